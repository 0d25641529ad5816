#!/usr/bin/env bash
# The one test command of codefleet (CI runs it through .ci/run).
#
#   1. deploy/install.sh            packages and Kafka jars (fast when present)
#   2. deploy/build.sh              <repo>/build (RelWithDebInfo)
#      deploy/build.sh --sanitize   <repo>/build-asan (ASan + UBSan)
#   3. deploy/stack.sh up --workers 0   (integration tests start their own workers)
#   4. ctest -L unit (build), ctest -L integration (build-asan, then the
#      suites of the sandbox, container and embedded spawn paths again with
#      build; all of it with build when the sanitizer build failed),
#      tests/chaos/run.sh --quick
#   5. tests/vm/run.sh (the sandbox suites on cgroup v2 kernels in qemu) in
#      the background from here to the end, beside:
#      tests/image/run.sh: the worker image built with podman, one worker
#      from it against the stack (before stack down)
#      ctest -L unit (build-asan), tests/harness/check.sh (the function
#      harnesses), ctest -L unit (build-tsan, the worker's threaded units)
#      tests/fuzz/run.sh: each libFuzzer harness for CF_FUZZ_SECONDS (10)
#      tests/k8s/run.sh: Kubernetes manifests against the upstream API
#      types, the systemd unit, the Grafana dashboard against a live scrape
#   6. deploy/stack.sh down (always, from a trap)
# The last line is "N passed, N failed" summed over the ctest runs; a step
# that breaks (install, build, stack) counts as one failure.  Exit status is
# non-zero when anything failed.  Needs no stdin; works with CI=true.  Before
# it, every stage's time.
#
#   tests/run_all.sh --quick   the quick tier (a few minutes): install, build,
#                              stack, the unit tests but the slow ones
#                              (ctest -L unit -LE slow) and the fleet smoke
#                              test (ctest -L smoke), stack down
# A part by hand: ctest --test-dir build -L <area> (sandbox, container,
# embedded, isolation, core, languages, worker, state, schema, dispatcher,
# common; --print-labels lists them), with the stack's environment for the
# integration ones (eval "$(deploy/stack.sh env)").
#
# The test stack is kept apart from a development stack: its own state dir
# and ports (override with CODEFLEET_STATE, CODEFLEET_KAFKA_PORT,
# CODEFLEET_REDIS_PORT).  CF_CTEST_JOBS sets ctest --parallel (default 4:
# the integration tests are RUN_SERIAL and the unit suites share a
# RESOURCE_LOCK, so only the three parts of the mostly idle mock-cluster
# suite overlap them; tests/CMakeLists.txt).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1
exec </dev/null

export CODEFLEET_STATE=${CODEFLEET_STATE:-$repo/.stack-test}
export CODEFLEET_KAFKA_PORT=${CODEFLEET_KAFKA_PORT:-19192}
export CODEFLEET_REDIS_PORT=${CODEFLEET_REDIS_PORT:-16479}
jobs=${CF_CTEST_JOBS:-4}
quick=0
for a in "$@"; do
    case $a in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) printf 'run_all: unknown argument %s\n' "$a" >&2; exit 2 ;;
    esac
done

passed=0
failed=0
notes=()

# Every stage's wall time, for the table at the end.
stage_names=()
stage_secs=()
stage_now=""
stage_t0=$SECONDS
stage_close() {
    if [[ -n $stage_now ]]; then
        stage_names+=("$stage_now")
        stage_secs+=($((SECONDS - stage_t0)))
    fi
    stage_now=""
}
say() {
    stage_close
    stage_now=$*
    stage_t0=$SECONDS
    printf '\n=== %s\n' "$*"
}

step_failed() {
    failed=$((failed + 1))
    notes+=("FAILED: $1")
    printf 'run_all: FAILED: %s\n' "$1" >&2
}

# Runs a script whose last line is "N passed, N failed" and adds its counts.
run_counted() { # what script [args...]
    local what=$1 out line
    shift
    say "$what ($1)"
    out=$(mktemp)
    "$@" 2>&1 | tee "$out"
    line=$(tail -n 1 "$out")
    if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        passed=$((passed + BASH_REMATCH[1]))
        failed=$((failed + BASH_REMATCH[2]))
        notes+=("$what: ${BASH_REMATCH[1]} passed, ${BASH_REMATCH[2]} failed")
    else
        step_failed "$what: no summary"
    fi
    rm -f "$out"
}

# Runs ctest and adds its counts, parsed from
# "NN% tests passed, F tests failed out of T".
run_ctest() { # what dir label [ctest args...]
    local what=$1 dir=$2 label=$3 out line f t
    shift 3
    say "ctest -L $label ($what)"
    out=$(mktemp)
    ctest --test-dir "$dir" --output-on-failure --parallel "$jobs" -L "$label" "$@" 2>&1 | tee "$out"
    line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$out" | tail -n 1)
    if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
        f=${BASH_REMATCH[1]}
        t=${BASH_REMATCH[2]}
        passed=$((passed + t - f))
        failed=$((failed + f))
        notes+=("$what: $((t - f)) passed, $f failed")
    elif grep -q 'No tests were found' "$out"; then
        notes+=("$what: no tests")
    else
        step_failed "$what: ctest gave no summary"
    fi
    rm -f "$out"
}

# The sandbox on cgroup v2: Debian kernels (the distribution's and
# backports') booted in qemu with a v2-only hierarchy run the sandbox's
# unit tests, the hostile driver and the v2 cases (tests/vm/run.sh).  It
# runs in the background, beside the stages from the worker image on: the
# emulated guest needs the release build only, and its quarter hour would
# otherwise be a third of the run.  (Not beside the integration stages and
# chaos: their wall-clock ceilings are the ones that matter most under
# load.)  Its output is printed when it is collected, at the end.
vm_pid=""
vm_out=""
vm_t0=0
vm_start() {
    vm_out=$(mktemp)
    vm_t0=$SECONDS
    printf 'run_all: cgroup v2 kernels in qemu (tests/vm/run.sh) started in the background\n'
    # Its own process group, so that cleanup can stop qemu with it; and a
    # watchdog in that group stops it when this script is gone without a
    # cleanup (SIGKILL), rather than leave a VM running for an hour.
    setsid bash -c 'run_all=$1; tests/vm/run.sh & vm=$!
        while kill -0 "$vm" 2>/dev/null; do
            kill -0 "$run_all" 2>/dev/null || kill -TERM 0
            sleep 2
        done
        wait "$vm"' vm-stage $$ >"$vm_out" 2>&1 </dev/null &
    vm_pid=$!
}
vm_collect() {
    local line
    [[ -n $vm_pid ]] || return 0
    say "cgroup v2 kernels in qemu (waiting for the background run)"
    wait "$vm_pid"
    vm_pid=""
    printf '\n=== cgroup v2 kernels in qemu (tests/vm/run.sh, %ds in the background)\n' $((SECONDS - vm_t0))
    cat "$vm_out"
    stage_names+=("cgroup v2 kernels in qemu, in the background from its start")
    stage_secs+=($((SECONDS - vm_t0)))
    line=$(tail -n 1 "$vm_out")
    if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        passed=$((passed + BASH_REMATCH[1]))
        failed=$((failed + BASH_REMATCH[2]))
        notes+=("cgroup v2 (qemu): ${BASH_REMATCH[1]} passed, ${BASH_REMATCH[2]} failed")
    else
        step_failed "cgroup v2 (qemu): no summary"
    fi
    rm -f "$vm_out"
}

stack_up=0
cleanup() {
    if [[ -n $vm_pid ]]; then
        kill -TERM -- "-$vm_pid" 2>/dev/null
        wait "$vm_pid" 2>/dev/null
        printf '\n=== cgroup v2 kernels in qemu: stopped by the interruption; its output so far\n'
        tail -n 40 "$vm_out"
        rm -f "$vm_out"
    fi
    if ((stack_up)); then
        say "stack down"
        deploy/stack.sh down || printf 'run_all: stack down failed\n' >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "install"
deploy/install.sh || step_failed "deploy/install.sh"

say "build"
build_ok=0
if deploy/build.sh; then build_ok=1; else step_failed "deploy/build.sh"; fi

asan_ok=0
if ((!quick)); then
    say "build --sanitize"
    if deploy/build.sh --sanitize; then asan_ok=1; else step_failed "deploy/build.sh --sanitize"; fi
fi

if ((build_ok)); then
    say "stack up"
    # Start from nothing: no topics or offsets left by an earlier run.
    deploy/stack.sh down --purge >/dev/null 2>&1 || true
    stack_up=1
    if deploy/stack.sh up --workers 0; then
        eval "$(deploy/stack.sh env)"
        export CF_TEST_BROKERS CF_TEST_REDIS
    else
        step_failed "deploy/stack.sh up"
        stack_up_failed=1
    fi

    if ((quick)); then
        run_ctest "unit (quick)" build unit -LE slow
        if [[ -z ${stack_up_failed:-} ]]; then
            run_ctest "smoke" build smoke
        else
            notes+=("smoke: skipped (no stack)")
        fi
    else
        run_ctest "unit" build unit
    fi
    if ((!quick)) && [[ -z ${stack_up_failed:-} ]]; then
        # The whole suite once, with ASan/UBSan-built workers, CLI and
        # clients (memory and UB errors besides the assertions); then, with
        # the release build, the suites whose paths a sanitizer build does
        # not take: the runner spawns with vfork and CLONE_VM only without
        # ASan (backends/core/runner.c), and the chaos stage runs the release
        # worker only on the process backend.
        if ((asan_ok)); then
            run_ctest "integration (asan)" build-asan integration
            run_ctest "integration (release spawn paths)" build integration \
                -R '^it_test_(hostile|hostile_cold|hostile_zygote|hostile_container|container|embed|budget|compiled|stream)$'
        else
            run_ctest "integration" build integration
        fi
        say "chaos (tests/chaos/run.sh --quick)"
        if tests/chaos/run.sh --quick; then
            passed=$((passed + 1))
            notes+=("chaos: passed")
        else
            step_failed "chaos: tests/chaos/run.sh --quick"
        fi
        ((quick)) || vm_start
        # The worker image: built with podman, one worker from it against
        # this stack.
        run_counted "worker image" tests/image/run.sh
    else
        notes+=("integration, chaos: skipped (no stack)")
    fi
fi

# (Without a stack, the worker image is not built: the VMs start here.)
if ((build_ok && !quick)) && [[ -z $vm_pid ]]; then vm_start; fi

if ((quick)); then
    say "summary"
    stage_close
    printf 'stage timings:\n'
    for i in "${!stage_names[@]}"; do printf '  %6ds  %s\n' "${stage_secs[i]}" "${stage_names[i]}"; done
    for n in "${notes[@]}"; do printf '  %s\n' "$n"; done
    printf '%d passed, %d failed\n' "$passed" "$failed"
    ((failed == 0 && passed > 0))
    exit
fi

if ((asan_ok)); then
    run_ctest "unit (asan)" build-asan unit
fi

# The function harnesses run by hand-invoked toolchains, every outcome
# (the pipeline tests run them through the sandbox).
say "function harnesses (tests/harness/check.sh)"
if tests/harness/check.sh; then
    passed=$((passed + 1))
    notes+=("function harnesses: passed")
else
    step_failed "function harnesses: tests/harness/check.sh"
fi

# ThreadSanitizer on the worker's threaded units (slot pool, offset
# tracker, lease keeper, the whole worker against the mock cluster).
say "build --tsan"
if deploy/build.sh --tsan unit_test_worker unit_test_worker_faults; then
    export TSAN_OPTIONS="suppressions=$repo/tests/support/tsan.supp die_after_fork=0 ${TSAN_OPTIONS:-}"
    run_ctest "unit (tsan)" build-tsan unit -R '^unit_test_worker(_faults_part[0-9]+)?$'
else
    step_failed "deploy/build.sh --tsan"
fi

# libFuzzer harnesses of every wire decoder and the config parser, a short
# run each (tests/fuzz/run.sh SECONDS for longer ones).
say "fuzz (${CF_FUZZ_SECONDS:-10} s per harness)"
fuzz_out=$(mktemp)
tests/fuzz/run.sh "${CF_FUZZ_SECONDS:-10}" 2>&1 | tee "$fuzz_out"
line=$(tail -n 1 "$fuzz_out")
if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
    notes+=("fuzz: ${BASH_REMATCH[1]} passed, ${BASH_REMATCH[2]} failed")
else
    step_failed "fuzz: no summary"
fi
rm -f "$fuzz_out"

# The deployment files: manifests strictly decoded into the upstream
# Kubernetes and KEDA types and validated as the API server would, the
# systemd unit, the dashboard against a live worker's /metrics.
if ((build_ok)); then
    run_counted "deployment files" tests/k8s/run.sh
fi

vm_collect

say "summary"
stage_close
printf 'stage timings:\n'
for i in "${!stage_names[@]}"; do printf '  %6ds  %s\n' "${stage_secs[i]}" "${stage_names[i]}"; done
for n in "${notes[@]}"; do printf '  %s\n' "$n"; done
printf '%d passed, %d failed\n' "$passed" "$failed"
((failed == 0 && passed > 0))
