#!/usr/bin/env bash
# Benchmark of the Redis state library (checkpoints, workspaces) against
# redis-benchmark on the same server, in one run (figures in BENCHMARKS.md).
#
#   tests/bench/run_state.sh [--quick]
#
#   1. redis-benchmark SET/GET with a checkpoint-sized payload (1024 B): one
#      connection without pipelining (-c 1 -P 1, like our client: one
#      connection per thread, sequential), 3 runs, median; and the default
#      50 connections for reference; plus 100 KiB values (-c 1), the size of
#      one workspace file.
#   2. bench_state: checkpoint save/latest/get and workspace place/write-back
#      (100 files x 100 KiB = 10 MB), each beside plain hiredis anchors.
#   3. summary: medians and the ratios ours / redis-benchmark.
#
# Starts its own redis-server (127.0.0.1, port $CF_BENCH_REDIS_PORT, default
# 25379, no persistence) in a temp dir and stops it at the end.  Uses the
# build in $CF_BUILD_DIR (default <repo>/build, built with deploy/build.sh
# if absent; benchmark an optimised build, not a Debug one).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
exec </dev/null

quick=0
[[ ${1:-} == --quick ]] && quick=1
port=${CF_BENCH_REDIS_PORT:-25379}
bin=${CF_BUILD_DIR:-$repo/build}
rb_n=50000 rb_runs=3 rb_n_many=200000 rb_n_big=3000 cp_ops=3000 reps=15
((quick)) && rb_n=10000 rb_runs=1 rb_n_many=50000 rb_n_big=500 cp_ops=500 reps=3
state_bytes=1024 files=100 file_bytes=102400

for tool in redis-server redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || { echo "run_state.sh: $tool not found" >&2; exit 1; }
done
if [[ -f $bin/build.ninja ]]; then
    # Another change in the tree may not build right now; an existing
    # binary still measures the library it was built with.
    if ! ninja -C "$bin" bench_state >"${TMPDIR:-/tmp}/cf-bench-state-build.log" 2>&1; then
        cat "${TMPDIR:-/tmp}/cf-bench-state-build.log" >&2
        [[ -x $bin/tests/bench_state ]] || exit 1
        echo "run_state.sh: build failed, using the existing bench_state" >&2
    fi
    rm -f "${TMPDIR:-/tmp}/cf-bench-state-build.log"
else
    deploy/build.sh
fi
[[ -x $bin/tests/bench_state ]] || { echo "run_state.sh: $bin/tests/bench_state missing" >&2; exit 1; }

if redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "run_state.sh: something already answers on port $port" >&2
    exit 1
fi
tmp=$(mktemp -d /tmp/cf-bench-state.XXXXXX)
redis_pid=
cleanup() {
    if [[ -n $redis_pid ]]; then
        kill -TERM "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp" --save '' --appendonly no \
    --logfile "$tmp/redis.log" &
redis_pid=$!
for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
done
redis-cli -p "$port" ping >/dev/null || { echo "run_state.sh: redis-server did not start" >&2; exit 1; }

results=()
collect() { # prints the tool's output and keeps its RESULT lines
    local line
    while IFS= read -r line; do
        printf '%s\n' "$line"
        [[ $line == RESULT* ]] && results+=("${line#RESULT }")
    done
}

# redis-benchmark -q prints "SET: 26385.22 requests per second, p50=0.031 msec"
# after \r-separated progress lines.  Emits "SET rps p50_us" per test.
rbench() {
    redis-benchmark -p "$port" -t set,get -q "$@" | tr '\r' '\n' |
        awk '/requests per second/ {
                 t = $1; sub(":", "", t); p = $0; sub(/.*p50=/, "", p); sub(/ msec.*/, "", p)
                 printf "%s %.0f %.0f\n", t, $2, p * 1000 }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print 0 }'; }

echo "== 1. redis-benchmark, ${state_bytes}-byte values, -c 1 -P 1, $rb_n requests, $rb_runs runs"
: >"$tmp/rb1"
for i in $(seq 1 "$rb_runs"); do
    rbench -n "$rb_n" -d "$state_bytes" -c 1 -P 1 | tee -a "$tmp/rb1" | sed "s/^/  run $i: /"
done
for t in SET GET; do
    rps=$(awk -v t=$t '$1 == t { print $2 }' "$tmp/rb1" | median)
    p50=$(awk -v t=$t '$1 == t { print $3 }' "$tmp/rb1" | median)
    results+=("redis_benchmark_c1 test=$t bytes=$state_bytes rps=$rps p50_us=$p50")
    declare "rb1_${t}_rps=$rps" "rb1_${t}_p50=$p50"
done
echo "== redis-benchmark, ${state_bytes}-byte values, default 50 connections, $rb_n_many requests"
while read -r t rps p50; do
    echo "  $t $rps requests/s p50 ${p50}us"
    results+=("redis_benchmark_c50 test=$t bytes=$state_bytes rps=$rps p50_us=$p50")
    declare "rb50_${t}_rps=$rps"
done < <(rbench -n "$rb_n_many" -d "$state_bytes")
echo "== redis-benchmark, ${file_bytes}-byte values (one workspace file), -c 1, $rb_n_big requests"
while read -r t rps p50; do
    echo "  $t $rps requests/s p50 ${p50}us"
    results+=("redis_benchmark_c1_big test=$t bytes=$file_bytes rps=$rps p50_us=$p50")
    declare "rbbig_${t}_rps=$rps"
done < <(rbench -n "$rb_n_big" -d "$file_bytes" -c 1 -P 1)
redis-cli -p "$port" flushall >/dev/null

echo
echo "== 2. bench_state (checkpoints: $cp_ops ops each; workspace: $files x $file_bytes B, $reps repetitions)"
collect < <("$bin/tests/bench_state" --port "$port" --cp-ops "$cp_ops" --state-bytes "$state_bytes" \
    --reps "$reps" --files "$files" --file-bytes "$file_bytes" --work-root "${TMPDIR:-/tmp}")

# field NAME KEY: the value of KEY= in the RESULT line that starts with NAME.
field() {
    local r
    for r in "${results[@]}"; do
        if [[ $r == "$1 "* ]]; then
            sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$r"
            return
        fi
    done
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo
echo "== summary ($(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'))"
echo "checkpoints, ${state_bytes}-byte state, one connection, sequential (ratio = our ops/s / redis-benchmark -c 1 -P 1 rps):"
for row in "cp_save SET" "cp_latest GET" "cp_get GET"; do
    read -r op test <<<"$row"
    ops=$(field "$op" ops_per_s) p50=$(field "$op" p50_us)
    rv="rb1_${test}_rps" rp="rb1_${test}_p50"
    printf '  %-10s p50 %4sus %7s ops/s | redis-benchmark %s p50 %3sus %6s rps | ratio %s\n' \
        "$op" "$p50" "$ops" "$test" "${!rp}" "${!rv}" "$(ratio "$ops" "${!rv}")"
    results+=("ratio_vs_redis_benchmark op=$op anchor=$test ratio=$(ratio "$ops" "${!rv}")")
done
printf '  in-process plain hiredis, same run: SET %s ops/s, GET %s ops/s; ratios save %s, latest %s, get %s\n' \
    "$(field raw_set_state ops_per_s)" "$(field raw_get_state ops_per_s)" "$(field cp_vs_raw save_ratio)" \
    "$(field cp_vs_raw latest_ratio)" "$(field cp_vs_raw get_ratio)"
printf '  server per op (Lua / main-thread CPU): save %s/%sus, latest %s/%sus, get -/%sus, plain SET -/%sus\n' \
    "$(field cp_save server_script_us)" "$(field cp_save server_cpu_us)" "$(field cp_latest server_script_us)" \
    "$(field cp_latest server_cpu_us)" "$(field cp_get server_cpu_us)" "$(field raw_set_state server_cpu_us)"
printf '  (redis-benchmark with 50 connections: SET %s, GET %s rps)\n' "${rb50_SET_rps:-?}" "${rb50_GET_rps:-?}"
big_get=$(awk -v r="${rbbig_GET_rps:-0}" -v n="$files" 'BEGIN { if (r > 0) printf "%.0f", n * 1e6 / r; else print 0 }')
big_set=$(awk -v r="${rbbig_SET_rps:-0}" -v n="$files" 'BEGIN { if (r > 0) printf "%.0f", n * 1e6 / r; else print 0 }')
echo "workspace, $files files x $file_bytes B (ratio = our time / plain hiredis time for the same bytes, same run):"
printf '  place       p50 %6sus (snapshot %s + put %s) | %d x GET %sus (redis-benchmark: %sus) | ratio %s\n' \
    "$(field ws_place p50_us)" "$(field ws_place snapshot_p50_us)" "$(field ws_place put_p50_us)" "$files" \
    "$(field ws_place raw_get_p50_us)" "$big_get" "$(field ws_place ratio)"
printf '  write-back  p50 %6sus (collect %s + diff %s + commit %s; %s puts, %s deletes) | plain SET/DEL %sus | ratio %s\n' \
    "$(field ws_writeback_partial p50_us)" "$(field ws_writeback_partial collect_p50_us)" \
    "$(field ws_writeback_partial diff_p50_us)" "$(field ws_writeback_partial commit_p50_us)" \
    "$(field ws_writeback_partial puts)" "$(field ws_writeback_partial deletes)" \
    "$(field ws_writeback_partial raw_p50_us)" "$(field ws_writeback_partial ratio)"
printf '  write-back charged to a tenant quota p50 %6sus (commit %s) | the same without %sus (commit %s) | ratio %s\n' \
    "$(field ws_writeback_partial_quota p50_us)" "$(field ws_writeback_partial_quota commit_p50_us)" \
    "$(field ws_writeback_partial_quota unquoted_p50_us)" "$(field ws_writeback_partial_quota unquoted_commit_p50_us)" \
    "$(field ws_writeback_partial_quota ratio)"
printf '  full w-back p50 %6sus (collect %s + diff %s + commit %s) | %d x SET %sus (redis-benchmark: %sus) | ratio %s\n' \
    "$(field ws_writeback_full p50_us)" "$(field ws_writeback_full collect_p50_us)" \
    "$(field ws_writeback_full diff_p50_us)" "$(field ws_writeback_full commit_p50_us)" "$files" \
    "$(field ws_writeback_full raw_set_p50_us)" "$big_set" "$(field ws_writeback_full ratio)"
printf '  floors: one Lua script moving the same 10 MB: GET %sus, SET %sus; plain files: write %sus, read %sus\n' \
    "$(field ws_lua_get_all p50_us)" "$(field ws_lua_set_all p50_us)" "$(field ws_file_write_all p50_us)" \
    "$(field ws_file_read_all p50_us)"
echo "RESULT lines:"
printf '  %s\n' "${results[@]}"
