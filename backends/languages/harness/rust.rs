// --- codefleet function harness (rust): calls run(input), see backends/languages/harness/README.md ---
// The code defines `fn run(input: &str) -> String` (any return type that is
// AsRef<str> will do): input is the JSON text of the input ("null" when the
// request had none), the value returned is the JSON text of the result.  Only
// std; every path is absolute (::std) so the code's own `use`s and modules do
// not matter.  Needs panic=unwind (rustc's default).
fn main() {
    ::std::process::exit(__codefleet_harness());
}

// No `use` anywhere: an import the code also has would be a warning.
fn __codefleet_say(msg: &str) {
    let _ = ::std::io::Write::flush(&mut ::std::io::stdout());
    let line = format!("codefleet harness: {}\n", msg.replace('\r', "\\r").replace('\n', "\\n"));
    let _ = ::std::io::Write::write_all(&mut ::std::io::stderr(), line.as_bytes());
}

fn __codefleet_panic_message(payload: &(dyn ::std::any::Any + ::std::marker::Send)) -> ::std::string::String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<::std::string::String>() {
        s.clone()
    } else {
        "a panic payload that is not a string".to_string()
    }
}

fn __codefleet_harness() -> i32 {
    let out_path = match ::std::env::var_os("CODEFLEET_OUTPUT") {
        Some(p) if !p.is_empty() => p,
        _ => {
            __codefleet_say("CODEFLEET_OUTPUT is not set");
            return 4;
        }
    };
    let input: ::std::string::String = match ::std::env::var_os("CODEFLEET_INPUT") {
        None => "null".to_string(),
        Some(p) => match ::std::fs::read_to_string(&p) {
            Ok(text) => text,
            Err(e) => {
                __codefleet_say(&format!("cannot read the input {}: {}", ::std::path::Path::new(&p).display(), e));
                return 4;
            }
        },
    };

    // The default hook would print the message and a backtrace note; this one
    // prints where run panicked (the message is in the last line) and, for a
    // thread of the code's own, where and what.
    let harness_thread = ::std::thread::current().id();
    ::std::panic::set_hook(::std::boxed::Box::new(move |info| {
        let place = match info.location() {
            Some(l) => format!("{}:{}:{}", l.file(), l.line(), l.column()),
            None => "an unknown location".to_string(),
        };
        let thread = ::std::thread::current();
        if thread.id() == harness_thread {
            eprintln!("run(input) panicked at {}", place);
        } else {
            let name = thread.name().unwrap_or("<unnamed>");
            eprintln!("thread '{}' panicked at {}: {}", name, place, __codefleet_panic_message(info.payload()));
        }
    }));
    let outcome = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| {
        let value = run(input.as_str());
        let text: &str = value.as_ref();
        text.to_string()
    }));
    let text = match outcome {
        Ok(text) => text,
        Err(payload) => {
            __codefleet_say(&format!("run(input) panicked: {}", __codefleet_panic_message(&*payload)));
            return 1;
        }
    };
    if let Err(e) = ::std::fs::write(&out_path, text.as_bytes()) {
        let _ = ::std::fs::remove_file(&out_path);
        __codefleet_say(&format!("cannot write the output {}: {}", ::std::path::Path::new(&out_path).display(), e));
        return 4;
    }
    let _ = ::std::io::Write::flush(&mut ::std::io::stdout());
    0
}
