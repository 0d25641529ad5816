#!/usr/bin/env bash
# Groundwork for a container backend: what one execution of /bin/true costs
# through a real OCI runtime, run directly on a bundle we prepare, beside
# `podman run --rm` doing the same, in the same run on this machine.
#
#   tests/bench/container_runtimes.sh [--quick] [--iterations N] [--no-pivot]
#
# Root only; reads no stdin.  Installs podman, crun (and runc, if it can) with
# apt-get when missing.  Builds, once, a tiny root file system (/bin/true plus
# the libraries ldd lists) in $CF_BENCH_CACHE (default
# /var/cache/codefleet-bench) and imports it once as the podman image
# localhost/cf-bench-true:1 -- no registry needed.  Both stay as a cache.
#
# Variants, interleaved round robin (N iterations, default 200, --quick 30),
# each run's wall time from fork to the reaped exit, and the CPU of the run
# and every descendant (conmon included: the timer is a child subreaper):
#   bare          fork+exec+wait of /bin/true on the host (the anchor)
#   crun_min      `crun run` of a bundle from `crun spec` (no terminal, args
#                 /bin/true, read-only root, fresh id per run): namespaces
#                 pid/net/ipc/uts/mount, a per-run cgroup /<id> made and removed
#                 by crun's cgroupfs manager, no seccomp
#   crun_min_nocg the same with --cgroup-manager=disabled (no cgroup at all)
#   crun_podspec  `crun run` of podman's own OCI spec for this image (taken
#                 from `podman init`: its seccomp profile, capabilities,
#                 rlimits, pids limit, masked paths, /dev, /etc/hosts binds...)
#                 on our read-only root, per-run cgroup: the runtime's share of
#                 a podman run
#   runc_min, runc_podspec   the same bundles through runc (when installed)
#   podman        podman run --rm --network=none localhost/cf-bench-true:1 /bin/true
#                 with podman's default runtime (the reference of ratio_podman)
#   podman_nocg   the same with --cgroups=disabled (crun only)
#   podman_runc   the same with --runtime runc (when runc is installed)
#   podman_noop   `podman image exists` of the image: the CLI and libpod/storage
#                 start-up every podman command pays, running nothing
#   crun_min_nopivot   crun_min with --no-pivot (only with --no-pivot)
# Then, when the repository is built, the sandbox and container backends
# through build/tests/bench_exec (each its own interleaved run with its own
# bare anchor; container_vs_podman compares the ratios to bare).
#
# Hybrid cgroup hosts (v1 controllers + a cgroup2 mount at
# /sys/fs/cgroup/unified with a controller enabled, e.g. hugetlb): crun
# refuses them ("cgroups in hybrid mode not supported"), even with
# --cgroup-manager=disabled.  Variants using crun (directly or under podman)
# then run in one private mount namespace (slave propagation) where an empty
# tmpfs hides /sys/fs/cgroup/unified: crun sees a plain v1 host and makes its
# per-run cgroups in the v1 hierarchies.  RESULT lines say ns=masked.  Made
# once, before timing; nothing of it is in the figures.
#
# Podman is given --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 (its
# defaults raise limits above the hard ones, which fails without
# CAP_SYS_RESOURCE).
#
# Cleans up what it made: its containers (checked in podman ps -a and the
# runtimes' state), cgroups named after its ids or podman's containers, and
# podman's libpod_parent cgroups when they did not exist before; exits 1 if
# anything was left.
set -euo pipefail
exec </dev/null
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

iters=200 nopivot=0
while (($#)); do
    case $1 in
    --quick) iters=30 ;;
    --iterations) iters=$2; shift ;;
    --no-pivot) nopivot=1 ;;
    *) echo "usage: $0 [--quick] [--iterations N] [--no-pivot]" >&2; exit 2 ;;
    esac
    shift
done
[[ $(id -u) == 0 ]] || { echo "container_runtimes.sh: needs root" >&2; exit 2; }

cache=${CF_BENCH_CACHE:-/var/cache/codefleet-bench}
image=localhost/cf-bench-true:1
prefix=cfb$$
py=/usr/bin/python3 # Debian's, never a pyenv shim

echo "== setup"
# ---- packages --------------------------------------------------------------
missing=()
for p in podman:podman crun:crun gcc:gcc python3:/usr/bin/python3; do
    command -v "${p#*:}" >/dev/null || missing+=("${p%%:*}")
done
if ((${#missing[@]})); then
    echo "installing ${missing[*]} (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v runc >/dev/null; then
    echo "installing runc (apt-get; optional)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc >/dev/null 2>&1 ||
        echo "runc not installable: its variants are skipped"
fi
have_runc=0
command -v runc >/dev/null && have_runc=1
echo "podman $(podman --version | awk '{print $3}'), $(crun --version | head -1)$( ((have_runc)) && echo ", runc $(runc --version | awk 'NR==1 {print $3}')")"

work=$(mktemp -d /tmp/cf-container-bench.XXXXXX)
cg_before=$work/cgroups.before
find /sys/fs/cgroup -mindepth 1 -maxdepth 4 -type d 2>/dev/null | sort >"$cg_before"
podman_parent_existed=0
[[ -d /sys/fs/cgroup/pids/libpod_parent || -d /sys/fs/cgroup/libpod_parent || -d /sys/fs/cgroup/unified/libpod_parent ]] &&
    podman_parent_existed=1
mask=0

# ---- cleanup and leftover checks ----------------------------------------------
left=()
check_and_clean() {
    local c d
    for c in $(podman ps -a --format '{{.Names}}' 2>/dev/null | grep "^$prefix" || true); do
        left+=("podman container $c")
        podman rm -f "$c" >/dev/null 2>&1 || true
    done
    for rt in crun runc; do
        command -v $rt >/dev/null || continue
        for root in "$work/$rt-state" ""; do
            for c in $($rt ${root:+--root "$root"} list -q 2>/dev/null | grep "^$prefix" || true); do
                left+=("$rt container $c")
                in_crun_ns $rt ${root:+--root "$root"} delete -f "$c" >/dev/null 2>&1 || true
            done
        done
    done
    # cgroups named after our ids, or podman's per-container ones made during the run
    while read -r d; do
        [[ -n $d ]] || continue
        case $d in
        */$prefix-* | */libpod_parent/libpod-*)
            left+=("cgroup $d")
            find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true ;;
        esac
    done < <(find /sys/fs/cgroup -mindepth 1 -maxdepth 4 -type d 2>/dev/null | sort | comm -13 "$cg_before" -)
    # podman's shared parents (libpod_parent, libpod_parent/conmon): ours when new
    if ((!podman_parent_existed)); then
        for d in /sys/fs/cgroup/*/libpod_parent /sys/fs/cgroup/libpod_parent; do
            [[ -d $d ]] || continue
            if [[ -d $d/conmon ]]; then rmdir "$d/conmon" 2>/dev/null || true; fi
            rmdir "$d" 2>/dev/null || left+=("cgroup $d (not empty)")
        done
    fi
}
on_exit() {
    local rc=$?
    check_and_clean
    rm -rf "$work" "/dev/shm/$prefix-sbx"
    if ((${#left[@]})); then
        echo "LEFT OVER by this run (${#left[@]}, removed now; the first 10):" >&2
        printf '  %s\n' "${left[@]:0:10}" >&2
        ((rc)) || rc=1
    elif ((rc == 0)); then
        echo "clean: no container or cgroup of this run left"
    fi
    exit $rc
}
trap on_exit EXIT

# ---- cgroup layout: hybrid needs the masked namespace for crun -------------
mask=0
if [[ $(stat -f -c %T /sys/fs/cgroup) == tmpfs && -d /sys/fs/cgroup/unified &&
    $(stat -f -c %T /sys/fs/cgroup/unified) == cgroup2fs && -n $(cat /sys/fs/cgroup/unified/cgroup.controllers) ]]; then
    mask=1
    echo "cgroups: hybrid (v2 controllers: $(cat /sys/fs/cgroup/unified/cgroup.controllers)); crun runs with /sys/fs/cgroup/unified hidden"
else
    echo "cgroups: $(stat -f -c %T /sys/fs/cgroup)"
fi
crun_ns=host
((mask)) && crun_ns=masked
in_crun_ns() { # command...: run it where crun works
    if ((mask)); then
        unshare -m --propagation slave sh -c \
            'mount -t tmpfs -o size=1m,mode=755 cfbench-mask /sys/fs/cgroup/unified && exec "$0" "$@"' "$@"
    else
        "$@"
    fi
}

# ---- root file system and image ---------------------------------------------
rootfs=$cache/rootfs-true
if [[ ! -x $rootfs/bin/true ]]; then
    echo "building $rootfs (/bin/true + its libraries)"
    rm -rf "$rootfs.tmp"
    mkdir -p "$rootfs.tmp"/{bin,dev,proc,sys,tmp,etc,run}
    cp -L /bin/true "$rootfs.tmp/bin/true"
    for lib in $(ldd /bin/true | grep -o '/[^ ]*'); do
        mkdir -p "$rootfs.tmp$(dirname "$lib")"
        cp -L "$lib" "$rootfs.tmp$lib"
    done
    # mount targets of podman's spec (the bundles' root is read-only)
    touch "$rootfs.tmp"/etc/{hostname,hosts,resolv.conf} "$rootfs.tmp/run/.containerenv"
    chmod 1777 "$rootfs.tmp/tmp"
    mv "$rootfs.tmp" "$rootfs"
else
    echo "reusing $rootfs"
fi
if ! podman image exists "$image"; then
    echo "importing $rootfs as $image"
    tar -C "$rootfs" -c . | podman import -q - "$image" >/dev/null
else
    echo "reusing image $image"
fi
podman_runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null || echo crun)
echo "podman's default runtime: $podman_runtime"
podman_ns=host
[[ $podman_runtime == crun ]] && podman_ns=$crun_ns


# ---- timer --------------------------------------------------------------------
sed -n '/^\/\* cf_runbench/,/^CF_RUNBENCH_C$/p' "${BASH_SOURCE[0]}" | sed '$d' >"$work/cf_runbench.c"
gcc -O2 -Wall -o "$work/cf_runbench" "$work/cf_runbench.c"

# ---- bundles --------------------------------------------------------------------
cp -a "$rootfs" "$work/rootfs" # the bundles' copy; mount targets get added to it
mkdir -p "$work/min" "$work/podspec/files" "$work/crun-state" "$work/runc-state"
(cd "$work/min" && crun spec)
$py - "$work/min/config.json" "$work/rootfs" <<'EOF'
import json, sys
path, rootfs = sys.argv[1:]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/true"]
c["root"] = {"path": rootfs, "readonly": True}
json.dump(c, open(path, "w"), indent=1)
EOF
ulimits=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
# podman's own OCI spec for this image (podman init writes it), made into a
# bundle on our root while the container's files still exist
cat >"$work/podspec.py" <<'EOF'
import json, os, shutil, sys
src, dst, rootfs, files = sys.argv[1:]
c = json.load(open(src))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/true"]
c["process"]["env"] = [e for e in c["process"]["env"] if not e.startswith("HOSTNAME=")] + ["HOSTNAME=cfbench"]
c["hostname"] = "cfbench"
c["root"] = {"path": rootfs, "readonly": True}
c.pop("hooks", None)
c.pop("annotations", None)
c["linux"].pop("cgroupsPath", None)  # default: /<container id>, one per run
for m in c["mounts"]:
    s = m.get("source", "")
    if m.get("type") == "bind" and (s.startswith("/var/lib/containers") or s.startswith("/run/containers")):
        copy = os.path.join(files, m["destination"].strip("/").replace("/", "_"))
        if os.path.isdir(s):
            os.makedirs(copy, exist_ok=True)
        else:
            shutil.copy(s, copy)
        m["source"] = copy
    d = m["destination"]
    if d.split("/")[1] in ("dev", "proc", "sys"):
        continue
    t = rootfs + d
    if not os.path.exists(t):
        os.makedirs(os.path.dirname(t), exist_ok=True)
        if m.get("type") == "bind" and os.path.isfile(m["source"]):
            open(t, "w").close()
        else:
            os.makedirs(t, exist_ok=True)
json.dump(c, open(dst, "w"), indent=1)
EOF
in_crun_ns sh -c 'id=$(podman create -q --name "$0-spec" --network=none $1 "$2" /bin/true) &&
    podman init "$id" >/dev/null &&
    "$3" "$4" "$(podman inspect --format "{{.StaticDir}}" "$id")/config.json" "$5/config.json" "$6" "$5/files"
    rc=$?; podman rm -f "$0-spec" >/dev/null; exit $rc' \
    "$prefix" "${ulimits[*]}" "$image" "$py" "$work/podspec.py" "$work/podspec" "$work/rootfs" ||
    { echo "could not make a bundle of podman's OCI spec" >&2; exit 1; }

# ---- variants ---------------------------------------------------------------------
declare -A desc
vf=$work/variants
T=$'\t'
add() { # name ns description -- argv...
    local name=$1 ns=$2
    desc[$name]="$3 ns=$ns"
    shift 4
    local IFS=$T
    printf '%s\t%s\t%s\n' "$name" "$ns" "$*" >>"$vf"
}
crun=$(command -v crun) podman=$(command -v podman)
add bare host "runtime=none" -- /bin/true
add crun_min "$crun_ns" "runtime=crun spec=min cgroup=per-run" -- "$crun" --root "$work/crun-state" run --bundle "$work/min" @ID@
add crun_min_nocg "$crun_ns" "runtime=crun spec=min cgroup=none" -- "$crun" --root "$work/crun-state" --cgroup-manager=disabled run --bundle "$work/min" @ID@
((nopivot)) && add crun_min_nopivot "$crun_ns" "runtime=crun spec=min cgroup=per-run no_pivot=1" -- "$crun" --root "$work/crun-state" run --no-pivot --bundle "$work/min" @ID@
add crun_podspec "$crun_ns" "runtime=crun spec=podman cgroup=per-run" -- "$crun" --root "$work/crun-state" run --bundle "$work/podspec" @ID@
if ((have_runc)); then
    runc=$(command -v runc)
    add runc_min host "runtime=runc spec=min cgroup=per-run" -- "$runc" --root "$work/runc-state" run --bundle "$work/min" @ID@
    add runc_podspec host "runtime=runc spec=podman cgroup=per-run" -- "$runc" --root "$work/runc-state" run --bundle "$work/podspec" @ID@
fi
add podman "$podman_ns" "runtime=podman+$podman_runtime cgroup=per-run" -- "$podman" run --rm --network=none "${ulimits[@]}" --name @ID@ "$image" /bin/true
[[ $podman_runtime == crun ]] &&
    add podman_nocg "$podman_ns" "runtime=podman+crun cgroup=none" -- "$podman" run --rm --network=none --cgroups=disabled "${ulimits[@]}" --name @ID@ "$image" /bin/true
add podman_noop "$podman_ns" "runtime=podman-noop" -- "$podman" image exists "$image"
((have_runc)) && [[ $podman_runtime != runc ]] &&
    add podman_runc host "runtime=podman+runc cgroup=per-run" -- "$podman" --runtime runc run --rm --network=none "${ulimits[@]}" --name @ID@ "$image" /bin/true

echo
echo "== container runtimes: /bin/true, $iters interleaved iterations of $(wc -l <"$vf") variants"
mkdir -p "$work/logs"
"$work/cf_runbench" "$iters" "$vf" "$work/logs" "$prefix" >"$work/stats"
results=()
while read -r kind name rest; do
    [[ $kind == DROPPED ]] && { echo "variant $name failed its warm-up run (exit $rest): $(tail -n 2 "$work/logs/$name.err" | tr '\n' ' ')"; }
done <"$work/stats"
bare=$(awk '$1 == "STAT" && $2 == "bare" {print $5}' "$work/stats")
ref=$(awk '$1 == "STAT" && $2 == "podman" {print $5}' "$work/stats")
ref_name=podman
if [[ -z $ref ]]; then
    ref=$(awk '$1 == "STAT" && $2 == "podman_runc" {print $5}' "$work/stats")
    ref_name=podman_runc
fi
printf '%-17s %5s %9s %9s %9s %9s %7s %9s\n' variant n median_us p90_us p99_us cpu_us x_bare x_$ref_name
while read -r kind name n failed med p90 p99 cpu; do
    [[ $kind == STAT ]] || continue
    rb=$(awk -v a="$med" -v b="$bare" 'BEGIN {printf "%.2f", a / b}')
    rp=$( [[ -n $ref ]] && awk -v a="$med" -v b="$ref" 'BEGIN {printf "%.3f", a / b}' || echo NA)
    printf '%-17s %5d %9d %9d %9d %9d %7s %9s\n' "$name" "$n" "$med" "$p90" "$p99" "$cpu" "$rb" "$rp"
    results+=("container_runtime variant=$name ${desc[$name]} n=$n failed=$failed median_us=$med p90_us=$p90 p99_us=$p99 cpu_us=$cpu ratio_bare=$rb ratio_podman=$rp")
done <"$work/stats"
[[ $ref_name != podman ]] && echo "(ratio_podman is against podman_runc: podman with its default runtime did not run)"
for f in "$work"/logs/*.err; do
    [[ -s $f ]] || continue
    echo "stderr of $(basename "$f" .err) (distinct lines, up to 5):"
    sed -E "s/$prefix-[0-9]+-[0-9w]+/<id>/g; s/[0-9a-f]{64}/<hash>/g" "$f" | sort | uniq -c | sort -rn | head -5
done

# ---- the sandbox backend (own interleaved run, own anchor) --------------------------
echo
if [[ -x $repo/build/tests/bench_exec ]]; then
    sbx_iters=$((iters < 10 ? 10 : iters))
    echo "== sandbox backend: build/tests/bench_exec --backend sandbox --no-bwrap ($sbx_iters iterations)"
    mkdir -p "/dev/shm/$prefix-sbx"
    while IFS= read -r line; do
        printf '%s\n' "$line"
        [[ $line == RESULT* ]] && results+=("${line#RESULT }")
    done < <(CF_BENCH_WORK_ROOT=/dev/shm/$prefix-sbx "$repo/build/tests/bench_exec" --backend sandbox --no-bwrap --iterations "$sbx_iters" 2>&1)
    # The container backend: crun through the worker's backend, the default
    # image (deploy/images.sh), its own interleaved run and bare anchor.
    # container_vs_podman compares each one's ratio to its own bare anchor.
    echo "== container backend: build/tests/bench_exec --backend container --no-bwrap ($sbx_iters iterations)"
    mkdir -p "/dev/shm/$prefix-ct"
    chmod 0711 "/dev/shm/$prefix-ct"
    ct_ratio=
    while IFS= read -r line; do
        printf '%s\n' "$line"
        [[ $line == RESULT* ]] && results+=("${line#RESULT }")
        [[ $line == "RESULT exec_overhead backend=container "* ]] && ct_ratio=$(sed -E 's/.*median_ratio=([0-9.]+).*/\1/' <<<"$line")
    done < <(CF_BENCH_WORK_ROOT=/dev/shm/$prefix-ct "$repo/build/tests/bench_exec" --backend container --no-bwrap --iterations "$sbx_iters" 2>&1)
    rmdir "/dev/shm/$prefix-ct" 2>/dev/null || true
    pod_med=$(awk '$1 == "STAT" && $2 == "podman" {print $5}' "$work/stats")
    if [[ -n $ct_ratio && -n $pod_med && -n $bare ]]; then
        results+=("$(awk -v c="$ct_ratio" -v p="$pod_med" -v b="$bare" 'BEGIN {printf "container_vs_podman container_ratio_bare=%.2f podman_ratio_bare=%.2f container_over_podman=%.3f", c, p / b, c / (p / b)}')")
    fi
else
    echo "== sandbox and container backends: skipped ($repo/build/tests/bench_exec not built; deploy/build.sh)"
fi

echo
echo "== results"
printf 'RESULT %s\n' "${results[@]}"
exit 0 # the EXIT trap checks for leftovers (and turns this into 1 if any)

# The timer, compiled at each run from the C below (a here-document bash never runs).
: <<'CF_RUNBENCH_C'
/* cf_runbench: interleaved wall-clock (and CPU) timing of command variants.
 *
 *   cf_runbench ITERATIONS VARIANTS_FILE LOG_DIR ID_PREFIX
 *
 * VARIANTS_FILE: one variant a line, fields separated by TABs:
 *   name  ns  arg0  arg1 ...
 * ns is "host" or "masked": masked variants run in a private mount namespace
 * (slave propagation, made once) where an empty tmpfs hides
 * /sys/fs/cgroup/unified, so that on a hybrid cgroup host crun sees a plain
 * v1 ("legacy") layout.  "@ID@" in an argument becomes a fresh id per run:
 * ID_PREFIX-<variant index>-<iteration>.
 *
 * Each iteration runs every variant once; the starting variant rotates.
 * One untimed warm-up run per variant first; a variant failing its warm-up
 * is dropped.  After each masked run the mask tmpfs is emptied (untimed).
 * The process is a child subreaper: daemonised descendants
 * (conmon) come back to it, are reaped after the timed run, and their CPU
 * counts in the variant's cpu figure.
 *
 * Prints per variant: "STAT name n failed median p90 p99 cpu_median" (us),
 * or "DROPPED name exit-status".  Children's stderr goes to LOG_DIR/name.err. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXV 32
#define MAXA 64
#define CGROUP2_MAGIC 0x63677270

struct variant {
    char *name;
    int masked;
    char *argv[MAXA];
    int errfd;
    int dropped, failed, n;
    int64_t *wall, *cpu;
};

static int64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static int64_t children_cpu_us(void)
{
    struct rusage r;
    getrusage(RUSAGE_CHILDREN, &r);
    return (int64_t)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000 + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t pct(int64_t *v, int n, double p)
{
    return n ? v[(int)(p * (n - 1) + 0.5)] : -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level > 0)
        remove(path);
    return 0;
}

/* crun on the "v1" layout it sees makes /sys/fs/cgroup/unified/<id> (a plain
 * directory on our mask tmpfs) and never removes it: empty the tmpfs after
 * every masked run, so it cannot fill up. */
static void clear_mask(void)
{
    nftw("/sys/fs/cgroup/unified", rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Reap every remaining descendant (they were reparented to us), up to 10 s. */
static int drain(void)
{
    int64_t deadline = now_us() + 10000000;
    for (;;) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p > 0)
            continue;
        if (p < 0 && errno == ECHILD)
            return 0;
        if (now_us() > deadline)
            return -1;
        usleep(200);
    }
}

/* Runs v once with id; returns the wait status, sets *wall_us and *cpu_us. */
static int run_one(struct variant *v, const char *id, int64_t *wall_us, int64_t *cpu_us)
{
    char *argv[MAXA], idbuf[MAXA][256];
    int i;
    for (i = 0; v->argv[i]; i++) {
        char *at = strstr(v->argv[i], "@ID@");
        if (at) {
            snprintf(idbuf[i], sizeof idbuf[i], "%.*s%s%s", (int)(at - v->argv[i]), v->argv[i], id, at + 4);
            argv[i] = idbuf[i];
        } else {
            argv[i] = v->argv[i];
        }
    }
    argv[i] = NULL;
    int64_t c0 = children_cpu_us();
    int64_t t0 = now_us();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        int dn = open("/dev/null", O_RDWR);
        dup2(dn, 0);
        dup2(dn, 1);
        dup2(v->errfd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    *wall_us = now_us() - t0;
    if (drain() < 0)
        fprintf(stderr, "cf_runbench: %s %s left processes running after 10 s\n", v->name, id);
    *cpu_us = children_cpu_us() - c0;
    if (v->masked)
        clear_mask();
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: cf_runbench ITERATIONS VARIANTS_FILE LOG_DIR ID_PREFIX\n");
        return 2;
    }
    int iters = atoi(argv[1]);
    const char *logdir = argv[3], *prefix = argv[4];
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 2;
    }
    static struct variant vs[MAXV];
    int nv = 0, need_mask = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0 && nv < MAXV) {
        line[strcspn(line, "\n")] = 0;
        if (!*line || *line == '#')
            continue;
        struct variant *v = &vs[nv];
        char *save, *tok = strtok_r(line, "\t", &save);
        v->name = strdup(tok);
        tok = strtok_r(NULL, "\t", &save);
        v->masked = tok && strcmp(tok, "masked") == 0;
        need_mask |= v->masked;
        int a = 0;
        while ((tok = strtok_r(NULL, "\t", &save)) && a < MAXA - 1)
            v->argv[a++] = strdup(tok);
        v->argv[a] = NULL;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.err", logdir, v->name);
        v->errfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        v->wall = calloc(iters, sizeof(int64_t));
        v->cpu = calloc(iters, sizeof(int64_t));
        nv++;
    }
    fclose(f);
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    int host_ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC), mask_ns = -1, cur_masked = 0;
    if (need_mask) {
        struct statfs s;
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
            perror("cf_runbench: private mount namespace");
            return 2;
        }
        if (statfs("/sys/fs/cgroup/unified", &s) == 0 && s.f_type == CGROUP2_MAGIC &&
            mount("cfbench-mask", "/sys/fs/cgroup/unified", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16m,mode=755") < 0) {
            perror("cf_runbench: mask /sys/fs/cgroup/unified");
            return 2;
        }
        mask_ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        cur_masked = 1;
    }
#define ENTER(m)                                                          \
    do {                                                                  \
        if ((m) != cur_masked) {                                          \
            if (setns((m) ? mask_ns : host_ns, CLONE_NEWNS) < 0) {        \
                perror("cf_runbench: setns");                             \
                return 2;                                                 \
            }                                                             \
            cur_masked = (m);                                             \
        }                                                                 \
    } while (0)

    char id[128];
    int64_t w, c;
    for (int k = 0; k < nv; k++) {
        ENTER(vs[k].masked);
        snprintf(id, sizeof id, "%s-%d-w", prefix, k);
        int st = run_one(&vs[k], id, &w, &c);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            vs[k].dropped = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            printf("DROPPED %s %d\n", vs[k].name, vs[k].dropped);
            fflush(stdout);
        }
    }
    int64_t t_start = now_us();
    for (int i = 0; i < iters; i++) {
        for (int j = 0; j < nv; j++) {
            struct variant *v = &vs[(i + j) % nv];
            if (v->dropped)
                continue;
            ENTER(v->masked);
            snprintf(id, sizeof id, "%s-%d-%d", prefix, (int)(v - vs), i);
            int st = run_one(v, id, &w, &c);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                v->failed++;
                continue;
            }
            v->wall[v->n] = w;
            v->cpu[v->n] = c;
            v->n++;
        }
        if ((i + 1) % 50 == 0 && i + 1 < iters)
            fprintf(stderr, "cf_runbench: %d/%d iterations, %.0f s\n", i + 1, iters, (now_us() - t_start) / 1e6);
    }
    ENTER(0);
    for (int k = 0; k < nv; k++) {
        struct variant *v = &vs[k];
        if (v->dropped)
            continue;
        qsort(v->wall, v->n, sizeof(int64_t), cmp);
        qsort(v->cpu, v->n, sizeof(int64_t), cmp);
        printf("STAT %s %d %d %lld %lld %lld %lld\n", v->name, v->n, v->failed, (long long)pct(v->wall, v->n, 0.5),
               (long long)pct(v->wall, v->n, 0.9), (long long)pct(v->wall, v->n, 0.99), (long long)pct(v->cpu, v->n, 0.5));
    }
    return 0;
}
CF_RUNBENCH_C
