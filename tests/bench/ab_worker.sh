#!/usr/bin/env bash
# Two worker builds side by side, interleaved, on the same broker: for a
# change that must not cost speed (a refactor), say whether it did.
#
#   tests/bench/ab_worker.sh OLD_WORKER NEW_WORKER [--rounds N] [--backend B]
#
# Each round runs, for A then B (alternating which goes first), one fresh
# worker (2 slots, the given backend: process by default) on fresh topics
# and measures with bench_fleet: the end-to-end latency of 200 sequential
# trivial requests (p50, p99) and the throughput of 2000 submitted at once.
# Prints each figure's median over the rounds per build, the ratio B/A, and
# the spread of the per-round ratios (min, median, max): a difference
# inside that spread is noise.
# CF_AB_ARGS_A / CF_AB_ARGS_B: extra worker flags for one side (e.g. the same
# binary with a setting on and off: --redis=... --profile.default.X=0).
# Needs the stack up and its environment (eval "$(deploy/stack.sh env)").
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=deploy/common.sh
source "$REPO/deploy/common.sh"

(($# >= 2)) || cf_die "usage: $0 OLD_WORKER NEW_WORKER [--rounds N] [--backend B]"
A=$1 B=$2
shift 2
rounds=5 backend=process
while (($#)); do
    case $1 in
    --rounds) rounds=$2; shift ;;
    --backend) backend=$2; shift ;;
    *) cf_die "unknown argument '$1'" ;;
    esac
    shift
done
for w in "$A" "$B"; do [[ -x $w ]] || cf_die "$w is not an executable"; done
: "${CF_TEST_BROKERS:?the stack environment is not set: eval \"\$(deploy/stack.sh env)\"}"
BIN=${CF_BINARY_DIR:-$REPO/build}
FLEET=$BIN/tests/bench_fleet
CLI=$BIN/dispatcher/codefleet
conf=$CF_TEST_CLIENT_CONFIG
dir=$(mktemp -d /tmp/cf-ab.XXXXXX)
trap 'rm -rf "$dir"' EXIT

one() { # worker label round
    local w=$1 label=$2 r=$3
    local -a extra
    if [[ $label == A ]]; then read -r -a extra <<<"${CF_AB_ARGS_A:-}"; else read -r -a extra <<<"${CF_AB_ARGS_B:-}"; fi
    local t="ab-$$-$label-$r"
    "$CLI" --config "$conf" --brokers "$CF_TEST_BROKERS" topics create --partitions 2 "$t.req" "$t.res" "$t.dlq" \
        >/dev/null
    "$w" --config "$conf" --brokers "$CF_TEST_BROKERS" --group "$t" --worker-id "$t" --request-topic "$t.req" \
        --result-topic "$t.res" --dlq-topic "$t.dlq" --workers-topic "" --log-level warn --slots 2 \
        --backends "$backend" --profile.default.backends="$backend" --profile.default.network=enabled \
        --work-root /tmp "${extra[@]}" >"$dir/$t.log" 2>&1 &
    local pid=$!
    # Ready when it answers: a latency run of one request.
    for _ in $(seq 1 60); do
        if "$FLEET" latency --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$t.req" --results "$t.res" \
            -n 1 >/dev/null 2>&1; then break; fi
    done
    "$FLEET" latency --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$t.req" --results "$t.res" -n 200 |
        sed -n "s/^RESULT /$label /p" >>"$dir/results"
    "$FLEET" throughput --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$t.req" --results "$t.res" \
        -n 2000 | sed -n "s/^RESULT /$label /p" >>"$dir/results"
    kill -TERM "$pid"
    wait "$pid" || true
}

for r in $(seq 1 "$rounds"); do
    if ((r % 2)); then one "$A" A "$r"; one "$B" B "$r"; else one "$B" B "$r"; one "$A" A "$r"; fi
    echo "round $r done" >&2
done
# "A latency p50_ms=1.23 p99_ms=..." -> medians per label and key.
PYTHONPATH="$REPO/tests/bench${PYTHONPATH:+:$PYTHONPATH}" python3 - "$dir/results" <<'EOF'
import sys, statistics, collections
from bench_results import read_results
vals = collections.defaultdict(list)
for (label, fig, k), xs in read_results(sys.argv[1]).items():
    vals[(fig, k, label)].extend(xs)
keys = sorted({(f, k) for (f, k, _) in vals})
# Per round, B's figure over A's of the same round (they ran back to back):
# the spread of those ratios is the noise a difference must stand out of.
print(f"{'figure':34s} {'A (median)':>11s} {'B (median)':>11s} {'B/A':>6s}  {'paired B/A: min  median  max':>28s}  rounds")
for f, k in keys:
    a, b = vals.get((f, k, 'A'), []), vals.get((f, k, 'B'), [])
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    ratio = mb / ma if ma else float('nan')
    paired = sorted(y / x for x, y in zip(a, b) if x)
    spread = (f"{paired[0]:8.3f} {statistics.median(paired):7.3f} {paired[-1]:7.3f}" if paired else "")
    print(f"{f + ' ' + k:34s} {ma:11.3f} {mb:11.3f} {ratio:6.3f}  {spread:>28s}  {len(a)}/{len(b)}")
EOF
