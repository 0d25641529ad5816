#!/usr/bin/env bash
# What observability costs a worker (issue 14): the same trivial requests
# through Kafka with one worker without metrics or traces (the anchor) and
# one serving /metrics (scraped every second, as Prometheus would) and
# exporting every request's spans over OTLP/HTTP to a local collector sink,
# interleaved rounds, medians; and how long a scrape of /metrics takes
# beside /healthz on the same server.
#
#   tests/bench/ops.sh [--quick]
#
# Its own stack (state .stack-bench-ops, ports 19392/16679), stopped at the end.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
exec </dev/null

quick=0
[[ ${1:-} == --quick ]] && quick=1
n_lat=300 n_thr=5000 rounds=3 n_scrape=200
((quick)) && n_lat=50 n_thr=500 rounds=1 n_scrape=30

export CODEFLEET_STATE=$repo/.stack-bench-ops
export CODEFLEET_KAFKA_PORT=19392
export CODEFLEET_REDIS_PORT=16679
export CODEFLEET_METRICS_PORT=0
brokers=127.0.0.1:$CODEFLEET_KAFKA_PORT
bin=$repo/build
deploy/install.sh >/dev/null
deploy/build.sh >/dev/null
deploy/stack.sh up --workers 0 --no-topics >/dev/null
admin_conf=$CODEFLEET_STATE/secrets/admin.conf
work_root=/dev/shm/codefleet-bench-ops
mkdir -p "$work_root"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    deploy/stack.sh down >/dev/null || true
}
trap cleanup EXIT

# A collector sink: takes OTLP/HTTP posts, answers 200, counts spans.
sink_port=$((20000 + RANDOM % 20000))
python3 - "$sink_port" >"$CODEFLEET_STATE/sink.log" 2>&1 <<'EOF' &
import http.server, json, sys
spans = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global spans
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        for rs in json.loads(body).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                spans += len(ss.get("spans", []))
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(str(spans).encode())
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
pids+=($!)

results=()
collect() {
    local line
    while IFS= read -r line; do
        printf '%s\n' "$line"
        [[ $line == RESULT* ]] && results+=("${line#RESULT }")
    done
}

run=$(date +%s)
mport=$((20000 + RANDOM % 20000))
for ((r = 1; r <= rounds; r++)); do
    for mode in off on; do
        t=bench-ops-$mode-$run-$r
        "$bin/dispatcher/codefleet" --config "$admin_conf" --brokers "$brokers" topics create --partitions 6 \
            "$t.req" "$t.res" "$t.dlq" >/dev/null
        extra=()
        [[ $mode == on ]] && extra=(--metrics-listen "127.0.0.1:$mport" --otlp-endpoint "http://127.0.0.1:$sink_port")
        "$bin/worker/codefleet-worker" --config "$admin_conf" --brokers "$brokers" --group "bench-$t" \
            --worker-id "ops-$mode-$r" --request-topic "$t.req" --result-topic "$t.res" --dlq-topic "$t.dlq" \
            --workers-topic "" --log-level warn --backends process --profile.default.backends=process \
            --profile.default.network=enabled \
            --work-root "$work_root" "${extra[@]}" >"$CODEFLEET_STATE/ops-$mode-$r.log" 2>&1 &
        wpid=$!
        pids+=($wpid)
        scraper=
        if [[ $mode == on ]]; then
            # Prometheus' pace, 1 s, for the whole run.
            (while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$mport/metrics" || true; done) &
            scraper=$!
        fi
        sleep 3
        collect < <("$bin/tests/bench_fleet" latency --config "$admin_conf" --brokers "$brokers" --requests "$t.req" \
            --results "$t.res" -n "$n_lat" | sed "s/^RESULT e2e_latency /RESULT e2e_latency observe=$mode round=$r /")
        collect < <("$bin/tests/bench_fleet" throughput --config "$admin_conf" --brokers "$brokers" --requests "$t.req" \
            --results "$t.res" -n "$n_thr" | sed "s/^RESULT throughput /RESULT throughput observe=$mode round=$r /")
        if [[ $mode == on ]]; then
            # The scrape itself, beside /healthz on the same server.
            for path in healthz metrics; do
                for ((i = 0; i < n_scrape; i++)); do
                    curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$mport/$path"
                done | sort -n | awk -v p="$path" -v r="$r" '{a[NR]=$1} END {printf "RESULT scrape path=/%s round=%s p50_us=%.0f\n", p, r, a[int((NR+1)/2)]*1e6}' | collect
            done
            kill "$scraper" 2>/dev/null || true
            wait "$scraper" 2>/dev/null || true
            spans=$(curl -s "http://127.0.0.1:$sink_port/")
            echo "RESULT spans_received round=$r total=$spans" | collect
        fi
        kill -TERM "$wpid"
        wait "$wpid" || true
    done
done

echo
echo "== summary ($(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ))"
printf '  %s\n' "${results[@]}"
# Medians over the rounds, and the ratios to the anchor (observe=off).
printf '%s\n' "${results[@]}" | python3 -c '
import re, statistics, sys
vals = {}
for line in sys.stdin:
    kind = line.split()[0]
    kv = dict(re.findall(r"(\w+)=(\S+)", line))
    if kind == "e2e_latency":
        vals.setdefault(("p50_us", kv["observe"]), []).append(float(kv["p50_us"]))
        vals.setdefault(("p99_us", kv["observe"]), []).append(float(kv["p99_us"]))
    elif kind == "throughput":
        vals.setdefault(("requests_per_s", kv["observe"]), []).append(float(kv["requests_per_s"]))
    elif kind == "scrape":
        vals.setdefault(("scrape_us", kv["path"]), []).append(float(kv["p50_us"]))
m = {k: statistics.median(v) for k, v in vals.items()}
for what in ("p50_us", "p99_us", "requests_per_s"):
    off, on = m.get((what, "off")), m.get((what, "on"))
    if off and on:
        print(f"MEDIAN {what}: off {off:.0f}  on {on:.0f}  on/off {on / off:.3f}")
h, s = m.get(("scrape_us", "/healthz")), m.get(("scrape_us", "/metrics"))
if h and s:
    print(f"MEDIAN scrape: /healthz {h:.0f} us  /metrics {s:.0f} us  ratio {s / h:.2f}")
'
