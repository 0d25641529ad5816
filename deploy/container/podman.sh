# shellcheck shell=bash disable=SC2034 # the variables are used by the sourcing scripts
# Shared podman settings of deploy/container/build.sh and tests/image/run.sh
# (sourced after deploy/common.sh, never run).
#
# Environment (default):
#   CODEFLEET_WORKER_IMAGE   localhost/codefleet-worker:latest   the image built
#                            (its build stage: localhost/codefleet-worker-build:latest)
#   CODEFLEET_BASE_IMAGE     localhost/codefleet-debian:bookworm the debootstrap base
#   CODEFLEET_PODMAN_RUNTIME the OCI runtime podman uses (default: podman's own on
#                            cgroup v2; runc on cgroup v1 or hybrid hosts, where
#                            crun refuses to run: "cgroups in hybrid mode not supported")

CF_WORKER_IMAGE=${CODEFLEET_WORKER_IMAGE:-localhost/codefleet-worker:latest}
CF_BASE_IMAGE=${CODEFLEET_BASE_IMAGE:-localhost/codefleet-debian:bookworm}
# The Containerfile's build stage, tagged so it stays as the layer cache.
CF_WORKER_BUILD_IMAGE=${CF_WORKER_IMAGE%:*}-build:latest

# What every podman build/run of ours takes:
#   CF_PODMAN_RUNTIME  the runtime (see above; empty: podman's default), given
#                      as `podman --runtime R run` and `podman build --runtime R`
#   CF_PODMAN_ULIMITS  podman asks for nofile 1048576 and nproc unlimited by
#                      default, more than the hard limits of many hosts (this
#                      one: nofile 20000), and then cannot start the container:
#                      ask for the hard limits instead (nproc at most 32768:
#                      podman's conmon runs with that, and a container cannot
#                      be given more than its parent has).
cf_podman_setup() {
    command -v podman >/dev/null 2>&1 || cf_die "podman is not installed (deploy/install.sh installs it)"
    CF_PODMAN_RUNTIME=${CODEFLEET_PODMAN_RUNTIME:-}
    if [[ -z $CF_PODMAN_RUNTIME && $(stat -fc %T /sys/fs/cgroup 2>/dev/null) != cgroup2fs ]]; then
        CF_PODMAN_RUNTIME=$(command -v runc 2>/dev/null || true)
        [[ -n $CF_PODMAN_RUNTIME ]] ||
            cf_die "cgroup v1 (or hybrid) host: crun cannot run containers here; install runc or set CODEFLEET_PODMAN_RUNTIME"
    fi
    local nofile nproc
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    [[ $nofile == unlimited ]] && nofile=1048576
    [[ $nproc == unlimited ]] && nproc=32768
    ((nproc <= 32768)) || nproc=32768
    CF_PODMAN_ULIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    CF_PODMAN=(podman)
    [[ -n $CF_PODMAN_RUNTIME ]] && CF_PODMAN+=(--runtime "$CF_PODMAN_RUNTIME")
    return 0
}
