#!/usr/bin/env bash
# Checks the function harnesses of backends/languages/harness/ by hand-made programs:
# each case is a user source, the harness appended after a newline (as the
# worker does), run (or compiled, then run) directly on this host, no worker
# and no sandbox.  A case checks the exit code, the output file (its exact
# text, or that there is none) and the last line of stderr.
#
# Toolchains come from deploy/toolchains.sh (python3 is /usr/bin/python3, as
# the worker's default); a language whose toolchain is missing is skipped
# with a "SKIP" line.  Rust is also compiled with the rustc on PATH when that
# is another one (a rustup toolchain, say).  Needs no stdin, writes only to a
# temporary directory.  Last line: "N passed, N failed, N skipped"; exit
# status non-zero when a case failed.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
harness=$repo/backends/languages/harness
exec </dev/null

declare -A tc=()
while IFS='=' read -r k v; do
    [[ -n $k ]] && tc[$k]=$v
done < <("$repo/deploy/toolchains.sh")
python=/usr/bin/python3
node=${tc[node]:-}
tsc=${tc[tsc]:-}
rustc=${tc[rustc]:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cf-harness.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
skipped=0
n=0

skip() {
    skipped=$((skipped + 1))
    printf 'SKIP %s\n' "$*"
}
fail() { # case what
    failed=$((failed + 1))
    printf 'FAIL %s: %s\n' "$1" "$2"
    [[ -s $dir/stderr ]] && sed 's/^/    stderr| /' "$dir/stderr" | tail -n 15
    return 0
}

# tsc as the worker runs it: @types/node from tsc's own node_modules (a
# --types name is looked up from the compiled file's directory otherwise).
ts_flags=(--strict --target es2022 --module commonjs --lib es2023 --types node)
[[ -n $tsc ]] && ts_flags+=(--typeRoots "${tsc%/typescript/bin/tsc}/@types")

# Compile step of a language ($dir/main.<ext> -> something run() can run).
build() { # lang
    case $1 in
    typescript) (cd "$dir" && timeout 120 "$node" "$tsc" "${ts_flags[@]}" --outDir out main.ts) ;;
    rust | rust-*) (cd "$dir" && timeout 120 "$cur_rustc" --edition 2021 -D warnings -o main main.rs) ;;
    *) return 0 ;;
    esac
}
program() { # lang -> argv of the program, one per line
    case $1 in
    python) printf '%s\n' "$python" main.py ;;
    javascript) printf '%s\n' "$node" main.js ;;
    typescript) printf '%s\n' "$node" out/main.js ;;
    rust | rust-*) printf '%s\n' ./main ;;
    esac
}

# t LANG CASE RC OUT ERR [INPUT [STDERR]] < user-source
#   RC      expected exit code ("build-fails": the compile step must fail)
#   OUT     the exact text of the output file, or - for none
#   ERR     an ERE the last line of stderr must match ("" for no check)
#   INPUT   the input's JSON text; absent (or -): CODEFLEET_INPUT unset
#   STDERR  an ERE some line of stderr must match (the traceback, say)
t() {
    local lang=$1 name="$1: $2" rc=$3 out=$4 err=$5 input=${6:--} want=${7:-} ext got last
    n=$((n + 1))
    dir=$tmp/$n
    mkdir -p "$dir"
    case $lang in
    python) ext=py ;; javascript) ext=js ;; typescript) ext=ts ;; rust | rust-*) ext=rs ;;
    esac
    # The JavaScript cases are TypeScript cases too, with input typed any.
    if [[ $lang == typescript ]]; then sed 's/(input)/(input: any)/g'; else cat; fi >"$dir/user.$ext"
    { cat "$dir/user.$ext"; printf '\n'; cat "$harness/${lang%%-*}.$ext"; } >"$dir/main.$ext"
    if ! build "$lang" >"$dir/stderr" 2>&1; then
        if [[ $rc == build-fails ]]; then
            passed=$((passed + 1))
            printf 'ok   %s (does not compile)\n' "$name"
        else
            fail "$name" "compile step failed"
        fi
        return
    fi
    [[ $rc == build-fails ]] && { fail "$name" "compiled, should not have"; return; }
    local -a env=(CODEFLEET_OUTPUT="$dir/result.json") argv
    if [[ $input != - ]]; then
        printf '%s' "$input" >"$dir/input.json"
        env+=(CODEFLEET_INPUT="$dir/input.json")
    fi
    mapfile -t argv < <(program "$lang")
    (cd "$dir" && env -u CODEFLEET_INPUT -u CODEFLEET_OUTPUT "${env[@]}" timeout 60 "${argv[@]}") \
        >"$dir/stdout" 2>"$dir/stderr"
    got=$?
    last=$(tail -n 1 "$dir/stderr")
    if [[ $got != "$rc" ]]; then
        fail "$name" "exit code $got, expected $rc"
    elif [[ $out == - && -e $dir/result.json ]]; then
        fail "$name" "an output file was written: $(head -c 200 "$dir/result.json")"
    elif [[ $out != - && ! -e $dir/result.json ]]; then
        fail "$name" "no output file"
    elif [[ $out != - && $(<"$dir/result.json") != "$out" ]]; then
        fail "$name" "output $(head -c 200 "$dir/result.json"), expected $out"
    elif [[ -n $err ]] && ! [[ $last =~ $err ]]; then
        fail "$name" "last stderr line '$last' does not match /$err/"
    elif [[ -n $want ]] && ! grep -Eq -- "$want" "$dir/stderr"; then
        fail "$name" "no line of stderr matches /$want/"
    else
        passed=$((passed + 1))
        printf 'ok   %s\n' "$name"
    fi
}

OBJ='{"a":[1,2.5,{"b":null}],"s":"h\u00e9"}'
OBJ_OUT='{"got":{"a":[1,2.5,{"b":null}],"s":"hé"}}'
MISSING='^codefleet harness: the code defines no function run\(input\)$'
NOTFN='^codefleet harness: run is not a function'
NOTSER='^codefleet harness: the value run\(input\) returned is not JSON-serializable: '

# ---------------------------------------------------------------- python
if [[ -x $python ]]; then
    t python object 0 "$OBJ_OUT" '' "$OBJ" <<'EOF'
def run(input):
    return {"got": input}
EOF
    t python no-input 0 '{"got":null}' '' <<'EOF'
def run(input):
    return {"got": input}
EOF
    t python returns-none 0 'null' '' '{}' <<'EOF'
def run(input):
    pass
EOF
    t python missing-run 3 - "$MISSING" '{}' <<'EOF'
def walk(input):
    return 1
EOF
    t python run-not-callable 3 - "$NOTFN" '{}' <<'EOF'
run = 5
EOF
    t python raises 1 - '^codefleet harness: run\(input\) raised KeyError: '"'"'nope'"'"'$' '{}' '^  File ".*main\.py", line 2, in run$' <<'EOF'
def run(input):
    return input["nope"]
EOF
    t python raises-multiline 1 - '^codefleet harness: run\(input\) raised ValueError: one\\ntwo$' '{}' <<'EOF'
def run(input):
    raise ValueError("one\ntwo")
EOF
    t python sys-exit-in-run 1 - '^codefleet harness: run\(input\) raised SystemExit: 0$' '{}' <<'EOF'
import sys
def run(input):
    sys.exit(0)
EOF
    t python not-serializable 1 - "$NOTSER"'TypeError: Object of type set' '{}' <<'EOF'
def run(input):
    return {1, 2}
EOF
    t python nan 1 - "$NOTSER"'ValueError: Out of range float' '{}' <<'EOF'
def run(input):
    return float("nan")
EOF
    t python async-run 0 '[1,2]' '' '[1]' <<'EOF'
import asyncio
async def run(input):
    await asyncio.sleep(0.01)
    return input + [2]
EOF
    t python stray-print 0 '{"n":2}' '' '{"n":1}' <<'EOF'
import sys
print("before", flush=True)
print("to stderr", file=sys.stderr)
def run(input):
    print("during")
    return {"n": input["n"] + 1}
import atexit
atexit.register(lambda: print("after"))
EOF
    t python main-block 0 '"main ran"' '' '{}' <<'EOF'
state = []
def run(input):
    return state[0]
if __name__ == "__main__":
    state.append("main ran")
EOF
    t python shadowed-names 0 '{"json":"mine","sys":1}' '' '{}' <<'EOF'
json = "mine"
sys = 1
os = None
def open(*a, **k): raise RuntimeError("the user's open")
def print(*a, **k): raise RuntimeError("the user's print")
str = type = callable = None
def run(input):
    return {"json": json, "sys": sys}
EOF
    t python no-leaked-names 0 '["__codefleet_harness","run"]' '' '{}' <<'EOF'
def run(input):
    return sorted(k for k in globals() if not (k.startswith("__") and k.endswith("__")))
EOF
else
    skip "python: $python not found"
fi

# ------------------------------------------------- javascript / typescript
js_cases() { # lang
    local l=$1
    t "$l" object 0 "$OBJ_OUT" '' "$OBJ" <<'EOF'
function run(input) { return { got: input } }
EOF
    t "$l" no-input 0 '{"got":null}' '' <<'EOF'
const run = (input) => ({ got: input })
EOF
    t "$l" returns-undefined 0 'null' '' '{}' <<'EOF'
function run(input) {}
EOF
    t "$l" missing-run 3 - "$MISSING" '{}' <<'EOF'
function walk(input) { return 1 }
EOF
    t "$l" run-not-callable 3 - "$NOTFN" '{}' <<'EOF'
const run = 5
EOF
    t "$l" throws 1 - '^codefleet harness: run\(input\) raised RangeError: too far$' '{}' '^ +at run ' <<'EOF'
function run(input) { throw new RangeError('too far') }
EOF
    t "$l" throws-string 1 - '^codefleet harness: run\(input\) raised string: oops$' '{}' <<'EOF'
function run(input) { throw 'oops' }
EOF
    t "$l" async-run 0 '[1,2]' '' '[1]' <<'EOF'
async function run(input) {
  await new Promise((resolve) => setTimeout(resolve, 10))
  return input.concat([2])
}
EOF
    t "$l" async-rejects 1 - '^codefleet harness: run\(input\) raised TypeError: late$' '{}' '^ +at run ' <<'EOF'
async function run(input) {
  await new Promise((resolve) => setTimeout(resolve, 10))
  throw new TypeError('late')
}
EOF
    t "$l" not-serializable 1 - "$NOTSER"'TypeError: .*BigInt' '{}' <<'EOF'
function run(input) { return { n: BigInt(1) } }
EOF
    t "$l" returns-function 1 - "$NOTSER"'a function$' '{}' <<'EOF'
function run(input) { return () => 1 }
EOF
    t "$l" stray-print-and-open-timer 0 '{"n":2}' '' '{"n":1}' <<'EOF'
console.log('before')
console.error('to stderr')
function run(input) {
  console.log('during')
  setTimeout(() => console.log('after'), 5)
  return { n: input.n + 1 }
}
setInterval(() => {}, 1000)
const last = 1
last
EOF
}
if [[ -n $node && -x $node ]]; then
    js_cases javascript
    t javascript shadowed-names 0 '{"JSON":5}' '' '{}' <<'EOF'
const JSON = 5
const fs = null, process = undefined
function run(input) { return { JSON } }
EOF
    t javascript exports-run 0 '{"got":1}' '' '1' <<'EOF'
exports.run = (input) => ({ got: input })
EOF
    t javascript es-module 0 '{"got":1}' '' '1' <<'EOF'
import { EOL } from 'node:os'
export function run(input) { return { got: input } }
EOF
else
    skip "javascript: node not found"
fi

if [[ -n $node && -x $node && -n $tsc && -f $tsc ]]; then
    js_cases typescript
    t typescript typed-run 0 '{"sum":3}' '' '{"a":1,"b":2}' <<'EOF'
interface Pair { a: number; b: number }
export async function run(input: Pair): Promise<{ sum: number }> {
  return { sum: input.a + input.b }
}
EOF
    t typescript exported-const 0 '"x"' '' '{}' <<'EOF'
import * as os from 'os'
export const run = (_input: unknown): string => (os.EOL ? 'x' : 'y')
EOF
    t typescript type-error-is-users build-fails - '' '{}' <<'EOF'
const n: number = 'not a number'
EOF
else
    skip "typescript: ${tsc:-tsc} or node not found (deploy/install.sh installs TypeScript)"
fi

# ---------------------------------------------------------------- rust
rust_cases() { # lang
    local l=$1
    t "$l" object 0 "{\"len\":${#OBJ}}" '' "$OBJ" <<'EOF'
fn run(input: &str) -> String {
    format!("{{\"len\":{}}}", input.chars().count())
}
EOF
    t "$l" no-input 0 '{"got":null}' '' <<'EOF'
fn run(input: &str) -> String {
    format!("{{\"got\":{}}}", input)
}
EOF
    t "$l" returns-str 0 '[1]' '' '{}' <<'EOF'
pub fn run(_input: &str) -> &'static str {
    "[1]"
}
EOF
    t "$l" missing-run build-fails - '' '{}' <<'EOF'
fn walk(input: &str) -> String { input.to_string() }
#[allow(dead_code)]
fn unused() { let _ = walk(""); }
EOF
    t "$l" panics 1 - '^codefleet harness: run\(input\) panicked: index out of bounds: the len is 0 but the index is 3$' '{}' '^run\(input\) panicked at main\.rs:3:' <<'EOF'
fn run(input: &str) -> String {
    let v: Vec<u8> = Vec::new();
    v[input.len() + 1].to_string()
}
EOF
    t "$l" panics-with-message 1 - '^codefleet harness: run\(input\) panicked: bad input: \{\}$' '{}' <<'EOF'
fn run(input: &str) -> String {
    panic!("bad input: {}", input);
}
EOF
    t "$l" thread-panic-not-run 0 '"ok"' '' '{}' <<'EOF'
fn run(_input: &str) -> String {
    let _ = std::thread::spawn(|| panic!("in a thread")).join();
    "\"ok\"".to_string()
}
EOF
    t "$l" stray-print-and-own-names 0 '{"n":1}' '' '{}' <<'EOF'
use std::io::Write;
type Result<T> = std::result::Result<T, String>;
mod json { pub fn num(n: usize) -> String { format!("{{\"n\":{}}}", n) } }
fn count(s: &str) -> Result<usize> { Ok(s.len() / 2) }
fn run(input: &str) -> String {
    println!("during");
    let _ = writeln!(std::io::stderr(), "to stderr");
    json::num(count(input).unwrap())
}
EOF
}
if [[ -n $rustc && -x $rustc ]]; then
    cur_rustc=$rustc
    printf '# rust: %s (%s)\n' "$rustc" "$("$rustc" --version)"
    rust_cases rust
    other=$(command -v rustc 2>/dev/null || true)
    if [[ -n $other && $(realpath -e "$other") != "$rustc" ]] && "$other" --version >/dev/null 2>&1; then
        cur_rustc=$other
        printf '# rust-path: %s (%s)\n' "$other" "$("$other" --version)"
        rust_cases rust-path
    fi
else
    skip "rust: /usr/bin/rustc not found (deploy/install.sh installs rustc)"
fi

printf '%d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
((failed == 0))
