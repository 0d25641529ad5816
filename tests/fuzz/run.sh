#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang-14, ASan + UBSan) into build-fuzz/
# and runs each for SECONDS (default 10), two at a time (CF_FUZZ_JOBS), on
# a fresh copy of its seeds: the golden vectors of schema/golden
# (committed) and tests/fuzz/seeds/.
# Findings (crash-*, leak-*, timeout-*) are kept in build-fuzz/findings/;
# make each a regression test.  Last line: "N passed, N failed" (a harness
# passes when it ran its time without a finding).
#
#   tests/fuzz/run.sh            10 s per harness (what tests/run_all.sh runs)
#   tests/fuzz/run.sh 600        longer runs
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
exec </dev/null
secs=${1:-10}
[[ $secs =~ ^[0-9]+$ ]] || { echo "run.sh: SECONDS must be a number" >&2; exit 2; }
cc=$(command -v clang-14 || command -v clang || true)
[[ -n $cc ]] || { echo "run.sh: clang not found (deploy/install.sh installs clang-14)"; echo "0 passed, 1 failed"; exit 1; }
out=$repo/build-fuzz
mkdir -p "$out"
# shellcheck source=deploy/common.sh
source "$repo/deploy/common.sh"
mapfile -t ccache_args < <(cf_ccache_cmake_args)
cmake -S . -B "$out" -G Ninja -DCMAKE_C_COMPILER="$cc" -DCF_FUZZ=ON -DBUILD_TESTING=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "${ccache_args[@]}" >"$out/configure.log" 2>&1 || { cat "$out/configure.log"; echo "0 passed, 1 failed"; exit 1; }
targets=(request result event json msgpack_value config flags batch_line redis_reply diagnostics)
ninja -C "$out" "${targets[@]/#/fuzz_}" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "0 passed, 1 failed"; exit 1; }

seeds_for() { # target -> seed files
    case $1 in
    request) ls schema/golden/request_*.msgpack ;;
    result) ls schema/golden/result_*.msgpack ;;
    event) ls schema/golden/event_*.msgpack schema/golden/chunk.msgpack ;;
    json) ls schema/golden/*.json ;;
    msgpack_value) ls schema/golden/*.msgpack ;;
    config) ls tests/fuzz/seeds/config/* ;;
    flags) ls tests/fuzz/seeds/flags/* ;;
    batch_line) ls tests/fuzz/seeds/batch_line/* schema/golden/request_*.json ;;
    redis_reply) ls tests/fuzz/seeds/redis_reply/* ;;
    diagnostics) ls tests/unit/fixtures/diagnostics/*.txt tests/unit/fixtures/diagnostics/*.jsonl 2>/dev/null ;;
    esac
}

# One harness on a fresh copy of its seeds; its verdict line goes to
# $out/fuzz_<t>.verdict.
fuzz_one() { # target
    local t=$1 corpus log rc runs
    corpus=$(mktemp -d)
    for f in $(seeds_for "$t"); do cp "$f" "$corpus/"; done
    log=$out/fuzz_$t.log
    "$out/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="$out/findings/$t-" -print_final_stats=1 "$corpus" >"$log" 2>&1
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    if ((rc == 0)); then
        printf 'fuzz_%-14s ok     %s runs in %ss\n' "$t" "$runs" "$secs" >"$out/fuzz_$t.verdict"
    else
        { printf 'fuzz_%-14s FAILED (exit %d), see %s\n' "$t" "$rc" "$log"
          grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5; } >"$out/fuzz_$t.verdict"
    fi
    rm -rf "$corpus"
}

# CF_FUZZ_JOBS (2) harnesses at a time: each is one process for its
# SECONDS, so on a 2-core machine two take the time of one.
jobs=${CF_FUZZ_JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: CF_FUZZ_JOBS must be a positive number" >&2; exit 2; }
mkdir -p "$out/findings"
rm -f "$out"/fuzz_*.verdict
for t in "${targets[@]}"; do
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
    fuzz_one "$t" &
done
wait
passed=0 failed=0
for t in "${targets[@]}"; do
    if [[ -f $out/fuzz_$t.verdict ]] && head -n 1 "$out/fuzz_$t.verdict" | grep -q ' ok '; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
    cat "$out/fuzz_$t.verdict" 2>/dev/null || printf 'fuzz_%-14s FAILED (no verdict)\n' "$t"
done
printf '%d passed, %d failed\n' "$passed" "$failed"
((failed == 0))
