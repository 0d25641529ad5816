#!/usr/bin/env bash
# The sandbox on real cgroup v2 kernels (issue 16): boots Debian kernels in
# qemu with a cgroup v2-only hierarchy and runs there the sandbox's unit
# tests, the hostile programs through the sandbox backend, the v2 cases
# (delegated subtree, no writable cgroup, memory.peak; the hostile
# programs again from a worker in a delegated systemd unit and in a pod's
# cgroup namespace, tests/vm/layout.sh) and a short
# per-execution benchmark against bare fork+exec in the same VM (--bench:
# a benchmark, so not part of the test command; BENCHMARKS.md).
#
#   tests/vm/run.sh [--kernels "dist backports"] [--build DIR] [--only REGEX]
#                   [--bench]            (the benchmark step too)
#                   [--command "CMD"]    (only CMD, e.g. a test under strace)
#
# Kernels: "dist" is the distribution's linux-image-amd64 (6.1 on
# bookworm), "backports" the one in <codename>-backports (6.12), so both the
# RSS fallback and v2's memory.peak reset are exercised.  Nothing goes into
# the host's /boot: each kernel package is downloaded and unpacked under
# the cache ($XDG_CACHE_HOME/codefleet/vm, outside the clone) with its
# initramfs (a static busybox, the virtio/9p/veth/tun modules).  The guest
# root is a tmpfs holding the host's /usr and /etc and this checkout as
# read-only virtio-9p shares, so the guest runs the very binaries just built
# against the same libraries; results come back through a writable share.
# Software emulation (KVM is not usable on these machines): about 3 s to
# boot.  A kernel's steps run in one or two VMs, each with 2 CPUs and 2 GiB,
# one after another (CF_VM_JOBS=N: up to N side by side, fewer when memory
# is short).  Needs root, qemu-system-x86, busybox-static, kmod, cpio (installed
# by deploy/install.sh) and the build (deploy/build.sh).  Last line:
# "N passed, N failed"; exit status non-zero when anything failed.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$repo/build
kernels="dist backports"
images=${CODEFLEET_IMAGES:-/var/lib/codefleet/images}
only=""
command=""
bench=0
while (($#)); do
    case $1 in
    --kernels) kernels=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --only) only=$2; shift 2 ;;
    --bench) bench=1; shift ;;
    --command) command=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
# Asking for the benchmark step by name asks for the benchmark.
if [[ -n $only && bench_exec =~ ^($only)$ ]]; then bench=1; fi
exec </dev/null

cache=${XDG_CACHE_HOME:-$HOME/.cache}/codefleet/vm
mkdir -p "$cache"
say() { printf 'vm: %s\n' "$*" >&2; }
die() { say "$*"; echo "0 passed, 1 failed"; exit 1; }

((EUID == 0)) || die "needs root (9p shares of /usr and /etc, the tests' namespaces)"
for t in qemu-system-x86_64 busybox cpio depmod modprobe apt-get dpkg-deb; do
    command -v "$t" >/dev/null || die "$t missing: run deploy/install.sh"
done
busybox=$(command -v busybox)
[[ -x $build/tests/unit_test_cgroup ]] || die "no build at $build: run deploy/build.sh"

# ---- kernels ---------------------------------------------------------------

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $codename ]] || die "cannot tell the Debian release from /etc/os-release"

# apt options for a private package list of <codename> (dist) or
# <codename>-backports, so the host's sources and lists stay as they are
# (and a host whose lists are empty or stale still finds the kernel).
private_apt() { # suite
    local d=$cache/apt-$1
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
    if [[ $1 == *-backports ]]; then
        echo "deb http://deb.debian.org/debian $1 main" >"$d/sources.list"
    else
        # The release's current kernel comes through its point updates and
        # security archive.
        printf '%s\n' "deb http://deb.debian.org/debian $1 main" "deb http://deb.debian.org/debian $1-updates main" \
            "deb http://deb.debian.org/debian-security $1-security main" >"$d/sources.list"
    fi
    printf '%s\n' -o "Dir::Etc::SourceList=$d/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o APT::Sandbox::User=root
}

# Prints the unpacked kernel's directory for "dist" or "backports",
# downloading and unpacking it once.
fetch_kernel() {
    local which=$1 opts=() pkg dir suite=$codename
    [[ $which == backports ]] && suite=$codename-backports
    mapfile -t opts < <(private_apt "$suite")
    # A day-old list is fresh enough; a failing update keeps the old one.
    if [[ -z $(find "$cache/apt-$suite/lists" -name '*Packages*' -mtime -1 2>/dev/null) ]]; then
        apt-get "${opts[@]}" update >&2 || say "$suite: package list not refreshed"
    fi
    pkg=$(apt-cache "${opts[@]}" depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [[ -n $pkg ]] || return 1
    dir=$cache/${pkg#linux-image-}
    if [[ ! -f $dir/ready ]]; then
        rm -rf "$dir" && mkdir -p "$dir/deb"
        (cd "$dir/deb" && apt-get "${opts[@]}" download "$pkg" >&2) || return 1
        if ! dpkg-deb --fsys-tarfile "$dir"/deb/*.deb | tar -x -C "$dir" ./boot ./lib/modules 2>/dev/null; then
            dpkg-deb --fsys-tarfile "$dir"/deb/*.deb | tar -x -C "$dir" ./boot ./usr/lib/modules || return 1
        fi
        if [[ -d $dir/usr/lib/modules ]]; then
            mkdir -p "$dir/lib" && mv "$dir/usr/lib/modules" "$dir/lib/modules" || return 1
        fi
        rm -rf "$dir/deb"
        # Only a complete unpack is remembered.
        compgen -G "$dir/boot/vmlinuz-*" >/dev/null && [[ $(ls "$dir/lib/modules" 2>/dev/null | wc -l) == 1 ]] ||
            return 1
        touch "$dir/ready"
    fi
    echo "$dir"
}

# The initramfs of a kernel: busybox, /init and the modules the guest needs
# (with what they depend on, in load order; compressed ones unpacked since
# busybox insmod reads plain .ko).
make_initramfs() {
    local dir=$1 ver root m f order=() seen=" "
    ver=$(ls "$dir/lib/modules")
    local out=$dir/initramfs-$(sha1sum "$repo/tests/vm/initramfs-init.sh" | cut -c1-12).cpio.gz
    if [[ ! -f $out ]]; then
        depmod -b "$dir" "$ver"
        root=$(mktemp -d)
        mkdir -p "$root/bin" "$root/mods"
        cp "$busybox" "$root/bin/busybox"
        cp "$repo/tests/vm/initramfs-init.sh" "$root/init"
        chmod 755 "$root/init"
        for m in virtio_pci 9pnet_virtio 9p veth tun; do
            while read -r kind f; do
                [[ $kind == insmod ]] || continue
                [[ $seen == *" $f "* ]] && continue
                seen+="$f "
                local base
                base=$(basename "$f")
                case $f in
                *.xz) xz -dc "$f" >"$root/mods/${base%.xz}"; base=${base%.xz} ;;
                *.zst) zstd -qdc "$f" >"$root/mods/${base%.zst}"; base=${base%.zst} ;;
                *) cp "$f" "$root/mods/$base" ;;
                esac
                order+=("mods/$base")
            done < <(modprobe -d "$dir" -S "$ver" --show-depends "$m" 2>/dev/null || true)
        done
        printf '%s\n' "${order[@]}" >"$root/modules.order"
        (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp" && mv "$out.tmp" "$out"
        rm -rf "$root"
    fi
    echo "$out"
}

# ---- the plan ---------------------------------------------------------------

# One line per step: VM, name, timeout (s), command (CF_* as ctest sets
# them).  A kernel's steps may be split over VMs that can boot side by side
# (CF_VM_JOBS); the newest kernel's steps are two VMs of similar length
# (minutes under stress-ng, fresh9: sandbox backend 7.4 + container 4.6;
# zygote 6.7 + the hostile driver in its three layouts 2.8 + exec 1.4 +
# seccomp 0.9 + cgroup).  One VM at a time is the default: with three or
# four side by side on two cores busy with stress-ng, each guest ran 1.4 to
# 2 times slower and its suites' wall-clock ceilings failed (a sandboxed
# request's 20 s, an OOM test's 10 s), although the stage took 13 minutes
# instead of 28.
env_prefix="CF_SOURCE_DIR=$repo CF_BINARY_DIR=$build"
plan_lines() { # which
    local t=$build/tests a=1 b=1 c=1
    # Every kernel: the cgroup layer, the hostile programs (warm, cold and
    # through the zygote), a worker in a delegated unit and in a pod (one
    # path each: the layout is what they test); with --bench the benchmark.
    if [[ $1 == backports ]]; then a=2 b=2 c=2; fi
    cat <<EOF
$b	unit_test_cgroup	600	$env_prefix $t/unit_test_cgroup
$b	unit_test_sandbox_probe	600	$env_prefix $t/unit_test_sandbox_probe
$c	unit_test_hostile_backend	900	$env_prefix $t/unit_test_hostile_backend
$c	hostile_delegated_unit	900	$env_prefix CF_HOSTILE_MODES=warm $repo/tests/vm/layout.sh delegated $t/unit_test_hostile_backend
$c	hostile_pod	900	$env_prefix CF_HOSTILE_MODES=warm $repo/tests/vm/layout.sh pod $t/unit_test_hostile_backend
EOF
    if ((bench)); then
        printf '%s\tbench_exec\t600\t%s CF_VM_BENCH_ITERATIONS=40 %s/tests/vm/bench.sh %s\n' "$a" "$env_prefix" "$repo" "$build"
    fi
    # The newest kernel also: the whole sandbox backend suite, the zygote's,
    # and the exec and seccomp units (the slow ones, once).
    if [[ $1 == backports ]]; then
        cat <<EOF
1	unit_test_sandbox_backend	900	$env_prefix $t/unit_test_sandbox_backend
2	unit_test_sandbox_exec	600	$env_prefix $t/unit_test_sandbox_exec
2	unit_test_zygote	900	$env_prefix $t/unit_test_zygote
2	unit_test_seccomp	600	$env_prefix $t/unit_test_seccomp
EOF
        # The container backend (crun without the hybrid mask, created in
        # its cgroup by clone3) when the host has the default image.
        if [[ -d $images/default/rootfs ]]; then
            printf '1\tunit_test_container\t900\t%s CODEFLEET_IMAGES=%s %s/unit_test_container\n' "$env_prefix" "$images" "$t"
        fi
    fi
}
# Last in every VM: the suites above removed the cgroups they made (cf-*
# parents included), whatever they tested.
leftovers_line() {
    printf 'cgroup_leftovers\t60\t%s\n' \
        "left=\$(find /sys/fs/cgroup -mindepth 1 -type d -name 'cf-*' | head -20); [ -z \"\$left\" ] || { echo \"left behind: \$left\"; exit 1; }"
}

# ---- run ---------------------------------------------------------------------

# Boots one VM on the plan in its out directory and waits for it: the
# results come back in out/results, qemu's exit status and the seconds in
# out/vm-status.  A guest that panicked before it reached tests/vm/guest.sh
# (no guest-info, a panic on the console) is booted once more, and the
# first console kept as console-boot1.log with out/boot-retried saying so
# (the summary reports it and the directory is kept): under software
# emulation with several vCPU threads the 6.12 kernel once panicked at
# boot on an int3 left by its own code patching (sched_clock_cpu, "Oops:
# int3"), before any test ran.  Any other boot failure is not retried.
boot_vm() { # kdir kver initrd out
    local out=$4 panic
    boot_vm_once "$@" || true
    [[ -f $out/guest-info ]] && return 0
    panic=$(grep -m1 -E 'Kernel panic|Oops' "$out/console.log" 2>/dev/null) || return 0
    say "$(basename "$out"): the kernel panicked at boot, before any test ($panic): booting it again"
    mv "$out/console.log" "$out/console-boot1.log"
    echo "$panic" >"$out/boot-retried"
    boot_vm_once "$@" || true
}
boot_vm_once() { # kdir kver initrd out
    local kdir=$1 kver=$2 initrd=$3 out=$4 build_share=() build_arg="" start vm_limit qrc
    if [[ -d $images/default/rootfs ]]; then
        build_share+=(-virtfs "local,path=$images,mount_tag=images,security_model=none,readonly=on,multidevs=remap")
        build_arg+=" cfvm_images=$images"
    fi
    if [[ $build != "$repo"/* ]]; then
        build_share+=(-virtfs "local,path=$build,mount_tag=build,security_model=none,readonly=on")
        build_arg+=" cfvm_build=$build"
    fi
    start=$(date +%s)
    # The steps' own limits, plus boot and shutdown.
    vm_limit=$(awk -F'\t' '{t += $2} END {print t + 120}' "$out/plan")
    # --foreground: timeout and qemu stay in this script's process group,
    # so whoever stops the script's group (run_all.sh's cleanup) stops the VM.
    qrc=0
    timeout --foreground -k 10 "$vm_limit" qemu-system-x86_64 \
        -machine q35 -accel tcg,thread=multi -cpu max -smp 2 -m 2048 \
        -kernel "$kdir/boot/vmlinuz-$kver" -initrd "$initrd" \
        -append "console=ttyS0 quiet panic=-1 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all cfvm_src=$repo $build_arg" \
        -virtfs "local,path=/usr,mount_tag=usr,security_model=none,readonly=on,multidevs=remap" \
        -virtfs "local,path=/etc,mount_tag=etc,security_model=none,readonly=on,multidevs=remap" \
        -virtfs "local,path=$repo,mount_tag=src,security_model=none,readonly=on,multidevs=remap" \
        "${build_share[@]}" \
        -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap" \
        -nic none -display none -serial "file:$out/console.log" -no-reboot >"$out/qemu.log" 2>&1 || qrc=$?
    echo "$qrc $(($(date +%s) - start))" >"$out/vm-status"
}

# Every VM's plan first (each kernel fetched and its initramfs made once),
# then the VMs, at most CF_VM_JOBS (1) at a time and 2.5 GiB of available
# memory each.
vm_jobs=${CF_VM_JOBS:-1}
[[ $vm_jobs =~ ^[1-9][0-9]*$ ]] || die "CF_VM_JOBS must be a positive number"
mem_jobs=$(awk '/^MemAvailable:/ {print int($2 / (2560 * 1024))}' /proc/meminfo)
((mem_jobs >= 1)) || mem_jobs=1
((vm_jobs <= mem_jobs)) || { say "$mem_jobs VM(s) at a time: each takes 2 GiB"; vm_jobs=$mem_jobs; }
passed=0
failed=0
summary=()
used_dirs=()
vms=() # "label kver kdir initrd out", one per VM
for which in $kernels; do
    kdir=$(fetch_kernel "$which") || { say "$which: no kernel package"; failed=$((failed + 1)); summary+=("$which: no kernel"); continue; }
    used_dirs+=("$kdir")
    kver=$(ls "$kdir/lib/modules")
    initrd=$(make_initramfs "$kdir")
    if [[ -n $command ]]; then groups=1; else groups=$(plan_lines "$which" | cut -f1 | sort -un); fi
    n=0
    for g in $groups; do
        out=$(mktemp -d /tmp/cfvm-out.XXXXXX)
        chmod 755 "$out"
        if [[ -n $command ]]; then
            printf 'command\t1800\t%s %s\n' "$env_prefix" "$command" >"$out/plan"
        else
            { plan_lines "$which" | awk -F'\t' -v g="$g" '$1 == g' | cut -f2-; leftovers_line; } |
                { if [[ -n $only ]]; then grep -E "^($only)	" || true; else cat; fi; } >"$out/plan"
        fi
        if [[ ! -s $out/plan ]]; then rm -rf "$out"; continue; fi
        n=$((n + 1))
        vms+=("$which/$n $kver $kdir $initrd $out")
    done
done
start_all=$(date +%s)
for v in "${vms[@]}"; do
    read -r label kver kdir initrd out <<<"$v"
    while (($(jobs -rp | wc -l) >= vm_jobs)); do wait -n || true; done
    say "$label: kernel $kver, $(wc -l <"$out/plan") step(s): $(cut -f1 "$out/plan" | paste -sd' ')"
    boot_vm "$kdir" "$kver" "$initrd" "$out" &
done
wait
say "${#vms[@]} VM(s), $vm_jobs at a time, done in $(($(date +%s) - start_all))s"
for v in "${vms[@]}"; do
    read -r label kver kdir initrd out <<<"$v"
    qrc=unknown secs=unknown
    if [[ -f $out/vm-status ]]; then read -r qrc secs <"$out/vm-status" || true; fi
    # The guest's kernel, cgroup controllers, CPUs and memory, once per kernel.
    [[ $label == */1 && -f $out/guest-info ]] && sed "s|^|vm:   $label: |" "$out/guest-info" >&2
    n_plan=$(grep -c . "$out/plan" || true)
    n_res=$(grep -c . "$out/results" 2>/dev/null || true)
    touch "$out/results"
    failed_before=$failed
    while read -r name rc took; do
        if [[ $rc == 0 ]]; then
            passed=$((passed + 1))
            say "$label: $name passed (${took}s)"
        else
            failed=$((failed + 1))
            say "$label: $name FAILED (exit $rc, ${took}s); its output:"
            tail -n 60 "$out/$name.log" | sed 's/^/    /' >&2
        fi
    done <"$out/results"
    if ((n_res < n_plan)); then
        failed=$((failed + n_plan - n_res))
        say "$label: only $n_res of $n_plan step(s) reported (qemu exit $qrc after ${secs}s); console:"
        tail -n 40 "$out/console.log" 2>/dev/null | sed 's/^/    /' >&2 || true
    fi
    if [[ -f $out/bench_exec.log ]]; then
        grep '^bench:' "$out/bench_exec.log" | sed "s|^bench:|vm: $label ($kver) bench:|" >&2 || true
    fi
    summary+=("$label ($kver): $n_res of $n_plan steps ran in ${secs}s")
    if [[ -f $out/boot-retried ]]; then
        summary+=("$label: booted twice, the first boot panicked: $(cat "$out/boot-retried")")
    fi
    if ((failed > failed_before)) || [[ -n $command || -f $out/boot-retried ]]; then
        say "$label: kept $out (logs of every step, console.log)"
    else
        rm -rf "$out"
    fi
done
# Kernels of earlier package versions are not needed any more (only known
# when both kinds were fetched).
[[ $kernels == "dist backports" ]] && for d in "$cache"/*/ready; do
    d=${d%/ready}
    [[ " ${used_dirs[*]:-} " == *" $d "* ]] || { say "removing the old kernel $(basename "$d") from the cache"; rm -rf "$d"; }
done
for s in "${summary[@]}"; do say "$s"; done
echo "$passed passed, $failed failed"
((failed == 0 && passed > 0))
