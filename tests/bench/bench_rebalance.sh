#!/usr/bin/env bash
# Group stability under steady load, and restarts of a static member.
#
#   tests/bench/bench_rebalance.sh [--duration SECONDS] [--restarts N] [--kills N]
#
# A section given 0 is skipped.
#
# 1. Steady run (default 600 s): three workers (2 slots, prefetch 2, so
#    partitions pause and resume all the time) on a 6-partition topic, fed
#    without pause by two streams of `codefleet batch` rounds: one mixing
#    trivial requests with executions of 10 s (longer than the 6 s session
#    timeout), one of trivial requests only; two CPU burners keep the
#    2-core machine saturated.  Counts every rebalance event the workers log
#    after the group first settled ("assigned" / "revoked" / "lost"); the
#    expected count is 0.
# 2. Static membership (default 20 restarts): the third worker runs with
#    --static-membership; each round SIGKILLs it, restarts it with the same
#    worker-id after 1 s, and measures the time from the restart to its
#    partitions being back; the other two workers must log no rebalance.
# 3. Failover (default 20 kills): tests/bench/bench_failover with the
#    worker defaults (KIP-848), then the same with group-protocol =
#    classic, each in a group of its own; then the anchor, one kill of a
#    classic worker with librdkafka's group defaults (45 s session).
#
# Uses its own stack (state dir .stack-rebalance, ports 19392/16679, or
# CODEFLEET_REBALANCE_KAFKA_PORT / CODEFLEET_REBALANCE_REDIS_PORT) and
# stops it at the end.  RESULT lines are summarized at the end.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
exec </dev/null

duration=600 restarts=20 kills=20
while (($#)); do
    case $1 in
    --duration) duration=$2 && shift ;;
    --restarts) restarts=$2 && shift ;;
    --kills) kills=$2 && shift ;;
    *) echo "usage: $0 [--duration SECONDS] [--restarts N] [--kills N]" >&2 && exit 2 ;;
    esac
    shift
done

export CODEFLEET_STATE=$repo/.stack-rebalance
export CODEFLEET_KAFKA_PORT=${CODEFLEET_REBALANCE_KAFKA_PORT:-19392}
export CODEFLEET_REDIS_PORT=${CODEFLEET_REBALANCE_REDIS_PORT:-16679}
brokers=127.0.0.1:$CODEFLEET_KAFKA_PORT

deploy/install.sh
deploy/build.sh
bin=$repo/build
deploy/stack.sh up --workers 0 --no-topics
declare -A pids=()
burners=()
flood_pid=
cleanup() {
    # The flood subshell and the batch it runs.
    [[ -z $flood_pid ]] || pkill -TERM -P "$flood_pid" 2>/dev/null || true
    [[ -z $flood_pid ]] || kill "$flood_pid" 2>/dev/null || true
    for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
    for id in "${!pids[@]}"; do kill -TERM "${pids[$id]}" 2>/dev/null || true; done
    for id in "${!pids[@]}"; do wait "${pids[$id]}" 2>/dev/null || true; done
    deploy/stack.sh down >/dev/null || true
}
trap cleanup EXIT

admin_conf=$CODEFLEET_STATE/secrets/admin.conf
logs=$CODEFLEET_STATE/rebalance
mkdir -p "$logs"
work_root=/dev/shm/codefleet-rebalance
mkdir -p "$work_root"
t=rebalance-$(date +%s)
cli() { "$bin/dispatcher/codefleet" --config "$admin_conf" --brokers "$brokers" "$@"; }
cli topics create --partitions 6 "$t.req" "$t.res" "$t.dlq" >/dev/null

start_worker() { # id log [extra flags...]
    local id=$1 log=$2
    shift 2
    env -u CODEFLEET_STATE -u CODEFLEET_KAFKA_PORT -u CODEFLEET_REDIS_PORT \
        "$bin/worker/codefleet-worker" --config "$admin_conf" --brokers "$brokers" --group "bench-$t" \
        --worker-id "$id" --request-topic "$t.req" --result-topic "$t.res" --dlq-topic "$t.dlq" \
        --log-level info --backends process --profile.default.backends=process --profile.default.network=enabled \
        --slots 2 --prefetch 2 --workers-topic= \
        --work-root "$work_root" "$@" >>"$log" 2>&1 &
    pids[$id]=$!
}
events() { grep -cE 'kafka: (assigned|revoked|lost) [0-9]+ partition' "$1" || true; }

start_worker rb-1 "$logs/rb-1.log"
start_worker rb-2 "$logs/rb-2.log"
start_worker rb-3 "$logs/rb-3.log" --static-membership
sleep 12 # join and settle
declare -A base=()
for id in rb-1 rb-2 rb-3; do base[$id]=$(events "$logs/$id.log"); done

# One round: 200 requests, 1 in 20 sleeping 10 s.
round=$logs/round.jsonl
: >"$round"
for ((i = 0; i < 200; i++)); do
    if ((i % 20 == 0)); then
        printf '{"language":"shell","code":"sleep 10","policy":{"timeout_us":30000000}}\n'
    else
        printf '{"language":"shell","code":"exit 0"}\n'
    fi
done >>"$round"

flood=$logs/flood.jsonl
for ((i = 0; i < 500; i++)); do printf '{"language":"shell","code":"exit 0"}\n'; done >"$flood"

if ((duration > 0)); then
echo "== 1. steady run: ${duration}s of load on 3 workers, two CPU burners"
for _ in 1 2; do
    sh -c 'while :; do :; done' &
    burners+=($!)
done
end=$((SECONDS + duration))
(
    n=0
    while ((SECONDS < end)); do
        cli --request-topic "$t.req" --result-topic "$t.res" --timeout 120s --json batch "$flood" --concurrency 20 \
            >"$logs/flood.out" 2>&1 || true
        n=$((n + $(grep '"summary"' "$logs/flood.out" | grep -o '"success":[0-9]*' | grep -o '[0-9]*$' || echo 0)))
    done
    echo "$n" >"$logs/flood.count"
) &
flood_pid=$!
rounds=0 answered=0 failed_rounds=0
while ((SECONDS < end)); do
    if out=$(cli --request-topic "$t.req" --result-topic "$t.res" --timeout 120s --json batch "$round" --concurrency 40 2>&1); then
        :
    else
        failed_rounds=$((failed_rounds + 1))
        ((failed_rounds > 1)) || printf '  a round did not fully succeed: %s\n' "$(printf '%s\n' "$out" | tail -n 2)"
    fi
    n=$(printf '%s\n' "$out" | grep '"summary"' | grep -o '"success":[0-9]*' | grep -o '[0-9]*$' | tail -n 1 || true)
    answered=$((answered + ${n:-0}))
    rounds=$((rounds + 1))
done
wait "$flood_pid" || true
for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
burners=()
flooded=$(cat "$logs/flood.count" 2>/dev/null || echo 0)
steady=0
for id in rb-1 rb-2 rb-3; do
    n=$(($(events "$logs/$id.log") - base[$id]))
    echo "  $id: $n rebalance event(s)"
    steady=$((steady + n))
done
echo "  mixed stream: $rounds rounds, $answered requests answered successfully, $failed_rounds round(s) not all successful"
echo "  trivial stream: $flooded requests answered successfully"
echo "RESULT rebalance_steady seconds=$duration succeeded=$((answered + flooded)) long_runs=$((rounds * 10)) events=$steady"
flood_pid=
fi

if ((restarts > 0)); then
echo "== 2. static member restarts ($restarts SIGKILL + restart after 1 s)"
times=()
others_before=$(($(events "$logs/rb-1.log") + $(events "$logs/rb-2.log")))
for ((r = 1; r <= restarts; r++)); do
    kill -KILL "${pids[rb-3]}" 2>/dev/null || true
    wait "${pids[rb-3]}" 2>/dev/null || true
    sleep 1
    log=$logs/rb-3.restart-$r.log
    : >"$log"
    t0=$(date +%s%N)
    start_worker rb-3 "$log" --static-membership
    got=""
    for ((k = 0; k < 300; k++)); do
        if grep -qE 'kafka: assigned [1-9][0-9]* partition' "$log"; then
            got=$(($(date +%s%N) - t0))
            break
        fi
        sleep 0.05
    done
    if [[ -z $got ]]; then
        echo "  round $r: partitions not back within 15 s"
        times+=(15000)
    else
        times+=($((got / 1000000)))
        echo "  round $r: partitions back after $((got / 1000000)) ms"
    fi
    sleep 2
done
others=$(($(events "$logs/rb-1.log") + $(events "$logs/rb-2.log") - others_before))
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
median=$(printf '%s\n' "$sorted" | sed -n "$(((restarts + 1) / 2))p")
max=$(printf '%s\n' "$sorted" | tail -n 1)
echo "  median ${median} ms, max ${max} ms; rebalance events on the other workers: $others"
echo "RESULT static_restart rounds=$restarts median_ms=$median max_ms=$max others_events=$others"
fi

((kills > 0)) || exit 0
kill -TERM "${pids[rb-1]}" "${pids[rb-2]}" "${pids[rb-3]}" 2>/dev/null || true
for id in rb-1 rb-2 rb-3; do
    [[ -n ${pids[$id]:-} ]] || continue
    wait "${pids[$id]}" 2>/dev/null || true
    unset "pids[$id]"
done
# One group per protocol, both of its workers on it: $1 the protocol, $2
# the kills, the rest extra flags for the killed worker.
failover() {
    local proto=$1 n=$2 f
    shift 2
    f=failover-$proto-$(date +%s)
    cli topics create --partitions 2 "$f.req" "$f.res" "$f.dlq" >/dev/null
    env -u CODEFLEET_STATE -u CODEFLEET_KAFKA_PORT -u CODEFLEET_REDIS_PORT \
        "$bin/worker/codefleet-worker" --config "$admin_conf" --brokers "$brokers" --group "bench-$f" \
        --worker-id "fo-B-$proto" --request-topic "$f.req" --result-topic "$f.res" --dlq-topic "$f.dlq" --workers-topic= \
        --log-level warn --backends process --profile.default.backends=process --profile.default.network=enabled \
        --group-protocol "$proto" --slots 2 --work-root "$work_root" >"$logs/fo-B-$proto.log" 2>&1 &
    pids[fo-B-$proto]=$!
    sleep 3
    "$bin/tests/bench_failover" --config "$admin_conf" --brokers "$brokers" --requests "$f.req" \
        --results "$f.res" --rounds "$n" -- \
        "$bin/worker/codefleet-worker" --config "$admin_conf" --brokers "$brokers" --group "bench-$f" \
        --request-topic "$f.req" --result-topic "$f.res" --dlq-topic "$f.dlq" --workers-topic= --slots 1 --prefetch 8 \
        --log-level error --backends process --profile.default.backends=process --profile.default.network=enabled \
        --group-protocol "$proto" --work-root "$work_root" "$@" || echo "  (a round lost a request: see above)"
    kill -TERM "${pids[fo-B-$proto]}" 2>/dev/null || true
    wait "${pids[fo-B-$proto]}" 2>/dev/null || true
    unset "pids[fo-B-$proto]"
}
echo "== 3. failover: $kills SIGKILLs of a worker with queued requests, KIP-848 (the default; the stack's broker: session ${CODEFLEET_GROUP_SESSION_MS:-1500} ms, heartbeat ${CODEFLEET_GROUP_HEARTBEAT_MS:-250} ms)"
failover consumer "$kills"
echo "== 3b. the same with the classic protocol (worker defaults: session.timeout.ms 6000, heartbeat 1000)"
failover classic "$kills" | sed 's/^RESULT failover /RESULT failover_classic /'
echo "== 3c. anchor: 1 SIGKILL of a worker with librdkafka's classic defaults (session.timeout.ms 45000, heartbeat 3000)"
failover classic 1 --kafka.session.timeout.ms=45000 --kafka.heartbeat.interval.ms=3000 |
    sed 's/^RESULT failover /RESULT failover_anchor /' || true
