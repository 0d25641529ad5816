#!/usr/bin/env bash
# The worker image against a real broker and Redis: builds the image
# (deploy/container/build.sh), runs ONE worker from it with podman, sends it
# requests with the image's own CLI, and stops it.
#
#   tests/image/run.sh
#
# Stack: when CF_TEST_BROKERS and CF_TEST_REDIS are exported (tests/run_all.sh
# does, from `deploy/stack.sh env`; CF_TEST_CLIENT_CONFIG and CF_TEST_SECRETS
# come with them), that stack is used; otherwise this script starts its own
# (deploy/stack.sh up --workers 0 with CODEFLEET_STATE=<repo>/.stack-image,
# CODEFLEET_KAFKA_PORT=19292, CODEFLEET_REDIS_PORT=16579 unless set) and
# takes it down at the end.
#
# The worker gets topics, a consumer group and run uids of its own
# (cfimg-<pid>-<rand>.*), runs as the stack's `worker` principal (ACLs granted
# here for its topics and group), with --network=host (the stack listens on
# loopback) and the image's baked /etc/codefleet/worker.conf plus the
# credentials, mounted over it as a file (nothing secret in the environment
# or on a command line).  Privileges, the least that work, tried in order
# (the first whose worker passes the sandbox's start-up probe with cgroups
# and runs a Python request is kept; needing more than the first is a
# failure of the check "minimal privileges suffice"):
#   1. --cap-drop=all --cap-add=SYS_ADMIN,SETUID,SETGID,CHOWN,DAC_OVERRIDE
#      --security-opt no-new-privileges --cgroupns=private
#      (podman's default seccomp profile; the image's entrypoint mounts a
#      proc of the container's own and remounts its cgroups read-write:
#      deploy/container/entrypoint.sh)
#        SYS_ADMIN      mount(2): the slots' tmpfs, the zygote's share, bind
#                       mounts, and the entrypoint's proc mount and cgroup
#                       remount.  Without it: the worker exits ("zygote:
#                       mounting the share ...: Operation not permitted";
#                       with read-only cgroups "no usable cgroups ...
#                       Read-only file system")
#        SETUID, SETGID writing each sandbox's uid_map/gid_map onto host uids
#                       run-uid-base + slot (and the process backend's
#                       per-slot uids, a block of its own above them).  Without: every sandboxed request is
#                       internal_error "write /proc/N/uid_map (gid_map):
#                       Operation not permitted"
#        CHOWN          giving the work directory and the stdio pipes to the
#                       slot's uid.  Without: "workdir: chown ... Operation
#                       not permitted"
#        DAC_OVERRIDE   the worker (root) creating directories inside the
#                       run uid's work directory.  Without: "workdir: mkdir
#                       .../work: Permission denied"
#        --cgroupns=private: the container's cgroup is its cgroup root, the
#                       entrypoint remounts it read-write, the worker makes
#                       its executions' cgroups below it (the container's
#                       limits still cover them).  Without writable cgroups:
#                       "no usable cgroups (... Read-only file system)" (here
#                       fatal: --sandbox-require-cgroups)
#        no-new-privileges: not needed, and harmless.
#      Not needed: the other default capabilities (FOWNER, FSETID, KILL,
#      NET_BIND_SERVICE, SETFCAP, SETPCAP, SYS_CHROOT), seccomp=unconfined,
#      --security-opt unmask=/proc/* (the entrypoint's own proc does it:
#      without either, "mount /proc of /usr/bin/python3: Operation not
#      permitted" for every execution), --privileged, a host /sys/fs/cgroup
#      volume.  No AppArmor on the test host.  network=enabled (not tested
#      here: no profile allows it) would also need --device /dev/net/tun
#      --cap-add=SETPCAP,NET_BIND_SERVICE (slirp4netns --enable-sandbox drops
#      its bounding set and keeps NET_BIND_SERVICE).
#   2. the same plus --security-opt unmask=/proc/* and seccomp=unconfined (and
#      apparmor=unconfined where AppArmor is enabled)
#   3. --privileged
#
# Checks: the image's helper paths; a Python print (sandbox, zygote), a shell
# script (sandbox, runs as uid 1000 inside), a shell script on the process
# backend (a second profile on its own topic), JavaScript (nodejs), a function
# harness call, a memory limit (cgroup OOM kill reported as
# memory_exceeded); /healthz, /readyz and /metrics when the worker has
# metrics-listen; then podman stop -t 60 (SIGTERM through tini): exit code
# 0, "stopped:" logged with nothing left for redelivery, no error lines.
# The last line is "N passed, N failed"; exit status non-zero on any
# failure.  Containers it started are removed on any exit.  Needs root
# (rootful podman), no stdin.
# shellcheck disable=SC2016 # single quotes: programs for the sandbox, not for us
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO" || exit 1
# shellcheck source=deploy/common.sh
source "$REPO/deploy/common.sh"
# shellcheck source=deploy/container/podman.sh
source "$REPO/deploy/container/podman.sh"
exec </dev/null

passed=0 failed=0
pass() {
    passed=$((passed + 1))
    printf 'ok    %s\n' "$1"
}
fail() {
    failed=$((failed + 1))
    printf 'FAIL  %s\n' "$1"
    [[ -n ${2:-} ]] && printf '      %s\n' "$2"
}
finish() {
    printf '%d passed, %d failed\n' "$passed" "$failed"
    ((failed == 0 && passed > 0))
    exit
}

tag=cfimg-$$-$RANDOM
tmp=$(mktemp -d /tmp/cf-image.XXXXXX)
chmod 0700 "$tmp"
containers=()
own_stack=0
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local c
    for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
    if ((own_stack)); then
        deploy/stack.sh down --purge >/dev/null 2>&1 || printf 'image test: stack down failed\n' >&2
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

(($(id -u) == 0)) || {
    fail "run as root (rootful podman: the sandbox backend needs it)"
    finish
}
if ! (cf_podman_setup) 2>"$tmp/podman.err"; then
    fail "podman set-up" "$(cat "$tmp/podman.err")"
    finish
fi
cf_podman_setup

# ---- the image -------------------------------------------------------------
t0=$SECONDS
if deploy/container/build.sh >"$tmp/build.log" 2>&1; then
    pass "image $CF_WORKER_IMAGE built ($((SECONDS - t0)) s)"
else
    tail -n 40 "$tmp/build.log"
    fail "deploy/container/build.sh (log above)"
    finish
fi
IMAGE=$CF_WORKER_IMAGE

# The helper files are where the install rules put them, and the installed
# worker finds them there by itself (it names them on start-up; with only
# the process backend and no broker it then ends).
if "${CF_PODMAN[@]}" run --rm "${CF_PODMAN_ULIMITS[@]}" --network=none --entrypoint /bin/sh "$IMAGE" -c '
    set -e
    test -f /usr/local/share/codefleet/harness/python.py
    test -x /usr/local/libexec/codefleet/codefleet-zygote -a -x /usr/local/libexec/codefleet/codefleet-container-init
    test -x /usr/bin/tini -a -x /usr/bin/python3 -a -x /usr/bin/node -a -x /usr/bin/slirp4netns
    line=$(timeout 30 /usr/local/bin/codefleet-worker --brokers=127.0.0.1:9 --backends=process --log-format=text 2>&1 |
           grep -m1 "helpers: " || true)
    echo "$line"
    case "$line" in
    *"harnesses /usr/local/share/codefleet/harness, zygote /usr/local/libexec/codefleet/codefleet-zygote, container init /usr/local/libexec/codefleet/codefleet-container-init,"*) ;;
    *) exit 1 ;;
    esac' >"$tmp/paths.log" 2>&1; then
    pass "image: the installed worker finds its harnesses, zygote and container init; tini, python3, node, slirp4netns"
else
    fail "image: helper files or interpreters missing" "$(tail -n 3 "$tmp/paths.log")"
fi

# ---- the stack -------------------------------------------------------------
# The image's own CLI, in a container (nothing of the build tree needed).
cli_n=0
cli() { # conf args...
    local conf=$1 name=$tag-cli-$((++cli_n))
    shift
    containers+=("$name")
    "${CF_PODMAN[@]}" run --rm --name "$name" --network=host "${CF_PODMAN_ULIMITS[@]}" \
        -v "$conf:/run/secrets/codefleet/client.conf:ro" --entrypoint /usr/local/bin/codefleet "$IMAGE" \
        --config /run/secrets/codefleet/client.conf --brokers "$CF_TEST_BROKERS" "$@"
}

if [[ -z ${CF_TEST_BROKERS:-} || -z ${CF_TEST_REDIS:-} ]]; then
    export CODEFLEET_STATE=${CODEFLEET_STATE:-$REPO/.stack-image}
    export CODEFLEET_KAFKA_PORT=${CODEFLEET_KAFKA_PORT:-19292}
    export CODEFLEET_REDIS_PORT=${CODEFLEET_REDIS_PORT:-16579}
    # stack.sh creates topics and ACLs with a host CLI: the image's, copied
    # out (Debian 12 binaries, like this host's), not the build tree's.
    if [[ -z ${CODEFLEET_BIN:-} ]]; then
        mkdir -p "$tmp/bin"
        cid=$(podman create "$IMAGE") && podman cp "$cid:/usr/local/bin/codefleet" "$tmp/bin/codefleet"
        [[ -n ${cid:-} ]] && podman rm "$cid" >/dev/null
        export CODEFLEET_BIN=$tmp/bin
    fi
    own_stack=1
    deploy/stack.sh down --purge >/dev/null 2>&1 || true
    if deploy/stack.sh up --workers 0 >"$tmp/stack.log" 2>&1; then
        eval "$(deploy/stack.sh env)"
        pass "stack up (own: $CODEFLEET_STATE, kafka $CF_TEST_BROKERS, redis $CF_TEST_REDIS)"
    else
        tail -n 30 "$tmp/stack.log"
        fail "deploy/stack.sh up --workers 0 (log above)"
        finish
    fi
fi
admin_conf=${CF_TEST_CLIENT_CONFIG:-${CF_TEST_SECRETS:-}/admin.conf}
[[ -r $admin_conf ]] || {
    fail "no client settings for the stack (CF_TEST_CLIENT_CONFIG)"
    finish
}
# The worker's principal when the stack has one, else the admin's.
worker_creds=$admin_conf
[[ -n ${CF_TEST_SECRETS:-} && -r $CF_TEST_SECRETS/worker.conf ]] && worker_creds=$CF_TEST_SECRETS/worker.conf

req=$tag.requests trusted=$tag.requests.trusted res=$tag.results group=$tag-workers
if cli "$admin_conf" --workers-topic "$tag.workers" topics create --partitions 2 \
    "$req" "$req.cancel" "$trusted" "$trusted.cancel" "$res" "$res.output" "$tag.dlq" "$tag.workers" \
    >"$tmp/topics.log" 2>&1 &&
    { [[ $worker_creds == "$admin_conf" ]] ||
        cli "$admin_conf" acl allow User:worker "read:topic:$req*" "read:group:$group" "write:topic:$res*" \
            "write:topic:$tag.dlq" "write:topic:$tag.workers" >>"$tmp/topics.log" 2>&1; }; then
    pass "topics $tag.* and the worker's ACLs"
else
    fail "creating topics / ACLs" "$(tail -n 3 "$tmp/topics.log")"
    finish
fi

# The image's worker.conf with the credentials added, mounted over it.
"${CF_PODMAN[@]}" run --rm "${CF_PODMAN_ULIMITS[@]}" --network=none --entrypoint /bin/cat "$IMAGE" \
    /etc/codefleet/worker.conf >"$tmp/worker.conf" && cat "$worker_creds" >>"$tmp/worker.conf"
chmod 0600 "$tmp/worker.conf"

# ---- the worker ------------------------------------------------------------
metrics=0
"${CF_PODMAN[@]}" run --rm "${CF_PODMAN_ULIMITS[@]}" --network=none "$IMAGE" --help-config >"$tmp/help-config" 2>&1
grep -q 'metrics-listen' "$tmp/help-config" && metrics=1
port=
if ((metrics)); then
    for ((p = 19500 + RANDOM % 400; p < 20000; p++)); do
        cf_port_busy "$p" || {
            port=$p
            break
        }
    done
fi

minimal=(--cap-drop=all --cap-add=SYS_ADMIN --cap-add=SETUID --cap-add=SETGID --cap-add=CHOWN
    --cap-add=DAC_OVERRIDE --security-opt no-new-privileges --cgroupns=private)
unconfined=("${minimal[@]}" --security-opt 'unmask=/proc/*' --security-opt seccomp=unconfined)
[[ $(cat /sys/module/apparmor/parameters/enabled 2>/dev/null) == Y ]] &&
    unconfined+=(--security-opt apparmor=unconfined)
# shellcheck disable=SC2034 # used through the nameref in start_worker
privileged=(--privileged --cgroupns=private)
levels=(minimal unconfined privileged)

# shellcheck disable=SC2054 # commas inside values (backend lists)
worker_args=(--brokers "$CF_TEST_BROKERS" --redis "$CF_TEST_REDIS" --group "$group"
    --request-topic "$req" --result-topic "$res" --dlq-topic "$tag.dlq" --workers-topic "$tag.workers"
    --backends sandbox,process --profile.default.backends=sandbox
    --profile.trusted.topic="$trusted" --profile.trusted.backends=process --profile.trusted.network=enabled
    --sandbox-require-cgroups=true --run-uid-base 150000 --slots 2 --shutdown-grace 20s
    --kafka.session.timeout.ms=6000 --log-format json)
[[ -n $port ]] && worker_args+=(--metrics-listen "127.0.0.1:$port")

wname=
start_worker() { # level
    local -n privs=$1
    wname=$tag-worker-$1
    containers+=("$wname")
    "${CF_PODMAN[@]}" run -d --name "$wname" --network=host "${CF_PODMAN_ULIMITS[@]}" "${privs[@]}" \
        -v "$tmp/worker.conf:/etc/codefleet/worker.conf:ro" "$IMAGE" \
        --worker-id "$wname" "${worker_args[@]}" >/dev/null 2>"$tmp/run.err" || return 1
    # Ready: /readyz answers 200 (connected, assigned), or without the HTTP
    # endpoints the "consuming" line; out when the container exits.
    local i
    for ((i = 0; i < 300; i++)); do
        [[ $(podman inspect -f '{{.State.Running}}' "$wname" 2>/dev/null) == true ]] || return 1
        if [[ -n $port ]]; then
            [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz") == 200 ]] && return 0
        else
            podman logs "$wname" >"$tmp/start.log" 2>&1
            grep -q "consuming $req" "$tmp/start.log" && return 0
        fi
        sleep 0.2
    done
    return 1
}

# One request through the image's CLI; prints the result's JSON line.
submit() { # topic args...
    local topic=$1
    shift
    cli "$admin_conf" --request-topic "$topic" --result-topic "$res" --json submit --timeout-exec 60s "$@" 2>"$tmp/submit.err"
}
# Fields of a result line: status, metadata.backend, metadata.sandbox,
# stdout, output (JSON), reason, tab-separated.
fields() {
    python3 -c 'import json, sys
d = json.loads(sys.stdin.readline() or "{}")
m = d.get("metadata") or {}
print("\t".join([d.get("status", "-"), m.get("backend", "-"), m.get("sandbox", "-"),
                 json.dumps(d.get("stdout", "")), json.dumps(d.get("output")), d.get("reason", "")]))'
}
# expect NAME TOPIC PATTERN... -- SUBMIT-ARGS...: each PATTERN is an extended
# regular expression for one field of fields(), in order (the rest of the
# line is not looked at).
expect() {
    local name=$1 topic=$2 got re='^' sep=''
    shift 2
    while (($#)) && [[ $1 != -- ]]; do
        re+="$sep($1)"
        sep=$'\t'
        shift
    done
    shift
    re+="(\$|$sep)"
    got=$(submit "$topic" "$@" | fields)
    if [[ $got =~ $re ]]; then
        pass "$name"
    else
        fail "$name" "want /${re//$'\t'/ | }/, got: ${got//$'\t'/ | }${got:+ }$(head -c 300 "$tmp/submit.err")"
    fi
}

level=
for l in "${levels[@]}"; do
    if start_worker "$l" && [[ $(submit "$req" -l python --code 'print(6 * 7)' | fields) == success$'\t'sandbox* ]]; then
        level=$l
        break
    fi
    printf 'image test: the worker does not serve the sandbox with privileges "%s":\n' "$l"
    { cat "$tmp/run.err"; podman logs "$wname" 2>&1; } | grep -E '"level":"(error|warn)"|Error' | grep -v GETPID | tail -n 5
    podman rm -f -t 0 "$wname" >/dev/null 2>&1
done
if [[ -z $level ]]; then
    fail "a worker from the image serving the sandbox (none of: ${levels[*]})"
    finish
fi
pass "worker started with privileges \"$level\"; sandbox probe passed with cgroups ($(podman logs "$wname" 2>&1 |
    grep -o 'sandbox backend: usable' | head -n 1 || true))"
if [[ $level == minimal ]]; then
    pass "minimal privileges suffice: ${minimal[*]}"
else
    declare -n used=$level
    fail "minimal privileges suffice" "needed \"$level\": ${used[*]}"
fi

# (stdout and output are JSON: a newline is the two characters \n.)
expect "python print on the sandbox (zygote)" "$req" success sandbox zygote '"42\\n"' -- \
    -l python --code 'print(6 * 7)'
expect "shell on the sandbox (uid 1000 inside)" "$req" success sandbox '[a-z]+' '"shell 42\\n1000\\n"' -- \
    -l shell --code 'echo "shell $((6 * 7))"; id -u'
expect "shell on the process backend (profile trusted)" "$trusted" success process - '"process 42\\n"' -- \
    --backend process -l shell --code 'echo "process $((6 * 7))"'
expect "javascript on the sandbox (nodejs)" "$req" success sandbox '[a-z]+' '"42\\n"' -- \
    -l javascript --code 'console.log(6 * 7)'
expect "python function harness" "$req" success sandbox '[a-z]+' '""' 49 -- \
    -l python --function --input '{"n": 7}' --code 'def run(input): return input["n"] ** 2'
expect "memory limit enforced (cgroup OOM kill)" "$req" memory_exceeded sandbox -- \
    -l python --memory 64MiB --code 'x = bytearray(200 << 20); print(len(x))'

if [[ -n $port ]]; then
    ok=1 why=
    for ep in healthz readyz metrics; do
        code=$(curl -s -o "$tmp/$ep.out" -w '%{http_code}' "http://127.0.0.1:$port/$ep")
        [[ $code == 200 ]] || {
            ok=0
            why+="/$ep: HTTP $code "
        }
    done
    grep -q '^codefleet_ready 1' "$tmp/metrics.out" 2>/dev/null || {
        ok=0
        why+="/metrics has no 'codefleet_ready 1' "
    }
    if ((ok)); then pass "/healthz, /readyz, /metrics on 127.0.0.1:$port"; else fail "health and metrics endpoints" "$why"; fi
else
    printf 'image test: this worker has no metrics-listen: /readyz not checked\n'
fi

# ---- stop --------------------------------------------------------------------
t0=$SECONDS
podman stop -t 60 "$wname" >/dev/null 2>&1
took=$((SECONDS - t0))
code=$(podman inspect -f '{{.State.ExitCode}}' "$wname" 2>/dev/null)
podman logs "$wname" >"$tmp/worker.log" 2>&1
if [[ $code == 0 ]] && ((took < 60)); then
    pass "SIGTERM: exited 0 in ${took}s"
else
    fail "SIGTERM: exit code ${code:-?} after ${took}s (want 0, before the 60 s SIGKILL)"
fi
if grep -q '"msg":"stopped: .* 0 left for redelivery' "$tmp/worker.log" &&
    ! grep -q '"level":"error"' "$tmp/worker.log"; then
    pass "clean stop: 'stopped:' logged, nothing left for redelivery, no error lines"
else
    fail "clean stop" "$(grep -E '"level":"error"|stopped:' "$tmp/worker.log" | tail -n 3)"
fi
# The process backend once shared the slot's host uid with the sandbox, and
# its clean-up by uid killed that slot's Python zygote.
if grep -q 'zygote ended' "$tmp/worker.log"; then
    fail "zygotes lived through the run" "$(grep 'zygote ended' "$tmp/worker.log" | head -n 2)"
else
    pass "zygotes lived through the run (a process-backend run does not reach the sandbox's uids)"
fi
# Other warnings are not failures, but worth seeing.
grep '"level":"warn"' "$tmp/worker.log" | grep -v 'GETPID' | head -n 5 | sed 's/^/note: worker warning: /'
if ((failed)); then
    printf 'image test: worker log (last 20 lines):\n'
    tail -n 20 "$tmp/worker.log"
fi
finish
