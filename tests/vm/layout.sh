#!/usr/bin/env bash
# Inside the test VM (a plan step of tests/vm/run.sh): runs a test binary
# as a worker runs in production on cgroup v2, with the sandbox's default
# cgroup parent (below the worker's own cgroup, CF_TEST_CGROUP_DEFAULT):
#
#   layout.sh delegated TEST   a systemd unit with Delegate=yes: the cgroup
#                              cf-worker.service, marked trusted.delegate,
#                              holding the worker and another process (an
#                              init such as tini)
#   layout.sh pod TEST         a Kubernetes pod: the cgroup cf-pod seen as
#                              the root of the worker's own cgroup namespace
#                              (cgroup2 mounted again in its mount namespace),
#                              with another process beside the worker
#
# The worker must move both processes into its leaf before it can give its
# executions memory and pids limits.  Afterwards everything made is removed
# (the step that follows checks that no cf-* cgroup is left).
set -u
mode=$1
test=$2
cg=/sys/fs/cgroup
case $mode in
delegated) top=$cg/cf-worker.service ;;
pod) top=$cg/cf-pod ;;
*) echo "layout.sh: unknown layout $mode" >&2; exit 2 ;;
esac
mkdir "$top" || exit 1
if [[ $mode == delegated ]]; then
    python3 -c "import os, sys; os.setxattr(sys.argv[1], 'trusted.delegate', b'1')" "$top" || exit 1
fi
sleep 100000 &
sibling=$!
echo "$sibling" >"$top/cgroup.procs" || exit 1
if [[ $mode == delegated ]]; then
    (echo "$BASHPID" >"$top/cgroup.procs" && CF_TEST_CGROUP_DEFAULT=1 exec "$test")
else
    (echo "$BASHPID" >"$top/cgroup.procs" &&
        exec unshare --cgroup --mount bash -c \
            'umount /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup && CF_TEST_CGROUP_DEFAULT=1 exec "$0"' "$test")
fi
rc=$?
# Where the worker put everything: its leaf, the executions' parent.
grep -q "codefleet-worker" "/proc/$sibling/cgroup" || { echo "layout.sh: the other process was not moved to the leaf" >&2; rc=1; }
kill -9 "$sibling"
wait "$sibling" 2>/dev/null
for d in "$top"/codefleet/* "$top"/codefleet "$top"/codefleet-worker "$top"; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null
done
[[ -d $top ]] && { echo "layout.sh: $top is left" >&2; rc=1; }
exit $rc
