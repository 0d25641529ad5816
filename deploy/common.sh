# shellcheck shell=bash disable=SC2034 # the variables are used by the sourcing scripts
# Shared settings for the deploy/ scripts (sourced, never run).
#
# Everything is overridable from the environment; nothing here prompts.

CF_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The broker the stack runs: the newest 4.x that resolves from Maven Central;
# CODEFLEET_KAFKA_VERSION=3.9.1 (or any other) still works.
CF_KAFKA_VERSION=${CODEFLEET_KAFKA_VERSION:-4.4.0}
[[ $CF_KAFKA_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || {
    printf "CODEFLEET_KAFKA_VERSION must look like 4.4.0, not %s\n" "$CF_KAFKA_VERSION" >&2
    exit 1
}
CF_CACHE=${CODEFLEET_CACHE:-${HOME:-/root}/.cache/codefleet}
CF_KAFKA_HOME=$CF_CACHE/kafka-$CF_KAFKA_VERSION
CF_KAFKA_LIBS=$CF_KAFKA_HOME/libs
CF_KAFKA_STAMP=$CF_KAFKA_HOME/.complete
# Toolchains the worker runs as unprivileged uids: a system location every uid
# can read (the sandbox binds /usr from the host).
CF_TOOLCHAINS=${CODEFLEET_TOOLCHAINS:-/usr/local/lib/codefleet}
CF_TS_HOME=$CF_TOOLCHAINS/typescript
CF_TS_STAMP=$CF_TS_HOME/.codefleet-package-lock.json

# The cmake arguments that put ccache (deploy/install.sh installs it) in
# front of the compilers, one per line, or none when it is missing or
# CODEFLEET_CCACHE=0: compiled objects are cached outside the clone, so a
# fresh clone or the test command's builds recompile only what changed.
# Paths under the checkout are hashed as relative ones, so a clone in
# another directory hits the same entries (__FILE__ is then relative too:
# the tests find the tree by CF_SOURCE_DIR).  The settings go into the
# launcher, so "cmake --build" alone uses them.
cf_ccache_cmake_args() {
    [[ ${CODEFLEET_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null 2>&1 || {
        printf '%s\n' -UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER
        return
    }
    local l="env;CCACHE_DIR=${CCACHE_DIR:-$CF_CACHE/ccache};CCACHE_BASEDIR=$CF_REPO;CCACHE_NOHASHDIR=1"
    l+=";CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-3G};ccache"
    printf '%s\n' "-DCMAKE_C_COMPILER_LAUNCHER=$l" "-DCMAKE_CXX_COMPILER_LAUNCHER=$l"
}

cf_log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
# For the index-th of several workers a script runs on this host at once:
# "--run-uid-base=N" 1000 x index above CODEFLEET_WORKER_RUN_UID_BASE when
# that is set (a worker refuses run uids another worker on the host holds),
# nothing otherwise (the process backend then runs no program as a run
# uid, and the other backends' default base is the first worker's).
cf_run_uid_base_arg() { # index
    local b=${CODEFLEET_WORKER_RUN_UID_BASE:-0}
    if [[ $b =~ ^[0-9]+$ ]] && ((b > 0)); then
        printf -- '--run-uid-base=%d\n' $((b + $1 * 1000))
    fi
}

cf_die() {
    cf_log "error: $*"
    exit 1
}

# True when something accepts TCP connections on 127.0.0.1:$1.
cf_port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# True when $1 is a live process whose command line contains $2: pid files
# can outlive their process, and pids get reused.
cf_pid_matches() {
    local pid=$1 marker=$2 cmdline
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ -n $cmdline && $cmdline == *"$marker"* ]]
}

# True while process $1 runs (a zombie does not).  For a child spawned a
# moment ago: until it has exec'd its program, its command line is still
# its parent shell's, so cf_pid_matches would call it gone.
cf_pid_alive() {
    [[ $1 =~ ^[0-9]+$ ]] && kill -0 "$1" 2>/dev/null &&
        [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}
