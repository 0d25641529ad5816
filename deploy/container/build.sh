#!/usr/bin/env bash
# Builds the worker image (deploy/container/Containerfile) with podman, from
# Debian packages only: no image registry is involved.
#
#   1. the base image, localhost/codefleet-debian:bookworm: a minbase Debian
#      root filesystem made with debootstrap and `podman import`ed; cached
#      (a stamp and the root filesystem's tarball in ~/.cache/codefleet/
#      container-base), so it is made once per suite/mirror/layout and only
#      re-imported when the image went missing
#   2. podman build -f deploy/container/Containerfile -t localhost/codefleet-worker:latest .
#      (podman's layer cache: a rebuild without source changes takes seconds,
#      one with source changes recompiles only)
#
# Usage: deploy/container/build.sh [--force-base] [--no-cache] [--base-only]
#   --force-base  make the base again (debootstrap) even if it is cached
#   --no-cache    build the worker image without podman's layer cache
#   --base-only   only make sure the base image is there
# Environment: CODEFLEET_WORKER_IMAGE, CODEFLEET_BASE_IMAGE,
# CODEFLEET_PODMAN_RUNTIME (deploy/container/podman.sh),
# CODEFLEET_DEBIAN_MIRROR (http://deb.debian.org/debian),
# CODEFLEET_IMAGE_SUITE (bookworm: the Containerfile names bookworm's packages),
# CODEFLEET_CACHE (~/.cache/codefleet).
#
# Needs root (debootstrap; podman as root, which the image's users need
# anyway: the sandbox backend needs a rootful container).  Idempotent, never
# prompts, prints how long each step took.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# shellcheck source=deploy/container/podman.sh
source "$(dirname "${BASH_SOURCE[0]}")/podman.sh"
exec </dev/null

force_base=0
no_cache=()
base_only=0
while (($#)); do
    case $1 in
    --force-base) force_base=1 ;;
    --no-cache) no_cache=(--no-cache) ;;
    --base-only) base_only=1 ;;
    -h | --help)
        sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) cf_die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

(($(id -u) == 0)) || cf_die "run as root (debootstrap, and rootful podman: the sandbox backend needs it)"
cf_podman_setup

suite=${CODEFLEET_IMAGE_SUITE:-bookworm}
mirror=${CODEFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
base_dir=$CF_CACHE/container-base
# Anything that changes what the base holds goes into the stamp.
stamp="suite=$suite mirror=$mirror layout=1"

t_start=$SECONDS
elapsed() { printf '%ds' $((SECONDS - $1)); }

# The base's own settings, written into the root filesystem before import.
layout_base() {
    local root=$1
    # Updates and security fixes, not only the release.
    local sec=${mirror%/debian}/debian-security
    cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $sec $suite-security main
EOF
    # Small images: no recommends, no documentation or translations (the
    # copyright files stay).
    cat >"$root/etc/apt/apt.conf.d/90codefleet" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOF
    cat >"$root/etc/dpkg/dpkg.cfg.d/90codefleet-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
EOF
    rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"* 2>/dev/null || true
    find "$root/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
    rm -rf "$root/usr/share/man/"* "$root/usr/share/info/"* 2>/dev/null || true
    # Nothing of the build machine: podman provides these at run time.
    : >"$root/etc/resolv.conf"
    echo localhost >"$root/etc/hostname"
}

import_base() {
    "${CF_PODMAN[@]}" import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL org.opencontainers.image.title=codefleet-debian org.opencontainers.image.description=\"Debian $suite minbase (debootstrap from $mirror)\"" \
        "$base_dir/rootfs.tar" "$CF_BASE_IMAGE" >/dev/null
}

make_base() {
    local t0=$SECONDS
    if ((!force_base)) && [[ -f $base_dir/stamp && $(cat "$base_dir/stamp") == "$stamp" && -s $base_dir/rootfs.tar ]]; then
        if podman image exists "$CF_BASE_IMAGE"; then
            cf_log "base image $CF_BASE_IMAGE: cached"
            return 0
        fi
        cf_log "base image $CF_BASE_IMAGE missing: importing the cached root filesystem"
        import_base
        cf_log "base image re-imported in $(elapsed "$t0")"
        return 0
    fi
    command -v debootstrap >/dev/null 2>&1 || cf_die "debootstrap is not installed (deploy/install.sh installs it)"
    mkdir -p "$base_dir"
    exec 9>"$base_dir/.lock"
    flock 9
    local tmp
    tmp=$(mktemp -d "$base_dir/.build.XXXXXX")
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf --one-file-system '$tmp'" EXIT
    cf_log "making the base image: debootstrap --variant=minbase $suite from $mirror (about a minute)"
    if ! nice -n 10 debootstrap --variant=minbase "$suite" "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1; then
        tail -n 20 "$tmp/debootstrap.log" >&2
        cf_die "debootstrap failed (log above)"
    fi
    layout_base "$tmp/rootfs"
    tar -C "$tmp/rootfs" --numeric-owner --xattrs -cf "$tmp/rootfs.tar" .
    rm -f "$base_dir/stamp"
    mv -f "$tmp/rootfs.tar" "$base_dir/rootfs.tar"
    rm -rf --one-file-system "$tmp"
    trap - EXIT
    import_base
    # The stamp last: an interrupted run never counts as done.
    echo "$stamp" >"$base_dir/stamp"
    exec 9>&-
    cf_log "base image $CF_BASE_IMAGE made in $(elapsed "$t0") ($(du -m "$base_dir/rootfs.tar" | cut -f1) MB tar)"
}

make_base
((base_only)) && exit 0

# Labels: what was built (HEAD, "+dirty" with local changes) and when (the
# commit's date, so an unchanged tree builds the same image).
version=$(sed -n 's/^project(codefleet VERSION \([0-9.]*\).*/\1/p' "$CF_REPO/CMakeLists.txt")
revision=unknown created=1970-01-01T00:00:00Z
if git -C "$CF_REPO" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    revision=$(git -C "$CF_REPO" rev-parse HEAD)
    [[ -z $(git -C "$CF_REPO" status --porcelain --untracked-files=no 2>/dev/null) ]] || revision+=+dirty
    created=$(TZ=UTC git -C "$CF_REPO" show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
fi

t0=$SECONDS
cf_log "building $CF_WORKER_IMAGE (revision $revision)"
build_args=(--build-arg "BASE_IMAGE=$CF_BASE_IMAGE" --build-arg "VERSION=${version:-0}"
    --build-arg "REVISION=$revision" --build-arg "CREATED=$created")
[[ -n $CF_PODMAN_RUNTIME ]] && build_args+=(--runtime "$CF_PODMAN_RUNTIME")
# librdkafka's source package, fetched and checked on the host (the
# Containerfile says why).
rdkafka_source=$("$CF_REPO/deploy/librdkafka.sh" --source) || cf_die "librdkafka's source is not available (above)"
build_args+=(--build-context "rdkafka-source=$rdkafka_source")
# nice: the image's compile shares the machine with whatever else runs.
build_image() { # extra podman build args...
    nice -n 10 podman build "${no_cache[@]}" "${CF_PODMAN_ULIMITS[@]}" "${build_args[@]}" \
        --layers --pull=never -f "$CF_REPO/deploy/container/Containerfile" "$@" "$CF_REPO"
}
# The build stage tagged too: a tagged image keeps its layers, so the
# prune below never throws the compile's cache (packages, objects) away.
build_image --target build -t "$CF_WORKER_BUILD_IMAGE" >"$base_dir/build-stage.log" 2>&1 || {
    tail -n 40 "$base_dir/build-stage.log" >&2
    cf_die "building the build stage failed (log above: $base_dir/build-stage.log)"
}
build_image -t "$CF_WORKER_IMAGE"
cf_log "image built in $(elapsed "$t0")"
# Earlier generations of both (untagged now) go; nothing else is touched.
# Not while another podman build runs: its intermediate images are untagged.
if ! pgrep -f '^podman (.* )?build ' >/dev/null 2>&1; then
    podman image prune -f --filter label=io.codefleet.image >/dev/null 2>&1 || true
fi

size=$(podman image inspect --format '{{.Size}}' "$CF_WORKER_IMAGE")
cf_log "$CF_WORKER_IMAGE: $((size / 1000000)) MB; total $(elapsed "$t_start")"
