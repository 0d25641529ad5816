#!/usr/bin/env python3
"""A scripted MCP client session against `codefleet mcp` and a real worker
on the test stack: the JSON-RPC 2.0 messages written by hand, one per line,
as the MCP stdio transport says (standard library only).

Covers: initialize and version negotiation, JSON-RPC batches (2025-03-26
only), tools/list (schemas whose enums come from the wire schema, output
schemas, annotations), tools/call of every tool, output as progress
notifications while a program runs, the cancel tool, an MCP
notifications/cancelled that becomes a fleet cancel (the program is killed)
and a client's own timeout that does not (get_result picks it up), keep-alive
progress,
ping served while a tool runs, calls side by side (and --max-calls 1: one
cancelled before its turn never starts), protocol errors (not JSON, unknown method,
unknown tool) and tool errors (bad arguments, a rejected request).
"""
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
import queue

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import Fleet  # noqa: E402

failures = []


def remove(*paths):
    """Removes files a test made, if they are there."""
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


def check(cond, what):
    if cond:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        failures.append(what)


class Server:
    """`codefleet mcp` as a subprocess, read by a thread into a queue."""

    def __init__(self, fleet, globals_=None, args=()):
        env = dict(os.environ, CODEFLEET_LOG_LEVEL="info")
        g = fleet.globals() if globals_ is None else globals_
        self.p = subprocess.Popen([fleet.cli] + g + ["mcp"] + list(args), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=open("/tmp/cf-mcp-server-%d.log" % os.getpid(), "wb"),
                                  env=env)
        self.q = queue.Queue()
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.q.put(json.loads(line))
        self.q.put(None)

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def send_raw(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def request(self, method, params=None, notify=None):
        """Sends a request; returns its id (use wait_for)."""
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return rid

    def wait_for(self, rid, timeout=120, others=None):
        """The response to rid; other messages go to `others` (a list)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                m = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError("no response to %r within %s s" % (rid, timeout))
            if m is None:
                raise EOFError("the server closed stdout")
            if m.get("id") == rid and ("result" in m or "error" in m):
                return m
            if others is not None:
                others.append(m)

    def initialize(self, name, version="2025-06-18"):
        """The handshake; returns initialize's response."""
        return self.wait_for(self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                                         "clientInfo": {"name": name, "version": "1"}}))

    def gated(self, gate, text, **args):
        """An execute_code whose program waits for the file gate, then
        prints text; returns the call's id."""
        args = dict({"language": "shell", "timeout_ms": 120000,
                     "code": "while [ ! -e %s ]; do sleep 0.05; done; echo %s" % (gate, text)}, **args)
        return self.request("tools/call", {"name": "execute_code", "arguments": args})

    def call(self, rid_params, timeout=120, others=None):
        return self.wait_for(self.request("tools/call", rid_params), timeout, others)

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
        return self.p.returncode


def no_streaming(fleet):
    """A worker with streaming off: a progress token must not cost the run
    (keep-alives off: only the absence of output progress is checked)."""
    srv = Server(fleet, args=["--keep-alive", "0"])
    try:
        srv.initialize("session.py")
        others = []
        r = srv.call({"name": "execute_code", "_meta": {"progressToken": 7},
                      "arguments": {"language": "shell", "code": "echo still runs"}}, others=others)
        sc = r["result"]["structuredContent"]
        check(sc["status"] == "success" and sc["stdout"] == "still runs\n" and not r["result"]["isError"],
              "streaming refused by the worker: run again without it, and it succeeds")
        check(not [m for m in others if m.get("method") == "notifications/progress"], "no progress then")
    finally:
        srv.close()


def tool_text(r):
    return r["result"]["content"][0]["text"] if "result" in r else json.dumps(r)


def tenant_workspaces(fleet):
    """Issue 31 part 4 (issue 33 part 5 before it): a tenant's MCP server,
    set up as docs/MCP.md shows (the tenant's settings file from
    deploy/stack.sh, no Redis), reaches its own workspaces only.  Its
    workspace tools are requests to the fleet, decided by the profile of
    its request topic: a client setting (--state-prefix='*', the
    operator's Redis address) cannot widen that, and every tool on another
    tenant's workspace is refused by the worker, naming the prefix."""
    secrets_dir = os.environ.get("CF_TEST_SECRETS")
    redis = os.environ.get("CF_TEST_REDIS")
    if not secrets_dir or not redis:
        print("skip tenant workspaces: not the stack of deploy/stack.sh (CF_TEST_SECRETS, CF_TEST_REDIS)")
        return
    tag = secrets.token_hex(4)
    theirs, mine = "tenant-b.secret-" + tag, "tenant-a.mine-" + tag
    requests = os.environ.get("CF_TEST_TOPIC_REQUESTS", "codefleet.requests")
    results = os.environ.get("CF_TEST_TOPIC_RESULTS", "codefleet.results")
    # The tenant's file names its topics; the flags only win over a
    # CODEFLEET_*_TOPIC this test's environment may hold.
    tenant_a = ["--config", os.path.join(secrets_dir, "tenant-a.conf"), "--brokers", fleet.brokers,
                "--request-topic", requests + ".tenant-a", "--result-topic", results + ".tenant-a"]
    # The workspace tools are requests now: a worker serves the stack's
    # tenant topics with the stack's tenant profiles (its own group, so a
    # local stack's workers, when up, answer too: the first answer counts).
    profiles = []
    for t in ("tenant-a", "tenant-b"):
        profiles += ["--profile.%s.topic=%s.%s" % (t, requests, t), "--profile.%s.result-topic=%s.%s" % (t, results, t),
                     "--profile.%s.state-prefix=%s." % (t, t), "--profile.%s.backends=%s" % (t, fleet.backends)]
        if fleet.backends == "process":
            profiles.append("--profile.%s.network=enabled" % t)
    tenants = Fleet("mcp-tenants", extra=profiles).start()
    # The operator (the CLI principal, the default profile: any id) puts a
    # file in tenant-b's workspace.
    op = Server(fleet)
    a = Server(fleet, tenant_a)
    loose = Server(fleet, tenant_a + ["--state-prefix=*", "--redis", redis])
    others = [("read_file", {"path": "key.txt"}), ("list_files", {}), ("grep_files", {"pattern": "tenant"}),
              ("write_file", {"path": "planted", "content": "x"}), ("delete_file", {"path": "key.txt"}),
              ("str_replace", {"path": "key.txt", "old_str": "only", "new_str": "and a"}),
              ("insert_text", {"path": "key.txt", "insert_line": 0, "new_str": "x"})]
    try:
        for srv in (op, a, loose):
            srv.initialize("session.py")
        r = op.call({"name": "write_file", "arguments": {"workspace": theirs, "path": "key.txt",
                                                         "content": "tenant-b only\n"}})
        check(r["result"]["isError"] is False, "the operator writes tenant-b's workspace: %s" % tool_text(r)[:200])
        r = op.call({"name": "read_file", "arguments": {"workspace": theirs, "path": "key.txt"}})
        check(not r["result"]["isError"] and r["result"]["structuredContent"]["content"] == "tenant-b only\n",
              "and reads it back (the file is there to be stolen)")

        r = a.call({"name": "write_file", "arguments": {"workspace": mine, "path": "f.txt", "content": "mine\n"}})
        check(r["result"]["isError"] is False, "tenant-a writes its own workspace, with no Redis: %s"
              % tool_text(r)[:200])
        r = a.call({"name": "read_file", "arguments": {"workspace": mine, "path": "f.txt"}})
        check(not r["result"]["isError"] and r["result"]["structuredContent"]["content"] == "mine\n",
              "and reads it")
        for srv, who in ((a, "tenant-a"), (loose, "tenant-a with --state-prefix=* and the operator's Redis")):
            for tool, extra in others:
                r = srv.call({"name": tool, "arguments": dict(extra, workspace=theirs)})
                text = tool_text(r)
                check(r["result"]["isError"] is True and "does not start with 'tenant-a.'" in text
                      and "tenant-b only" not in text,
                      "%s's %s on tenant-b's workspace: refused by its topic's profile (%s)" % (who, tool, text[:160]))
        r = op.call({"name": "list_files", "arguments": {"workspace": theirs}})
        files = r["result"]["structuredContent"]["files"] if not r["result"]["isError"] else None
        check(files == [{"path": "key.txt", "size": 14}], "tenant-b's workspace is as it was: %s" % files)
        r = op.call({"name": "read_file", "arguments": {"workspace": theirs, "path": "key.txt"}})
        check(not r["result"]["isError"] and r["result"]["structuredContent"]["revision"] == 1
              and r["result"]["structuredContent"]["content"] == "tenant-b only\n",
              "at its first revision, with its bytes: %s" % tool_text(r)[:200])
    finally:
        for srv in (op, a, loose):
            srv.close()
        tenants.stop()


def parallel_calls(fleet):
    """Tool calls run side by side: a call whose program waits for another
    call's program finishes (served one at a time, it never would); with
    --max-calls 1 a second call waits its turn, and cancelled before it,
    never starts."""
    srv = Server(fleet)
    try:
        srv.initialize("parallel")
        # The waiter's program ends as soon as the gate is there, before
        # the opener's answer is sent: either answer may come first (under
        # load the waiter's often did, and a check on the order, which also
        # dropped that answer, failed and then waited 180 s for it).  The
        # second time the opener lingers, so the waiter's answer comes first.
        for linger in ("", "sleep 1; "):
            gate = "/tmp/cf-mcp-%s.gate" % secrets.token_hex(4)
            waiter = srv.gated(gate, "saw the gate")
            opener = srv.request("tools/call", {"name": "execute_code", "arguments": {
                "language": "shell", "code": "touch %s; %secho opened" % (gate, linger)}})
            got = []
            r = srv.wait_for(opener, timeout=180, others=got)
            opened = r.get("result", {}).get("structuredContent", {}).get("stdout") == "opened\n"
            check(opened, "a second call runs while the first waits for it (%s)%s"
                  % (linger or "no linger", "" if opened else ": %s" % json.dumps(r)[:1500]))
            w = next((m for m in got if m.get("id") == waiter and ("result" in m or "error" in m)), None)
            r = w or srv.wait_for(waiter, timeout=180)
            sc = r.get("result", {}).get("structuredContent", {})
            # Served one at a time, the waiter would time out (120 s).
            check(sc.get("status") == "success" and sc.get("stdout") == "saw the gate\n",
                  "the first call's program saw what the second's made (answered %s the second): %s"
                  % ("before" if w else "after", sc.get("status")))
            remove(gate)
    finally:
        srv.close()

    # Calls naming the same thread run in the order they came: the first
    # waits for a file the second makes, so it times out (side by side, it
    # would see the file and succeed); another thread's call is not held.
    if os.environ.get("CF_TEST_REDIS"):
        srv = Server(fleet)
        try:
            srv.initialize("ordered")
            gate = "/tmp/cf-mcp-%s.gate" % secrets.token_hex(4)
            thread = "mcp-order-" + secrets.token_hex(4)
            # The second also names a workspace, which becomes its Kafka
            # key: the fleet, which runs one key's requests in order, would
            # run the two side by side; only the server's order holds it.
            ws = "mcp-order-ws-" + secrets.token_hex(4)
            r = srv.call({"name": "write_file", "arguments": {"workspace": ws, "path": "x", "content": "1"}})
            check(r["result"]["isError"] is False, "a workspace for the ordered calls")
            first = srv.gated(gate, "saw it", thread=thread, timeout_ms=3000)
            second = srv.request("tools/call", {"name": "execute_code", "arguments": {
                "language": "shell", "thread": thread, "workspace": ws, "code": "touch %s; echo second" % gate}})
            got = []  # every message, in the order it came

            def response(rid):
                for m in got:
                    if m.get("id") == rid and ("result" in m or "error" in m):
                        return m
                m = srv.wait_for(rid, timeout=180, others=got)
                got.append(m)
                return m

            other = response(srv.request("tools/call", {"name": "execute_code", "arguments": {
                "language": "shell", "thread": thread + "-other", "code": "echo other"}}))
            check(other.get("result", {}).get("structuredContent", {}).get("stdout") == "other\n",
                  "another thread's call runs beside them")
            r1, r2 = response(first), response(second)
            sc1 = r1.get("result", {}).get("structuredContent", {})
            sc2 = r2.get("result", {}).get("structuredContent", {})
            check(sc1.get("status") == "timeout" and sc2.get("stdout") == "second\n" and got.index(r1) < got.index(r2),
                  "calls of one thread run one after another: %s, %s" % (sc1.get("status"), sc2.get("status")))
            remove(gate)
        finally:
            srv.close()
    else:
        print("skip ordered calls: the thread needs Redis (CF_TEST_REDIS)")

    # The client's own timeout does not free a thread's turn: the next call
    # of the thread starts once the timed-out call's program has ended.
    # Two get_result calls of one execution both get it; a second call
    # under an id still in flight is refused; a case's unknown key is
    # said.
    if os.environ.get("CF_TEST_REDIS"):
        srv = Server(fleet)
        try:
            srv.initialize("timeout-order")
            gate, done = ("/tmp/cf-mcp-%s" % secrets.token_hex(4) for _ in range(2))
            thread, ws = "mcp-to-" + secrets.token_hex(4), "mcp-to-ws-" + secrets.token_hex(4)
            srv.call({"name": "write_file", "arguments": {"workspace": ws, "path": "x", "content": "1"}})
            first = srv.request("tools/call", {"name": "execute_code", "arguments": {
                "language": "shell", "thread": thread, "timeout_ms": 120000,
                "code": "while [ ! -e %s ]; do sleep 0.05; done; touch %s; echo first" % (gate, done)}})
            second = srv.request("tools/call", {"name": "execute_code", "arguments": {
                "language": "shell", "thread": thread, "workspace": ws,
                "code": "[ -e %s ] && echo after || echo beside" % done}})
            srv.send({"jsonrpc": "2.0", "id": first, "method": "tools/call", "params": {
                "name": "get_result", "arguments": {"id": "x"}}})
            dup = srv.wait_for(first, timeout=30)  # (the first call's program waits for the gate)
            check(dup.get("error", {}).get("code") == -32600 and "in flight" in dup["error"]["message"],
                  "a second call under an id in flight is refused: %s" % dup)
            srv.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": first, "reason": "McpError: MCP error -32001: Request timed out"}})
            check(srv.wait_for(srv.request("ping"), timeout=30).get("result") == {}, "the timeout cancel was read")
            open(gate, "w").close()
            left = []
            r = srv.wait_for(second, timeout=180, others=left)
            check(r.get("result", {}).get("structuredContent", {}).get("stdout") == "after\n",
                  "after a client timeout, the thread's next call waited for the program: %s" % tool_text(r)[:200])
            a = srv.request("tools/call", {"name": "get_result", "arguments": {"wait_timeout_ms": 120000}})
            b = srv.request("tools/call", {"name": "get_result", "arguments": {"wait_timeout_ms": 120000}})
            ra, rb = srv.wait_for(a, timeout=180, others=left), None
            rb = next((m for m in left if m.get("id") == b), None) or srv.wait_for(b, timeout=180)
            check(ra.get("result", {}).get("structuredContent", {}).get("stdout") == "first\n",
                  "get_result without an id picks up the timed-out call's result: %s" % tool_text(ra)[:200])
            check(rb.get("result", {}).get("isError") is True, "the next one finds nothing left: %s" % tool_text(rb)[:120])
            r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "code": "sleep 2; echo twice",
                                                                "wait": False}})
            eid = r["result"]["structuredContent"]["id"]
            a = srv.request("tools/call", {"name": "get_result", "arguments": {"id": eid}})
            b = srv.request("tools/call", {"name": "get_result", "arguments": {"id": eid}})
            both = [srv.wait_for(a, timeout=180, others=left)]
            both.append(next((m for m in left if m.get("id") == b), None) or srv.wait_for(b, timeout=180))
            check(all(x.get("result", {}).get("structuredContent", {}).get("stdout") == "twice\n" for x in both),
                  "two get_result calls of one execution both get it")
            r = srv.call({"name": "execute_code", "arguments": {"language": "python", "code": "print(input())",
                                                                "cases": [{"stdin": "x", "expected_stdout": "y"}]}})
            check(r["result"]["isError"] is True and "expected_stdout" in tool_text(r),
                  "a case's unknown key is refused by name: %s" % tool_text(r)[:200])
            remove(gate, done)
        finally:
            srv.close()

    srv = Server(fleet, args=["--max-calls", "1", "--keep-alive", "1s"])
    try:
        srv.initialize("one-call")
        gate = "/tmp/cf-mcp-%s.gate" % secrets.token_hex(4)
        marker = "/tmp/cf-mcp-%s.ran" % secrets.token_hex(4)
        first = srv.gated(gate, "first")
        queued_call = srv.request("tools/call", {"name": "execute_code", "arguments": {
            "language": "shell", "code": "touch %s" % marker}})
        srv.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": queued_call}})
        leftover = []
        # Lines are read in order: once this ping is answered, the cancel was.
        check(srv.wait_for(srv.request("ping"), timeout=30, others=leftover).get("result") == {},
              "ping answered while the one allowed call runs")
        open(gate, "w").close()
        r = srv.wait_for(first, timeout=180, others=leftover)
        check(r.get("result", {}).get("structuredContent", {}).get("stdout") == "first\n", "the first call ends")
        # A call after it runs: had the cancelled one started, it ran before.
        r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "code": "echo next"}},
                     others=leftover)
        check(r.get("result", {}).get("structuredContent", {}).get("stdout") == "next\n", "the next call runs")
        check(not os.path.exists(marker) and not any(m.get("id") == queued_call for m in leftover),
              "--max-calls 1: a call cancelled before its turn neither runs nor answers")
        remove(gate, marker)

        # A call in line gets keep-alives; the client's own timeout is not
        # a cancel: it runs when its turn comes, and get_result picks it up.
        gate = "/tmp/cf-mcp-%s.gate" % secrets.token_hex(4)
        first = srv.gated(gate, "first")
        in_line = srv.request("tools/call", {"name": "execute_code", "_meta": {"progressToken": "line"},
                                             "arguments": {"language": "shell", "code": "echo ran after all"}})
        seen, deadline = [], time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            m = srv.q.get(timeout=max(0.01, deadline - time.monotonic()))
            if m and m.get("method") == "notifications/progress" and m["params"].get("progressToken") == "line":
                seen.append(m)
        check(bool(seen), "a call waiting for its turn gets keep-alive progress")
        srv.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": in_line, "reason": "McpError: MCP error -32001: Request timed out"}})
        check(srv.wait_for(srv.request("ping"), timeout=30).get("result") == {}, "the timeout cancel was read")
        open(gate, "w").close()
        left = []
        r = srv.wait_for(first, timeout=180, others=left)
        r = srv.call({"name": "get_result", "arguments": {"wait_timeout_ms": 120000}}, timeout=180, others=left)
        check(r.get("result", {}).get("structuredContent", {}).get("stdout") == "ran after all\n"
              and not any(m.get("id") == in_line and ("result" in m or "error" in m) for m in left),
              "timed out while in line: it ran, unanswered, and get_result picked it up: %s" % tool_text(r)[:200])
        remove(gate)
    finally:
        srv.close()


def main():
    fleet = Fleet("mcp-session").start()
    srv = Server(fleet)
    quiet = None
    try:
        run(srv, fleet)
        batches(fleet)
        client_timeouts(fleet)
        parallel_calls(fleet)
        tenant_workspaces(fleet)
        quiet = Fleet("mcp-nostream", extra=["--stream-topic-suffix="]).start()
        no_streaming(quiet)
    finally:
        code = srv.close()
        check(code == 0, "the server exits 0 when its input ends (exit %s)" % code)
        fleet.stop()
        if quiet:
            quiet.stop()
        if failures:
            fleet.dump_log()
            with open("/tmp/cf-mcp-server-%d.log" % os.getpid(), "rb") as f:
                sys.stderr.write(f.read().decode("utf-8", "replace")[-8000:])
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


def client_timeouts(fleet):
    """A client's own request timeout is not a user's cancel: the program
    keeps running and get_result without an id picks it up; a quiet call
    with a progress token gets keep-alive progress."""
    srv = Server(fleet, args=["--keep-alive", "1s"])
    try:
        srv.initialize("timeouts")
        srv.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        r = srv.call({"name": "get_result", "arguments": {}})
        check(r["result"]["isError"] is True and "pass the request id" in r["result"]["content"][0]["text"],
              "get_result without an id, nothing left running: a tool error")
        # A silent program: keep-alive progress (no message) until its answer.
        others = []
        r = srv.call({"name": "execute_code", "_meta": {"progressToken": 77},
                      "arguments": {"language": "shell", "code": "sleep 4; echo woke"}}, others=others)
        prog = [m["params"] for m in others if m.get("method") == "notifications/progress"]
        # (A keep-alive may also come between the output and the answer,
        # on a machine slow to deliver the result.)
        check(r["result"]["structuredContent"]["stdout"] == "woke\n" and len(prog) >= 2
              and "message" not in prog[0] and all(p["progressToken"] == 77 for p in prog)
              and [p["message"] for p in prog if "message" in p] == ["woke\n"]
              and [p["progress"] for p in prog] == list(range(1, len(prog) + 1)),
              "a quiet call gets keep-alive progress: %s" % prog)
        # The TypeScript SDK's timeout cancel, sent once the program runs
        # (its first output arrived): the program goes on.
        rid = srv.request("tools/call", {"name": "execute_code", "_meta": {"progressToken": "t2"}, "arguments": {
            "language": "shell", "code": "echo started; sleep 10; echo finished anyway"}})
        deadline = time.monotonic() + 120
        seen = False
        while not seen and time.monotonic() < deadline:
            m = srv.q.get(timeout=max(0.01, deadline - time.monotonic()))
            seen = m is not None and m.get("method") == "notifications/progress" and \
                m["params"].get("message") == "started\n"
        check(seen, "the program started (its first output came as progress)")
        srv.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": rid, "reason": "McpError: MCP error -32001: Request timed out"}})
        # Reattach: get_result with a progress token replays the output
        # the program printed before it (from the output topic), then the
        # rest as it comes, before the result (E2B#1074).
        r = srv.call({"name": "get_result", "_meta": {"progressToken": "re"}, "arguments": {"wait_timeout_ms": 120000}},
                     others=(left := []))
        sc = r["result"].get("structuredContent", {})
        check(not any(m.get("id") == rid and ("result" in m or "error" in m) for m in left),
              "no response for the timed-out call")
        check(sc.get("status") == "success" and sc.get("stdout") == "started\nfinished anyway\n",
              "after the client's timeout the program ran on; get_result picked it up: %s" % sc.get("status"))
        replayed = "".join(m["params"].get("message", "") for m in left
                           if m.get("method") == "notifications/progress" and m["params"].get("progressToken") == "re")
        check(replayed == "started\nfinished anyway\n",
              "get_result with a progress token replays the output, then the rest: %r" % replayed)
        r = srv.call({"name": "get_result", "arguments": {}})
        check(r["result"]["isError"] is True, "once picked up, it is off the list")
        # get_result waits with keep-alives too (its result does not stream).
        r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "code": "sleep 4; echo late",
                                                            "wait": False}})
        eid = r["result"]["structuredContent"]["id"]
        others = []
        r = srv.call({"name": "get_result", "_meta": {"progressToken": "g1"}, "arguments": {"id": eid}},
                     others=others)
        prog = [m["params"] for m in others if m.get("method") == "notifications/progress"]
        check(r["result"]["structuredContent"].get("stdout") == "late\n" and len(prog) >= 1
              and all(p["progressToken"] == "g1" and "message" not in p for p in prog),
              "get_result sends keep-alives while it waits: %s" % prog)
    finally:
        srv.close()


def batches(fleet):
    """JSON-RPC batches: answered as one array in a 2025-03-26 session (the
    version that requires them), refused in the others."""
    srv = Server(fleet)
    try:
        r = srv.wait_for(srv.request("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                                    "clientInfo": {"name": "batch", "version": "1"}}))
        check(r["result"]["protocolVersion"] == "2025-03-26", "2025-03-26 is negotiated")
        srv.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        srv.send([{"jsonrpc": "2.0", "id": "b1", "method": "ping"},
                  {"jsonrpc": "2.0", "method": "notifications/whatever"},
                  {"jsonrpc": "2.0", "id": "b2", "method": "tools/call",
                   "params": {"name": "execute_code", "arguments": {"language": "shell", "code": "echo batched"}}},
                  7,
                  {"jsonrpc": "2.0", "id": "b3", "method": "initialize", "params": {}},
                  {"jsonrpc": "2.0", "id": "b4", "method": "tools/list"}])
        got = srv.q.get(timeout=120)
        check(isinstance(got, list), "a batch is answered with one array: %s" % str(got)[:200])
        by_id = {m.get("id"): m for m in got} if isinstance(got, list) else {}
        check(sorted(by_id, key=str) == sorted(["b1", "b2", None, "b3", "b4"], key=str) and len(got) == 5,
              "one response per request member, none for the notification: %s" % list(by_id))
        b2 = by_id.get("b2", {}).get("result", {}).get("structuredContent", {})
        check(b2.get("status") == "success" and b2.get("stdout") == "batched\n", "a tool call inside a batch runs")
        check(by_id.get("b3", {}).get("error", {}).get("code") == -32600, "initialize inside a batch is refused")
        check(by_id.get(None, {}).get("error", {}).get("code") == -32600, "a member that is not an object: error")
        check(len(by_id.get("b4", {}).get("result", {}).get("tools", [])) == 11, "tools/list inside a batch")
        # A batch is bounded: 101 messages are refused as one.
        srv.send([{"jsonrpc": "2.0", "id": "p%d" % i, "method": "ping"} for i in range(101)])
        got = srv.q.get(timeout=60)
        check(isinstance(got, dict) and got.get("error", {}).get("code") == -32600
              and "at most 100" in got["error"].get("message", ""), "a batch of 101 is refused: %s" % str(got)[:200])
        # Notifications only: nothing comes back (the next message is the ping's answer).
        srv.send([{"jsonrpc": "2.0", "method": "notifications/whatever"}])
        rid = srv.request("ping")
        got = srv.q.get(timeout=60)
        check(isinstance(got, dict) and got.get("id") == rid, "a batch of notifications gets no answer")
    finally:
        srv.close()
    srv = Server(fleet)
    try:
        srv.initialize("nobatch")
        srv.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
        got = srv.q.get(timeout=60)
        check(isinstance(got, dict) and got.get("error", {}).get("code") == -32600
              and "2025-03-26" in got["error"].get("message", ""), "no batches in a 2025-06-18 session: %s" % got)
    finally:
        srv.close()


def run(srv, fleet):
    r = srv.initialize("session.py")
    res = r.get("result", {})
    check(res.get("protocolVersion") == "2025-06-18", "initialize echoes a version it supports")
    check(res.get("capabilities", {}).get("tools") is not None, "initialize offers tools")
    check(res.get("serverInfo", {}).get("name") == "codefleet", "serverInfo names codefleet")
    r = srv.wait_for(srv.request("initialize", {"protocolVersion": "1999-01-01", "capabilities": {},
                                                "clientInfo": {"name": "old", "version": "1"}}))
    check(r["result"]["protocolVersion"] == "2025-11-25", "an unknown version gets the newest it speaks")
    srv.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    tools = srv.wait_for(srv.request("tools/list"))["result"]["tools"]
    names = sorted(t["name"] for t in tools)
    check(names == ["apply_patch", "cancel", "delete_file", "execute_code", "get_result", "grep_files", "insert_text",
                    "list_files", "read_file", "str_replace", "write_file"],
          "tools/list: %s" % names)
    ex = next(t for t in tools if t["name"] == "execute_code")
    langs = ex["inputSchema"]["properties"]["language"]["enum"]
    check("python" in langs and "rust" in langs and "command" in langs, "language enum from the schema: %s" % langs)
    check(ex["inputSchema"]["required"] == ["language"], "execute_code requires language")
    # Every tool says what its structuredContent holds and how it behaves.
    hints = {t["name"]: t.get("annotations", {}) for t in tools}
    check(all(t.get("outputSchema", {}).get("type") == "object" for t in tools), "every tool has an outputSchema")
    check(all(hints[n].get("readOnlyHint") is True for n in ("get_result", "list_files", "read_file", "grep_files"))
          and all(hints[n].get("readOnlyHint") is False
                  for n in ("execute_code", "cancel", "write_file", "delete_file", "str_replace", "insert_text",
                            "apply_patch"))
          and hints["execute_code"].get("destructiveHint") is True and hints["cancel"].get("idempotentHint") is True,
          "annotations: read-only, destructive, idempotent hints: %s" % hints)
    schemas = {t["name"]: t["outputSchema"] for t in tools}

    def conforms(tool, sc):
        """structuredContent against the tool's outputSchema (the property types it declares)."""
        kinds = {"string": str, "integer": int, "array": list, "object": dict, "boolean": bool}
        props = schemas[tool].get("properties", {})
        bad = [k for k, v in sc.items() if k in props and "type" in props[k]
               and not isinstance(v, kinds[props[k]["type"]])]
        check(isinstance(sc, dict) and not bad, "%s: structuredContent matches its outputSchema (%s)" % (tool, bad))

    # A program that works.
    r = srv.call({"name": "execute_code", "arguments": {"language": "python", "code": "print(6 * 7)"}})
    sc = r["result"]["structuredContent"]
    check(r["result"]["isError"] is False and sc["status"] == "success" and sc["stdout"] == "42\n",
          "execute_code python -> success, stdout 42")
    conforms("execute_code", sc)
    check("42" in r["result"]["content"][0]["text"], "the text summary shows the output")

    # Output cut at the cap: each stream's section once, with the mark.
    r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "max_output_bytes": 10,
                                                         "code": "head -c 100 /dev/zero | tr '\\0' x"}})
    text = r["result"]["content"][0]["text"]
    check(r["result"]["structuredContent"]["stdout_truncated"] is True and text.count("--- stdout ---") == 1
          and "[truncated at the cap]" in text and "--- stderr ---" not in text,
          "truncated output: its section once, marked")

    # A program that fails is a result, not an error.
    r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "code": "echo oops >&2; exit 3"}})
    sc = r["result"]["structuredContent"]
    check(r["result"]["isError"] is False and sc["status"] == "failed" and sc["exit_code"] == 3
          and sc["stderr"] == "oops\n", "a failing program: status failed, exit 3, not isError")

    # The program's text reaches the model without terminal controls.
    r = srv.call({"name": "execute_code", "arguments": {"language": "python", "code":
                  "import sys\nsys.stdout.buffer.write(b'C1:\\xc2\\x9b31m BIDI:\\xe2\\x80\\xaeevil ESC:\\x1b[2J "
                  "BAD:\\xc0\\xaf\\n')"}})
    text = r["result"]["content"][0]["text"]
    check(all(ch not in text for ch in "\u009b\u202e\x1b\x7f") and "C1:?31m BIDI:?evil ESC:?[2J BAD:??" in text,
          "content text: C1, bidi, ESC and bad UTF-8 shown as '?'")

    # Limits reach the worker.
    r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "code": "sleep 5",
                                                        "timeout_ms": 300}})
    check(r["result"]["structuredContent"]["status"] == "timeout", "timeout_ms becomes the policy: timeout")

    # Valid JSON the server refuses (a NUL in a string, a key twice) is
    # answered with the call's id, so the client does not wait for it.
    rid = srv.next_id
    srv.next_id += 1
    srv.send_raw(('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"execute_code",'
                  '"arguments":{"language":"shell","code":"cat","stdin":"a\\u0000b"}}}\n' % rid).encode())
    r = srv.wait_for(rid, timeout=60)
    check(r.get("error", {}).get("code") == -32600 and "NUL" in r["error"].get("message", ""),
          "a NUL in an argument: an error for that call: %s" % r)
    rid = srv.next_id
    srv.next_id += 1
    srv.send_raw(('{"jsonrpc":"2.0","id":%d,"method":"ping","method":"ping"}\n' % rid).encode())
    r = srv.wait_for(rid, timeout=60)
    check(r.get("error", {}).get("code") == -32600, "a key given twice: an error for that call")

    # Bad arguments are tool errors the model can read.
    r = srv.call({"name": "execute_code", "arguments": {"language": "cobol", "code": "x"}})
    check(r["result"]["isError"] is True and "language" in r["result"]["content"][0]["text"],
          "an unknown language: isError naming the field")
    conforms("execute_code", r["result"]["structuredContent"])
    r = srv.call({"name": "execute_code", "arguments": {"language": "python", "code": "1", "timout_ms": 5}})
    check(r["result"]["isError"] is True and "timout_ms" in r["result"]["content"][0]["text"],
          "a misspelt argument is named, not ignored")
    r = srv.call({"name": "execute_code", "arguments": {"language": "python", "code": "1", "backend": "nosuch"}})
    check(r["result"]["isError"] is True and r["result"]["structuredContent"]["status"] == "rejected",
          "a rejected request: isError with the result")

    # Output while it runs: progress notifications before the response.
    others = []
    r = srv.call({"name": "execute_code", "_meta": {"progressToken": "tok-1"},
                  "arguments": {"language": "python",
                                "code": "import time\nfor i in range(4):\n    print('step', i, flush=True)\n"
                                        "    time.sleep(0.3)\n"}}, others=others)
    prog = [m for m in others if m.get("method") == "notifications/progress"]
    text = "".join(m["params"].get("message", "") for m in prog)
    check(len(prog) >= 3 and all(m["params"]["progressToken"] == "tok-1" for m in prog),
          "progress notifications with the token (%d)" % len(prog))
    check(text == "step 0\nstep 1\nstep 2\nstep 3\n", "progress messages carry the output: %r" % text)
    check([m["params"]["progress"] for m in prog] == list(range(1, len(prog) + 1)), "progress increases")
    check(r["result"]["structuredContent"]["chunks"] == len(prog), "the result counts the chunks")

    # A wait that runs out says whether a worker has started it (its start
    # notice, SPEC.md 13.1), and get_result then has it.
    # A worker that took it more than the wait later (a loaded machine) is
    # rightly "queued"; a test of the C library (it_test_stream) shows both.
    r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "code": "sleep 8; echo woke",
                                                        "wait_timeout_ms": 4000}}, timeout=120)
    text = r["result"]["content"][0]["text"]
    check(r["result"]["isError"] is True and ("it is running: worker " in text or "most likely queued" in text),
          "a wait that runs out: running, by which worker (or queued): %r" % text)
    m = re.search(r"request (\S+):", text)
    check(m is not None, "the timed-out call names its request: %r" % text)
    r = srv.call({"name": "get_result", "arguments": {"id": m.group(1), "wait_timeout_ms": 60000}}, timeout=120)
    check(r["result"]["structuredContent"]["status"] == "success", "get_result picks the result up after it")

    # wait=false, then the cancel tool, then get_result.
    r = srv.call({"name": "execute_code", "arguments": {"language": "command", "argv": ["/bin/sleep", "60"],
                                                        "wait": False}})
    eid = r["result"]["structuredContent"]["id"]
    check(r["result"]["structuredContent"]["status"] == "submitted", "wait=false returns the id at once")
    conforms("execute_code", r["result"]["structuredContent"])
    time.sleep(1.0)
    r = srv.call({"name": "cancel", "arguments": {"id": eid, "reason": "changed my mind"}})
    check(r["result"]["isError"] is False, "cancel tool: sent")
    t0 = time.monotonic()
    r = srv.call({"name": "get_result", "arguments": {"id": eid, "wait_timeout_ms": 30000}})
    sc = r["result"]["structuredContent"]
    check(sc["status"] == "cancelled" and "changed my mind" in sc.get("reason", ""),
          "get_result: cancelled with the reason (%.1f s)" % (time.monotonic() - t0))

    # The client cancels a running call: no response, the program is killed.
    marker = "/tmp/cf-mcp-%s.pid" % secrets.token_hex(4)
    rid = srv.request("tools/call", {"name": "execute_code", "arguments": {
        "language": "shell", "code": "echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 60" % (marker, marker, marker)}})
    pid = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and pid is None:
        try:
            pid = int(open(marker).read())
        except (OSError, ValueError):
            time.sleep(0.05)
    check(pid is not None, "the long program runs")
    ping = srv.request("ping")
    pong = srv.wait_for(ping, timeout=10)
    check(pong.get("result") == {}, "ping is answered while a tool runs")
    srv.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid,
                                                                               "reason": "user pressed stop"}})
    gone = False
    deadline = time.monotonic() + 20
    while pid and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            time.sleep(0.05)
        except ProcessLookupError:
            gone = True
            break
    check(gone, "the MCP cancel killed the program")
    after = srv.wait_for(srv.request("ping"), timeout=10, others=(leftover := []))
    check(after.get("result") == {} and not any(m.get("id") == rid for m in leftover),
          "no response for the cancelled call")
    remove(marker)

    # Workspace tools (with Redis).
    if os.environ.get("CF_TEST_REDIS"):
        ws = "mcp-ws-" + secrets.token_hex(4)
        r = srv.call({"name": "write_file", "arguments": {"workspace": ws, "path": "data/in.txt",
                                                          "content": "hello from mcp\n"}})
        check(r["result"]["isError"] is False and r["result"]["structuredContent"]["revision"] >= 1,
              "write_file creates the workspace and writes")
        r = srv.call({"name": "write_file", "arguments": {"workspace": ws, "path": "bin.dat",
                                                          "content": {"base64": "AP8A"}}})
        check(r["result"]["isError"] is False, "write_file takes base64")
        r = srv.call({"name": "list_files", "arguments": {"workspace": ws}})
        files = r["result"]["structuredContent"]["files"]
        check(files == [{"path": "bin.dat", "size": 3}, {"path": "data/in.txt", "size": 15}], "list_files: %s" % files)
        r = srv.call({"name": "read_file", "arguments": {"workspace": ws, "path": "bin.dat"}})
        check(r["result"]["structuredContent"]["content"] == {"base64": "AP8A"}, "read_file: binary as base64")
        # text_editor's view_range: some lines of a file, -1 to the end.
        srv.call({"name": "write_file", "arguments": {"workspace": ws, "path": "five.lines",
                                                      "content": "l1\nl2\nl3\nl4\nl5\n"}})
        r = srv.call({"name": "read_file", "arguments": {"workspace": ws, "path": "five.lines", "view_range": [2, 3]}})
        check(r["result"]["structuredContent"].get("content") == "l2\nl3\n"
              and r["result"]["structuredContent"].get("size") == 15, "read_file view_range [2, 3]: %s"
              % r["result"]["structuredContent"])
        r = srv.call({"name": "read_file", "arguments": {"workspace": ws, "path": "five.lines", "view_range": [4, -1]}})
        check(r["result"]["structuredContent"].get("content") == "l4\nl5\n", "read_file view_range [4, -1]")
        r = srv.call({"name": "read_file", "arguments": {"workspace": ws, "path": "five.lines", "view_range": [9, -1]}})
        check(r["result"]["isError"] is True and "has 5 line(s)" in r["result"]["content"][0]["text"],
              "view_range past the end: an error saying how many lines")
        r = srv.call({"name": "read_file", "arguments": {"workspace": ws, "path": "five.lines", "view_range": "1-2"}})
        check(r["result"]["isError"] is True and "view_range" in r["result"]["content"][0]["text"],
              "a malformed view_range is named")
        if "sandbox" in fleet.backends:
            r = srv.call({"name": "execute_code", "arguments": {"language": "shell", "code": "cat data/in.txt",
                                                                "workspace": ws, "filesystem": "workspace_ro",
                                                                "backend": "sandbox"}})
            check(r["result"]["structuredContent"].get("stdout") == "hello from mcp\n",
                  "a program reads the file written through MCP: %s" % r["result"]["content"][0]["text"][:300])
        else:
            print("skip reading the workspace from a program: the sandbox needs root")
        r = srv.call({"name": "read_file", "arguments": {"workspace": ws, "path": "../etc/passwd"}})
        check(r["result"]["isError"] is True, "read_file refuses a path outside the workspace")
        r = srv.call({"name": "write_file", "arguments": {"workspace": ws, "path": "x", "content": "1",
                                                          "expected_revision": 1}})
        check(r["result"]["isError"] is True and "revision" in r["result"]["content"][0]["text"],
              "write_file with a stale revision: a conflict, said")
        # The editing tools: text_editor's semantics, each change a revision.
        r = srv.call({"name": "str_replace", "arguments": {"workspace": ws, "path": "data/in.txt",
                                                           "old_str": "hello", "new_str": "hi"}})
        check(r["result"]["isError"] is False and r["result"]["structuredContent"]["changed_paths"] == ["data/in.txt"],
              "str_replace: %s" % tool_text(r)[:200])
        r = srv.call({"name": "str_replace", "arguments": {"workspace": ws, "path": "data/in.txt", "old_str": "nope"}})
        check(r["result"]["isError"] is True and "does not occur" in tool_text(r), "str_replace of absent text: said")
        r = srv.call({"name": "insert_text", "arguments": {"workspace": ws, "path": "data/in.txt", "insert_line": 0,
                                                           "new_str": "# head"}})
        check(r["result"]["isError"] is False, "insert_text: %s" % tool_text(r)[:200])
        r = srv.call({"name": "grep_files", "arguments": {"workspace": ws, "pattern": "mcp"}})
        check(r["result"]["structuredContent"].get("matches") == "data/in.txt:2:hi from mcp\n",
              "grep_files: %s" % tool_text(r)[:200])
        r = srv.call({"name": "list_files", "arguments": {"workspace": ws, "pattern": "**/*.txt"}})
        check([f["path"] for f in r["result"]["structuredContent"]["files"]] == ["data/in.txt"],
              "list_files with a glob: %s" % tool_text(r)[:200])
        r = srv.call({"name": "apply_patch", "arguments": {"workspace": ws, "patch": (
            "*** Begin Patch\n*** Add File: p/new.txt\n+patched\n*** Update File: data/in.txt\n@@\n-hi from mcp\n"
            "+hi from a patch\n*** End Patch\n")}})
        check(r["result"]["isError"] is False
              and r["result"]["structuredContent"]["changed_paths"] == ["data/in.txt", "p/new.txt"],
              "apply_patch: %s" % tool_text(r)[:200])
        r = srv.call({"name": "apply_patch", "arguments": {"workspace": ws, "patch": (
            "*** Begin Patch\n*** Update File: data/in.txt\n@@\n-not there\n+x\n*** End Patch\n")}})
        check(r["result"]["isError"] is True and "data/in.txt: hunk 1 (patch line 3) does not apply" in tool_text(r),
              "apply_patch with a stale hunk: said with its file and line: %s" % tool_text(r)[:200])
        r = srv.call({"name": "grep_files", "arguments": {"workspace": ws, "pattern": "patch"}})
        check(r["result"]["structuredContent"].get("matches") == "data/in.txt:2:hi from a patch\np/new.txt:1:patched\n",
              "the patch landed: %s" % tool_text(r)[:200])
        r = srv.call({"name": "delete_file", "arguments": {"workspace": ws, "path": "bin.dat"}})
        check(r["result"]["isError"] is False, "delete_file: %s" % tool_text(r)[:200])
        r = srv.call({"name": "read_file", "arguments": {"workspace": ws, "path": "bin.dat"}})
        check(r["result"]["isError"] is True and "no file bin.dat" in tool_text(r), "a deleted file is gone")
        for tool in ("list_files", "read_file", "write_file", "str_replace", "grep_files", "delete_file"):
            sc = {"list_files": {"workspace": ws}, "read_file": {"workspace": ws, "path": "data/in.txt"},
                  "write_file": {"workspace": ws, "path": "y", "content": "2"},
                  "str_replace": {"workspace": ws, "path": "y", "old_str": "2", "new_str": "3"},
                  "grep_files": {"workspace": ws, "pattern": "3"},
                  "delete_file": {"workspace": ws, "path": "y"}}[tool]
            r = srv.call({"name": tool, "arguments": sc})
            check(r["result"]["isError"] is False, "%s: %s" % (tool, tool_text(r)[:200]))
            conforms(tool, r["result"]["structuredContent"])
    else:
        print("skip workspace tools: no CF_TEST_REDIS")

    # What the CLI offers: cases, collect, compile_flags.
    r = srv.call({"name": "execute_code", "arguments": {
        "language": "python", "code": "print(int(input()) * 2)",
        "cases": [{"name": "two", "stdin": "2", "expect_stdout": "4"},
                  {"name": "three", "stdin": "3", "expect_stdout": "7"}]}})
    sc = r["result"]["structuredContent"]
    rows = [(c.get("name"), c.get("match")) for c in sc.get("cases", [])]
    check(sc.get("status") == "failed" and rows == [("two", True), ("three", False)]
          and "three" in r["result"]["content"][0]["text"],
          "execute_code with cases: a row per case, the mismatch named: %s %s" % (sc.get("status"), rows))
    r = srv.call({"name": "execute_code", "arguments": {
        "language": "shell", "code": "mkdir -p out && echo plot > out/a.txt && echo x > out/b.bin",
        "collect": ["out/*.txt"]}})
    files = [(f.get("path"), f.get("content")) for f in r["result"]["structuredContent"].get("files", [])]
    check(files == [("out/a.txt", "plot\n")], "execute_code with collect returns the files: %s" % files)
    r = srv.call({"name": "execute_code", "arguments": {"language": "python", "code": "print(1)",
                                                        "compile_flags": ["-O2"]}})
    check(r["result"]["isError"] is True and "compile_flags" in r["result"]["content"][0]["text"],
          "compile_flags reach the request's check (python is not compiled): %s" % tool_text(r)[:200])

    # A line too long for the server: a parse error, and it goes on.
    srv.send_raw(b'{"jsonrpc":"2.0","id":99,"method":"ping","params":{"x":"' + b"a" * (5 << 20) + b'"}}\n')
    got = srv.q.get(timeout=30)
    check(got.get("error", {}).get("code") == -32700 and "too long" in got["error"]["message"],
          "a 5 MiB line: -32700 too long")
    check(srv.wait_for(srv.request("ping"), timeout=10).get("result") == {}, "and the server goes on")

    # Protocol errors.
    srv.send_raw(b"this is not json\n")
    got = srv.q.get(timeout=10)
    check(got.get("error", {}).get("code") == -32700 and got.get("id") is None, "not JSON: -32700")
    r = srv.wait_for(srv.request("resources/list"))
    check(r.get("error", {}).get("code") == -32601, "unknown method: -32601")
    r = srv.call({"name": "no_such_tool", "arguments": {}})
    check(r.get("error", {}).get("code") == -32602, "unknown tool: -32602")
    r = srv.wait_for(srv.request("tools/call", {"name": "execute_code", "arguments": ["not", "an", "object"]}))
    check(r["result"]["isError"] is True, "arguments that are not an object: a tool error")


if __name__ == "__main__":
    sys.exit(main())
