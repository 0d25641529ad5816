;; Loops in its start function, during instantiation: still a timeout.
(module
  (func $spin (loop $l (br $l)))
  (start $spin)
  (func (export "_start")))
