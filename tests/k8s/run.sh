#!/usr/bin/env bash
# Checks the deployment files offline (after the first run has the Go
# modules cached):
#
#   deploy/k8s      tests/k8s/validate (Go, upstream types and validation):
#                   strict decoding, kustomize build of both variants, the API
#                   server's create validation, KEDA's checks, cross-references
#                   to worker.conf, the Secret, probes, shutdown timing, memory,
#                   the securityContext the sandbox needs; then its negative
#                   tests (each breaks the manifests one way and expects the
#                   failure)
#   deploy/systemd  systemd-analyze verify of codefleet-worker@.service, and
#                   that verify notices a misspelled directive
#   deploy/grafana  tests/k8s/check_dashboard.py: structure, every expression
#                   parsed by promtool (Prometheus's own parser), the metric
#                   names against a scrape (a live worker's when
#                   build/worker/codefleet-worker exists), and that the checker
#                   fails on a missing metric, invalid JSON, a panel without
#                   targets
#
# Needs Go 1.21 or later ($GO, /usr/local/go/bin/go or PATH; it fetches the
# go 1.26 toolchain go.mod asks for if older; modules come from the Go module
# proxy on the first run, about 0.5 GB in GOMODCACHE, and 1.4 GB of build
# cache in GOCACHE), python3; systemd-analyze
# and promtool when present (a check that cannot run is reported as skipped
# and counted in neither number).  Last line: "N passed, N failed"; exits 1
# when something failed.
#
#   tests/k8s/run.sh
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
exec </dev/null

passed=0 failed=0 skipped=0
ok() { passed=$((passed + 1)); printf 'ok     %s\n' "$1"; }
bad() { failed=$((failed + 1)); printf 'FAILED %s\n' "$1"; }
skip() { skipped=$((skipped + 1)); printf 'skip   %s\n' "$1"; }
finish() {
    ((skipped > 0)) && printf '%d check(s) skipped (see above)\n' "$skipped"
    printf '%d passed, %d failed\n' "$passed" "$failed"
    ((failed == 0))
    exit
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- deploy/k8s ------------------------------------------------------------
# A Go that can build the module: go.mod asks for go 1.26 (k8s.io/kubernetes
# 1.37, KEDA 2.21); Go 1.21 or later fetches that toolchain from the module
# proxy by itself (GOTOOLCHAIN=auto).  Debian 12's golang-go (1.19) cannot.
go=
for g in "${GO:-}" /usr/local/go/bin/go "$(command -v go 2>/dev/null)"; do
    [[ -n $g && -x $g ]] || continue
    v=$("$g" env GOVERSION 2>/dev/null)
    v=${v#go}
    if [[ $v =~ ^1\.([0-9]+) ]] && ((BASH_REMATCH[1] >= 21)); then
        go=$g
        break
    fi
done
if [[ -z $go ]]; then
    bad "k8s: no Go 1.21 or later (GO=..., /usr/local/go/bin/go or PATH): the manifest validator cannot run"
else
    export GOFLAGS=-mod=mod
    vdir=$repo/tests/k8s/validate
    t0=$SECONDS
    # The validator links the Kubernetes and KEDA types: minutes to build
    # on a fresh machine.  Kept outside the clone, keyed by its sources.
    cache=${CODEFLEET_CACHE:-$HOME/.cache/codefleet}/k8svalidate
    key=$(cd "$vdir" && cat go.mod go.sum ./*.go 2>/dev/null | sha256sum | cut -c1-16)
    cached=$cache/k8svalidate-$key
    if [[ -x $cached ]] && cp "$cached" "$work/k8svalidate" 2>/dev/null; then
        ok "k8s: validator from the cache ($cached)"
        built=1
    elif (cd "$vdir" && "$go" build -o "$work/k8svalidate" . >"$work/build.log" 2>&1); then
        ok "k8s: validator built ($((SECONDS - t0)) s)"
        mkdir -p "$cache" && cp "$work/k8svalidate" "$cached.tmp.$$" && mv "$cached.tmp.$$" "$cached" || true
        built=1
    else
        built=0
    fi
    if ((built)); then
        keda=$(cd "$vdir" && "$go" list -m -f '{{.Dir}}' github.com/kedacore/keda/v2 2>/dev/null)
        "$work/k8svalidate" -repo "$repo" -keda-dir "$keda" >"$work/validate.log" 2>&1
        rc=$?
        n_ok=$(grep -c '^ok ' "$work/validate.log")
        n_bad=$(grep -c '^FAIL ' "$work/validate.log")
        grep -v '^ok ' "$work/validate.log" | grep -v '^[0-9]* passed, [0-9]* failed$' | sed 's/^/       /'
        passed=$((passed + n_ok))
        failed=$((failed + n_bad))
        if ((rc != 0 && n_bad == 0)); then bad "k8s: validator exited $rc"; fi
        printf '       k8s: %d manifest checks passed, %d failed (one line each: cd tests/k8s/validate && go run .)\n' "$n_ok" "$n_bad"
        # The negative tests: each broken manifest must fail.
        (cd "$vdir" && "$go" test -count=1 -v . >"$work/test.log" 2>&1)
        rc=$?
        t_ok=$(grep -c -- '--- PASS: TestBrokenManifestsFail/' "$work/test.log")
        t_bad=$(grep -c -- '--- FAIL: TestBrokenManifestsFail/' "$work/test.log")
        for t in TestShippedManifests TestEnvKeyMapping; do
            if grep -q -- "--- PASS: $t " "$work/test.log"; then ok "k8s: go test $t"; else bad "k8s: go test $t"; fi
        done
        passed=$((passed + t_ok))
        failed=$((failed + t_bad))
        printf '       k8s: %d broken manifests rejected, %d not (go test -v -run TestBrokenManifestsFail)\n' "$t_ok" "$t_bad"
        if ((rc != 0)); then
            grep -E -- '--- FAIL|want a failure|FAIL|panic' "$work/test.log" | head -40 | sed 's/^/       /'
            ((t_bad == 0)) && bad "k8s: go test exited $rc"
        fi
    else
        bad "k8s: validator does not build"
        tail -30 "$work/build.log" | sed 's/^/       /'
    fi
fi

# ---- deploy/systemd ----------------------------------------------------------
unit=deploy/systemd/codefleet-worker@.service
if command -v systemd-analyze >/dev/null 2>&1; then
    # verify refuses a unit whose ExecStart binary is missing; where the
    # worker is not installed, check a copy that runs /bin/true with the
    # same arguments (everything else is the file as shipped).
    mkdir -p "$work/units" "$work/broken"
    if [[ -x /usr/local/bin/codefleet-worker ]]; then
        cp "$unit" "$work/units/"
    else
        sed 's#^ExecStart=/usr/local/bin/codefleet-worker #ExecStart=/bin/true #' "$unit" >"$work/units/codefleet-worker@.service"
    fi
    out=$(systemd-analyze verify "$work/units/codefleet-worker@ci.service" 2>&1)
    rc=$?
    if ((rc == 0)) && [[ -z $out ]]; then
        ok "systemd: systemd-analyze verify $unit (instance ci)"
    else
        bad "systemd: systemd-analyze verify $unit (exit $rc)"
        printf '%s\n' "$out" | sed 's/^/       /'
    fi
    sed 's/^Delegate=yes/Delegat=yes/' "$work/units/codefleet-worker@.service" >"$work/broken/codefleet-worker@.service"
    out=$(systemd-analyze verify "$work/broken/codefleet-worker@ci.service" 2>&1)
    if [[ $out == *Delegat* ]]; then
        ok "systemd: verify reports a misspelled directive (Delegat=yes)"
    else
        bad "systemd: verify did not report Delegat=yes: the check above proves nothing"
    fi
    for opt in Delegate=yes KillMode=mixed KillSignal=SIGTERM Restart=on-failure OOMPolicy=continue; do
        grep -qx "$opt" "$unit" || bad "systemd: $unit lacks $opt"
    done
    grace=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$unit")
    if [[ -n $grace ]] && ((grace > 30 + 10 + 1)); then
        ok "systemd: TimeoutStopSec=$grace > shutdown-grace 30 s + shutdown-kafka-timeout 10 s"
    else
        bad "systemd: TimeoutStopSec must exceed shutdown-grace + shutdown-kafka-timeout (30 + 10 s)"
    fi
else
    skip "systemd: systemd-analyze not installed, $unit not verified"
fi

# ---- deploy/grafana -------------------------------------------------------------
dash=deploy/grafana/codefleet.json
chk=tests/k8s/check_dashboard.py
if python3 "$chk" --dashboard "$dash" --promql-rules "$work/rules.json" >"$work/dash.log" 2>&1; then
    ok "grafana: $(tail -1 "$work/dash.log")"
else
    bad "grafana: $dash is not a valid dashboard"
    sed 's/^/       /' "$work/dash.log"
fi
if command -v promtool >/dev/null 2>&1; then
    if promtool check rules "$work/rules.json" >"$work/promtool.log" 2>&1; then
        ok "grafana: promtool parses every expression ($(grep -o '[0-9]* rules' "$work/promtool.log"))"
    else
        bad "grafana: promtool cannot parse an expression"
        sed 's/^/       /' "$work/promtool.log"
    fi
else
    skip "grafana: promtool not installed, expressions not parsed"
fi
# The checker itself: a scrape holding every name passes (histograms
# declared only by # TYPE, their series as _bucket/_sum/_count); one without
# a name fails; broken dashboards fail.
python3 "$chk" --dashboard "$dash" --list >"$work/names" 2>/dev/null
{
    declare -A hist=()
    while read -r n; do
        case $n in
        *_bucket | *_sum | *_count) hist[${n%_*}]=1 ;;
        *) printf '# TYPE %s gauge\n%s 1\n' "$n" "$n" ;;
        esac
    done <"$work/names"
    for h in "${!hist[@]}"; do printf '# TYPE %s histogram\n%s_bucket{le="+Inf"} 0\n' "$h" "$h"; done
} >"$work/scrape-all.txt"
first=$(head -1 "$work/names")
grep -v -- "$first" "$work/scrape-all.txt" >"$work/scrape-missing.txt"
echo '{"schemaVersion": 39, "panels": [' >"$work/broken.json"
python3 - "$dash" "$work/notargets.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
next(p for p in d["panels"] if p.get("type") != "row")["targets"] = []
json.dump(d, open(sys.argv[2], "w"))
EOF
if [[ -s $work/names ]] && python3 "$chk" --dashboard "$dash" "$work/scrape-all.txt" >/dev/null &&
    ! python3 "$chk" --dashboard "$dash" "$work/scrape-missing.txt" >/dev/null &&
    ! python3 "$chk" --dashboard "$work/broken.json" >/dev/null &&
    ! python3 "$chk" --dashboard "$work/notargets.json" >/dev/null; then
    ok "grafana: check_dashboard.py passes a full scrape, fails a missing $first, invalid JSON, a panel without targets"
else
    bad "grafana: check_dashboard.py does not tell good from bad"
fi
# Against a real worker's /metrics, when one is built.
worker=build/worker/codefleet-worker
if [[ -x $worker ]]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$work/wr"
    # No broker is needed for /metrics: the worker serves it while it retries.
    # Its settings are these flags alone: a CODEFLEET_WORKER_* variable of
    # the caller's (run_all.sh exports the test stack's) must not reach it.
    clean_env=()
    while IFS= read -r v; do clean_env+=(-u "$v"); done < <(compgen -e | grep '^CODEFLEET_WORKER_' || true)
    env "${clean_env[@]}" "$worker" --brokers=127.0.0.1:1 --backends=process --profile.default.backends=process \
        --work-root="$work/wr" --metrics-listen="127.0.0.1:$port" --shutdown-grace=0 \
        --shutdown-kafka-timeout=100ms >"$work/worker.log" 2>&1 &
    wpid=$!
    got=0
    for _ in $(seq 50); do
        if python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
            "http://127.0.0.1:$port/metrics" >"$work/scrape.txt" 2>/dev/null; then
            got=1
            break
        fi
        sleep 0.2
    done
    kill -TERM "$wpid" 2>/dev/null
    wait "$wpid" 2>/dev/null
    if ((got)) && python3 "$chk" --dashboard "$dash" "$work/scrape.txt" >"$work/live.log" 2>&1; then
        ok "grafana: every dashboard metric is in a live worker's /metrics"
    elif ((got)); then
        bad "grafana: dashboard metrics missing from a live worker's /metrics"
        sed 's/^/       /' "$work/live.log"
    else
        bad "grafana: $worker did not serve /metrics on 127.0.0.1:$port"
        tail -5 "$work/worker.log" | sed 's/^/       /'
    fi
else
    skip "grafana: $worker not built, no live scrape (run check_dashboard.py SCRAPE yourself)"
fi

finish
