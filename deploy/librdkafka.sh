#!/usr/bin/env bash
# Builds the pinned librdkafka the project links, from the source that the
# crates.io package rdkafka-sys carries (with its licenses), checked
# against the checksum crates.io's index lists, into PREFIX (default
# $CODEFLEET_CACHE/librdkafka-<version>, i.e. ~/.cache/codefleet/
# librdkafka-2.12.1; a version per directory, so checkouts pinning
# different ones never rebuild over each other): a static
# library and CMake's package files (RdKafka::rdkafka, which names its
# dependencies: OpenSSL, zlib, zstd, Cyrus SASL).  CMakeLists.txt looks
# there first.
#
# Usage: deploy/librdkafka.sh [PREFIX]      build (a no-op when PREFIX has it)
#        deploy/librdkafka.sh --source      fetch and check the source only;
#                                           print the directory holding it
# Environment: CODEFLEET_RDKAFKA_SOURCE, a directory already holding the
# package (the image's build stage gets the host's this way: the build
# container may not trust the host's TLS interception); it is checked too.
#
# Why not Debian's: bookworm has librdkafka 2.0.2 (early 2023).  It cannot
# do SCRAM against Kafka 4 (confluentinc/librdkafka#4895, fixed in 2.6.1),
# its cooperative-sticky assignor hangs the group leader when members
# subscribe to different topics (#4783, fixed in 2.6.1; the worker's one
# consumer per request topic needs that), and it has no KIP-848 group
# protocol (GA in 2.12).  Static, so the worker, the CLI and the image carry
# one version whatever the host has.
#
# Idempotent and quiet when the prefix holds this version (a stamp names
# it); one build at a time per prefix (flock); about 2.5 minutes on 2 cores.
# Needs: curl, cmake, ninja, a C compiler, libssl-dev, libsasl2-dev,
# libzstd-dev, zlib1g-dev (deploy/install.sh and the image's build stage
# install them).
set -euo pipefail

RDKAFKA_VERSION=2.12.1
RDKAFKA_CRATE=rdkafka-sys-4.10.0+$RDKAFKA_VERSION
RDKAFKA_SHA256=e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77

cache=${CODEFLEET_CACHE:-${HOME:-/root}/.cache/codefleet}
cache=${cache%/}
log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# The package, downloaded once into the cache and checked at every use.
source_dir() {
    local dir=${CODEFLEET_RDKAFKA_SOURCE:-$cache/crates}
    local crate=$dir/$RDKAFKA_CRATE.crate
    if [[ ! -f $crate && -z ${CODEFLEET_RDKAFKA_SOURCE:-} ]]; then
        command -v curl >/dev/null 2>&1 || die "curl not found (deploy/install.sh installs it)"
        mkdir -p "$dir"
        curl -sSfL --retry 3 -o "$crate.part.$$" "https://static.crates.io/crates/rdkafka-sys/$RDKAFKA_CRATE.crate" ||
            {
                rm -f "$crate.part.$$"
                die "could not download $RDKAFKA_CRATE from crates.io"
            }
        mv -f "$crate.part.$$" "$crate"
    fi
    [[ -f $crate ]] || die "$crate not found"
    echo "$RDKAFKA_SHA256  $crate" | sha256sum -c --quiet - >/dev/null 2>&1 || {
        [[ -n ${CODEFLEET_RDKAFKA_SOURCE:-} ]] && die "$crate: checksum mismatch"
        rm -f "$crate"
        die "$crate: checksum mismatch (removed; run again to download it anew)"
    }
    printf '%s\n' "$dir"
}

if [[ ${1:-} == --source ]]; then
    source_dir
    exit 0
fi
prefix=${1:-$cache/librdkafka-$RDKAFKA_VERSION}
while [[ $prefix == */ && $prefix != / ]]; do prefix=${prefix%/}; done
[[ $prefix == /* && $prefix != / ]] || die "PREFIX must be an absolute path other than /, not '$prefix'"
stamp=$prefix/.codefleet-librdkafka
want="librdkafka $RDKAFKA_VERSION $RDKAFKA_SHA256"

[[ -f $stamp && $(head -n1 "$stamp") == "$want" ]] && exit 0
mkdir -p "$(dirname "$prefix")"
exec 7>"$prefix.lock"
flock 7
[[ -f $stamp && $(head -n1 "$stamp") == "$want" ]] && exit 0
# Only a directory this script made is ever replaced: a PREFIX that holds
# something else (/usr/local, say) is refused, never removed.
if [[ -e $prefix && ! -f $stamp && ! -f $stamp.replacing ]] && [[ -n $(ls -A "$prefix" 2>/dev/null) ]]; then
    die "$prefix exists and was not made by this script: choose another PREFIX or remove it"
fi

for tool in cmake ninja sha256sum; do
    command -v $tool >/dev/null 2>&1 || die "$tool not found (deploy/install.sh installs it)"
done
dir=$(source_dir)
log "building librdkafka $RDKAFKA_VERSION from crates.io's $RDKAFKA_CRATE into $prefix (once; about 2.5 minutes)"
tmp=$(mktemp -d "$prefix.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$dir/$RDKAFKA_CRATE.crate" -C "$tmp" "$RDKAFKA_CRATE/librdkafka/"
src=$tmp/$RDKAFKA_CRATE/librdkafka
[[ -f $src/CMakeLists.txt && -f $src/LICENSES.txt ]] || die "$RDKAFKA_CRATE: no librdkafka sources in the package"
# SSL + SASL (SCRAM, OAUTHBEARER and Cyrus GSSAPI), zstd and zlib from
# the system; lz4 bundled; no curl (OIDC token fetching), no examples or
# tests.  PIC because the project's executables are PIE.
if ! nice -n 5 cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$tmp/prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DRDKAFKA_BUILD_STATIC=ON -DRDKAFKA_BUILD_EXAMPLES=OFF -DRDKAFKA_BUILD_TESTS=OFF \
    -DWITH_SSL=ON -DWITH_SASL=ON -DWITH_ZSTD=ON -DWITH_ZLIB=ON -DWITH_CURL=OFF -DENABLE_LZ4_EXT=OFF \
    </dev/null >"$tmp/build.log" 2>&1 ||
    ! nice -n 5 ninja -C "$tmp/build" </dev/null >>"$tmp/build.log" 2>&1 ||
    ! ninja -C "$tmp/build" install </dev/null >>"$tmp/build.log" 2>&1; then
    tail -n 40 "$tmp/build.log" >&2
    die "building librdkafka $RDKAFKA_VERSION failed (are libssl-dev, libsasl2-dev, libzstd-dev and zlib1g-dev installed?)"
fi
grep -q '^#define WITH_SASL_SCRAM 1' "$tmp/build/generated/config.h" ||
    die "librdkafka was built without SCRAM (SCRAM needs WITH_SSL and WITH_SASL: libssl-dev and libsasl2-dev)"
# pkg-config files would name the temporary prefix; CMake's package files
# are relative and are what the project uses.
rm -rf "$tmp/prefix/lib/pkgconfig"
printf '%s\nbuilt %s\n' "$want" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$tmp/prefix/.codefleet-librdkafka"
# The stamp goes first (renamed, so the tree is still known as ours), so
# an interrupted swap is never taken as complete; the old tree is moved
# aside before the new one takes its name.
[[ -f $stamp ]] && mv -f "$stamp" "$stamp.replacing"
if [[ -e $prefix ]]; then
    mv "$prefix" "$tmp/old"
fi
mv "$tmp/prefix" "$prefix"
log "librdkafka $RDKAFKA_VERSION ready in $prefix"
