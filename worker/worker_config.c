/* The worker's configuration table: the single source for defaults,
 * bounds, the config file, CODEFLEET_WORKER_* variables, flags and
 * docs/CONFIGURATION-worker.md. */
#include <stddef.h>

#include "profile_int.h"
#include "cf_worker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define OFF(field) offsetof(cf_worker_config, field)
#define SEC 1000000LL
#define MIB (1024LL * 1024)

static const cf_conf_prop worker_props[] = {
    {"brokers", CF_CONF_STRING, OFF(brokers), 0, 1024, "127.0.0.1:19092", NULL,
     "Kafka bootstrap servers (host:port, comma-separated).", NULL},
    {"group", CF_CONF_STRING, OFF(group), 0, 249, "codefleet", NULL,
     "Consumer group shared by every worker of the fleet.  Keep it out of any prefix granted to tenants (the "
     "dispatcher's throwaway groups are codefleet-*): a tenant allowed into it could join as a worker, and "
     "fence static members.", NULL},
    {"worker-id", CF_CONF_STRING, OFF(worker_id), 0, 128, NULL, NULL,
     "Name reported in results and logs; default <hostname>-<pid>.", NULL},
    {"reserve-slots", CF_CONF_INT, OFF(reserve_slots), -1, 64, "-1", NULL,
     "Execution slots added to `slots` that no one profile may fill: a profile runs at most `slots` (or its "
     "max-slots) at once, so while one tenant's runs hold them another tenant's request still starts at once "
     "(docs/OPERATIONS.md, \"Fair shares\").  -1: one when the worker serves more than one profile, else none.",
     NULL},
    {"memory-budget", CF_CONF_SIZE, OFF(memory_budget_bytes), 0, 1024 * 1024 * MIB, "0", NULL,
     "What the memory limits of the executions running at once may add up to: an execution reserves its limit "
     "(its request's, its profile's default-memory, or sandbox-memory) before it starts and waits while it "
     "does not fit; one larger than the budget is rejected.  0: three quarters of the worker's cgroup limit, "
     "or of the host's memory (docs/OPERATIONS.md, \"Memory budget\").", NULL},
    {"children-memory", CF_CONF_SIZE, OFF(children_memory_bytes), 0, 1024 * 1024 * MIB, "0", NULL,
     "What the worker's executions, helpers and zygotes may use together: the memory limit of the cgroup that "
     "holds them all (its own, below cgroup-root), so that no mix of them takes the host's memory whatever their "
     "own limits add up to.  0: an eighth more than memory-budget, at most seven eighths of the worker's cgroup "
     "limit or of the host's memory (docs/OPERATIONS.md, \"Memory budget\").", NULL},
    {"children-pids", CF_CONF_INT, OFF(children_pids), 0, 4194304, "0", NULL,
     "How many processes and threads the worker's executions, helpers and zygotes may have together (the same "
     "cgroup's pids limit).  0: half of the kernel's pid_max or threads-max, whichever is lower, at most seven "
     "eighths of the worker's own cgroup's pids limit.  All but what helpers and zygotes keep (an eighth, at least 8 and 4 per slot) is the executions' process budget: each reserves its pids bound "
     "before it starts, and waits when it does not fit.", NULL},
    {"userns-owner", CF_CONF_ENUM, OFF(userns_owner), 0, 0, "auto", "auto|run-uid|root",
     "Who creates each execution's user namespace (sandbox, zygote, embedded helpers).  run-uid: its run uid, so "
     "that what a program makes inside (inotify instances and watches, queued signals, ...) counts against its "
     "slot's per-user limits, never root's; needs CAP_KILL and CAP_SYS_PTRACE besides the sandbox's usual "
     "capabilities, or the worker refuses to start.  root: root, whose per-user limits every program then shares.  "
     "auto: run-uid when the worker has those capabilities, else root with a warning (docs/SECURITY.md).", NULL},
    {"consumer-per-topic", CF_CONF_BOOL, OFF(consumer_per_topic), 0, 0, "true", NULL,
     "One consumer (group member) per request topic, so that the group spreads each topic over the live workers "
     "(within one partition); off: one consumer for all topics, which the group balances by the total only, so "
     "one worker may hold all of a tenant's partitions (docs/OPERATIONS.md, \"Spreading topics\").", NULL},
    {"group-protocol", CF_CONF_ENUM, OFF(group_protocol), 0, 0, "auto", "auto|consumer|classic",
     "The consumer group protocol.  consumer: KIP-848's (Kafka 4.0 and newer), where the broker assigns "
     "partitions and holds the session (group.consumer.session.timeout.ms), so a dead worker's partitions move "
     "in about that long: Kafka's default is 45 s, so set it on the broker or for the workers' group "
     "(consumer.session.timeout.ms; the local stack's broker has 1.5 s); classic: the member-side protocol (session.timeout.ms 6 s, cooperative-sticky); "
     "auto: consumer, or classic when a kafka.* classic-only property (session.timeout.ms, "
     "heartbeat.interval.ms, partition.assignment.strategy) is set or the broker does not offer KIP-848 "
     "(the worker then starts again with classic; docs/RELIABILITY.md, \"Failover\").", NULL},
    {"static-membership", CF_CONF_BOOL, OFF(static_membership), 0, 0, "false", NULL,
     "Join the group as a static member named by worker-id (required then): a worker restarted with the same "
     "id within the session timeout gets its partitions back without a rebalance of the others.  The "
     "cost: a stopped static member's partitions move only when its session expires, also on a clean stop.  "
     "Under KIP-848 a restart that comes before the old run's session expired is refused by the broker; the "
     "worker then starts again once it has (docs/RELIABILITY.md, \"Failover\").", NULL},
    {"request-topic", CF_CONF_STRING, OFF(request_topic), 0, 249, "codefleet.requests", NULL,
     "Topic the worker consumes execution requests from, governed by the profile `default` (empty: only the "
     "profiles' topics).", NULL},
    {"result-topic", CF_CONF_STRING, OFF(result_topic), 0, 249, "codefleet.results", NULL,
     "Topic results go to unless a request names reply_to.", NULL},
    {"dlq-topic", CF_CONF_STRING, OFF(dlq_topic), 0, 249, "codefleet.dlq", NULL,
     "Dead-letter topic for messages that cannot be answered (no readable id).", NULL},
    {"events-topic", CF_CONF_STRING, OFF(events_topic), 0, 249, "codefleet.events", NULL,
     "The fleet's collaboration events topic (requests may never name it as reply_to).", NULL},
    {"workers-topic", CF_CONF_STRING, OFF(workers_topic), 0, 249, "codefleet.workers", NULL,
     "Compacted topic where the worker publishes what it serves (backends, languages, limits) at start, and a "
     "tombstone at a clean stop; `codefleet doctor` reads it.  Empty: no report.  A failed report is logged, "
     "never fatal.", NULL},
    {"report-interval", CF_CONF_DURATION, OFF(report_interval_us), 0, 3600 * SEC, "30s", NULL,
     "How often the worker republishes its report with what it is doing (busy slots, waiting requests, counts "
     "since start) for `codefleet top`.  0: at start and stop only.  `codefleet topics create` makes the workers "
     "topic compact every 10 minutes; a topic made otherwise grows by one report per worker per interval.", NULL},
    {"slots", CF_CONF_INT, OFF(slots), 1, 256, "2", NULL,
     "Executions run concurrently by this worker.", NULL},
    {"prefetch", CF_CONF_INT, OFF(prefetch), 0, 4096, "32", NULL,
     "Requests held beyond the busy slots before the worker pauses its partitions; it "
     "resumes them when half of these are used up.  What librdkafka had fetched by then is still taken (a fetch "
     "brings up to 1 MiB per partition), so a flood may hold more.  Held requests are not committed.", NULL},
    {"backends", CF_CONF_STRING, OFF(backends), 0, 256, "sandbox", NULL,
     "Backends this worker runs, comma-separated.  Which of them a request may use is its profile's "
     "decision (profile.<name>.backends; the default profile allows the sandbox only).", NULL},
    {"work-root", CF_CONF_STRING, OFF(work_root), 0, 1024, "/tmp", NULL,
     "Directory under which each execution gets a fresh private work directory.  Put it on a "
     "tmpfs for speed: directory operations on ext4 cost ~0.5 ms per execution on the "
     "development machine, ~0.05 ms on tmpfs (the local stack uses /dev/shm/codefleet).", NULL},
    {"python", CF_CONF_STRING, OFF(python_path), 0, 1024, "/usr/bin/python3", NULL,
     "Python interpreter (absolute path; resolved once at start, never through PATH).", NULL},
    {"node", CF_CONF_STRING, OFF(node_path), 0, 1024, "/usr/bin/node", NULL,
     "Node.js interpreter for javascript (absolute path).", NULL},
    {"shell", CF_CONF_STRING, OFF(shell_path), 0, 1024, "/bin/sh", NULL,
     "POSIX shell for shell requests (absolute path).", NULL},
    {"cc", CF_CONF_STRING, OFF(cc_path), 0, 1024, "/usr/bin/gcc", NULL,
     "C compiler for language c (gcc; absolute path, resolved at start; empty or missing: c is off).", NULL},
    {"cxx", CF_CONF_STRING, OFF(cxx_path), 0, 1024, "/usr/bin/g++", NULL,
     "C++ compiler for language cpp (g++).", NULL},
    {"rustc", CF_CONF_STRING, OFF(rustc_path), 0, 1024, "/usr/bin/rustc", NULL,
     "Rust compiler for language rust.  A toolchain outside /usr (rustup's) is bound read-only into sandboxes; "
     "it must be readable by the run uids.", NULL},
    {"go", CF_CONF_STRING, OFF(go_path), 0, 1024, "/usr/bin/go", NULL,
     "The go command for language go (builds with GO111MODULE=off, no network, cgo off).", NULL},
    {"tsc", CF_CONF_STRING, OFF(tsc_path), 0, 1024,
     "/usr/local/lib/codefleet/typescript/node_modules/typescript/bin/tsc", NULL,
     "TypeScript compiler (typescript's bin/tsc, run by `node`) for language typescript; @types/node is taken "
     "from the same node_modules (deploy/install.sh installs both).", NULL},
    {"harness-dir", CF_CONF_STRING, OFF(harness_dir), 0, 1024, NULL, NULL,
     "Directory of the function harnesses (python.py, javascript.js, typescript.ts, rust.rs) used by requests "
     "with harness=function; default: share/codefleet/harness of an installed worker's prefix (cmake --install; none if missing there), or for a worker run from its build tree backends/harness of its source tree.", NULL},
    {"c-flags-allowed", CF_CONF_STRING, OFF(c_flags_allowed), 0, 4096,
     "-O0,-O1,-O2,-O3,-Os,-g,-Wall,-Wextra,-Werror,-Wpedantic,-pedantic,-std=c*,-std=gnu*,-D*,-U*,-fsanitize=undefined,-fno-omit-frame-pointer",
     NULL, "Extra compile flags a c request may give (comma-separated; a trailing * allows a prefix).  Everything "
           "else is rejected: flags that load code or files into the compiler (-fplugin, -B, -specs, @file) are "
           "never listed.", NULL},
    {"cpp-flags-allowed", CF_CONF_STRING, OFF(cpp_flags_allowed), 0, 4096,
     "-O0,-O1,-O2,-O3,-Os,-g,-Wall,-Wextra,-Werror,-Wpedantic,-pedantic,-std=c++*,-std=gnu++*,-D*,-U*,-fno-exceptions,-fno-rtti,-fsanitize=undefined",
     NULL, "Extra compile flags a cpp request may give.", NULL},
    {"rust-flags-allowed", CF_CONF_STRING, OFF(rust_flags_allowed), 0, 4096,
     "-g,-Copt-level=*,-Cdebuginfo=*,-Coverflow-checks=*,--edition=2015,--edition=2018,--edition=2021,-Dwarnings,-Awarnings",
     NULL, "Extra compile flags a rust request may give.", NULL},
    {"go-flags-allowed", CF_CONF_STRING, OFF(go_flags_allowed), 0, 4096, "-gcflags=-N -l,-ldflags=-s -w", NULL,
     "Extra `go build` flags a go request may give.", NULL},
    {"ts-flags-allowed", CF_CONF_STRING, OFF(ts_flags_allowed), 0, 4096,
     "--noImplicitAny,--noUnusedLocals,--noUnusedParameters,--noImplicitReturns,--noUncheckedIndexedAccess,--exactOptionalPropertyTypes,--noFallthroughCasesInSwitch",
     NULL, "Extra tsc flags a typescript request may give.", NULL},
    {"compile-timeout", CF_CONF_DURATION, OFF(compile_timeout_us), 100000, 3600 * SEC, "60s", NULL,
     "Wall-clock limit of a compile step (a request's policy.compile_timeout_us may only lower it).  A compile "
     "that hits it is compile_failed, not timeout.", NULL},
    {"compile-memory", CF_CONF_SIZE, OFF(compile_memory_bytes), 64 * MIB, 1024 * 1024 * MIB, "2GiB", NULL,
     "Memory limit of a compile step (cgroup in the sandbox; address space on the process backend, where node "
     "running tsc needs ~1 GiB).", NULL},
    {"compile-processes", CF_CONF_INT, OFF(compile_processes), 4, 4096, "128", NULL,
     "Processes/threads limit of a compile step (go build runs several compilers at once).", NULL},
    {"compile-output", CF_CONF_SIZE, OFF(compile_output_bytes), 4096, 64 * MIB, "1MiB", NULL,
     "Compiler output (diagnostics) kept per stream.", NULL},
    {"artifact-max", CF_CONF_SIZE, OFF(artifact_bytes), 4096, 1024 * MIB, "64MiB", NULL,
     "Largest build artifact (also the compile step's file size limit).", NULL},
    {"compile-cache", CF_CONF_SIZE, OFF(compile_cache_bytes), 0, 64 * 1024 * MIB, "256MiB", NULL,
     "Bytes of successful builds kept in memory per worker, least recently used dropped first (0: no cache). "
     "Keyed by profile, language, toolchain, flags, harness and sources.", NULL},
    {"collect-max", CF_CONF_SIZE, OFF(collect_bytes), 0, 1024 * MIB, "4MiB", NULL,
     "Bytes of files a request's collect patterns may return in all; further content is cut (truncated flag).",
     NULL},
    {"exec-path", CF_CONF_STRING, OFF(exec_path), 0, 4096, "/usr/local/bin:/usr/bin:/bin", NULL,
     "PATH given to user code, and the only path used to resolve a command's argv[0].", NULL},
    {"run-uid-base", CF_CONF_INT, OFF(run_uid_base), 0, 4000000000LL, "0", NULL,
     "When >0 and running as root, the process backend runs slot i's code as uid/gid "
     "run-uid-base+3*slots+i (enables its processes limit and kill-by-uid clean-up). The "
     "namespaced backends run as host uids from it too (0 = from 100000): sandbox and container "
     "base+i, wasm base+slots+i, js base+2*slots+i; each backend a block of its own, so no "
     "program or clean-up reaches another backend's processes (slots here counts the slot threads: slots + "
     "reserve-slots).  Give each worker on a host its own base, at least 4*(slots+reserve-slots) apart.  With 0 (or not root) the process backend runs programs as "
     "the worker's own user: root, trusted tenants only.", NULL},
    {"cgroup-root", CF_CONF_STRING, OFF(cgroup_root), 0, 1024, NULL, NULL,
     "Parent of the sandbox's cgroups, relative to each hierarchy's root; default: the "
     "worker's own cgroup + /codefleet.", NULL},
    {"slirp4netns", CF_CONF_STRING, OFF(slirp4netns_path), 0, 1024, "/usr/bin/slirp4netns", NULL,
     "Sandbox: user-mode networking for network=enabled (absolute path). Programs then get their own network "
     "namespace with egress only; empty or missing: network=enabled is not offered (requests asking are "
     "rejected).", NULL},
    {"sandbox-memory", CF_CONF_SIZE, OFF(sandbox_memory_bytes), 0, 1024 * 1024 * MIB, "512MiB", NULL,
     "Sandbox: memory limit (cgroup, incl. tmpfs and shared memory) for requests that set none.", NULL},
    {"sandbox-pids", CF_CONF_INT, OFF(sandbox_pids_max), 1, 1000000, "256", NULL,
     "Sandbox: process and thread limit (pids cgroup) for requests that set none.", NULL},
    {"sandbox-tmp", CF_CONF_SIZE, OFF(sandbox_tmp_bytes), MIB, 64 * 1024 * MIB, "64MiB", NULL,
     "Sandbox: size of /tmp and of /dev/shm inside, each a tmpfs.", NULL},
    {"sandbox-work", CF_CONF_SIZE, OFF(sandbox_work_bytes), MIB, 64 * 1024 * MIB, "128MiB", NULL,
     "Sandbox: size of the per-execution tmpfs holding the work directory.", NULL},
    {"sandbox-inodes", CF_CONF_INT, OFF(sandbox_inodes), 64, 100000000, "16384", NULL,
     "Sandbox: inode cap of each of those tmpfs.", NULL},
    {"default-timeout", CF_CONF_DURATION, OFF(default_timeout_us), 1000, 24 * 3600 * SEC, "30s", NULL,
     "Wall-clock timeout for requests that set none.", NULL},
    {"max-timeout", CF_CONF_DURATION, OFF(max_timeout_us), 1000, 24 * 3600 * SEC, "15m", NULL,
     "Largest timeout a request may ask for; larger ones are rejected.", NULL},
    {"default-output", CF_CONF_SIZE, OFF(default_output_bytes), 0, 64 * MIB, "1MiB", NULL,
     "stdout and stderr cap for requests that set none.", NULL},
    {"max-output", CF_CONF_SIZE, OFF(max_output_bytes), 0, 64 * MIB, "4MiB", NULL,
     "Largest stdout/stderr cap a request may ask for (results must fit a Kafka message).", NULL},
    {"max-memory", CF_CONF_SIZE, OFF(max_memory_bytes), MIB, 1024 * 1024 * MIB, "4GiB", NULL,
     "Largest memory limit a request may ask for (profiles may set less); larger ones are rejected.", NULL},
    {"max-processes", CF_CONF_INT, OFF(max_processes), 1, 4194304, "1024", NULL,
     "Largest processes limit a request may ask for (profiles may set less).", NULL},
    {"max-file-size", CF_CONF_SIZE, OFF(max_file_size_bytes), 1, 1024 * 1024 * MIB, "1GiB", NULL,
     "Largest file size limit a request may ask for (profiles may set less).", NULL},
    {"max-request", CF_CONF_SIZE, OFF(max_request_bytes), 1024, 256 * MIB, "16MiB", NULL,
     "Largest request message accepted; larger ones are rejected or dead-lettered.", NULL},
    {"max-files", CF_CONF_SIZE, OFF(max_files_bytes), 0, 1024 * MIB, "64MiB", NULL,
     "Cap on the bytes of files placed into or collected from a work directory.", NULL},
    {"max-output-file", CF_CONF_SIZE, OFF(max_output_file_bytes), 0, 64 * MIB, "1MiB", NULL,
     "Cap on the structured output file (CODEFLEET_OUTPUT) read back after a run.", NULL},
    {"shutdown-grace", CF_CONF_DURATION, OFF(shutdown_grace_us), 0, 3600 * SEC, "30s", NULL,
     "On SIGTERM, how long running executions may take to finish before they are abandoned "
     "(abandoned requests are not committed: another worker runs them).", NULL},
    {"shutdown-kafka-timeout", CF_CONF_DURATION, OFF(shutdown_kafka_timeout_us), 100000, 600 * SEC, "5s", NULL,
     "After shutdown-grace, how long flushing results, the final offset commit and leaving the group may take "
     "together; with the broker gone the worker stops anyway and the next owner reads what was not committed.",
     NULL},
    {"cancel-topic-suffix", CF_CONF_STRING, OFF(cancel_topic_suffix), 0, 64, ".cancel", NULL,
     "Each request topic's cancels are read from the topic named like it plus this suffix (every partition, "
     "by every worker): a cancel stops the request if it runs here, drops it if it waits here, and is "
     "remembered for cancel-memory in case the request comes later.  Empty = cancels are not read.", NULL},
    {"cancel-memory", CF_CONF_DURATION, OFF(cancel_memory_us), 0, 24 * 3600 * SEC, "10m", NULL,
     "How long a cancel for a request that has not arrived is remembered (and how far back a starting worker "
     "reads the cancel topics).", NULL},
    {"stream-topic-suffix", CF_CONF_STRING, OFF(stream_topic_suffix), 0, 64, ".output", NULL,
     "A request asking for \"stream\" gets its output chunks, while its program runs, on the topic its "
     "result goes to plus this suffix (which must exist: a request whose output topic is missing is "
     "rejected).  Empty = streaming is off (such requests are rejected).", NULL},
    {"stream-interval", CF_CONF_DURATION, OFF(stream_interval_us), 1000, 10 * SEC, "10ms", NULL,
     "A streaming request's chunks are published at most once per this interval; bytes written in between "
     "go out together in the next round (the first bytes after a quiet interval go at once).", NULL},
    {"stream-max-chunks", CF_CONF_INT, OFF(stream_max_chunks), 1, 10000000, "10000", NULL,
     "Chunks of one execution published at the stream-interval pace; past them, at most one round a second "
     "(a program writing a byte at a time cannot turn its run into millions of messages).", NULL},
    {"stream-chunk-max", CF_CONF_SIZE, OFF(stream_chunk_bytes), 1024, 256 * 1024, "64KiB", NULL,
     "Largest data of one output chunk; more is split.", NULL},
    {"result-batch", CF_CONF_DURATION, OFF(result_batch_us), 0, 1000000, "5ms", NULL,
     "While requests wait for a slot (a backlog), how long a result may wait to be sent together with "
     "others (the producer's linger.ms): fewer, larger produce requests, so more requests per second for "
     "the same CPU.  Without a backlog every result is sent at once, whatever this says.  0 = never wait.",
     NULL},
    {"rebalance-wait", CF_CONF_DURATION, OFF(rebalance_wait_us), 0, 600 * SEC, "5s", NULL,
     "When partitions are revoked, how long to wait for their running executions so their "
     "offsets can be committed (past it, the new owner may run them again).", NULL},
    {"partition-stall", CF_CONF_DURATION, OFF(partition_stall_us), SEC, 3600 * SEC, "10s", NULL,
     "The partition guard: a partition this worker holds, has not paused, with requests waiting beyond its "
     "position, from which nothing was taken for this long while the worker had room, is a stall: logged, "
     "counted (codefleet_partition_stalls_total), shown by `codefleet top` and `doctor`, and moved again by "
     "the cheapest correct step, one per further period: resume it, seek it to its position, rejoin the "
     "group.  Nothing is skipped (docs/RELIABILITY.md, \"The partition guard\").", NULL},
    {"redis", CF_CONF_STRING, OFF(redis), 0, 1024, "", NULL,
     "Redis for workspaces, checkpoints and delivery counts: host:port, or a unix socket path. Empty: no "
     "Redis; requests naming a workspace or thread are then rejected.", NULL},
    {"redis-user", CF_CONF_STRING, OFF(redis_user), 0, 256, NULL, NULL,
     "ACL user for AUTH (Redis 6+); unset: AUTH with the password alone.", NULL},
    {"redis-password", CF_CONF_STRING, OFF(redis_password), 0, 1024, NULL, NULL,
     "Password for AUTH; unset: no AUTH.  Prefer the environment or a config file to a flag.", NULL},
    {"redis-db", CF_CONF_INT, OFF(redis_db), 0, 1000000, "0", NULL,
     "Database SELECTed after every (re)connect.", NULL},
    {"redis-connect-timeout", CF_CONF_DURATION, OFF(redis_connect_timeout_us), 1000, 60 * SEC, "2s", NULL,
     "Timeout of one connection attempt to Redis.", NULL},
    {"redis-command-timeout", CF_CONF_DURATION, OFF(redis_command_timeout_us), 1000, 600 * SEC, "5s", NULL,
     "Timeout of each socket read or write of a Redis command.", NULL},
    {"redis-retry-budget", CF_CONF_DURATION, OFF(redis_retry_budget_us), 0, 600 * SEC, "5s", NULL,
     "How long each Redis step of a request retries transient failures (with backoff) before the request "
     "is answered internal_error.", NULL},
    {"workspace-max-file", CF_CONF_SIZE, OFF(workspace_max_file_bytes), 1, 512 * MIB, "8MiB", NULL,
     "Largest file a run may write back to a workspace; a larger one means no write-back.", NULL},
    {"workspace-max-files", CF_CONF_INT, OFF(workspace_max_files), 1, 1000000, "1000", NULL,
     "Most files a workspace may hold (and a run may leave in its work directory).", NULL},
    {"workspace-max-total", CF_CONF_SIZE, OFF(workspace_max_total_bytes), 1, 1024 * MIB, "64MiB", NULL,
     "Most bytes a workspace may hold over all its files.", NULL},
    {"workspace-ttl", CF_CONF_DURATION, OFF(workspace_ttl_us), 0, 3650 * 24 * 3600 * SEC, "24h", NULL,
     "Idle time after which a workspace this worker creates expires (0 = never).", NULL},
    {"workspace-history", CF_CONF_INT, OFF(workspace_history), 0, 100000, "16", NULL,
     "Older revisions kept readable in workspaces this worker creates.", NULL},
    {"checkpoint-max-per-thread", CF_CONF_INT, OFF(checkpoint_max_per_thread), 0, 1000000, "100", NULL,
     "Checkpoints kept per thread (oldest trimmed on save; 0 = unlimited).", NULL},
    {"checkpoint-ttl", CF_CONF_DURATION, OFF(checkpoint_ttl_us), 0, 3650 * 24 * 3600 * SEC, "168h", NULL,
     "Lifetime of a checkpoint after its creation (0 = never expires).", NULL},
    {"idempotency-ttl", CF_CONF_DURATION, OFF(idempotency_ttl_us), 0, 3650 * 24 * 3600 * SEC, "24h", NULL,
     "With Redis: how long a request's result is kept to answer a redelivery or resubmission of its id "
     "(same body: the stored result, marked metadata.replay; different body: rejected) without running it "
     "again.  0: no store (at-least-once: a redelivered request runs again).", NULL},
    {"idempotency-lease", CF_CONF_DURATION, OFF(idempotency_lease_us), SEC, 300 * SEC, "10s", NULL,
     "With Redis: lease on a request id while it runs, renewed every third of it; a second delivery of "
     "the id waits for the lease (and then replays) instead of running alongside.  A dead worker's lease "
     "lapses after this long.", NULL},
    {"idempotency-max-result", CF_CONF_SIZE, OFF(idempotency_max_result_bytes), 4096, 64 * MIB, "256KiB", NULL,
     "With Redis: the largest stored copy of a result.  A larger result is stored with its stdout, stderr and "
     "output cut to fit (the replay says so in a diagnostic), so one tenant's big outputs cannot fill Redis "
     "for everyone.", NULL},
    {"metrics-listen", CF_CONF_STRING, OFF(metrics_listen), 0, 300, "", NULL,
     "host:port where the worker serves GET /metrics (Prometheus text format), /healthz (liveness) and /readyz "
     "(readiness: connected to the broker, in the group with an assignment, Redis reachable when configured, not "
     "draining).  Empty: no HTTP server.  Port 0 picks a free port (logged).  Read-only, but it tells the fleet's "
     "load: bind it where only the scraper reaches (docs/OPERATIONS.md).", NULL},
    {"liveness-stall", CF_CONF_DURATION, OFF(liveness_stall_us), 1 * SEC, 3600 * SEC, "60s", NULL,
     "/healthz fails once the worker's main loop has not turned for this long (a hung worker is restarted by "
     "its supervisor).", NULL},
    {"otlp-endpoint", CF_CONF_STRING, OFF(otlp_endpoint), 0, 1024, "", NULL,
     "OpenTelemetry collector (OTLP/HTTP) base URL, e.g. http://127.0.0.1:4318: each request's spans are POSTed "
     "as JSON to <endpoint>/v1/traces.  Empty: no export (log lines and results still carry the trace).", NULL},
    {"otlp-headers", CF_CONF_STRING, OFF(otlp_headers), 0, 4096, "", NULL,
     "Extra HTTP headers for the OTLP export, Name=value,... (e.g. an Authorization header: a secret, kept in the "
     "0600 configuration file like the other credentials, never in the environment).", NULL},
    {"otlp-sample-percent", CF_CONF_INT, OFF(otlp_sample_percent), 0, 100, "100", NULL,
     "Share of sampled traces whose spans are exported, decided by the trace id (every worker keeps the same "
     "ones).  Callers choose their traceparent's sampled flag and new traces start sampled: lower this where "
     "tenants could flood the collector.", NULL},
    {"log-level", CF_CONF_ENUM, OFF(log_level), 0, 0, "info", "error|warn|info|debug",
     "Log verbosity.", NULL},
    {"log-format", CF_CONF_ENUM, OFF(log_format), 0, 0, "text", "text|json",
     "Log lines as text or JSON objects.", NULL},
    {"kafka.", CF_CONF_KVLIST, OFF(kafka), 0, 0, NULL, NULL,
     "Any librdkafka property, e.g. kafka.session.timeout.ms=10000 (applied to the consumer "
     "and producer; librdkafka validates it).", NULL},
    {"profile.", CF_CONF_KVLIST, OFF(profiles), 0, 0, NULL, NULL,
     "Operator policy profiles: profile.<name>.<key>, in a file as a [profile.<name>] section.  Each governs "
     "one request topic and says what its requests may ask for; keys in the Profiles table below.", NULL},
};

/* The worker's own keys, then each backend family's (cf_backend_settings),
 * whose values live in the configuration's backend_settings area: the
 * table is put together once, at first use. */
static cf_conf_table worker_table;
static pthread_once_t worker_table_once = PTHREAD_ONCE_INIT;

static void worker_table_compose(void)
{
    size_t own = sizeof(worker_props) / sizeof(worker_props[0]), n = own;
    const cf_backend_settings *const *fams = cf_backend_settings_all();
    for (size_t i = 0; fams[i]; i++)
        n += fams[i]->nprops;
    cf_conf_prop *props = calloc(n, sizeof(*props));
    if (!props) {
        /* Before anything is configured: nothing to do but say so. */
        fputs("codefleet-worker: out of memory composing the configuration table\n", stderr);
        abort();
    }
    memcpy(props, worker_props, sizeof(worker_props));
    size_t at = own;
    for (size_t i = 0; fams[i]; i++) {
        long off = cf_backend_settings_offset(fams[i]);
        if (off < 0) {
            fprintf(stderr, "codefleet-worker: backend %s's settings do not fit in CF_BACKEND_SETTINGS_BYTES\n",
                    fams[i]->family);
            abort();
        }
        for (size_t k = 0; k < fams[i]->nprops; k++) {
            props[at] = fams[i]->props[k];
            props[at].offset += offsetof(cf_worker_config, backend_settings) + (size_t)off;
            at++;
        }
    }
    /* The CLI's own keys in a principal's settings file (deploy/stack.sh
     * writes one file per principal for both programs). */
    static const char *const cli_keys[] = {"state-prefix", NULL};
    worker_table = (cf_conf_table){.program = "codefleet-worker", .env_prefix = "CODEFLEET_WORKER_", .props = props,
                                   .nprops = n, .file_foreign = cli_keys};
}

const cf_conf_table *cf_worker_conf(void)
{
    pthread_once(&worker_table_once, worker_table_compose);
    return &worker_table;
}

void cf_worker_print_config_markdown(FILE *out)
{
    cf_conf_print_markdown(&cf_worker_conf_table, out);
    fprintf(out,
            "\n## Profiles\n\n"
            "What a request may ask for is decided by the profile governing the topic it arrived on, never by the "
            "request.  Each key below is set as `profile.<name>.<key>` (flag `--profile.<name>.<key>=...`, or in the "
            "file a `[profile.<name>]` section).  The profile `default` governs `request-topic` and exists with the "
            "defaults below when nothing configures it; every other profile needs a `topic`.  Requests asking beyond "
            "their profile are answered `rejected` with a reason naming the profile and the control.  Threat model: "
            "docs/SECURITY.md.\n\n");
    cf_conf_print_markdown_table(&cf_profile_conf_table, out, false);
}
