;; Declares 128 MiB of initial memory: more than the test's 64 MiB limit.
(module
  (memory (export "memory") 2048)
  (func (export "_start")))
