;; Calls proc_exit(3) from its start function, during instantiation.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func $init (call $exit (i32.const 3)))
  (start $init)
  (func (export "_start")))
