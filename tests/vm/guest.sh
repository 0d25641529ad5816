#!/usr/bin/env bash
# PID 1 of the test VM (after tests/vm/initramfs-init.sh): mounts a cgroup
# v2-only hierarchy and the usual pseudo filesystems, runs each line of
# /vm-out/plan ("name<TAB>timeout-seconds<TAB>command") from a scratch
# directory, writing its output to /vm-out/<name>.log and
# "name rc seconds" to /vm-out/results, then powers the VM off.
set -u
export PATH=/usr/sbin:/usr/bin HOME=/root LANG=C.UTF-8
# Software emulation: the suites' wall-clock ceilings stretch by this
# (tests/support/test_time.h).
export CF_TEST_TIME_SCALE=5
mount -t proc proc /proc
mount -t devtmpfs dev /dev
mount -t sysfs sys /sys
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
# (/tmp and /run are tmpfs already: the initramfs mounted them under the
# shares, so a checkout below /tmp stays visible.)
mkdir -p /dev/pts /dev/shm /dev/net
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
[ -e /dev/net/tun ] || mknod /dev/net/tun c 10 200
ip link set lo up
hostname cfvm
# The kernel says what it can do, for the record.
{
    echo "kernel: $(uname -r)"
    echo "cgroup: $(stat -f -c %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
    echo "cpus: $(nproc), memory: $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo)"
} >/vm-out/guest-info
: >/vm-out/results
while IFS=$'\t' read -r name limit cmd; do
    [[ -z $name || $name == \#* ]] && continue
    start=$(date +%s)
    (cd /tmp && exec timeout -k 5 "$limit" bash -c "$cmd") >"/vm-out/$name.log" 2>&1 </dev/null
    rc=$?
    echo "$name $rc $(($(date +%s) - start))" >>/vm-out/results
done </vm-out/plan
sync
echo o >/proc/sysrq-trigger
sleep 30
