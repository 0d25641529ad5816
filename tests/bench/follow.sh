#!/usr/bin/env bash
# Reattach (issue 31 part 6): `codefleet follow ID` of a finished streamed
# request against `codefleet wait ID` of the same request (the anchor: the
# same CLI start, connection and result scan, without the output replay),
# medians, interleaved each round:
#
#   tests/bench/follow.sh [-n ROUNDS]
#
# One worker (the process backend) answers R streamed requests printing
# 200 lines each; each round follows and waits for one of them.  Needs the
# stack up and its environment (eval "$(deploy/stack.sh env)").
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=deploy/common.sh
source "$REPO/deploy/common.sh"

n=15
while (($#)); do
    case $1 in
    -n) n=$2; shift ;;
    *) cf_die "unknown argument '$1'" ;;
    esac
    shift
done
: "${CF_TEST_BROKERS:?the stack environment is not set: eval \"\$(deploy/stack.sh env)\"}"
BIN=${CF_BINARY_DIR:-$REPO/build}
conf=$CF_TEST_CLIENT_CONFIG
b=follow-$$
dir=$(mktemp -d /tmp/cf-follow.XXXXXX)
pid=
cleanup() {
    if [[ -n $pid ]]; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
cli=("$BIN/dispatcher/codefleet" --config "$conf" --brokers "$CF_TEST_BROKERS" --request-topic "$b.req"
    --result-topic "$b.res" --timeout 60s)
"${cli[@]}" topics create --partitions 2 "$b.req" "$b.req.cancel" "$b.res" "$b.res.output" "$b.dlq" >/dev/null
mapfile -t uids < <(cf_run_uid_base_arg 0)
"$BIN/worker/codefleet-worker" "${uids[@]}" --config "$conf" --brokers "$CF_TEST_BROKERS" --group "$b.grp" \
    --worker-id "$b-w1" --request-topic "$b.req" --result-topic "$b.res" --dlq-topic "$b.dlq" --workers-topic "" \
    --log-level warn --slots 2 --backends process --profile.default.backends=process \
    --profile.default.network=enabled --work-root /tmp \
    >"$dir/worker.log" 2>&1 &
pid=$!
ids=()
for ((i = 0; i < n; i++)); do
    # --follow waits for it: every request is finished before the timing.
    "${cli[@]}" --json submit --follow -l shell --code 'for i in $(seq 1 200); do echo "line $i"; done' \
        >"$dir/submit.json" || { tail -20 "$dir/worker.log" >&2; exit 1; }
    ids+=("$(sed -n 's/.*"id":"\([^"]*\)","status".*/\1/p' "$dir/submit.json" | tail -n 1)")
done
now_ms() { date +%s%3N; }
: >"$dir/follow" && : >"$dir/wait"
for id in "${ids[@]}"; do
    t0=$(now_ms); "${cli[@]}" follow "$id" >"$dir/out" 2>/dev/null; t1=$(now_ms)
    [[ $(wc -l <"$dir/out") -eq 200 ]] || cf_die "follow $id: not the 200 lines"
    echo $((t1 - t0)) >>"$dir/follow"
    t0=$(now_ms); "${cli[@]}" wait "$id" >/dev/null; t1=$(now_ms)
    echo $((t1 - t0)) >>"$dir/wait"
done
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
f=$(median "$dir/follow") w=$(median "$dir/wait")
printf 'rounds                  %d\n' "$n"
printf 'wait ID (anchor)        %s ms median\n' "$w"
printf 'follow ID (200 lines)   %s ms median  (%.2fx of wait)\n' "$f" "$(awk -v a="$f" -v b="$w" 'BEGIN { print a / b }')"
