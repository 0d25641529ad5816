#!/usr/bin/env bash
# The wasm and js backends' figures, in one run.
#
#   tests/bench/bench_embed.sh [--iterations N] [--requests N]
#
# 1. Backend execution (bench_embed, default 2000 iterations): a trivial
#    wasm module (an empty _start) and a trivial js snippet (`0`) beside
#    the process backend running /bin/true and `node -e 0`, with bare
#    fork+exec+wait of /bin/true as the anchor; medians and p99.
# 2. End to end through Kafka (bench_fleet latency, 500 one at a time):
#    command /bin/true (process backend), wasm, js; p50/p99.
# 3. Throughput of one worker (2 slots, bench_fleet throughput, default
#    20000 requests submitted at once): js, wasm, and command /bin/true on
#    the process backend; the broker runs on the same 2 cores.
#
# Uses its own stack (state dir .stack-embed, ports 19492/16779) and stops
# it at the end.  Needs root (the runtime helpers are confined).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
exec </dev/null

iterations=2000 requests=20000
while (($#)); do
    case $1 in
    --iterations) iterations=$2 && shift ;;
    --requests) requests=$2 && shift ;;
    *) echo "usage: $0 [--iterations N] [--requests N]" >&2 && exit 2 ;;
    esac
    shift
done
((EUID == 0)) || { echo "bench_embed.sh: needs root (the runtime helpers are confined)" >&2; exit 2; }

export CODEFLEET_STATE=$repo/.stack-embed
export CODEFLEET_KAFKA_PORT=19492
export CODEFLEET_REDIS_PORT=16779
brokers=127.0.0.1:$CODEFLEET_KAFKA_PORT

deploy/install.sh
deploy/build.sh
bin=$repo/build
work_root=/dev/shm/codefleet-bench-embed
mkdir -p "$work_root" && chmod 0711 "$work_root"
results=$(mktemp)
worker_pid=
cleanup() {
    [[ -z $worker_pid ]] || kill -TERM "$worker_pid" 2>/dev/null || true
    [[ -z $worker_pid ]] || wait "$worker_pid" 2>/dev/null || true
    deploy/stack.sh down >/dev/null || true
    rm -f "$results"
}
trap cleanup EXIT

echo "== 1. backend execution, $iterations iterations each, interleaved"
CF_BENCH_WORK_ROOT=$work_root CF_BINARY_DIR=$bin "$bin/tests/bench_embed" --iterations "$iterations" \
    --node "$(command -v node)" | tee -a "$results"

deploy/stack.sh up --workers 0 --no-topics
admin_conf=$CODEFLEET_STATE/secrets/admin.conf
logs=$CODEFLEET_STATE/embed
mkdir -p "$logs"
t=embed-$(date +%s)
"$bin/dispatcher/codefleet" --config "$admin_conf" --brokers "$brokers" topics create --partitions 2 \
    "$t.req" "$t.res" "$t.dlq" >/dev/null
env -u CODEFLEET_STATE -u CODEFLEET_KAFKA_PORT -u CODEFLEET_REDIS_PORT \
    "$bin/worker/codefleet-worker" --config "$admin_conf" --brokers "$brokers" --group "bench-$t" \
    --worker-id embed-1 --request-topic "$t.req" --result-topic "$t.res" --dlq-topic "$t.dlq" \
    --workers-topic= --log-level warn --backends process,wasm,js --profile.default.backends=process,wasm,js \
    --profile.default.network=enabled \
    --slots 2 --work-root "$work_root" >"$logs/worker.log" 2>&1 &
worker_pid=$!
sleep 8 # join
fleet() { "$bin/tests/bench_fleet" "$1" --config "$admin_conf" --brokers "$brokers" --requests "$t.req" \
    --results "$t.res" "${@:2}"; }

echo "== 2. end to end through Kafka, one request at a time"
for kind in command wasm js; do
    fleet latency --kind "$kind" -n 500 | tee -a "$results"
done

echo "== 3. throughput of one worker (2 slots), $requests requests at once"
for kind in js wasm command; do
    fleet throughput --kind "$kind" -n "$requests" | tee -a "$results"
done

echo "== summary"
grep '^RESULT' "$results"
