#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build, bring up
# the local stack (Kafka broker, Redis, workers) and run a demo that submits
# requests in each language, including one that times out and one that is
# rejected, and prints the results.  The stack keeps running afterwards:
# `deploy/stack.sh down` stops it (or run this with --down).
#
#   deploy/demo.sh [--workers N] [--down]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/common.sh
source "$here/common.sh"

workers=2
stop_after=0
while (($#)); do
    case $1 in
    --workers) workers=$2; shift 2 ;;
    --down) stop_after=1; shift ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) cf_die "unknown argument: $1" ;;
    esac
done

"$here/install.sh"
"$here/build.sh"
"$here/stack.sh" up --workers "$workers"
eval "$("$here/stack.sh" env)"
if ((stop_after)); then
    trap '"$here/stack.sh" down' EXIT
fi

BACKENDS_IN_USE=$( ((EUID == 0)) && echo "${CODEFLEET_BACKENDS:-sandbox,process,wasm,js}" || echo "${CODEFLEET_BACKENDS:-process}")
cli=${CODEFLEET_BIN:-$CF_REPO/build/dispatcher}/codefleet
[[ -x $cli ]] || cli=$CF_REPO/build/dispatcher/codefleet
failures=0

# expect WANT_EXIT TITLE -- codefleet arguments...
expect() {
    local want=$1 title=$2
    shift 3
    [[ -n $title ]] && printf '\n\033[1m=== %s\033[0m\n' "$title"
    printf '$ codefleet %s\n' "$*"
    local rc=0
    "$cli" "$@" || rc=$?
    if ((rc != want)); then
        printf '!!! expected exit code %d, got %d\n' "$want" "$rc"
        failures=$((failures + 1))
    fi
}

# The workers publish their reports as they start: give them a moment, then
# check the whole fleet (broker, topics, workers, Redis, a round trip).
sleep 2
expect 0 "is everything in place? (codefleet doctor)" -- doctor
expect 0 "shell" -- submit -l shell --code 'echo "hello from $(basename "$0") in $PWD"; echo "to stderr" >&2'
expect 0 "python, with structured input and output" -- submit -l python --input '{"numbers": [3, 1, 2]}' --code '
import json, os
data = json.load(open(os.environ["CODEFLEET_INPUT"]))
result = {"sorted": sorted(data["numbers"]), "sum": sum(data["numbers"])}
json.dump(result, open(os.environ["CODEFLEET_OUTPUT"], "w"))
print("sorted", result["sorted"])'
expect 0 "javascript" -- submit -l javascript --code 'const fib = n => n < 2 ? n : fib(n - 1) + fib(n - 2); console.log("fib(20) =", fib(20));'
hello=$(mktemp /tmp/codefleet-demo-XXXXXX.txt)
printf 'file content\n' >"$hello"
expect 0 "command (argv), with a file placed in the work directory" -- \
    submit --file "data/hello.txt=$hello" -- /bin/cat data/hello.txt
rm -f "$hello"
expect 1 "a program that fails" -- submit -l python --code 'import sys; print("bad input", file=sys.stderr); sys.exit(4)'
expect 1 "a program that times out (1s wall clock)" -- submit -l python --timeout-exec 1s --code 'while True: pass'
if [[ $BACKENDS_IN_USE == sandbox* ]]; then
    expect 3 "rejected: the default profile does not allow the host-local process backend" -- \
        submit --backend process -l shell --code 'echo this never runs'
    expect 1 "sandbox: no network unless asked for (connecting to the broker fails)" -- \
        submit -l python --code "import socket; socket.create_connection(('127.0.0.1', ${CODEFLEET_BROKERS##*:}), timeout=2)"
    expect 1 "sandbox: a memory hog is stopped by its 64 MiB limit (memory_exceeded)" -- \
        submit -l python --memory 64MiB --code 'blocks = [bytearray(16 << 20) for _ in range(64)]'
fi
expect 3 "rejected: deadline already passed" -- submit -l shell --deadline 1ms --code 'echo too late'

# Compiled languages: the compiler runs in the same sandbox, under its own limits.
src=$(mktemp -d /tmp/codefleet-demo-XXXXXX)
printf '#include <stdio.h>\nint main(void)\n{\n    int unused;\n    printf("%%d\\n", 6 * 7)\n}\n' >"$src/broken.c"
expect 1 "C: a compile error comes back as diagnostics, like a compiler prints them" -- \
    submit --file "$src/broken.c"
cat >"$src/sum.rs" <<'RUST'
use std::io::Read;
fn main() {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap();
    let total: i64 = s.split_whitespace().map(|w| w.parse::<i64>().unwrap()).sum();
    println!("{}", total);
}
RUST
printf '{"name": "many", "stdin": "1 2 3 4 5 6 7 8 9 10", "expect_stdout": "55"}\n' >"$src/cases.jsonl"
expect 1 "Rust: built once, run against four cases (one expectation is wrong, one input is not a number)" -- \
    submit --file "$src/sum.rs" --case 'stdin=1 2,expect=3,name=small' --case 'stdin=40 2,expect=43,name=wrong' \
    --case 'stdin=x,expect=0,name=garbage' --cases "$src/cases.jsonl"
expect 0 "TypeScript: a function harness: run(input) returns the output" -- \
    submit -l typescript --function --input '{"words": ["kafka", "worker", "fleet"]}' \
    --code 'function run(input: { words: string[] }) { return input.words.map((w) => w.length); }'

# The embedded runtimes: nothing is forked per execution (a pre-started,
# confined helper per slot runs wasmtime or QuickJS-ng).
if [[ ,$BACKENDS_IN_USE, == *,js,* ]]; then
    expect 0 "JavaScript on the embedded js backend (QuickJS-ng): run(input) returns the output" -- \
        submit -l js --input '{"n": 25}' \
        --code 'function run(input) { const fib = (n) => n < 2 ? n : fib(n - 1) + fib(n - 2); return { n: input.n, fib: fib(input.n) } }'
fi
if [[ ,$BACKENDS_IN_USE, == *,wasm,* ]] && command -v clang-14 >/dev/null; then
    printf '#include <stdio.h>\nint main(int argc, char **argv)\n{\n    printf("hello from WebAssembly, %%d argument(s), first: %%s\\n", argc - 1, argc > 1 ? argv[1] : "-");\n    return 0;\n}\n' >"$src/hello.c"
    clang-14 --target=wasm32-wasi -O2 -o "$src/hello.wasm" "$src/hello.c"
    expect 0 "WebAssembly (WASI): a module compiled from C, run by wasmtime" -- \
        submit --module "$src/hello.wasm" -- fleet
fi
rm -rf "$src"

ws=demo-$(date +%s)
notes=$(mktemp /tmp/codefleet-demo-XXXXXX.txt)
printf 'first line\n' >"$notes"
expect 0 "workspace: create it and put a file" -- workspace create "$ws" --project demo
expect 0 "" -- workspace put "$ws" "notes.txt=$notes"
expect 0 "an execution against the workspace writes back one new revision" -- \
    submit --workspace "$ws" -l shell --code 'cat notes.txt; echo "second line" >> notes.txt; date > stamp.txt'
expect 0 "" -- workspace ls "$ws"
rm -f "$notes"

thread=$ws-thread
counter='import json, os
ctx = json.load(open(os.environ["CODEFLEET_INPUT"]))
state = ctx["checkpoint"] or {"runs": 0}
state["runs"] += 1
print("run number", state["runs"])
json.dump({"checkpoint": state}, open(os.environ["CODEFLEET_OUTPUT"], "w"))'
expect 0 "checkpoints: each run of a thread continues from the last saved state" -- \
    submit --thread "$thread" -l python --code "$counter"
expect 0 "" -- submit --thread "$thread" -l python --code "$counter"
expect 0 "" -- checkpoint history "$thread"

expect 0 "collaboration events: publish, then a wait that starts afterwards still sees it" -- \
    events publish --workspace "$ws" --correlation-id "$ws-task" --kind need_work --topic review \
    --producer planner --payload '{"file": "notes.txt"}'
expect 0 "" -- events wait "$ws-task" --workspace "$ws" --kind need_work

printf '\n\033[1m=== %s\033[0m\n' "cancel: a program that would run 10 minutes, stopped"
printf '$ codefleet submit --no-wait --timeout-exec 10m -l shell --code '"'"'sleep 600'"'"'\n'
cancel_id=$("$cli" submit --no-wait --timeout-exec 10m -l shell --code 'sleep 600' | tail -n 1 | awk '{print $NF}')
sleep 1
expect 9 "" -- cancel "$cancel_id" --reason "the demo does not wait 10 minutes" --wait

batch=$(mktemp /tmp/codefleet-demo-XXXXXX.jsonl)
for i in $(seq 1 50); do
    printf '{"language":"shell","code":"echo request %d"}\n' "$i"
done >"$batch"
expect 0 "batch of 50 requests across the workers" -- batch "$batch"
rm -f "$batch"

# What an operator sees: the fleet at a glance, and one worker's metrics.
expect 0 "the fleet at a glance (codefleet top)" -- top --once
if command -v curl >/dev/null 2>&1 && curl -sf "http://127.0.0.1:${CODEFLEET_METRICS_PORT:-19464}/readyz" >/dev/null; then
    printf '\n\033[1m=== %s\033[0m\n' "worker w1's /metrics (Prometheus), the request counters"
    curl -s "http://127.0.0.1:${CODEFLEET_METRICS_PORT:-19464}/metrics" | grep '^codefleet_requests_total' || true
fi

echo
if ((failures)); then
    echo "demo: $failures step(s) did not behave as expected"
    exit 1
fi
echo "demo: every step behaved as expected."
if ((!stop_after)); then
    echo "The stack is still running: 'deploy/stack.sh status', 'deploy/stack.sh down'."
    echo "Try: eval \"\$(deploy/stack.sh env)\"; build/dispatcher/codefleet submit -l python --code 'print(42)'"
fi
