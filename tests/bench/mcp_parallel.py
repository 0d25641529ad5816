#!/usr/bin/env python3
"""Parallel MCP tool calls (issue 33): N execute_code calls of `sleep S`
sent at once to one `codefleet mcp`, against a worker with N slots, and
their makespan as a ratio to one such call's time measured in the same
run (the anchor).  Ideal: 1.0; a server that serves one call at a time:
N.  Medians over --rounds.  Needs the stack (eval "$(deploy/stack.sh env)")
and a build (CF_BINARY_DIR, default build/).

  tests/bench/mcp_parallel.py [--calls 4] [--sleep 1] [--rounds 5]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcp"))
from fleet import Fleet  # noqa: E402
from session import Server  # noqa: E402


def call(srv, seconds):
    return srv.request("tools/call", {"name": "execute_code", "arguments": {
        "language": "shell", "code": "sleep %s" % seconds, "backend": "process"}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    fleet = Fleet("mcp-bench", extra=["--slots=%d" % a.calls]).start()
    srv = Server(fleet)
    singles, spans = [], []
    try:
        srv.initialize("mcp_parallel")
        srv.wait_for(call(srv, 0), timeout=120)  # warm: topics, the worker's first run
        for _ in range(a.rounds):
            t0 = time.monotonic()
            r = srv.wait_for(call(srv, a.sleep), timeout=120)
            singles.append(time.monotonic() - t0)
            assert r["result"]["structuredContent"]["status"] == "success", r
            t0 = time.monotonic()
            ids = [call(srv, a.sleep) for _ in range(a.calls)]
            got = []  # responses come in the order calls finish
            for rid in ids:
                r = next((m for m in got if m.get("id") == rid), None) or srv.wait_for(rid, timeout=300, others=got)
                assert r["result"]["structuredContent"]["status"] == "success", r
            spans.append(time.monotonic() - t0)
    finally:
        srv.close()
        fleet.stop()
    one, span = statistics.median(singles), statistics.median(spans)
    print("one call of sleep %s       %.3f s (median of %d)" % (a.sleep, one, a.rounds))
    print("%d calls at once           %.3f s (median of %d)" % (a.calls, span, a.rounds))
    print("makespan / one call        %.2f (ideal 1.00; one at a time: %d)" % (span / one, a.calls))
    print("per-round ratios           %s" % " ".join("%.2f" % (s / o) for s, o in zip(spans, singles)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
