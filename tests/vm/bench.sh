#!/usr/bin/env bash
# Inside the test VM (a plan step of tests/vm/run.sh): the sandbox's
# per-execution cost of /bin/true against bare fork+exec+wait (and
# bubblewrap when installed) in the same run, warm and cold, and the cost of
# putting a process into its cgroup (bench_cgroup).  Under
# software emulation only the ratios to bare mean anything.  Lines are
# prefixed "bench:" for run.sh to report.
set -euo pipefail
build=$1
work=$(mktemp -d /tmp/bench-work.XXXXXX)
chmod 711 "$work"
CF_BENCH_WORK_ROOT=$work "$build/tests/bench_exec" --backend sandbox --iterations "${CF_VM_BENCH_ITERATIONS:-100}" |
    sed 's/^/bench: /'
rm -rf "$work"
# What joining the execution's cgroup costs on this kernel, by each way.
"$build/tests/bench_cgroup" --iterations "${CF_VM_BENCH_ITERATIONS:-100}" | sed 's/^/bench: /'
