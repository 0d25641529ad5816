#!/usr/bin/env bash
# The fleet under faults, against the real local stack (deploy/stack.sh).
#
#   tests/chaos/run.sh [--quick] [--requests N] [--rate R]
#
# Three workers (process backend, so programs can log their runs to a host
# file) serve a mix of requests from tests/chaos/chaos_driver: trivial, slow,
# workspace-writing, checkpointing.  Meanwhile a random worker is SIGKILLed
# every 3-8 s and restarted, the broker is stopped and restarted once, and
# Redis is SIGKILLed and restarted once.  The driver then checks that every
# id has a result, that no id ran twice except across a kill (with the same
# status), and that no acknowledged workspace write or checkpoint is lost,
# and prints the figures (docs/RELIABILITY.md).
#
# Default: 2000 requests at 25/s.  --quick (the CI variant): 500 at 10/s,
# about a minute and a half.  Needs the stack up (tests/run_all.sh starts one; by
# hand: deploy/stack.sh up --workers 0) and its environment
# (eval "$(deploy/stack.sh env)"); restarting the broker and Redis uses
# deploy/stack.sh with the same CODEFLEET_STATE.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=deploy/common.sh
source "$REPO/deploy/common.sh"

requests=2000 rate=25
while (($#)); do
    case $1 in
    --quick) requests=500 rate=10 ;;
    --requests) requests=$2; shift ;;
    --rate) rate=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) cf_die "unknown argument '$1'" ;;
    esac
    shift
done

: "${CF_TEST_BROKERS:?the stack environment is not set: eval \"\$(deploy/stack.sh env)\"}"
: "${CF_TEST_REDIS:?}" "${CF_TEST_CLIENT_CONFIG:?}"
BUILD=${CF_BINARY_DIR:-$REPO/build}
WORKER=$BUILD/worker/codefleet-worker
CLI=$BUILD/dispatcher/codefleet
DRIVER=$BUILD/tests/chaos_driver
for b in "$WORKER" "$CLI" "$DRIVER"; do [[ -x $b ]] || cf_die "$b not found: build first"; done
STACK=$REPO/deploy/stack.sh

tag=chaos-$$-$RANDOM
dir=$(mktemp -d /tmp/cf-chaos.XXXXXX)
chmod 0777 "$dir"
: >"$dir/runs"
chmod 0666 "$dir/runs"
: >"$dir/killed"
req=$tag.requests res=$tag.results dlq=$tag.dlq group=$tag-workers
"$CLI" --config "$CF_TEST_CLIENT_CONFIG" --brokers "$CF_TEST_BROKERS" topics create --partitions 6 \
    "$req" "$res" "$dlq" >/dev/null

pids=("" "" "")
start_worker() { # index
    local i=$1
    setsid "$WORKER" --config "$CF_TEST_CLIENT_CONFIG" --brokers "$CF_TEST_BROKERS" --group "$group" \
        --worker-id "$tag-w$i" --request-topic "$req" --result-topic "$res" --dlq-topic "$dlq" \
        --redis "$CF_TEST_REDIS" --backends process --profile.default.backends=process \
        --profile.default.network=enabled --slots 2 --idempotency-lease 3s --rebalance-wait 2s \
        --kafka.session.timeout.ms=6000 --kafka.heartbeat.interval.ms=500 --log-level info \
        >>"$dir/w$i.log" 2>&1 </dev/null &
    pids[i]=$!
}
stop_all() {
    local p
    for p in "${pids[@]}"; do [[ -n $p ]] && kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap 'stop_all' EXIT
for i in 0 1 2; do start_worker "$i"; done

"$DRIVER" --brokers "$CF_TEST_BROKERS" --config "$CF_TEST_CLIENT_CONFIG" --redis "$CF_TEST_REDIS" \
    --requests "$req" --results "$res" --runs-file "$dir/runs" --killed-file "$dir/killed" \
    --logs-dir "$dir" --tag "$tag" --n "$requests" --rate "$rate" --timeout 420 \
    >"$dir/report" 2>"$dir/driver.log" &
driver=$!

submit_s=$((requests / rate))
broker_at=$((submit_s * 3 / 10)) redis_at=$((submit_s * 6 / 10))
kills=0 broker_done=0 redis_done=0 start=$SECONDS
while kill -0 "$driver" 2>/dev/null; do
    sleep $((3 + RANDOM % 6))
    kill -0 "$driver" 2>/dev/null || break
    t=$((SECONDS - start))
    if ((!broker_done && t >= broker_at)); then
        cf_log "chaos: t=${t}s stopping and restarting the broker"
        "$STACK" restart kafka >>"$dir/stack.log" 2>&1
        broker_done=1
        continue
    fi
    if ((!redis_done && t >= redis_at)); then
        cf_log "chaos: t=${t}s SIGKILL redis, restart"
        "$STACK" restart redis --kill >>"$dir/stack.log" 2>&1
        redis_done=1
        continue
    fi
    # Only while requests still arrive: afterwards the fleet must finish.
    ((t < submit_s)) || continue
    i=$((RANDOM % 3))
    cf_log "chaos: t=${t}s SIGKILL worker w$i (pid ${pids[i]})"
    echo "${pids[i]}" >>"$dir/killed"
    kill -KILL "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
    kills=$((kills + 1))
    start_worker "$i"
done
wait "$driver" || true
stop_all
trap - EXIT
cat "$dir/report"
echo "worker kills         $kills"
echo "broker restarts      $broker_done"
echo "redis kills          $redis_done"
echo "logs                 $dir"
grep -q '^verdict *PASS' "$dir/report"
