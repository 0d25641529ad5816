//! Re-export of wasmtime's C API (`wasm.h`, `wasi.h`, `wasmtime.h`) as one
//! static archive for the C worker.  Nothing of ours lives here.
pub use wasmtime_c_api::*;
