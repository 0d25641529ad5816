;; Asks for a table far past the element cap: instantiation must fail.
(module
  (table 5000000 funcref)
  (func (export "_start")))
