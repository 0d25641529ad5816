;; The README's WebAssembly example (WASI preview 1): prints a greeting and
;; how many arguments it got.  app.wasm is this, built by
;; `wat2wasm docs/examples/app.wat -o docs/examples/app.wasm` (tests/readme
;; checks that they match).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; "hello from wasm, N argument(s)\n" with N patched in at offset 17
  (data (i32.const 0) "hello from wasm, ? argument(s)\n")
  (func (export "_start")
    ;; argc (the program name counts) at 64
    (drop (call $args_sizes_get (i32.const 64) (i32.const 68)))
    ;; one digit: argc - 1, capped at 9
    (i32.store8 (i32.const 17)
      (i32.add (i32.const 48)
        (select (i32.const 9) (i32.sub (i32.load (i32.const 64)) (i32.const 1))
          (i32.gt_u (i32.sub (i32.load (i32.const 64)) (i32.const 1)) (i32.const 9)))))
    ;; iovec at 32: base 0, length 31
    (i32.store (i32.const 32) (i32.const 0))
    (i32.store (i32.const 36) (i32.const 31))
    (drop (call $fd_write (i32.const 1) (i32.const 32) (i32.const 1) (i32.const 40)))))
