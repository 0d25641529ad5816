#!/usr/bin/env bash
# Builds the container backend's default image: a Debian root filesystem made
# with debootstrap from Debian packages (python3, nodejs, gcc, g++), laid out
# for codefleet (the mount points the backend binds into), cached outside
# the clone.  No registry is involved.
#
# Usage: deploy/images.sh [--force] [--print-dir]
#   --force      build again even if the cached image is complete
#   --print-dir  only print where the default image is (or would be)
# Environment: CODEFLEET_IMAGES (default /var/lib/codefleet/images: every
# directory down to an image must let other uids through, which a home
# directory such as /root does not),
# CODEFLEET_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# CODEFLEET_IMAGE_SUITE (default: this host's codename, else bookworm).
#
# The image is a plain directory, <images>/default/rootfs, owned by root
# and never written by the backend (it is mounted read-only into every
# container).  A stamp file names the package list: a changed list builds a
# new image.  The build goes to a temporary directory first and is renamed
# into place, so an interrupted build never leaves a half image behind.
#
# An operator's own image needs the same layout: empty directories /work,
# /run/codefleet and an empty file /run/codefleet-init (make_layout below),
# everything owned by root and writable by nobody else (harden below), and
# whatever the languages it is allowed for need at the usual paths.  A
# running worker keeps using the image it started with: restart workers
# after replacing one.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

force=0
print_dir=0
while (($#)); do
    case $1 in
    --force) force=1 ;;
    --print-dir) print_dir=1 ;;
    -h | --help)
        sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) cf_die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

images=${CODEFLEET_IMAGES:-/var/lib/codefleet/images}
dest=$images/default
if ((print_dir)); then
    echo "$dest/rootfs"
    exit 0
fi

suite=${CODEFLEET_IMAGE_SUITE:-}
if [[ -z $suite ]]; then
    suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    [[ -n $suite ]] || suite=bookworm
fi
mirror=${CODEFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What each default language needs; the init is not in it (the backend binds
# its static codefleet-container-init in as pid 1, so any image gets one).
include=python3,nodejs,gcc,g++,libc6-dev,ca-certificates
stamp="suite=$suite include=$include layout=3"

make_layout() {
    local root=$1
    install -d -m 0755 "$root/work" "$root/run/codefleet" "$root/tmp" "$root/dev" "$root/proc"
    : >"$root/run/codefleet-init"
    chmod 0644 "$root/run/codefleet-init"
    # Nothing of the build machine: no resolver of ours (network=enabled
    # binds slirp's over this file), its own name, localhost resolvable.
    : >"$root/etc/resolv.conf"
    echo codefleet >"$root/etc/hostname"
    printf '127.0.0.1\tlocalhost codefleet\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
    chmod 0644 "$root/etc/resolv.conf" "$root/etc/hostname" "$root/etc/hosts"
}

# The image sits on the host where every uid can reach it (the runtime sets
# containers up inside their user namespaces): nothing in it may be a way in
# for a host user or a program of another backend.  No device nodes (the
# runtime makes /dev), no setuid or setgid programs, nothing writable but by
# root (/tmp and /var/tmp included: inside, /tmp is a tmpfs and the rest is
# read-only anyway).  The worker checks the same at start.
harden() {
    local root=$1
    find "$root/dev" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
    find "$root" -xdev ! -type l -perm /6000 -exec chmod ug-s {} +
    find "$root" -xdev ! -type l -perm /022 -exec chmod go-w {} +
    chmod 0755 "$root/tmp" "$root/var/tmp" 2>/dev/null || true
}

if ((!force)) && [[ -f $dest/stamp && $(cat "$dest/stamp") == "$stamp" && -x $dest/rootfs/usr/bin/python3 ]]; then
    exit 0
fi
(($(id -u) == 0)) || cf_die "building the image needs root (debootstrap)"
command -v debootstrap >/dev/null || cf_die "debootstrap is not installed (deploy/install.sh installs it)"

mkdir -p "$images"
chmod 0755 "$images"
tmp=$(mktemp -d "$images/.build.XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT
cf_log "building the default container image ($suite: $include) in $tmp; this takes a few minutes"
t0=$(date +%s)
if ! debootstrap --variant=minbase --include="$include" "$suite" "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1; then
    tail -n 20 "$tmp/debootstrap.log" >&2
    cf_die "debootstrap failed (log above)"
fi
# Nothing of the build machine's package caches goes into the image.
rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"* 2>/dev/null || true
make_layout "$tmp/rootfs"
harden "$tmp/rootfs"
echo "$stamp" >"$tmp/stamp"
chmod 0755 "$tmp" "$tmp/rootfs"
rm -f "$tmp/debootstrap.log"
# Swap in: the old image (if any) goes only once the new one is complete.
if [[ -d $dest ]]; then
    mv "$dest" "$images/.old.$$"
    rm -rf --one-file-system "$images/.old.$$"
fi
mv "$tmp" "$dest"
trap - EXIT
cf_log "default image ready in $dest/rootfs ($(du -sm "$dest/rootfs" | cut -f1) MB, $(($(date +%s) - t0)) s)"
