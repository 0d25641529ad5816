#!/usr/bin/env bash
# The local codefleet stack: a single-node KRaft Kafka broker, Redis and N
# workers, all on 127.0.0.1, with state, logs and pid files in one directory.
#
# Authenticated: Kafka takes SASL/SCRAM (SHA-512 for the stack's clients, SHA-256
# too) only, with ACLs (KRaft's
# StandardAuthorizer); Redis takes ACL users only (no default user).  Each
# principal has its own password, generated at the first `up` into
# <state>/secrets (0700; files 0600): admin (super user), worker, cli (the
# operator's CLI), tenant-a and tenant-b (each may write only its request
# topic <requests>.<tenant> and its cancel topic <requests>.<tenant>.cancel,
# and read only its results <results>.<tenant> and their output chunks
# <results>.<tenant>.output).
# <state>/secrets/<name>.conf is a settings file for codefleet --config /
# codefleet-worker --config (kafka.sasl.*, redis-user, redis-password).
#
# Usage:
#   deploy/stack.sh up [--workers N] [--no-topics] [--container] [--warm]
#                                       --container: the workers also offer the
#                                        container backend with the image of
#                                        deploy/images.sh (every profile may use it);
#                                       --warm: warm sandboxes (sandbox-warm).
#                                       A running worker whose arguments or
#                                       settings file changed is restarted
#                                       (drained first); one unchanged keeps running.
#   deploy/stack.sh down [--purge]      (--purge also deletes the state dir)
#   deploy/stack.sh status              (exit 3 if Kafka or Redis is not running)
#   deploy/stack.sh env                 (export lines, for: eval "$(deploy/stack.sh env)")
#   deploy/stack.sh restart kafka|redis [--kill]
#                                       (stop, with SIGKILL when --kill, and start again:
#                                        fault injection for tests/chaos)
#
# Environment (default):
#   CODEFLEET_STATE                state dir (<repo>/.stack)
#   CODEFLEET_KAFKA_PORT           broker port (19092); the controller uses port+1
#   CODEFLEET_REDIS_PORT           Redis port (16379)
#   CODEFLEET_PARTITIONS           partitions per topic (6)
#   CODEFLEET_TOPIC_REQUESTS       codefleet.requests
#   CODEFLEET_TOPIC_RESULTS        codefleet.results
#   CODEFLEET_TOPIC_DLQ            codefleet.dlq
#   CODEFLEET_TOPIC_EVENTS         codefleet.events
#   CODEFLEET_TOPIC_WORKERS        codefleet.workers (the workers' reports, compacted)
#   CODEFLEET_KAFKA_VERSION        the broker release (deploy/common.sh; 3.9.1 still works)
#   CODEFLEET_KAFKA_SASL           scram|scram-sha-256|plain: the clients' mechanism (default scram:
#                                  SCRAM-SHA-512)
#   CODEFLEET_WORKERS              workers started by `up` (2)
#   CODEFLEET_GROUP                the workers' consumer group (codefleet)
#   CODEFLEET_GROUP_SESSION_MS     the broker's KIP-848 session timeout (1500) and
#   CODEFLEET_GROUP_HEARTBEAT_MS   heartbeat interval (250), read when the broker starts
#   CODEFLEET_STACK_WORKER_ARGS    extra arguments for every worker (word-split)
#   CODEFLEET_METRICS_PORT         worker i serves /metrics, /healthz, /readyz on
#                                  127.0.0.1:<this + i - 1> (19464; 0: no HTTP server)
#   CODEFLEET_BACKENDS             the workers' backends (sandbox,process,wasm,js as root, else process)
#   CODEFLEET_WORK_ROOT            the workers' work-root (/dev/shm/codefleet: a tmpfs is faster)
#   CODEFLEET_WORKER_RUN_UID_BASE  worker i's programs run as host uids base + i*1000 + slot
#                                  (100000); a second stack on the host needs another
#   CODEFLEET_BIN                  directory holding codefleet and codefleet-worker
#                                  (default: <repo>/build/dispatcher and <repo>/build/worker)
#   CODEFLEET_KAFKA_START_TIMEOUT  seconds to wait for the broker (90)
#   CODEFLEET_REDIS_MAXMEMORY      Redis's ceiling (1gb; noeviction: writes past it fail)
#   CODEFLEET_CACHE                where deploy/install.sh put the Kafka jars
#
# `up` and `down` are idempotent; nothing prompts.  Ports, topics and group
# are recorded at `up`, so later `down`/`status`/`env` use the same ones.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

STATE=${CODEFLEET_STATE:-$CF_REPO/.stack}
RUN_UID_BASE=${CODEFLEET_WORKER_RUN_UID_BASE:-100000}
[[ $RUN_UID_BASE =~ ^[0-9]+$ ]] || cf_die "CODEFLEET_WORKER_RUN_UID_BASE must be a number, not '$RUN_UID_BASE'"
SETTINGS=$STATE/stack.env

KAFKA_PORT=${CODEFLEET_KAFKA_PORT:-19092}
REDIS_PORT=${CODEFLEET_REDIS_PORT:-16379}
PARTITIONS=${CODEFLEET_PARTITIONS:-6}
TOPIC_REQUESTS=${CODEFLEET_TOPIC_REQUESTS:-codefleet.requests}
TOPIC_RESULTS=${CODEFLEET_TOPIC_RESULTS:-codefleet.results}
TOPIC_DLQ=${CODEFLEET_TOPIC_DLQ:-codefleet.dlq}
TOPIC_EVENTS=${CODEFLEET_TOPIC_EVENTS:-codefleet.events}
TOPIC_WORKERS=${CODEFLEET_TOPIC_WORKERS:-codefleet.workers}
GROUP=${CODEFLEET_GROUP:-codefleet}
KAFKA_START_TIMEOUT=${CODEFLEET_KAFKA_START_TIMEOUT:-90}

# Script-only variables share the CODEFLEET_ prefix with the programs' own
# settings; the programs reject unknown CODEFLEET_* variables, so these are
# removed from the environment of everything this script starts.
SCRIPT_VARS=(CODEFLEET_STATE CODEFLEET_KAFKA_PORT CODEFLEET_REDIS_PORT CODEFLEET_PARTITIONS
    CODEFLEET_TOPIC_REQUESTS CODEFLEET_TOPIC_RESULTS CODEFLEET_TOPIC_DLQ CODEFLEET_TOPIC_EVENTS CODEFLEET_TOPIC_WORKERS
    CODEFLEET_WORKERS CODEFLEET_GROUP CODEFLEET_STACK_WORKER_ARGS CODEFLEET_BACKENDS CODEFLEET_WORK_ROOT CODEFLEET_BIN
    CODEFLEET_KAFKA_START_TIMEOUT CODEFLEET_CACHE CODEFLEET_REDIS_MAXMEMORY CODEFLEET_KAFKA_VERSION
    CODEFLEET_KAFKA_SASL)
CLEAN_ENV=(env)
for v in "${SCRIPT_VARS[@]}"; do CLEAN_ENV+=(-u "$v"); done

KAFKA_DIR=$STATE/kafka
REDIS_DIR=$STATE/redis
WORKER_DIR=$STATE/workers
SECRETS=$STATE/secrets
PRINCIPALS=(admin worker cli tenant-a tenant-b)
TENANTS=(tenant-a tenant-b)

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# Reads the settings recorded by `up` (only known keys: the file is data,
# never sourced).
load_settings() {
    [[ -f $SETTINGS ]] || return 0
    local key value
    while IFS='=' read -r key value; do
        case $key in
        KAFKA_PORT) KAFKA_PORT=$value ;;
        REDIS_PORT) REDIS_PORT=$value ;;
        PARTITIONS) PARTITIONS=$value ;;
        TOPIC_REQUESTS) TOPIC_REQUESTS=$value ;;
        TOPIC_RESULTS) TOPIC_RESULTS=$value ;;
        TOPIC_DLQ) TOPIC_DLQ=$value ;;
        TOPIC_EVENTS) TOPIC_EVENTS=$value ;;
        TOPIC_WORKERS) TOPIC_WORKERS=$value ;;
        GROUP) GROUP=$value ;;
        esac
    done <"$SETTINGS"
}

save_settings() {
    mkdir -p "$STATE"
    {
        printf 'KAFKA_PORT=%s\nREDIS_PORT=%s\nPARTITIONS=%s\n' "$KAFKA_PORT" "$REDIS_PORT" "$PARTITIONS"
        printf 'TOPIC_REQUESTS=%s\nTOPIC_RESULTS=%s\n' "$TOPIC_REQUESTS" "$TOPIC_RESULTS"
        printf 'TOPIC_DLQ=%s\nTOPIC_EVENTS=%s\nGROUP=%s\n' "$TOPIC_DLQ" "$TOPIC_EVENTS" "$GROUP"
        printf 'TOPIC_WORKERS=%s\n' "$TOPIC_WORKERS"
    } >"$SETTINGS"
}

brokers() { printf '127.0.0.1:%s' "$KAFKA_PORT"; }

# ---- credentials ----

password() { cat "$SECRETS/$1.pw"; }

# One password per principal, made once; the settings files hold what a
# client of that principal needs.  Nothing secret goes on a command line or
# into an environment.
init_secrets() {
    (umask 077 && mkdir -p "$STATE" "$SECRETS")
    # A directory someone else made (a planted CODEFLEET_STATE) would stay
    # theirs whatever its mode: refuse it.
    [[ -O $STATE && -O $SECRETS ]] || cf_die "$STATE or $SECRETS is not owned by this user: refusing to keep secrets there"
    chmod 0700 "$STATE" "$SECRETS"
    local p pw mech
    mech=$(sasl_mechanism)
    for p in "${PRINCIPALS[@]}"; do
        if [[ ! -s $SECRETS/$p.pw ]]; then
            pw=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
            ((${#pw} == 48)) || cf_die "could not generate a password"
            (umask 077 && rm -f "$SECRETS/$p.pw" && printf '%s\n' "$pw" >"$SECRETS/$p.pw")
        fi
        pw=$(password "$p")
        rm -f "$SECRETS/$p.conf"
        (
            umask 077
            {
                printf '# codefleet client settings for principal %s (generated by deploy/stack.sh)\n' "$p"
                printf 'kafka.security.protocol = SASL_PLAINTEXT\nkafka.sasl.mechanisms = %s\n' "$mech"
                printf 'kafka.sasl.username = %s\nkafka.sasl.password = %s\n' "$p" "$pw"
                # Every principal has a Redis user; a tenant's reaches only
                # its own workspaces and threads (write_redis_config), whose
                # ids start with its state prefix, which its tools check too.
                printf 'redis-user = %s\nredis-password = %s\n' "$p" "$pw"
                case $p in
                tenant-*)
                    # Its topics too: a tenant's client needs no flag to
                    # reach them (an environment's CODEFLEET_*_TOPIC wins).
                    printf 'state-prefix = %s.\nrequest-topic = %s.%s\nresult-topic = %s.%s\n' "$p" \
                        "$TOPIC_REQUESTS" "$p" "$TOPIC_RESULTS" "$p"
                    ;;
                esac
            } >"$SECRETS/$p.conf"
        )
    done
}
ctrl_port() { printf '%s' $((KAFKA_PORT + 1)); }

# The mechanism the stack's clients use: SASL/SCRAM-SHA-512 (the password
# never crosses the wire).  The broker holds SCRAM-SHA-512 and SCRAM-SHA-256
# credentials for every principal, so CODEFLEET_KAFKA_SASL=scram-sha-256
# serves a client that has only the older hash.  The project's librdkafka
# (2.12, deploy/librdkafka.sh) speaks both to Kafka 3.x and 4.x; Debian's
# 2.0.2 built a proof Kafka 4 rejects (confluentinc/librdkafka#4895), which
# is why the stack once used PLAIN there.  CODEFLEET_KAFKA_SASL=plain still
# gives PLAIN (for a client on an old librdkafka, kcat among them): it sends
# the password to the broker, acceptable on loopback only.  A broker
# formatted before SCRAM-SHA-512 (its .scram marker does not name it) has
# SHA-256 credentials only: its clients keep SHA-256.
sasl_mechanism() {
    case ${CODEFLEET_KAFKA_SASL:-} in
    '' | scram | SCRAM-SHA-512 | scram-sha-512)
        if [[ -f $KAFKA_DIR/data/meta.properties ]] && ! grep -qs SCRAM-SHA-512 "$KAFKA_DIR/.scram"; then
            printf 'SCRAM-SHA-256'
        else
            printf 'SCRAM-SHA-512'
        fi
        ;;
    scram-sha-256 | SCRAM-SHA-256) printf 'SCRAM-SHA-256' ;;
    plain | PLAIN)
        # PLAIN is enabled when the broker starts: one already running
        # without it would refuse every client this would configure.
        if kafka_running && ! grep -q '^listener.name.sasl_plaintext.sasl.enabled.mechanisms=.*PLAIN' \
            "$KAFKA_DIR/server.properties" 2>/dev/null; then
            cf_die "CODEFLEET_KAFKA_SASL=plain: the running broker was started without PLAIN: deploy/stack.sh down, then up with it set"
        fi
        printf 'PLAIN'
        ;;
    *) cf_die "CODEFLEET_KAFKA_SASL must be scram (SCRAM-SHA-512), scram-sha-256 or plain, not '$CODEFLEET_KAFKA_SASL'" ;;
    esac
}

binary() { # name subdir-under-build
    if [[ -n ${CODEFLEET_BIN:-} ]]; then
        printf '%s/%s' "$CODEFLEET_BIN" "$1"
    else
        printf '%s/build/%s/%s' "$CF_REPO" "$2" "$1"
    fi
}

read_pid() { [[ -f $1 ]] && head -c 32 "$1" | tr -dc '0-9'; }

kafka_marker() { printf '%s' "$KAFKA_DIR/server.properties"; }
kafka_running() {
    local pid
    pid=$(read_pid "$KAFKA_DIR/kafka.pid") && cf_pid_matches "$pid" "kafka.Kafka" &&
        cf_pid_matches "$pid" "$(kafka_marker)"
}
# Redis rewrites its process title to "redis-server 127.0.0.1:PORT" once it
# is initialised; until then the title is still our command line.
redis_running() {
    local pid
    pid=$(read_pid "$REDIS_DIR/redis.pid") && cf_pid_matches "$pid" "redis-server" &&
        { cf_pid_matches "$pid" ":$REDIS_PORT" || cf_pid_matches "$pid" "--port $REDIS_PORT "; }
}
worker_running() { # pidfile
    local pid name
    name=$(basename "$1" .pid)
    pid=$(read_pid "$1") && cf_pid_matches "$pid" "codefleet-worker" && cf_pid_matches "$pid" "--worker-id $name "
}

# Starts a command detached (own session, no stdin), logging to $1, pid to $2.
spawn() {
    local log=$1 pidfile=$2
    shift 2
    # In a non-interactive shell the background child is no group leader,
    # so setsid execs in place and $! is the final process.
    setsid "$@" >"$log" 2>&1 </dev/null &
    printf '%s\n' "$!" >"$pidfile"
}

# SIGTERM, wait up to $3 seconds, then SIGKILL; $2 is a function that says
# whether the process of pid file $1 still runs.
stop_pidfile() {
    local pidfile=$1 check=$2 grace=$3 what=$4 pid i
    [[ -f $pidfile ]] || return 0
    pid=$(read_pid "$pidfile")
    if ! "$check" "$pidfile"; then
        rm -f "$pidfile"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 5; i++)); do
        "$check" "$pidfile" || break
        sleep 0.2
    done
    if "$check" "$pidfile"; then
        cf_log "$what (pid $pid) ignored SIGTERM for ${grace}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            "$check" "$pidfile" || break
            sleep 0.1
        done
    fi
    if "$check" "$pidfile"; then
        cf_log "error: $what (pid $pid) is still running"
        return 1
    fi
    rm -f "$pidfile"
    cf_log "stopped $what (pid $pid)"
}
kafka_check() { kafka_running; }
redis_check() { redis_running; }
worker_check() { worker_running "$1"; }

write_kafka_config() {
    mkdir -p "$KAFKA_DIR/data"
    chmod 0700 "$KAFKA_DIR"
    local admin_pw plain_users='' p mechanisms=SCRAM-SHA-512,SCRAM-SHA-256 plain_jaas='' inter=SCRAM-SHA-512
    admin_pw=$(password admin)
    # PLAIN only when the clients use it: its users are static (a rotated
    # SCRAM password would not revoke a PLAIN login until a restart).
    if [[ $(sasl_mechanism) == PLAIN ]]; then
        for p in "${PRINCIPALS[@]}"; do plain_users+=" user_$p=\"$(password "$p")\""; done
        mechanisms+=,PLAIN
        plain_jaas="listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"$admin_pw\"$plain_users;"
    fi
    # A broker formatted before SCRAM-SHA-512 has no SHA-512 credentials.
    if [[ -f $KAFKA_DIR/data/meta.properties ]] && ! grep -qs SCRAM-SHA-512 "$KAFKA_DIR/.scram"; then
        mechanisms=${mechanisms/SCRAM-SHA-512,/} inter=SCRAM-SHA-256
    fi
    rm -f "$KAFKA_DIR/server.properties"
    (umask 077 && : >"$KAFKA_DIR/server.properties")
    cat >"$KAFKA_DIR/server.properties" <<EOF
# Generated by deploy/stack.sh: a single-node KRaft broker for development.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$(ctrl_port)
# Clients: SASL/SCRAM, and SASL/PLAIN when the clients use it (see
# sasl_mechanism in deploy/stack.sh), with the same per-principal passwords.  The controller listener takes
# SASL/PLAIN with the admin's password (SCRAM credentials live in the
# metadata the controller serves, so it cannot use them itself).
listeners=SASL_PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$(ctrl_port)
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$KAFKA_PORT
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
controller.listener.names=CONTROLLER
sasl.enabled.mechanisms=$inter
sasl.mechanism.inter.broker.protocol=$inter
sasl.mechanism.controller.protocol=PLAIN
listener.name.sasl_plaintext.sasl.enabled.mechanisms=$mechanisms
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
$plain_jaas
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin_pw" user_admin="$admin_pw";
# Who may do what: ACLs (deploy/stack.sh up grants them); nothing without one.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false
log.dirs=$KAFKA_DIR/data
num.partitions=1
# One node: internal topics cannot have more than one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
# KIP-848 groups (the workers' group-protocol, auto: consumer): the broker
# holds each member's session, and a SIGKILLed worker's partitions move
# once it expires and the others' next heartbeat has come (about session +
# heartbeat; docs/RELIABILITY.md "Failover").  Kafka's defaults, 45 s and
# 5 s, are for members whose heartbeats may stall; librdkafka sends ours
# from its own thread, whatever the worker runs.
group.consumer.min.session.timeout.ms=1000
group.consumer.session.timeout.ms=${CODEFLEET_GROUP_SESSION_MS:-1500}
group.consumer.min.heartbeat.interval.ms=100
group.consumer.heartbeat.interval.ms=${CODEFLEET_GROUP_HEARTBEAT_MS:-250}
auto.create.topics.enable=false
# Results carry stdout, stderr and output (each capped by the worker's
# max-output); the default 1 MiB message limit is too small for them.
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
EOF
    # Without an appender the broker logs nothing, and "started" never shows.
    cat >"$KAFKA_DIR/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.storage.internals.log=WARN
log4j.logger.kafka.log.LogCleaner=WARN
EOF
    # Kafka 4 also logs through log4j2 directly; without a configuration it
    # prints "No configuration found" and drops those lines.
    cat >"$KAFKA_DIR/log4j2.properties" <<'EOF'
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
EOF
}

start_kafka() {
    if kafka_running; then
        cf_log "kafka already running (pid $(read_pid "$KAFKA_DIR/kafka.pid")) on $(brokers)"
        return 0
    fi
    [[ -f $CF_KAFKA_STAMP ]] || cf_die "Kafka jars not found in $CF_KAFKA_LIBS: run deploy/install.sh"
    command -v java >/dev/null 2>&1 || cf_die "java not found: run deploy/install.sh"
    local p
    for p in "$KAFKA_PORT" "$(ctrl_port)"; do
        ! cf_port_busy "$p" || cf_die "port $p is in use by another process (set CODEFLEET_KAFKA_PORT)"
    done
    if [[ -f $KAFKA_DIR/data/meta.properties && ! -f $KAFKA_DIR/.scram ]]; then
        cf_die "$KAFKA_DIR was formatted without authentication: deploy/stack.sh down --purge, then up"
    fi
    write_kafka_config
    local cp="$CF_KAFKA_LIBS/*"
    local java_log=(-Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties"
        -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties")
    # Kafka upgrades storage written by an older release, never the other
    # way: a downgrade would fail deep in the broker's start-up.
    local formatted
    formatted=$(cat "$KAFKA_DIR/version" 2>/dev/null || true)
    [[ $formatted =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || formatted=3.9.1
    if [[ -f $KAFKA_DIR/data/meta.properties &&
        $(printf '%s\n%s\n' "$formatted" "$CF_KAFKA_VERSION" | sort -V | tail -n 1) != "$CF_KAFKA_VERSION" ]]; then
        cf_die "$KAFKA_DIR holds Kafka $formatted data, newer than $CF_KAFKA_VERSION: set CODEFLEET_KAFKA_VERSION=$formatted or run deploy/stack.sh down --purge"
    fi
    if [[ ! -f $KAFKA_DIR/data/meta.properties ]]; then
        local id
        if [[ -s $KAFKA_DIR/cluster.id ]]; then
            id=$(<"$KAFKA_DIR/cluster.id")
        else
            id=$(java "${java_log[@]}" -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
            [[ $id =~ ^[A-Za-z0-9_-]{22}$ ]] || cf_die "StorageTool random-uuid returned '$id'"
            printf '%s\n' "$id" >"$KAFKA_DIR/cluster.id"
        fi
        # The principals' SCRAM credentials go into the metadata at format
        # time (KIP-900).  The passwords travel in a java @argfile (0600,
        # removed right after): on the command line every local user would
        # read them in /proc.
        local argfile=$SECRETS/format.args p
        rm -f "$argfile"
        (
            umask 077
            {
                printf '%s\n' kafka.tools.StorageTool format -t "$id" -c "$KAFKA_DIR/server.properties" --ignore-formatted
                for p in "${PRINCIPALS[@]}"; do
                    printf -- '--add-scram\nSCRAM-SHA-%s=[name=%s,password=%s]\n' 512 "$p" "$(password "$p")" \
                        256 "$p" "$(password "$p")"
                done
            } >"$argfile"
        )
        java "${java_log[@]}" -cp "$cp" "@$argfile" >"$KAFKA_DIR/format.log" 2>&1 ||
            {
                rm -f "$argfile"
                cat "$KAFKA_DIR/format.log" >&2
                cf_die "formatting the Kafka storage failed"
            }
        rm -f "$argfile"
        # The mechanisms its credentials were made for (sasl_mechanism).
        printf 'SCRAM-SHA-512 SCRAM-SHA-256\n' >"$KAFKA_DIR/.scram"
        # Formatted by this release (updated at each successful start).
        printf '%s\n' "$CF_KAFKA_VERSION" >"$KAFKA_DIR/version"
    fi
    cf_log "starting kafka $CF_KAFKA_VERSION on $(brokers) (controller $(ctrl_port), clients SASL/$(sasl_mechanism)), log $KAFKA_DIR/kafka.log"
    spawn "$KAFKA_DIR/kafka.log" "$KAFKA_DIR/kafka.pid" "${CLEAN_ENV[@]}" \
        java -Xms256m -Xmx512m "${java_log[@]}" -cp "$cp" kafka.Kafka "$KAFKA_DIR/server.properties"
    local deadline=$((SECONDS + KAFKA_START_TIMEOUT)) pid
    pid=$(read_pid "$KAFKA_DIR/kafka.pid")
    until grep -q 'Kafka Server started' "$KAFKA_DIR/kafka.log" 2>/dev/null; do
        # By pid, not by command line: under load the first look can come
        # before setsid has exec'd java (CI once read that as an exit).
        if ! cf_pid_alive "$pid"; then
            tail -n 40 "$KAFKA_DIR/kafka.log" >&2 || true
            cf_die "kafka exited during start-up (log above)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 40 "$KAFKA_DIR/kafka.log" >&2 || true
            stop_pidfile "$KAFKA_DIR/kafka.pid" kafka_check 10 kafka || true
            cf_die "kafka did not start within ${KAFKA_START_TIMEOUT}s (log above)"
        fi
        sleep 0.5
    done
    # Recorded once it runs: a release that failed to start on this data
    # must not block going back to the one that wrote it.
    printf '%s\n' "$CF_KAFKA_VERSION" >"$KAFKA_DIR/version"
    cf_log "kafka started (pid $(read_pid "$KAFKA_DIR/kafka.pid"))"
}

# redis-cli reads the password from REDISCLI_AUTH, not from argv.
redis_ping() {
    [[ $(REDISCLI_AUTH=$(password admin) redis-cli --user admin -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

# ACL users only.  worker and cli reach the codefleet keys (cf:*) and no
# administrative or dangerous command.  The default user has a password
# nobody knows (the SHA-256 of random bytes, never stored) rather than being
# off: Redis 7 replays the append-only file as the default user and re-checks
# ACLs at each EXEC, and our scripts' effects are logged as MULTI/EXEC, so
# with "user default off" a restart silently drops every scripted write
# (redis/redis#14541, valkey-io/valkey#3983).  No client can authenticate as
# it, so unauthenticated connections still get nothing.
write_redis_config() {
    (umask 077 && mkdir -p "$REDIS_DIR")
    chmod 0700 "$REDIS_DIR"
    rm -f "$REDIS_DIR/redis.conf"
    (
        umask 077
        {
            printf '# Generated by deploy/stack.sh\n'
            # A ceiling for what requests can make Redis hold (workspaces
            # are created by the requests that name them): past it writes
            # fail and are reported, instead of the host running out.
            printf 'maxmemory %s\nmaxmemory-policy noeviction\n' "${CODEFLEET_REDIS_MAXMEMORY:-1gb}"
            # maxmemory does not count replies a client has not read: by
            # default a client may pile up unread replies without bound
            # (a tenant pipelining GETs of a large value took Redis past
            # 2 GB on a 1 GB cap).  The largest reply codefleet reads is a
            # 64 MiB workspace snapshot.
            printf 'client-output-buffer-limit normal 256mb 128mb 60\n'
            printf 'user default on #%s ~* &* +@all\n' "$(head -c 32 /dev/urandom | sha256sum | cut -d' ' -f1)"
            printf 'user admin on >%s ~* &* +@all\n' "$(password admin)"
            # Scripts call what they need (TIME, ZADD, UNLINK...): every
            # command but the administrative and dangerous ones, on cf:* only.
            printf 'user worker on >%s ~cf:* +@all -@admin -@dangerous\n' "$(password worker)"
            printf 'user cli on >%s ~cf:* +@all -@admin -@dangerous\n' "$(password cli)"
            # A tenant: its own workspaces and threads only (the keys of
            # workspace and thread T are cf:{ws:T}... and cf:{cp:T}...,
            # docs/STATE.md), whose ids start with its state prefix
            # (<tenant>.).  Key patterns do not cover commands that show
            # other keys' names or counts: SCAN, RANDOMKEY, DBSIZE, and
            # CLIENT TRACKING (its broadcast mode names every key changed,
            # unchecked before Redis 7.4); nor other clients' scripts:
            # SCRIPT FLUSH/KILL, FUNCTION.  EVAL and EVALSHA stay: the
            # workspace and checkpoint operations are scripts.
            for t in "${TENANTS[@]}"; do
                printf 'user %s on >%s ~cf:{ws:%s.* ~cf:{cp:%s.* %s\n' "$t" "$(password "$t")" "$t" "$t" \
                    '+@all -@admin -@dangerous -scan -randomkey -dbsize -client|tracking -script|flush -script|kill -function -fcall -fcall_ro -select -memory|stats -memory|doctor -memory|malloc-stats -memory|purge'
            done
        } >"$REDIS_DIR/redis.conf"
    )
}

# A Redis already running keeps the users and limits it started with; a
# stack made by an older version of this script would lack the tenants'
# users (or hold their old rules).  Apply the generated users' lines and
# the client output limit to it (through stdin: no password on a command
# line); default and admin stay.
sync_redis_config() {
    write_redis_config
    local out
    out=$({
        sed -n 's/^user \(worker\|cli\|tenant-[A-Za-z0-9_-]*\) \(.*\)$/ACL SETUSER \1 reset \2/p' "$REDIS_DIR/redis.conf"
        sed -n 's/^client-output-buffer-limit \(.*\)$/CONFIG SET client-output-buffer-limit "\1"/p' "$REDIS_DIR/redis.conf"
    } | REDISCLI_AUTH=$(password admin) redis-cli --user admin -h 127.0.0.1 -p "$REDIS_PORT" 2>&1) &&
        ! grep -q 'ERR' <<<"$out" || cf_die "could not update the running redis's users: $out"
}

start_redis() {
    if redis_running; then
        cf_log "redis already running (pid $(read_pid "$REDIS_DIR/redis.pid")) on 127.0.0.1:$REDIS_PORT"
        sync_redis_config
        return 0
    fi
    command -v redis-server >/dev/null 2>&1 || cf_die "redis-server not found: run deploy/install.sh"
    ! cf_port_busy "$REDIS_PORT" || cf_die "port $REDIS_PORT is in use by another process (set CODEFLEET_REDIS_PORT)"
    write_redis_config
    cf_log "starting redis on 127.0.0.1:$REDIS_PORT, log $REDIS_DIR/redis.log"
    spawn "$REDIS_DIR/redis.log" "$REDIS_DIR/redis.pid" "${CLEAN_ENV[@]}" \
        redis-server "$REDIS_DIR/redis.conf" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
        --appendonly yes --appendfsync everysec --daemonize no --dir "$REDIS_DIR" --logfile ''
    local i
    local pid
    pid=$(read_pid "$REDIS_DIR/redis.pid")
    for ((i = 0; i < 100; i++)); do
        redis_ping && break
        # Only the pid tells whether it died: while redis rewrites its
        # process title, /proc/<pid>/cmdline can read empty for a moment.
        if ! cf_pid_alive "$pid"; then
            tail -n 20 "$REDIS_DIR/redis.log" >&2 || true
            cf_die "redis exited during start-up (log above)"
        fi
        sleep 0.1
    done
    redis_ping || cf_die "redis does not answer PING on 127.0.0.1:$REDIS_PORT"
    cf_log "redis started (pid $(read_pid "$REDIS_DIR/redis.pid"))"
}

cli_as() { # principal args...: the CLI with that principal's settings
    local p=$1 cli
    shift
    cli=$(binary codefleet dispatcher)
    [[ -x $cli ]] || cf_die "$cli not found: build first (deploy/build.sh)"
    "${CLEAN_ENV[@]}" -u CODEFLEET_CONFIG "$cli" --config "$SECRETS/$p.conf" --brokers "$(brokers)" "$@" </dev/null
}

# Topics that already exist are left alone, so `up` can run again.
create_topics() {
    local t all=("$TOPIC_REQUESTS" "$TOPIC_REQUESTS.cancel" "$TOPIC_RESULTS" "$TOPIC_RESULTS.output" "$TOPIC_DLQ"
        "$TOPIC_EVENTS" "$TOPIC_WORKERS")
    for t in "${TENANTS[@]}"; do
        all+=("$TOPIC_REQUESTS.$t" "$TOPIC_REQUESTS.$t.cancel" "$TOPIC_RESULTS.$t" "$TOPIC_RESULTS.$t.output")
    done
    cf_log "topics (${PARTITIONS} partitions): ${all[*]}"
    # A freshly started broker on a busy machine can take more than the
    # CLI's default 30 s to serve every partition of these topics.
    cli_as admin --workers-topic "$TOPIC_WORKERS" --timeout 180s topics create --partitions "$PARTITIONS" \
        "${all[@]}" >/dev/null || cf_die "topic creation failed"
}

# What each principal may do on the broker (idempotent).
grant_acls() {
    cli_as admin acl allow User:worker \
        "read:topic:$TOPIC_REQUESTS*" "read:group:$GROUP" "write:topic:$TOPIC_RESULTS*" "write:topic:$TOPIC_DLQ" \
        "write:topic:$TOPIC_WORKERS" \
        >/dev/null || cf_die "granting the worker's ACLs failed"
    cli_as admin acl allow User:cli \
        "write:topic:$TOPIC_REQUESTS" "write:topic:$TOPIC_REQUESTS.cancel" "read:topic:$TOPIC_RESULTS" \
        "read:topic:$TOPIC_RESULTS.output" "read:topic:$TOPIC_DLQ" \
        "read:topic:$TOPIC_EVENTS" "write:topic:$TOPIC_EVENTS" "read:group:codefleet-*" \
        "read:topic:$TOPIC_WORKERS" "describe:group:$GROUP" "describe:topic:$TOPIC_REQUESTS*" \
        "describe:topic:$TOPIC_RESULTS*" "describe_configs:topic:$TOPIC_RESULTS*" \
        "describe_configs:topic:$TOPIC_DLQ" "describe_configs:topic:$TOPIC_WORKERS" \
        "describe_configs:group:$GROUP" \
        >/dev/null || cf_die "granting the CLI's ACLs failed"
    local t
    for t in "${TENANTS[@]}"; do
        cli_as admin acl allow "User:$t" \
            "write:topic:$TOPIC_REQUESTS.$t" "write:topic:$TOPIC_REQUESTS.$t.cancel" \
            "read:topic:$TOPIC_RESULTS.$t" "read:topic:$TOPIC_RESULTS.$t.output" "read:group:codefleet-*" \
            >/dev/null || cf_die "granting $t's ACLs failed"
    done
    cf_log "ACLs granted: worker, cli, ${TENANTS[*]}"
}

# The workers' settings: credentials and one profile per tenant (0600).
write_worker_config() {
    local t
    rm -f "$STATE/worker.conf"
    (
        umask 077
        {
            cat "$SECRETS/worker.conf"
            # Tenants only with the sandbox: without root the workers run
            # the host-local process backend, which would give a tenant the
            # host (and this user's secrets).
            if ((EUID == 0)); then
                for t in "${TENANTS[@]}"; do
                    printf '\n[profile.%s]\ntopic = %s.%s\nresult-topic = %s.%s\nstate-prefix = %s.\nbackends = %s\n' \
                        "$t" "$TOPIC_REQUESTS" "$t" "$TOPIC_RESULTS" "$t" "$t" "$TENANT_BACKENDS"
                done
            fi
        } >"$STATE/worker.conf"
    )
}

# The hardened sandbox needs root (user namespaces with uid maps, cgroups);
# without it the workers offer the host-local process backend only.
WORK_ROOT=${CODEFLEET_WORK_ROOT:-/dev/shm/codefleet}
# wasm and js: the embedded runtimes, in confined helpers (a build without
# them starts the workers without those two, and says so).
if ((EUID == 0)); then BACKENDS=${CODEFLEET_BACKENDS:-sandbox,process,wasm,js}; else BACKENDS=${CODEFLEET_BACKENDS:-process}; fi
TENANT_BACKENDS=sandbox,wasm,js
# Extra worker flags from `up` (--container, --warm).
STACK_FLAGS=()
# What requests may use is the profile's decision: the default profile
# allows the sandbox only.  Without root there is no sandbox, and this
# development stack lets its default profile use the process backend
# (host-local: for trusted code only; README "Backends").
PROFILE_ARGS=(--profile.default.backends=$TENANT_BACKENDS)
((EUID == 0)) || PROFILE_ARGS=(--profile.default.backends=process --profile.default.network=enabled)

start_workers() {
    local n=$1 worker i pidfile
    ((n > 0)) || return 0
    worker=$(binary codefleet-worker worker)
    [[ -x $worker ]] || cf_die "$worker not found: build first (deploy/build.sh) or pass --workers 0"
    mkdir -p "$WORKER_DIR"
    write_worker_config
    local -a extra=()
    metrics_listen() {
        local base=${CODEFLEET_METRICS_PORT:-19464}
        ((base > 0)) && printf '127.0.0.1:%d' $((base + $1 - 1)) || true
    }
    # shellcheck disable=SC2206 # word splitting is the documented interface
    [[ -n ${CODEFLEET_STACK_WORKER_ARGS:-} ]] && extra=($CODEFLEET_STACK_WORKER_ARGS)
    # Work directories on a tmpfs: ext4 directory operations cost ~0.5 ms
    # per execution here, a tmpfs ~0.05 ms.
    mkdir -p "$WORK_ROOT" && chmod 0711 "$WORK_ROOT"
    local started=()
    # The workers share this host: each gets its part of three quarters of
    # its memory as the budget its executions may reserve (the worker's
    # default assumes it is alone on the host or in a pod).
    # (Or of the container's memory limit, when it is lower.  Workers
    # already running keep the budget they started with.)
    local mem_kib cg budget=()
    mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || true)
    cg=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || true)
    [[ $mem_kib =~ ^[0-9]+$ && $cg =~ ^[0-9]+$ ]] && ((cg / 1024 < mem_kib)) && mem_kib=$((cg / 1024))
    [[ $mem_kib =~ ^[0-9]+$ ]] && budget=(--memory-budget "$((mem_kib * 3 / 4 / n))KiB")
    # And its part of half the host's processes for all it starts (the
    # worker's default, half of pid_max or threads-max, whichever is lower,
    # assumes it is alone on the host).
    local pid_max threads_max
    pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || true)
    threads_max=$(cat /proc/sys/kernel/threads-max 2>/dev/null || true)
    [[ $threads_max =~ ^[0-9]+$ && $pid_max =~ ^[0-9]+$ ]] && ((threads_max < pid_max)) && pid_max=$threads_max
    [[ $pid_max =~ ^[0-9]+$ ]] && ((pid_max / 2 / n > 0)) && budget+=(--children-pids "$((pid_max / 2 / n))")
    local -a cmd
    local signature
    for ((i = 1; i <= n; i++)); do
        pidfile=$WORKER_DIR/w$i.pid
        # Each worker of this host gets its own range of host uids for the
        # programs it runs (per slot), so two workers never share one; a
        # second stack on the host needs its own base
        # (CODEFLEET_WORKER_RUN_UID_BASE), or its workers and this one's
        # would kill each other's programs (kill-by-uid clean-up).
        cmd=("$worker" --config "$STATE/worker.conf"
            --brokers "$(brokers)" --group "$GROUP" --worker-id "w$i"
            --request-topic "$TOPIC_REQUESTS" --result-topic "$TOPIC_RESULTS" --dlq-topic "$TOPIC_DLQ"
            --workers-topic "$TOPIC_WORKERS"
            --redis "127.0.0.1:$REDIS_PORT" --backends "$BACKENDS" --run-uid-base $((RUN_UID_BASE + i * 1000))
            --work-root "$WORK_ROOT" "${PROFILE_ARGS[@]}" "${STACK_FLAGS[@]}"
            --metrics-listen "$(metrics_listen "$i")" "${budget[@]}"
            "${extra[@]}")
        # What it runs with: its arguments and its settings file (which
        # holds secrets: only its digest is kept).
        signature="$(printf '%q ' "${cmd[@]}") settings:$(sha256sum <"$STATE/worker.conf" | cut -c1-16)"
        if worker_running "$pidfile"; then
            if [[ -f $WORKER_DIR/w$i.args && $(cat "$WORKER_DIR/w$i.args") == "$signature" ]]; then
                cf_log "worker w$i already running (pid $(read_pid "$pidfile")) with these arguments"
                continue
            fi
            cf_log "worker w$i runs with other arguments or settings: restarting it (it drains first)"
            stop_pidfile "$pidfile" worker_check 60 "worker w$i" || cf_die "worker w$i could not be stopped"
        fi
        printf '%s\n' "$signature" >"$WORKER_DIR/w$i.args"
        spawn "$WORKER_DIR/w$i.log" "$pidfile" "${CLEAN_ENV[@]}" "${cmd[@]}"
        started+=("$i")
    done
    ((${#started[@]})) || return 0
    # A worker that rejects its flags or cannot reach the broker exits at once.
    sleep 1
    for i in "${started[@]}"; do
        if ! cf_pid_alive "$(read_pid "$WORKER_DIR/w$i.pid")"; then
            tail -n 20 "$WORKER_DIR/w$i.log" >&2 || true
            cf_die "worker w$i exited right after start (log above: $WORKER_DIR/w$i.log)"
        fi
    done
    cf_log "started ${#started[@]} worker(s), logs in $WORKER_DIR"
}

cmd_up() {
    local workers=${CODEFLEET_WORKERS:-2} topics=1
    STACK_FLAGS=()
    while (($#)); do
        case $1 in
        --container)
            local rootfs=${CODEFLEET_IMAGES:-/var/lib/codefleet/images}/default/rootfs
            [[ -d $rootfs ]] || cf_die "--container: no image at $rootfs (deploy/images.sh builds it)"
            [[ ,$BACKENDS, == *,container,* ]] || BACKENDS+=,container
            TENANT_BACKENDS+=,container
            # Every profile may use it: the default one and the tenants'.
            if ((EUID == 0)); then PROFILE_ARGS=(--profile.default.backends=$TENANT_BACKENDS); fi
            STACK_FLAGS+=(--container-images "default=$rootfs")
            ;;
        --warm) STACK_FLAGS+=(--sandbox-warm=true) ;;
        --workers)
            (($# >= 2)) || cf_die "--workers needs a number"
            workers=$2
            shift
            ;;
        --workers=*) workers=${1#--workers=} ;;
        --no-topics) topics=0 ;;
        -h | --help)
            usage
            return 0
            ;;
        *) cf_die "up: unknown argument '$1' (see --help)" ;;
        esac
        shift
    done
    is_uint "$workers" || cf_die "--workers must be a number, not '$workers'"
    if ! is_uint "$PARTITIONS" || ((PARTITIONS == 0)); then
        cf_die "CODEFLEET_PARTITIONS must be a positive number"
    fi
    if ! is_uint "$KAFKA_PORT" || ((KAFKA_PORT == 0 || KAFKA_PORT >= 65535)); then
        cf_die "bad CODEFLEET_KAFKA_PORT '$KAFKA_PORT'"
    fi
    if ! is_uint "$REDIS_PORT" || ((REDIS_PORT == 0 || REDIS_PORT > 65535)); then
        cf_die "bad CODEFLEET_REDIS_PORT '$REDIS_PORT'"
    fi
    is_uint "$KAFKA_START_TIMEOUT" || cf_die "bad CODEFLEET_KAFKA_START_TIMEOUT"

    # A stack that is partly up keeps the settings it was started with.
    if [[ -f $SETTINGS ]]; then
        local want_k=$KAFKA_PORT want_r=$REDIS_PORT
        load_settings
        if kafka_running || redis_running; then
            [[ $want_k == "$KAFKA_PORT" && $want_r == "$REDIS_PORT" ]] ||
                cf_log "stack already running on ports $KAFKA_PORT/$REDIS_PORT; keeping them"
        else
            KAFKA_PORT=$want_k REDIS_PORT=$want_r
            PARTITIONS=${CODEFLEET_PARTITIONS:-6}
            TOPIC_REQUESTS=${CODEFLEET_TOPIC_REQUESTS:-codefleet.requests}
            TOPIC_RESULTS=${CODEFLEET_TOPIC_RESULTS:-codefleet.results}
            TOPIC_DLQ=${CODEFLEET_TOPIC_DLQ:-codefleet.dlq}
            TOPIC_EVENTS=${CODEFLEET_TOPIC_EVENTS:-codefleet.events}
            TOPIC_WORKERS=${CODEFLEET_TOPIC_WORKERS:-codefleet.workers}
            GROUP=${CODEFLEET_GROUP:-codefleet}
        fi
    fi
    # Tenants use consumer groups codefleet-* (the dispatcher's own): the
    # workers' group must not fall under that grant.
    [[ $GROUP != codefleet-* ]] || cf_die "CODEFLEET_GROUP '$GROUP' falls under the tenants' group grant codefleet-*"
    init_secrets
    save_settings
    start_kafka
    start_redis
    if ((topics)); then
        create_topics
        grant_acls
    fi
    start_workers "$workers"
    cf_log "stack is up: kafka $(brokers), redis 127.0.0.1:$REDIS_PORT (eval \"\$(${0} env)\")"
}

cmd_down() {
    local purge=0 rc=0 f
    while (($#)); do
        case $1 in
        --purge) purge=1 ;;
        *) cf_die "down: unknown argument '$1'" ;;
        esac
        shift
    done
    load_settings
    # Workers first: they want the broker to commit offsets while stopping.
    for f in "$WORKER_DIR"/w*.pid; do
        [[ -e $f ]] || continue
        stop_pidfile "$f" worker_check 20 "worker $(basename "$f" .pid)" || rc=1
    done
    stop_pidfile "$KAFKA_DIR/kafka.pid" kafka_check 30 kafka || rc=1
    stop_pidfile "$REDIS_DIR/redis.pid" redis_check 10 redis || rc=1
    ((rc == 0)) || cf_die "some processes could not be stopped"
    if ((purge)); then
        rm -rf "$STATE"
        cf_log "removed $STATE"
    fi
}

# Durability (docs/RELIABILITY.md): Redis writes every change to its
# append-only file before it answers, so a killed redis-server loses nothing
# it acknowledged; the file is fsynced every second, so a power loss could
# lose up to a second (appendfsync always closes that, at a write cost).
# A SIGKILLed server's process can be gone from /proc while the kernel
# still holds its listening socket for a moment: starting again at once
# found the port "in use by another process" and left the server down.
wait_ports_free() { # port...
    local p tries
    for p in "$@"; do
        for ((tries = 0; tries < 300; tries++)); do
            cf_port_busy "$p" || break
            sleep 0.1
        done
    done
}

cmd_restart() {
    local what=${1:-} kill=0
    (($#)) && shift
    while (($#)); do
        case $1 in
        --kill) kill=1 ;;
        *) cf_die "restart: unknown argument '$1'" ;;
        esac
        shift
    done
    load_settings
    case $what in
    kafka)
        if ((kill)); then
            kill -KILL "$(read_pid "$KAFKA_DIR/kafka.pid")" 2>/dev/null || true
            while kafka_running; do sleep 0.1; done
            wait_ports_free "$KAFKA_PORT" "$(ctrl_port)"
            rm -f "$KAFKA_DIR/kafka.pid"
        else
            stop_pidfile "$KAFKA_DIR/kafka.pid" kafka_check 30 kafka
        fi
        start_kafka
        ;;
    redis)
        if ((kill)); then
            kill -KILL "$(read_pid "$REDIS_DIR/redis.pid")" 2>/dev/null || true
            while redis_running; do sleep 0.1; done
            wait_ports_free "$REDIS_PORT"
            rm -f "$REDIS_DIR/redis.pid"
            cf_log "killed redis"
        else
            stop_pidfile "$REDIS_DIR/redis.pid" redis_check 10 redis
        fi
        start_redis
        ;;
    *) cf_die "restart: kafka or redis, not '$what'" ;;
    esac
}

cmd_status() {
    load_settings
    local rc=0 f
    if kafka_running; then
        printf 'kafka   running  pid %-7s %s\n' "$(read_pid "$KAFKA_DIR/kafka.pid")" "$(brokers)"
    else
        printf 'kafka   stopped\n'
        rc=3
    fi
    if redis_running; then
        printf 'redis   running  pid %-7s 127.0.0.1:%s\n' "$(read_pid "$REDIS_DIR/redis.pid")" "$REDIS_PORT"
    else
        printf 'redis   stopped\n'
        rc=3
    fi
    for f in "$WORKER_DIR"/w*.pid; do
        [[ -e $f ]] || continue
        if worker_running "$f"; then
            printf 'worker  running  pid %-7s %s\n' "$(read_pid "$f")" "$(basename "$f" .pid)"
        else
            printf 'worker  stopped  %s (stale pid file)\n' "$(basename "$f" .pid)"
        fi
    done
    printf 'state   %s\n' "$STATE"
    return "$rc"
}

cmd_env() {
    load_settings
    local b r
    b=$(brokers)
    r=127.0.0.1:$REDIS_PORT
    printf 'export %s=%q\n' \
        CODEFLEET_BROKERS "$b" \
        CODEFLEET_REDIS "$r" \
        CODEFLEET_CONFIG "$SECRETS/cli.conf" \
        CODEFLEET_WORKER_BROKERS "$b" \
        CODEFLEET_WORKER_CONFIG "$STATE/worker.conf" \
        CF_TEST_CLIENT_CONFIG "$SECRETS/admin.conf" \
        CF_TEST_SECRETS "$SECRETS" \
        CF_TEST_KAFKA_PIDFILE "$STATE/kafka/kafka.pid" \
        CF_TEST_GROUP "$GROUP" \
        CODEFLEET_REQUEST_TOPIC "$TOPIC_REQUESTS" \
        CODEFLEET_RESULT_TOPIC "$TOPIC_RESULTS" \
        CODEFLEET_DLQ_TOPIC "$TOPIC_DLQ" \
        CODEFLEET_EVENTS_TOPIC "$TOPIC_EVENTS" \
        CODEFLEET_WORKERS_TOPIC "$TOPIC_WORKERS" \
        CODEFLEET_WORKER_GROUP "$GROUP" \
        CF_TEST_BROKERS "$b" \
        CF_TEST_REDIS "$r" \
        CF_TEST_REDIS_HOST 127.0.0.1 \
        CF_TEST_REDIS_PORT "$REDIS_PORT" \
        CF_TEST_TOPIC_REQUESTS "$TOPIC_REQUESTS" \
        CF_TEST_TOPIC_RESULTS "$TOPIC_RESULTS" \
        CF_TEST_TOPIC_DLQ "$TOPIC_DLQ" \
        CF_TEST_TOPIC_EVENTS "$TOPIC_EVENTS" \
        CF_TEST_TOPIC_WORKERS "$TOPIC_WORKERS" \
        CF_TEST_PARTITIONS "$PARTITIONS"
}

main() {
    (($#)) || {
        usage >&2
        exit 2
    }
    local cmd=$1
    shift
    case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    env) cmd_env "$@" ;;
    restart) cmd_restart "$@" ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
    esac
}

main "$@"
