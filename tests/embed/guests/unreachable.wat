(module (func (export "_start") unreachable))
