#!/usr/bin/env bash
# Fair fleet figures (issue 30), on the stack's broker, medians over rounds:
#
#   tests/bench/fair.sh [--rounds N]
#
# 1. makespan of 8 x `sleep 1` on one topic, 1 and 2 workers of 2 slots:
#    its ratio to the ideal (4 s, 2 s);
# 2. tenant-b's trivial request (100 sequential, after 200 to warm up):
#    p50/p99 with tenant-a idle, while tenant-a holds 12 runs of 600 s, and
#    while it floods 500 runs of 0.05 s; one worker, 2 slots, serving the
#    default profile, tenant-a and tenant-b;
# 3. that worker's throughput (2000 trivial requests on tenant-a's topic)
#    with fair shares (the default: a reserve slot, each profile at most
#    `slots`) and without (reserve-slots=0, consumer-per-topic=false),
#    interleaved.
# Needs the stack up and its environment (eval "$(deploy/stack.sh env)").
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=deploy/common.sh
source "$REPO/deploy/common.sh"

rounds=3
while (($#)); do
    case $1 in
    --rounds) rounds=$2; shift ;;
    *) cf_die "unknown argument '$1'" ;;
    esac
    shift
done
: "${CF_TEST_BROKERS:?the stack environment is not set: eval \"\$(deploy/stack.sh env)\"}"
BIN=${CF_BINARY_DIR:-$REPO/build}
FLEET=$BIN/tests/bench_fleet
CLI=$BIN/dispatcher/codefleet
WORKER=$BIN/worker/codefleet-worker
conf=$CF_TEST_CLIENT_CONFIG
dir=$(mktemp -d /tmp/cf-fair.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

topics() { # base: default, tenant-a and tenant-b request topics (+ cancel), results, dlq
    local b=$1
    "$CLI" --config "$conf" --brokers "$CF_TEST_BROKERS" topics create --partitions 6 "$b.req" "$b.req.cancel" \
        "$b.a" "$b.a.cancel" "$b.b" "$b.b.cancel" "$b.res" "$b.dlq" >/dev/null
}

start_worker() { # base id extra-args...
    local b=$1 id=$2 uids
    shift 2
    mapfile -t uids < <(cf_run_uid_base_arg "${#pids[@]}")
    "$WORKER" "${uids[@]}" --config "$conf" --brokers "$CF_TEST_BROKERS" --group "$b.grp" --worker-id "$id" \
        --request-topic "$b.req" --result-topic "$b.res" --dlq-topic "$b.dlq" --workers-topic "" \
        --log-level warn --slots 2 --backends process --profile.default.backends=process \
        --profile.default.network=enabled --work-root /tmp "$@" >"$dir/$id.log" 2>&1 &
    pids+=($!)
}

tenants() { # base: the profile flags of tenant-a and tenant-b
    printf '%s\n' "--profile.tenant-a.topic=$1.a" --profile.tenant-a.backends=process \
        --profile.tenant-a.network=enabled "--profile.tenant-b.topic=$1.b" --profile.tenant-b.backends=process \
        --profile.tenant-b.network=enabled
}

ready() { # topic results: a round trip answered
    local i
    for i in $(seq 1 120); do
        "$FLEET" latency --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$1" --results "$2" -n 1 \
            >/dev/null 2>&1 && return 0
    done
    cf_die "no worker answered on $1"
}

stop_workers() {
    local p
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}

result() { # label: the bench's RESULT line, labelled
    sed -n "s/^RESULT /$1 /p" >>"$dir/results"
}

for r in $(seq 1 "$rounds"); do
    # 1. makespan, one topic (one profile: its cap is every slot)
    for nw in 1 2; do
        b=fair-$$-m$nw-$r
        topics "$b"
        for i in $(seq 1 "$nw"); do start_worker "$b" "$b-w$i"; done
        ready "$b.req" "$b.res"
        "$FLEET" throughput --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$b.req" --results "$b.res" \
            --kind sleep:1 -n 8 | result "makespan_${nw}w"
        stop_workers
    done
    # 2. tenant-b's latency: idle, beside 12 long runs, beside a flood
    for load in idle long flood; do
        b=fair-$$-l$load-$r
        topics "$b"
        mapfile -t tf < <(tenants "$b")
        start_worker "$b" "$b-w1" "${tf[@]}"
        ready "$b.b" "$b.res"
        case $load in
        long) "$FLEET" publish --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$b.a" --kind sleep:600 \
            -n 12 >/dev/null ;;
        flood) "$FLEET" publish --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$b.a" --kind sleep:0.05 \
            -n 500 >/dev/null ;;
        esac
        "$FLEET" latency --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$b.b" --results "$b.res" -n 100 |
            result "tenant_b_$load"
        stop_workers
    done
    # 3. throughput with and without fair shares, interleaved
    for mode in fair unfair; do
        b=fair-$$-t$mode-$r
        topics "$b"
        mapfile -t tf < <(tenants "$b")
        extra=()
        if [[ $mode == unfair ]]; then
            extra=(--consumer-per-topic=false --reserve-slots=0)
        fi
        start_worker "$b" "$b-w1" "${tf[@]}" "${extra[@]}"
        ready "$b.a" "$b.res"
        "$FLEET" throughput --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$b.a" --results "$b.res" \
            -n 2000 | result "throughput_$mode"
        stop_workers
    done
    echo "round $r done" >&2
done

PYTHONPATH="$REPO/tests/bench${PYTHONPATH:+:$PYTHONPATH}" python3 - "$dir/results" <<'EOF'
import sys, statistics, collections
from bench_results import read_results
vals = collections.defaultdict(list)
for (label, _figure, k), xs in read_results(sys.argv[1]).items():
    vals[(label, k)].extend(xs)
med = {k: statistics.median(v) for k, v in vals.items()}
def m(label, key):
    return med.get((label, key), float('nan'))
print("figure                                          median")
for nw, ideal in ((1, 4.0), (2, 2.0)):
    span = m(f"makespan_{nw}w", "elapsed_s")
    print(f"makespan 8 x sleep 1, {nw} worker(s)             {span:6.2f} s   {span / ideal:5.2f} x ideal ({ideal:.0f} s)")
for load in ("idle", "long", "flood"):
    print(f"tenant-b trivial, tenant-a {load:5s}  p50 {m('tenant_b_' + load, 'p50_us') / 1000:7.1f} ms  "
          f"p99 {m('tenant_b_' + load, 'p99_us') / 1000:7.1f} ms")
idle99, bare = m('tenant_b_idle', 'p99_us'), m('tenant_b_idle', 'bare_us')
for load in ("long", "flood"):
    p99 = m('tenant_b_' + load, 'p99_us')
    limit = idle99 + bare + 50000
    print(f"  {load}: p99 {p99 / 1000:.1f} ms against idle p99 + one trivial execution + 50 ms = {limit / 1000:.1f} ms: "
          f"{'met' if p99 <= limit else 'NOT met'}")
f, u = m('throughput_fair', 'requests_per_s'), m('throughput_unfair', 'requests_per_s')
print(f"throughput, one worker: fair {f:.0f}/s, without {u:.0f}/s: {f / u:.2f}x")
for k in sorted(vals):
    print(f"  ({k[0]} {k[1]}: {', '.join('%g' % x for x in vals[k])})")
EOF
