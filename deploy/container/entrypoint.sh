#!/bin/sh
# The worker image's entrypoint, run by tini (pid 1):
#   ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/codefleet-entrypoint"]
# Two preparations the sandbox backend needs in a container, then it execs
# /usr/local/bin/codefleet-worker with the container's arguments.  Both need
# root and CAP_SYS_ADMIN (which the sandbox needs anyway); without them each
# says so and does nothing, and the worker reports what it can enforce.  No
# settings; each is skipped when there is nothing to do (a privileged
# container), so running it twice is harmless.
#
# 1. A proc instance of the container's own at /run/codefleet/proc.  Each
#    sandbox mounts a /proc for its pid namespace inside its user namespace,
#    which the kernel allows only while the mount namespace holds a fully
#    visible proc; runtimes mask parts of the container's /proc (/proc/kcore,
#    /proc/keys, ... covered, /proc/sys read-only), and every execution then
#    fails with "mount /proc: Operation not permitted".  This one is of the
#    container's pid namespace and inside no sandbox's root (they see /usr,
#    /bin, /lib* and a few /etc files).  The alternative is unmasking the
#    container's /proc (podman --security-opt unmask=/proc/*, Kubernetes
#    procMount: Unmasked, which needs hostUsers: false).
# 2. The container's own cgroups read-write.  The sandbox creates a cgroup
#    per execution below its own cgroup (memory, pids, cpu accounting).
#    Runtimes mount /sys/fs/cgroup read-only unless the container is
#    privileged, so the worker would start without memory and process limits
#    (or refuse to, with sandbox-require-cgroups).  Remounted read-write:
#    exactly those cgroup mounts that show the container's own cgroup (the
#    mount's root is the cgroup this process is in: always so with
#    --cgroupns=private, and with runc's cgroup v1 mounts under
#    --cgroupns=host), only for the controllers the sandbox uses (memory,
#    pids, cpu, cpuacct, freezer; or the cgroup v2 hierarchy at
#    /sys/fs/cgroup).  Never the devices controller, never a mount showing
#    cgroups of others.
set -u

remount_cgroups() {
    [ "$(id -u)" = 0 ] || return 0
    # The read-only cgroup mounts of ours (mount points have no spaces).
    mps=$(awk '
        FNR == NR {                       # /proc/self/cgroup: id:controllers:path
            split($0, f, ":")
            path = substr($0, length(f[1]) + length(f[2]) + 3)
            if (f[2] == "") own["unified"] = path
            n = split(f[2], c, ",")
            for (i = 1; i <= n; i++) own[c[i]] = path
            next
        }
        {                                 # /proc/self/mountinfo
            for (sep = 7; sep <= NF && $sep != "-"; sep++) ;
            fstype = $(sep + 1); root = $4; mp = $5; opts = $6
            if (mp !~ "^/sys/fs/cgroup(/|$)" || ("," opts ",") !~ /,ro,/) next
            if (fstype == "cgroup2") {
                if (mp == "/sys/fs/cgroup" && ("unified" in own) && own["unified"] == root) print mp
                next
            }
            if (fstype != "cgroup") next
            n = split($(sep + 3), s, ",")
            ok = 0
            for (i = 1; i <= n; i++) {
                if (s[i] == "devices") { ok = 0; break }
                if (s[i] ~ /^(memory|pids|cpu|cpuacct|freezer)$/ && (s[i] in own) && own[s[i]] == root) ok = 1
            }
            if (ok) print mp
        }' /proc/self/cgroup /proc/self/mountinfo)
    [ -n "$mps" ] || return 0
    done_list='' failed=''
    for mp in $mps; do
        if mount -o remount,rw,bind "$mp" 2>/dev/null; then done_list="$done_list $mp"; else failed="$failed $mp"; fi
    done
    [ -z "$done_list" ] || echo "codefleet-entrypoint: made the container's own cgroups writable:$done_list" >&2
    [ -z "$failed" ] || echo "codefleet-entrypoint: could not remount read-write (no CAP_SYS_ADMIN?):$failed; the sandbox has no cgroup limits unless they are writable otherwise" >&2
    return 0
}

own_proc() {
    [ "$(id -u)" = 0 ] || return 0
    # Nothing over the container's /proc: nothing to do.
    awk '$5 ~ "^/proc/" { found = 1 } END { exit !found }' /proc/self/mountinfo || return 0
    # Already there (an earlier step of the pod's command, say).
    awk '$5 == "/run/codefleet/proc" { found = 1 } END { exit !found }' /proc/self/mountinfo && return 0
    if mkdir -p /run/codefleet/proc 2>/dev/null &&
        mount -t proc -o nosuid,nodev,noexec proc /run/codefleet/proc 2>/dev/null; then
        echo "codefleet-entrypoint: mounted a proc of the container's own at /run/codefleet/proc (the sandboxes' /proc needs one fully visible)" >&2
    else
        echo "codefleet-entrypoint: could not mount proc at /run/codefleet/proc (no CAP_SYS_ADMIN?): sandboxed executions will fail to mount their /proc unless the container's /proc is unmasked" >&2
    fi
    return 0
}

own_proc
remount_cgroups
exec /usr/local/bin/codefleet-worker "$@"
