#!/usr/bin/env bash
# Installs what codefleet needs to build and test (Debian packages, among
# them the worker's compilers gcc, g++, rustc and go), TypeScript from the npm
# registry into a system location every uid can read, then fetches the Apache
# Kafka broker jars from Maven Central into a cache outside git.
#
# Usage: deploy/install.sh [--no-kafka] [--no-runtimes] [--no-images] [--force-kafka] [--force-typescript]
#   --no-kafka          skip the Kafka jars
#   --no-images         skip the container backend's default image (deploy/images.sh)
#   --no-runtimes       skip the wasm/js runtimes' sources and the cargo check
#   --force-kafka       fetch the Kafka jars again even if the cache is complete
#   --force-typescript  run npm ci again even if the installed tree matches
# Environment: CODEFLEET_KAFKA_VERSION (default in deploy/common.sh),
# CODEFLEET_CACHE (default ~/.cache/codefleet; also npm's cache),
# CODEFLEET_TOOLCHAINS (default /usr/local/lib/codefleet).
#
# Idempotent and quiet when everything is there (dpkg-query first, the
# TypeScript tree checked against a stamped copy of its package-lock.json, so
# a second run costs well under a second).  Never prompts.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fetch_kafka=1
runtimes=1
images=1
force_kafka=0
force_ts=0
while (($#)); do
    case $1 in
    --no-kafka) fetch_kafka=0 ;;
    --no-runtimes) runtimes=0 ;;
    --no-images) images=0 ;;
    --force-kafka) force_kafka=1 ;;
    --force-typescript) force_ts=1 ;;
    -h | --help)
        sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) cf_die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

packages=(build-essential cmake ninja-build ccache pkg-config curl libssl-dev libsasl2-dev libzstd-dev zlib1g-dev
    libmsgpack-dev libseccomp-dev libhiredis-dev libcmocka-dev libjansson-dev libinih-dev redis-server redis-tools kcat bubblewrap
    python3 python3-dev python3-cloudpickle python3-numpy python3-pandas python3-matplotlib nodejs ca-certificates slirp4netns iproute2 clang-14 libfuzzer-14-dev libclang-rt-14-dev
    rustc golang-go lld-14 wasi-libc libclang-rt-14-dev-wasm32 wabt
    qemu-system-x86 busybox-static kmod cpio xz-utils zstd
    crun debootstrap
    libmicrohttpd-dev libcurl4-openssl-dev prometheus podman runc)
# (curl, libssl, libsasl2, libzstd, zlib: librdkafka, built by
#  deploy/librdkafka.sh from a pinned crates.io source, not Debian's 2.0.2.)
# (python3-cloudpickle: a Python session saves the functions, classes and
#  lambdas its cells define by value; without it they are reported lost.
#  numpy, pandas, matplotlib: what agents' cells import first; a session's
#  matplotlib figures come back as PNGs.)
# (qemu, busybox, kmod, cpio: tests/vm/run.sh boots cgroup v2 kernels.)
# (crun, debootstrap: the container backend and its default image.)
# (libmicrohttpd: the worker's /metrics and health endpoints; libcurl: OTLP
#  trace export; prometheus: promtool and a real scraper for the tests;
#  podman (+ runc: crun refuses cgroup v1/hybrid hosts): the worker image is
#  built and run in CI.)
# Any Java 17+ runtime will do: only ask for Debian's default when none is there.
command -v java >/dev/null 2>&1 || packages+=(default-jre-headless)
command -v mvn >/dev/null 2>&1 || packages+=(maven)

# npm, for TypeScript only.  Look where Node.js installs put it, not only on
# PATH (a non-login shell may lack the PATH a profile script sets up).
# NodeSource's nodejs package ships its own npm and conflicts with Debian's:
# Debian's npm is asked for only when no npm is there at all.
find_npm() {
    local c
    for c in "$(command -v npm 2>/dev/null)" /usr/bin/npm /usr/local/bin/npm \
        /usr/lib/node_modules/npm/bin/npm-cli.js /usr/share/nodejs/npm/bin/npm-cli.js; do
        [[ -n $c && -x $c ]] && {
            printf '%s\n' "$c"
            return 0
        }
    done
    return 1
}
find_npm >/dev/null || packages+=(npm)

install_packages() {
    local missing=() pkg status
    for pkg in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
        [[ $status == ii* ]] || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0

    local -a sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 || cf_die "missing packages (${missing[*]}) and not root; install them as root"
        sudo=(sudo -n) # -n: fail instead of prompting (CI has no stdin)
    fi
    cf_log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q </dev/null >/dev/null
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >/dev/null
}

typescript_current() {
    [[ -x $CF_TS_HOME/node_modules/typescript/bin/tsc && -f $CF_TS_STAMP ]] &&
        cmp -s "$CF_TS_STAMP" "$CF_REPO/deploy/toolchains/typescript/package-lock.json"
}

# npm ci of deploy/toolchains/typescript into a staging dir in the cache (as
# the caller: npm never runs as root for a non-root caller), then copied into
# $CF_TS_HOME, owned by root and readable by every uid.  The copy of the lock
# file is the stamp, written into the staging dir last.
install_typescript() {
    if ((!force_ts)) && typescript_current; then
        return 0
    fi
    local src=$CF_REPO/deploy/toolchains/typescript npm
    npm=$(find_npm) || cf_die "npm not found (the Debian package npm should have installed it)"
    mkdir -p "$CF_CACHE"
    exec 8>"$CF_CACHE/typescript.lock"
    flock 8
    if ((!force_ts)) && typescript_current; then
        exec 8>&-
        return 0
    fi
    cf_log "installing TypeScript into $CF_TS_HOME (npm ci)"
    local -a s=()
    if ! { mkdir -p "$CF_TOOLCHAINS" 2>/dev/null && [[ -w $CF_TOOLCHAINS ]]; }; then
        command -v sudo >/dev/null 2>&1 || cf_die "$CF_TOOLCHAINS is not writable and there is no sudo; run as root"
        s=(sudo -n)
        "${s[@]}" mkdir -p "$CF_TOOLCHAINS"
    fi
    local stage=$CF_CACHE/typescript.stage log=$CF_CACHE/npm-typescript.log
    rm -rf "$stage"
    mkdir -p "$stage"
    cp "$src/package.json" "$src/package-lock.json" "$stage/"
    if ! (cd "$stage" && umask 022 && "$npm" ci --prefix "$stage" --cache "$CF_CACHE/npm" \
        --ignore-scripts --no-audit --no-fund --no-update-notifier --loglevel=warn) </dev/null >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        rm -rf "$stage"
        cf_die "npm ci failed (network?); full log: $log"
    fi
    [[ -x $stage/node_modules/typescript/bin/tsc ]] || {
        rm -rf "$stage"
        cf_die "npm ci finished but node_modules/typescript/bin/tsc is missing"
    }
    cp "$src/package-lock.json" "$stage/${CF_TS_STAMP##*/}"
    "${s[@]}" rm -rf "$CF_TS_HOME.new" "$CF_TS_HOME.old"
    "${s[@]}" cp -R "$stage" "$CF_TS_HOME.new"
    "${s[@]}" chmod -R u+rwX,go+rX,go-w "$CF_TS_HOME.new"
    if [[ -e $CF_TS_HOME ]]; then "${s[@]}" mv "$CF_TS_HOME" "$CF_TS_HOME.old"; fi
    "${s[@]}" mv "$CF_TS_HOME.new" "$CF_TS_HOME"
    "${s[@]}" rm -rf "$CF_TS_HOME.old" "$stage"
    exec 8>&-
    cf_log "typescript ready: $("$CF_TS_HOME/node_modules/typescript/bin/tsc" --version)"
}

kafka_complete() {
    [[ -f $CF_KAFKA_STAMP && -f $CF_KAFKA_LIBS/kafka_2.13-$CF_KAFKA_VERSION.jar ]]
}

fetch_kafka_jars() {
    if ((!force_kafka)) && kafka_complete; then
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || cf_die "mvn not found"
    mkdir -p "$CF_KAFKA_HOME"
    # One fetch at a time: CI jobs may share the cache.
    exec 9>"$CF_KAFKA_HOME/.lock"
    flock 9
    if ((!force_kafka)) && kafka_complete; then
        exec 9>&-
        return 0
    fi
    cf_log "fetching Apache Kafka $CF_KAFKA_VERSION from Maven Central into $CF_KAFKA_LIBS"
    local tmp=$CF_KAFKA_HOME/libs.tmp.$$
    rm -rf "$tmp"
    # The build dir of the helper pom also goes to the cache, not the repo.
    # Maven's output goes to a log (it is shown on failure only).
    local mvnlog=$CF_KAFKA_HOME/maven.log
    if ! mvn -B -q -f "$CF_REPO/deploy/kafka/pom.xml" \
        -Dkafka.version="$CF_KAFKA_VERSION" -Dcf.libs="$tmp" \
        -Dcf.target="$CF_KAFKA_HOME/target" \
        dependency:copy-dependencies </dev/null >"$mvnlog" 2>&1; then
        tail -n 40 "$mvnlog" >&2
        rm -rf "$tmp"
        cf_die "Maven could not resolve the Kafka jars (network?); full log: $mvnlog"
    fi
    local jar
    for jar in "kafka_2.13-$CF_KAFKA_VERSION.jar" "kafka-clients-$CF_KAFKA_VERSION.jar" \
        slf4j-reload4j-1.7.36.jar reload4j-1.2.25.jar; do
        [[ -f $tmp/$jar ]] || {
            rm -rf "$tmp"
            cf_die "Maven finished but $jar is missing"
        }
    done
    rm -rf "$CF_KAFKA_LIBS" "$CF_KAFKA_STAMP"
    mv "$tmp" "$CF_KAFKA_LIBS"
    # The stamp is written last: a half-done fetch is never taken as complete.
    printf 'kafka %s fetched %s\n' "$CF_KAFKA_VERSION" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$CF_KAFKA_STAMP"
    exec 9>&-
    cf_log "kafka jars ready ($(find "$CF_KAFKA_LIBS" -name '*.jar' | wc -l) jars)"
}

# QuickJS-ng 0.18.0 C sources for the js backend, from the crates.io package
# that carries them with their license (libquickjs-ng-sys 0.14.0, directory
# embed/quickjs), checked against the checksum crates.io's index lists.
QUICKJS_CRATE=libquickjs-ng-sys-0.14.0
QUICKJS_SHA256=9c81e864c33a1d1543f2f651d7622de0e8fb9b8e0c50b808eee606c056dd02e2
QUICKJS_DIR=$CF_CACHE/quickjs-ng-0.18.0
fetch_quickjs() {
    [[ -f $QUICKJS_DIR/.complete ]] && return 0
    mkdir -p "$CF_CACHE"
    exec 8>"$CF_CACHE/.quickjs.lock"
    flock 8
    if [[ ! -f $QUICKJS_DIR/.complete ]]; then
        cf_log "fetching QuickJS-ng sources ($QUICKJS_CRATE) from crates.io into $QUICKJS_DIR"
        local tmp=$CF_CACHE/quickjs.tmp.$$
        rm -rf "$tmp" && mkdir -p "$tmp"
        curl -sSfL --retry 3 -o "$tmp/q.crate" "https://static.crates.io/crates/${QUICKJS_CRATE%-*}/$QUICKJS_CRATE.crate" ||
            cf_die "could not download $QUICKJS_CRATE from crates.io"
        echo "$QUICKJS_SHA256  $tmp/q.crate" | sha256sum -c --quiet - || cf_die "$QUICKJS_CRATE: checksum mismatch"
        tar -xzf "$tmp/q.crate" -C "$tmp" --strip-components=3 "$QUICKJS_CRATE/embed/quickjs/"
        rm -f "$tmp/q.crate"
        [[ -f $tmp/quickjs.c && -f $tmp/LICENSE ]] || cf_die "$QUICKJS_CRATE: no quickjs.c in the package"
        rm -rf "$QUICKJS_DIR"
        mv "$tmp" "$QUICKJS_DIR"
        date -u +%Y-%m-%dT%H:%M:%SZ >"$QUICKJS_DIR/.complete"
    fi
    exec 8>&-
}

# wasmtime's C API is built by cargo (Rust 1.90+: wasmtime 48's minimum).
check_cargo() {
    local cargo
    cargo=$(command -v cargo 2>/dev/null || true)
    [[ -z $cargo && -x ${HOME:-/root}/.cargo/bin/cargo ]] && cargo=${HOME:-/root}/.cargo/bin/cargo
    [[ -n $cargo ]] || cf_die "cargo not found: the wasm backend needs Rust 1.90 or newer (rustup); or build with deploy/build.sh --no-runtimes"
    local v
    v=$("$cargo" --version | awk '{print $2}')
    [[ $(printf '%s\n1.90.0\n' "$v" | sort -V | head -n1) == 1.90.0 ]] ||
        cf_die "cargo $v is older than 1.90 (wasmtime 48 needs it); or build with deploy/build.sh --no-runtimes"
}

install_packages
"$(dirname "${BASH_SOURCE[0]}")/librdkafka.sh"
install_typescript
((fetch_kafka)) && fetch_kafka_jars
if ((runtimes)); then
    fetch_quickjs
    check_cargo
fi
# The container backend's default image: debootstrap from Debian packages,
# cached in /var/lib/codefleet/images (a no-op when it is there).
((images)) && "$(dirname "${BASH_SOURCE[0]}")/images.sh"
exit 0
