#!/usr/bin/env bash
# The fleet under faults, against the real local stack (deploy/stack.sh).
#
#   tests/chaos/run.sh [--quick] [--requests N] [--rate R]
#
# Three workers (process backend, so programs can log their runs to a host
# file) serve a mix of requests from tests/chaos/chaos_driver: trivial, slow,
# workspace-writing, checkpointing.  Meanwhile a random worker is SIGKILLed
# every 3-8 s and restarted, the broker is stopped and restarted once, and
# Redis is SIGKILLed and restarted once.  The broker's restart is timed to
# land on the shape that once stopped a worker for good (issue 28): a burst
# of slow requests fills every worker's intake (its partitions pause), a
# worker is killed and restarted, and the broker goes down as soon as the
# restarted worker holds freshly assigned partitions.  The driver then
# checks that every id has a result within the bound it states, that no id
# ran twice except across a kill (attributed by the work directory, whose
# root names the worker's pid), and that no acknowledged workspace write or
# checkpoint is lost, and prints the figures (docs/RELIABILITY.md).
#
# Default: 2000 requests at 25/s.  --quick (the CI variant): 500 at 10/s,
# about a minute and a half.  Needs the stack up (tests/run_all.sh starts one; by
# hand: deploy/stack.sh up --workers 0) and its environment
# (eval "$(deploy/stack.sh env)"); restarting the broker and Redis uses
# deploy/stack.sh with the same CODEFLEET_STATE.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=deploy/common.sh
source "$REPO/deploy/common.sh"

requests=2000 rate=25
while (($#)); do
    case $1 in
    --quick) requests=500 rate=10 ;;
    --requests) requests=$2; shift ;;
    --rate) rate=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) cf_die "unknown argument '$1'" ;;
    esac
    shift
done

: "${CF_TEST_BROKERS:?the stack environment is not set: eval \"\$(deploy/stack.sh env)\"}"
: "${CF_TEST_REDIS:?}" "${CF_TEST_CLIENT_CONFIG:?}"
BUILD=${CF_BINARY_DIR:-$REPO/build}
# CF_CHAOS_WORKER: another worker binary (an older commit's, to show what
# the suite finds there); the driver and the CLI stay this build's.
WORKER=${CF_CHAOS_WORKER:-$BUILD/worker/codefleet-worker}
CLI=$BUILD/dispatcher/codefleet
DRIVER=$BUILD/tests/chaos_driver
for b in "$WORKER" "$CLI" "$DRIVER"; do [[ -x $b ]] || cf_die "$b not found: build first"; done
STACK=$REPO/deploy/stack.sh

tag=chaos-$$-$RANDOM
dir=$(mktemp -d /tmp/cf-chaos.XXXXXX)
chmod 0777 "$dir"
: >"$dir/runs"
chmod 0666 "$dir/runs"
: >"$dir/killed"
req=$tag.requests res=$tag.results dlq=$tag.dlq group=$tag-workers
"$CLI" --config "$CF_TEST_CLIENT_CONFIG" --brokers "$CF_TEST_BROKERS" topics create --partitions 6 \
    "$req" "$res" "$dlq" >/dev/null

# The partition guard, quick to act here; a worker without it (an older
# build) runs without.
guard_args=()
if "$WORKER" --help-config 2>/dev/null | grep -q 'partition-stall'; then guard_args=(--partition-stall 5s); fi
pids=("" "" "")
# Each worker's work-root is <dir>/root-<its pid>: a program's work
# directory says which worker started it (its parent pid would not, for a
# program that outlived its worker).  Small prefetch: a burst pauses intake.
start_worker() { # index
    local i=$1 uids
    mapfile -t uids < <(cf_run_uid_base_arg "$i")
    # shellcheck disable=SC2016 # expanded by the inner shell, whose $$ the worker keeps
    setsid sh -c 'r="$0/root-$$"; mkdir -p "$r" && exec "$@" --work-root "$r"' "$dir" \
        "$WORKER" "${uids[@]}" --config "$CF_TEST_CLIENT_CONFIG" --brokers "$CF_TEST_BROKERS" --group "$group" \
        --worker-id "$tag-w$i" --request-topic "$req" --result-topic "$res" --dlq-topic "$dlq" \
        --redis "$CF_TEST_REDIS" --backends process --profile.default.backends=process \
        --profile.default.network=enabled --slots 2 --prefetch 2 --idempotency-lease 3s --rebalance-wait 2s \
        "${guard_args[@]}" --log-level info \
        >>"$dir/w$i.log" 2>&1 </dev/null &
    pids[i]=$!
}
# Waits (bounded) until file has more than n lines matching pattern.
wait_lines() { # file pattern n seconds
    local deadline=$((SECONDS + $4))
    while (($(grep -c -- "$2" "$1" 2>/dev/null || true) <= $3)); do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}
kill_worker() { # index
    local i=$1
    echo "${pids[i]} $(date +%s%6N)" >>"$dir/killed"
    kill -KILL "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
    kills=$((kills + 1))
}
stop_all() {
    local p
    for p in "${pids[@]}"; do [[ -n $p ]] && kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap 'stop_all' EXIT
# The workers' group session (KIP-848: the broker's), for the driver's
# bound: what the stack's broker was started with.
props=${CODEFLEET_STATE:-$REPO/.stack}/kafka/server.properties
session_ms=$(sed -n 's/^group.consumer.session.timeout.ms=\([0-9]*\)$/\1/p' "$props" 2>/dev/null | tail -n 1)
[[ $session_ms =~ ^[0-9]+$ ]] ||
    cf_die "no group.consumer.session.timeout.ms in $props: the chaos suite runs against deploy/stack.sh's broker"
session_s=$(((session_ms + 999) / 1000))
for i in 0 1 2; do start_worker "$i"; done

# The driver's producer logs librdkafka's account of leaders, the
# idempotent producer's state and its connections into driver.log.
CF_CHAOS_PRODUCER_DEBUG=${CF_CHAOS_PRODUCER_DEBUG-eos,metadata,topic,broker} \
"$DRIVER" --brokers "$CF_TEST_BROKERS" --config "$CF_TEST_CLIENT_CONFIG" --redis "$CF_TEST_REDIS" \
    --requests "$req" --results "$res" --runs-file "$dir/runs" --killed-file "$dir/killed" \
    --logs-dir "$dir" --tag "$tag" --n "$requests" --rate "$rate" --timeout 420 \
    --group "$group" --burst 30 --outage-file "$dir/outage" \
    --session-s "$session_s" --rebalance-s 2 --lease-s 3 --stall-s 5 \
    >"$dir/report" 2>"$dir/driver.log" &
driver=$!

submit_s=$((requests / rate))
broker_at=$((submit_s * 3 / 10)) redis_at=$((submit_s * 6 / 10))
kills=0 broker_done=0 redis_done=0 start=$SECONDS
while kill -0 "$driver" 2>/dev/null; do
    sleep $((3 + RANDOM % 6))
    kill -0 "$driver" 2>/dev/null || break
    t=$((SECONDS - start))
    if ((!broker_done && t >= broker_at)); then
        # The shape of issue 28: paused partitions (the burst fills every
        # worker's intake) and freshly assigned ones (a worker restarted
        # just now), then the broker goes away.
        cf_log "chaos: t=${t}s burst of slow requests"
        kill -USR1 "$driver"
        wait_lines "$dir/driver.log" 'burst of' 0 60 || cf_log "chaos: the burst was not confirmed"
        i=$((RANDOM % 3))
        assigned=$(grep -c 'kafka: assigned [1-9]' "$dir/w$i.log" 2>/dev/null || true)
        cf_log "chaos: t=$((SECONDS - start))s SIGKILL worker w$i (pid ${pids[i]}), restarting it"
        kill_worker "$i"
        start_worker "$i"
        wait_lines "$dir/w$i.log" 'kafka: assigned [1-9]' "$assigned" 60 ||
            cf_log "chaos: w$i was not assigned partitions within 60 s"
        kill -USR2 "$driver"
        cf_log "chaos: t=$((SECONDS - start))s w$i holds fresh partitions: stopping and restarting the broker"
        t0=$(date +%s%N)
        "$STACK" restart kafka >>"$dir/stack.log" 2>&1
        t1=$(date +%s%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", (b - a) / 1e9 }' >"$dir/outage"
        cf_log "chaos: the broker was away $(cat "$dir/outage") s"
        broker_done=1
        continue
    fi
    if ((!redis_done && t >= redis_at)); then
        cf_log "chaos: t=${t}s SIGKILL redis, restart"
        "$STACK" restart redis --kill >>"$dir/stack.log" 2>&1
        redis_done=1
        continue
    fi
    # Only while requests still arrive: afterwards the fleet must finish.
    ((t < submit_s)) || continue
    i=$((RANDOM % 3))
    cf_log "chaos: t=${t}s SIGKILL worker w$i (pid ${pids[i]})"
    kill_worker "$i"
    start_worker "$i"
done
wait "$driver" || true
stop_all
trap - EXIT
cat "$dir/report"
echo "worker kills         $kills"
echo "broker restarts      $broker_done (away $(cat "$dir/outage" 2>/dev/null || echo '?') s)"
echo "redis kills          $redis_done"
echo "logs                 $dir"
# An outage must read as one: a worker that has joined the group got through
# with its settings, so blaming them (librdkafka's security.protocol hint
# when a broker drops a connection mid-handshake) sends an operator the
# wrong way.
read -r misled handshakes < <(cat "$dir"/w*.log | awk '
    match($0, /codefleet-worker\[[0-9]+\]/) { pid = substr($0, RSTART, RLENGTH) }
    /kafka: assigned / { joined[pid] = 1 }
    /expects SASL or TLS/ && joined[pid] { n++ }
    /dropped the connection during its handshake/ { h++ }
    END { print n + 0, h + 0 }')
echo "misleading lines     $misled (a joined worker blaming its settings; $handshakes said the broker was away)"
grep -q '^verdict *PASS' "$dir/report" && ((misled == 0))
