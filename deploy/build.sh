#!/usr/bin/env bash
# Configures and builds codefleet with CMake + Ninja.
#
# Usage: deploy/build.sh [--sanitize | --tsan] [--no-runtimes] [--jobs N] [TARGET...]
#   (default)     RelWithDebInfo build in <repo>/build
#   --sanitize    ASan + UBSan (-DCF_SANITIZE=ON, Debug) in <repo>/build-asan
#   --tsan        ThreadSanitizer (-DCF_TSAN=ON) in <repo>/build-tsan
#   --no-runtimes without the wasm and js backends' runtimes (no cargo needed)
#   TARGET...     build only these targets (default: all)
#   --jobs N      parallel compile jobs (default: number of CPUs)
# Environment: CODEFLEET_CMAKE_ARGS  extra arguments for cmake (word-split);
#              CODEFLEET_CCACHE=0   no compiler cache (ccache, on by default).
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sanitize=0
runtimes=ON
targets=()
jobs=$(nproc 2>/dev/null || echo 2)
while (($#)); do
    case $1 in
    --sanitize) sanitize=1 ;;
    --tsan) sanitize=2 ;;
    --no-runtimes) runtimes=OFF ;;
    --jobs)
        (($# >= 2)) || cf_die "--jobs needs a number"
        jobs=$2
        shift
        ;;
    --jobs=*) jobs=${1#--jobs=} ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    -*) cf_die "unknown argument '$1' (see --help)" ;;
    *) targets+=("$1") ;;
    esac
    shift
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || cf_die "--jobs must be a positive number"

if ((sanitize == 2)); then
    dir=$CF_REPO/build-tsan
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCF_TSAN=ON)
elif ((sanitize)); then
    dir=$CF_REPO/build-asan
    args=(-DCMAKE_BUILD_TYPE=Debug -DCF_SANITIZE=ON)
else
    dir=$CF_REPO/build
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCF_SANITIZE=OFF)
fi
args+=(-DCF_EMBED_RUNTIMES=$runtimes)
# Compiled objects are cached outside the clone (ccache; deploy/common.sh).
mapfile -t -O "${#args[@]}" args < <(cf_ccache_cmake_args)
# shellcheck disable=SC2206 # word splitting is the documented interface
[[ -n ${CODEFLEET_CMAKE_ARGS:-} ]] && args+=($CODEFLEET_CMAKE_ARGS)

# A directory configured with another generator cannot be reused by Ninja.
if [[ -f $dir/CMakeCache.txt ]] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$dir/CMakeCache.txt"; then
    cf_log "$dir was configured with another generator: reconfiguring from scratch"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi

# The pinned librdkafka (built once into the cache; a no-op after that).
"$CF_REPO/deploy/librdkafka.sh"
cmake -S "$CF_REPO" -B "$dir" -G Ninja "${args[@]}" >/dev/null </dev/null ||
    cf_die "cmake configure failed (run: cmake -S $CF_REPO -B $dir -G Ninja ${args[*]})"
ninja -C "$dir" -j "$jobs" "${targets[@]}" </dev/null
cf_log "built in $dir"
