#!/usr/bin/python3
"""Independent check of the collaboration event golden vectors
(schema/golden/event_*.msgpack), from schema/SPEC.md "Events" alone.

Reuses the from-scratch msgpack decoder/encoder of mp_check.py (which shares
no code with the C implementation) and checks both ways for every vector:
  decode(file bytes) == the expected event written out below, and
  encode(expected event) == the file bytes (key order and smallest forms).
It also checks the rules of the Events section that a decoder must apply.

Usage: mp_check_events.py GOLDEN_DIR     (exit 0 = all vectors agree)
"""
import os
import re
import sys

# Run with -I (isolated): the script's own directory is not on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import mp_check  # noqa: E402

KINDS = ("need_work", "work_claimed", "work_published", "feedback_requested",
         "feedback_provided", "blocked", "completed")
KEY_ORDER = ("v", "id", "workspace", "correlation_id", "topic", "producer",
             "consumer", "kind", "payload", "timestamp_us")

EXPECTED = {
    "event_min": {
        "v": 1,
        "id": "evt-min-0001",
        "workspace": "ws-42",
        "correlation_id": "task-7",
        "topic": "parser",
        "producer": "agent:alice",
        "kind": "need_work",
        "timestamp_us": 1767225600000000,
    },
    "event_full": {
        "v": 1,
        "id": "evt-full-0001",
        "workspace": "ws-42",
        "correlation_id": "task-7",
        "topic": "parser/review",
        "producer": "agent:alice",
        "consumer": "agent:bob",
        "kind": "feedback_requested",
        "payload": {
            "question": "LALR or PEG?",
            "files": ["src/parse.c", "src/lex.c"],
            "priority": 2,
            "blocking": True,
            "score": 0.5,
            "context": None,
        },
        "timestamp_us": 1767225600123456,
    },
}


def check_rules(name, ev):
    """The field rules of SPEC.md "Events"; returns a list of problems."""
    bad = []
    idre = re.compile(r"^[\x21-\x7e]{1,128}$")
    if ev.get("v") != 1:
        bad.append("v must be 1")
    for k in ("id", "correlation_id"):
        if not isinstance(ev.get(k), str) or not idre.match(ev[k]):
            bad.append("%s: bad id" % k)
    if not isinstance(ev.get("workspace"), str) or not re.match(r"^[A-Za-z0-9._-]{1,128}$", ev["workspace"]):
        bad.append("workspace: bad id")
    for k in ("topic", "producer", "consumer"):
        if k == "consumer" and k not in ev:
            continue
        v = ev.get(k)
        if not isinstance(v, str) or not 1 <= len(v.encode()) <= 256 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
            bad.append("%s: bad text" % k)
    if ev.get("kind") not in KINDS:
        bad.append("kind: unknown")
    ts = ev.get("timestamp_us")
    if not isinstance(ts, int) or isinstance(ts, bool) or ts <= 0:
        bad.append("timestamp_us: not a positive integer")
    order = [k for k in KEY_ORDER if k in ev]
    if list(ev.keys()) != order:
        bad.append("keys not in the canonical order")
    return ["%s: %s" % (name, b) for b in bad]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    failures = 0
    for name, want in EXPECTED.items():
        for problem in check_rules(name, want):
            print(problem, file=sys.stderr)
            failures += 1
        path = os.path.join(sys.argv[1], name + ".msgpack")
        with open(path, "rb") as f:
            data = f.read()
        try:
            got = mp_check.decode(data)
        except Exception as e:  # any decoder failure is a mismatch
            print("%s: decode failed: %s" % (name, e), file=sys.stderr)
            failures += 1
            continue
        if not mp_check.same(got, want):
            print("%s: decoded event differs:\n  got  %r\n  want %r" % (name, got, want), file=sys.stderr)
            failures += 1
        if mp_check.encode(want) != data:
            print("%s: encoding the expected event does not give the file bytes" % name, file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
