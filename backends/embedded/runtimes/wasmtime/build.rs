// Copies the C API headers the wasmtime-c-api crate exports (its `links`
// metadata, DEP_WASMTIME_C_API_INCLUDE) next to the built archive, so CMake
// finds them at <target>/<profile>/include.  Build scripts are not told the
// target dir: it is derived from OUT_DIR (<target>/<profile>/build/<pkg>/out).
use std::{env, fs, path::Path};

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create include dir");
    for entry in fs::read_dir(from).expect("read include dir") {
        let entry = entry.expect("dir entry");
        let dest = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), &dest).expect("copy header");
        }
    }
}

fn main() {
    let include = env::var("DEP_WASMTIME_C_API_INCLUDE").expect("wasmtime-c-api exports its include dir");
    let out_dir = env::var("OUT_DIR").expect("OUT_DIR");
    let profile_dir = Path::new(&out_dir).ancestors().nth(3).expect("target/<profile>");
    copy_tree(Path::new(&include), &profile_dir.join("include"));
    println!("cargo:rerun-if-changed=build.rs");
}
