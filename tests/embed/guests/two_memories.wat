;; Two linear memories: the limit applies to one, so a second is refused.
(module
  (memory 1)
  (memory 1)
  (func (export "_start")))
