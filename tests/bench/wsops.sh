#!/usr/bin/env bash
# Workspace operations through the fleet (issue 31 part 4), on the stack's
# broker and Redis, medians:
#
#   tests/bench/wsops.sh [-n ROUNDS] [--mode wsops|session]
#
# One worker (2 slots, the process backend) with Redis; bench_fleet wsops:
# an apply_patch changing a line in each of 10 files, against the same
# change as 10 write ops and as one run writing the 10 files back, and a
# read op against a run of `cat` (the variants interleaved, each round).
# --mode session (issue 31 part 9, as far as sessions go: no live
# interpreter yet): bench_fleet session: a trivial python cell of a session
# against a trivial python run on a workspace (the anchor: the same
# snapshot, write-back and interpreter start), a cell whose session holds
# about 1 MiB of state, and the same pair for shell.
# Needs the stack up and its environment (eval "$(deploy/stack.sh env)").
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=deploy/common.sh
source "$REPO/deploy/common.sh"

n=15
mode=wsops
while (($#)); do
    case $1 in
    -n) n=$2; shift ;;
    --mode) mode=$2; shift ;;
    *) cf_die "unknown argument '$1'" ;;
    esac
    shift
done
: "${CF_TEST_BROKERS:?the stack environment is not set: eval \"\$(deploy/stack.sh env)\"}"
: "${CF_TEST_REDIS:?the stack environment has no Redis (CF_TEST_REDIS)}"
BIN=${CF_BINARY_DIR:-$REPO/build}
conf=$CF_TEST_CLIENT_CONFIG
b=wsops-$$
dir=$(mktemp -d /tmp/cf-wsops.XXXXXX)
pid=
cleanup() {
    if [[ -n $pid ]]; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT

"$BIN/dispatcher/codefleet" --config "$conf" --brokers "$CF_TEST_BROKERS" topics create --partitions 2 "$b.req" \
    "$b.req.cancel" "$b.res" "$b.dlq" >/dev/null
mapfile -t uids < <(cf_run_uid_base_arg 0)
"$BIN/worker/codefleet-worker" "${uids[@]}" --config "$conf" --brokers "$CF_TEST_BROKERS" --group "$b.grp" \
    --worker-id "$b-w1" --request-topic "$b.req" --result-topic "$b.res" --dlq-topic "$b.dlq" --workers-topic "" \
    --redis "$CF_TEST_REDIS" --log-level warn --slots 2 --backends process --profile.default.backends=process \
    --profile.default.network=enabled --work-root /tmp >"$dir/worker.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
    "$BIN/tests/bench_fleet" latency --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$b.req" \
        --results "$b.res" -n 1 >/dev/null 2>&1 && break
done
"$BIN/tests/bench_fleet" "$mode" --config "$conf" --brokers "$CF_TEST_BROKERS" --requests "$b.req" --results "$b.res" \
    -n "$n" || { tail -20 "$dir/worker.log" >&2; exit 1; }
