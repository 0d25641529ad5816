;; Grows its memory a page at a time until memory.grow fails, then traps:
;; the store limiter must answer -1 at the limit.
(module
  (memory (export "memory") 1)
  (func (export "_start")
    (loop $more
      (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable))
