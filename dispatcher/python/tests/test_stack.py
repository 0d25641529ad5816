"""The client against the real local stack (deploy/stack.sh): skipped unless
CF_TEST_BROKERS is set.

Each run creates its own topics (2 partitions) and starts its own worker on
them, so it disturbs nothing else on the broker.  Environment:
CF_TEST_BROKERS, CF_TEST_CLIENT_CONFIG (settings file with the SASL
credentials), CF_BINARY_DIR (where codefleet-worker was built).
"""
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import List, Optional

import msgpack

import codefleet as cf

BROKERS = os.environ.get("CF_TEST_BROKERS")
REDIS = os.environ.get("CF_TEST_REDIS")  # workspaces: the worker gets it when set
CLIENT_CONFIG = os.environ.get("CF_TEST_CLIENT_CONFIG")
BINARY_DIR = Path(os.environ.get("CF_BINARY_DIR") or Path(__file__).resolve().parents[3] / "build")

PREFIX = f"pyclient-{os.getpid()}-{secrets.token_hex(3)}"
REQ, RES, DLQ, EVENTS = f"{PREFIX}.req", f"{PREFIX}.res", f"{PREFIX}.dlq", f"{PREFIX}.events"
IDLE_REQ, IDLE_RES = f"{PREFIX}-idle.req", f"{PREFIX}-idle.res"  # no worker reads these
TOPICS = [REQ, RES, DLQ, f"{REQ}.cancel", f"{RES}.output", EVENTS, IDLE_REQ, IDLE_RES]
WORKER_ID = f"{PREFIX}-w"

worker: Optional[subprocess.Popen] = None
worker_log = Path(tempfile.gettempdir()) / f"{PREFIX}-worker.log"
client: Optional[cf.Client] = None


def settings() -> cf.Settings:
    s = cf.load_settings(CLIENT_CONFIG, environ={}) if CLIENT_CONFIG else cf.Settings()
    s.brokers = BROKERS or s.brokers
    return s


def kafka_conf() -> dict:
    s = settings()
    return {"bootstrap.servers": s.brokers, **s.kafka}


def create_topics(names: List[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(kafka_conf())
    futures = admin.create_topics([NewTopic(n, num_partitions=2, replication_factor=-1) for n in names],
                                  operation_timeout=30)
    for f in futures.values():
        f.result(timeout=60)


def delete_topics(names: List[str]) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient(kafka_conf())  # kept referenced until the futures resolve
    try:
        for f in admin.delete_topics(names, operation_timeout=30).values():
            f.result(timeout=60)
    except Exception as e:  # noqa: BLE001 - leftovers are harmless; say so and go on
        print(f"could not delete the test topics: {e}", file=sys.stderr)


def dump_worker_log() -> None:
    if worker_log.exists():
        lines = worker_log.read_text(errors="replace").splitlines()
        print(f"\n---- worker log {worker_log} (last 80 lines) ----", file=sys.stderr)
        print("\n".join(lines[-80:]), file=sys.stderr)


def start_worker() -> subprocess.Popen:
    args = [str(BINARY_DIR / "worker" / "codefleet-worker")]
    if CLIENT_CONFIG:
        args.append(f"--config={CLIENT_CONFIG}")
    args += [f"--brokers={BROKERS}", f"--group={PREFIX}.grp", f"--request-topic={REQ}", f"--result-topic={RES}",
             f"--dlq-topic={DLQ}", f"--worker-id={WORKER_ID}", "--log-level=info",
             "--kafka.session.timeout.ms=6000", "--kafka.heartbeat.interval.ms=500", "--backends=process",
             "--profile.default.backends=process", "--profile.default.network=enabled"]
    if REDIS:
        args.append(f"--redis={REDIS}")
    with open(worker_log, "wb") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while b"reading cancels from" not in worker_log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            dump_worker_log()
            proc.kill()
            proc.wait()
            raise RuntimeError("the worker did not come up")
        time.sleep(0.1)
    return proc


def setUpModule() -> None:
    global worker, client
    if not BROKERS:
        raise unittest.SkipTest("CF_TEST_BROKERS is not set: no stack to test against")
    create_topics(TOPICS)
    worker = start_worker()
    client = cf.Client(settings(), request_topic=REQ, result_topic=RES, events_topic=EVENTS)


def tearDownModule() -> None:
    if client is not None:
        client.close()
    if worker is not None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    if BROKERS:
        delete_topics(TOPICS)
    worker_log.unlink(missing_ok=True)


class Credentials(unittest.TestCase):
    """Credentials the broker refuses are one clear ClientError naming them,
    told within seconds, never "cannot reach the broker"."""

    def test_wrong_password(self):
        s = settings()
        if "sasl.username" not in s.kafka:
            self.skipTest("not an authenticated stack")
        s.kafka = {**s.kafka, "sasl.password": "not-the-password"}
        t0 = time.monotonic()
        with self.assertRaises(cf.ClientError) as ctx:
            cf.Client(settings=s, connect_timeout=60.0)
        text = str(ctx.exception)
        self.assertIn("refused this client's credentials", text)
        self.assertNotIn("not-the-password", text)
        self.assertNotIn("cannot reach", text)
        self.assertLess(time.monotonic() - t0, 30.0)


class StackTest(unittest.TestCase):
    def run(self, result=None):
        # The worker's log is what explains a failure here: show it then.
        result = result if result is not None else self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        out = super().run(result)
        if len(result.failures) + len(result.errors) > before:
            dump_worker_log()
        return out

    # -- submit and wait --------------------------------------------------

    def test_run_success(self):
        res = client.run(cf.Request("python", "print(6*7)"), timeout=60)
        self.assertEqual(res.status, cf.Status.SUCCESS, res.reason)
        self.assertEqual(res.stdout, b"42\n")
        self.assertEqual(res.exit_code, 0)
        self.assertTrue(cf.id_valid(res.id))
        self.assertEqual(res.metadata.worker, WORKER_ID)

    def test_submit_then_wait_keeps_the_callers_request(self):
        req = cf.Request("python", "print('hi')", id=f"{PREFIX}-given-id")
        self.assertEqual(client.submit(req), req.id)
        self.assertEqual(req.created_us, 0)  # filled on the copy that was sent, not here
        res = client.wait(req.id, timeout=60)
        self.assertEqual((res.id, res.status, res.stdout), (req.id, cf.Status.SUCCESS, b"hi\n"))

    def test_workspace_files(self):
        """Issue 31 part 4: a workspace's files through the fleet, E2B's
        files shape plus the editing tools."""
        if not REDIS:
            self.skipTest("CF_TEST_REDIS is not set: no workspaces")
        files = client.files(f"{PREFIX}-ws")
        self.assertEqual(files.write("src/app.py", "x = 1\nprint(x)\n"), 1)
        self.assertEqual(files.write("data.bin", b"\x00\xff"), 2)
        self.assertEqual(files.list(), [cf.WorkspaceEntry("data.bin", 2), cf.WorkspaceEntry("src/app.py", 15)])
        self.assertEqual(files.list("**/*.py"), [cf.WorkspaceEntry("src/app.py", 15)])
        self.assertEqual(files.read("data.bin", format="bytes"), b"\x00\xff")
        self.assertEqual(files.grep("x"), [("src/app.py", 1, "x = 1"), ("src/app.py", 2, "print(x)")])
        with self.assertRaises(cf.WorkspaceOpError) as cm:
            files.replace("src/app.py", "x", "y")
        self.assertEqual(cm.exception.status, "failed")
        self.assertIn("occurs 2 times", str(cm.exception))
        self.assertEqual(files.replace("src/app.py", "x = 1", "x = 41"), 3)
        self.assertEqual(files.insert("src/app.py", 0, "import os"), 4)
        with self.assertRaises(cf.WorkspaceOpError) as cm:
            files.remove("data.bin", expected_revision=1)
        self.assertTrue(cm.exception.conflict)
        self.assertEqual(files.apply_patch("*** Begin Patch\n*** Delete File: data.bin\n*** Update File: src/app.py\n"
                                           "@@\n-print(x)\n+print(x + 1)\n*** End Patch\n"),
                         ["data.bin", "src/app.py"])
        self.assertEqual(files.read("src/app.py"), "import os\nx = 41\nprint(x + 1)\n")
        self.assertEqual(files.read("src/app.py", lines=(2, 3)), "x = 41\nprint(x + 1)\n")
        self.assertEqual(files.read("src/app.py", lines=(3, None)), "print(x + 1)\n")
        with self.assertRaises(cf.WorkspaceOpError) as cm:
            files.read("src/app.py", lines=(4, None))
        self.assertIn("has 3 line(s)", str(cm.exception))
        with self.assertRaises(cf.WorkspaceOpError) as cm:
            files.read("data.bin")
        self.assertIn("no file data.bin", str(cm.exception))
        # What the files hold is what a program on the workspace sees.
        res = client.run(cf.Request("shell", "cat src/app.py", workspace=files.workspace), timeout=60)
        self.assertEqual(res.stdout, b"import os\nx = 41\nprint(x + 1)\n", res.reason)

    def test_session(self):
        """Issue 31: a Python session through the fleet, E2B's shape: cells
        whose names persist, a shell command and the files of its
        workspace, what could not be saved, a failing cell that saves
        nothing."""
        if not REDIS:
            self.skipTest("CF_TEST_REDIS is not set: no sessions")
        s = client.session(f"{PREFIX}-nb")
        res = s.run_code("import math\ndef area(r):\n    return round(math.pi * r * r, 2)\nradius = 2\n")
        self.assertEqual((res.status, res.session_cell, res.session_restored), (cf.Status.SUCCESS, 1, False),
                         res.reason)
        res = s.run_code("area(radius)")
        self.assertEqual((res.stdout, res.session_cell, res.session_restored), (b"12.57\n", 2, True), res.reason)
        self.assertEqual(s.cells, 2)
        res = s.commands.run("echo 3 > radius.txt; ls .codefleet/sessions")
        self.assertEqual(res.stdout, f"{PREFIX}-nb.python\n".encode(), res.reason)
        self.assertEqual(s.files.read("radius.txt"), "3\n")
        res = s.run_code("radius = int(open('radius.txt').read())\nimport threading\nguard = threading.Lock()\n")
        self.assertEqual((res.status, res.session_lost, s.lost), (cf.Status.SUCCESS, ["guard"], ["guard"]),
                         res.reason)
        res = s.run_code("radius = 100\nraise RuntimeError('stop')")
        self.assertEqual(res.status, cf.Status.FAILED)
        self.assertIn(b"RuntimeError: stop", res.stderr)
        res = s.run_code("print(area(radius), 'guard' in dir())")
        self.assertEqual(res.stdout, b"28.27 False\n", res.reason)
        with self.assertRaises(TypeError):
            s.run_code("1", workspace="elsewhere")

    def test_shell_session(self):
        if not REDIS:
            self.skipTest("CF_TEST_REDIS is not set: no sessions")
        s = client.session(f"{PREFIX}-sh", language="shell")
        res = s.run_code("count=2; export MODE=fast; twice() { echo $(( $1 * 2 )); }; mkdir -p d && cd d")
        self.assertEqual((res.status, res.session_cell), (cf.Status.SUCCESS, 1), res.reason)
        res = s.run_code('twice $count; echo "$MODE ${PWD##*/}"')
        self.assertEqual((res.stdout, res.session_restored), (b"4\nfast d\n", True), res.reason)
        with self.assertRaises(ValueError):
            client.session("x", language="javascript")

    def test_async_session(self):
        if not REDIS:
            self.skipTest("CF_TEST_REDIS is not set: no sessions")

        async def go():
            async with cf.AsyncClient(settings(), request_topic=REQ, result_topic=RES) as ac:
                s = ac.session(f"{PREFIX}-anb")
                first = await s.run_code("n = 20")
                second = await s.run_code("n + 1")
                listed = await s.files.list()
                return first, second, listed

        first, second, listed = asyncio.run(go())
        self.assertEqual((first.status, second.stdout, second.session_restored), (cf.Status.SUCCESS, b"21\n", True),
                         second.reason)
        self.assertEqual([e.path for e in listed], [f".codefleet/sessions/{PREFIX}-anb.python"])

    def test_async_workspace_files(self):
        if not REDIS:
            self.skipTest("CF_TEST_REDIS is not set: no workspaces")

        async def go():
            async with cf.AsyncClient(settings(), request_topic=REQ, result_topic=RES) as ac:
                files = ac.files(f"{PREFIX}-aws")
                self.assertEqual(await files.write("a.txt", "one\n"), 1)
                self.assertEqual(await files.insert("a.txt", 1, "two"), 2)
                self.assertEqual(await files.read("a.txt"), "one\ntwo\n")
                self.assertEqual(await files.list(), [cf.WorkspaceEntry("a.txt", 8)])
                with self.assertRaises(cf.WorkspaceOpError):
                    await files.replace("a.txt", "three", "3")
        asyncio.run(go())

    def test_failing_program(self):
        res = client.run(cf.Request("python", "import sys\nsys.stderr.write('boom\\n')\nsys.exit(3)\n"), timeout=60)
        self.assertEqual(res.status, cf.Status.FAILED)
        self.assertEqual(res.exit_code, 3)
        self.assertEqual(res.stderr, b"boom\n")

    def test_timeout_policy(self):
        started = time.monotonic()
        res = client.run(cf.Request("python", "import time\ntime.sleep(30)\n",
                                    policy=cf.Policy(timeout_us=1_000_000)), timeout=60)
        self.assertEqual(res.status, cf.Status.TIMEOUT, res.reason)
        self.assertIsNone(res.exit_code)  # killed, it never exited
        self.assertLess(time.monotonic() - started, 20)

    def test_wait_times_out_when_no_worker_serves_the_topic(self):
        with cf.Client(settings(), request_topic=IDLE_REQ, result_topic=IDLE_RES) as idle:
            started = time.monotonic()
            with self.assertRaises(cf.Timeout) as ctx:
                idle.run(cf.Request("python", "print(1)"), timeout=1.5)
            waited = time.monotonic() - started
        self.assertIsInstance(ctx.exception, TimeoutError)
        self.assertTrue(cf.id_valid(ctx.exception.id))
        self.assertGreaterEqual(waited, 1.5)
        self.assertLess(waited, 10)

    # -- streaming --------------------------------------------------------

    STREAM_PROGRAM = "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done\n"

    def check_stream(self, chunks, times, ended, result):
        self.assertIsNotNone(result)
        self.assertEqual(result.status, cf.Status.SUCCESS, result.reason)
        self.assertEqual(result.stdout, b"line1\nline2\nline3\nline4\nline5\n")
        self.assertGreaterEqual(len(chunks), 2)  # lines 200 ms apart do not all go out together
        self.assertEqual([c.seq for c in chunks], list(range(len(chunks))))
        self.assertEqual(result.chunks, len(chunks))
        self.assertEqual(b"".join(c.data for c in chunks if c.stream == cf.OutputStream.STDOUT), result.stdout)
        self.assertTrue(all(c.id == result.id and c.run == result.metadata.run for c in chunks))
        # The first chunk came while the program still ran: at least the
        # remaining 4 x 200 ms of it before the stream ended.
        self.assertGreater(ended - times[0], 0.5)

    def test_stream(self):
        chunks, times = [], []
        with client.stream(cf.Request("shell", self.STREAM_PROGRAM), timeout=60) as stream:
            for chunk in stream:
                chunks.append(chunk)
                times.append(time.monotonic())
                if len(chunks) == 1:
                    self.assertIsNone(stream.result)
            ended = time.monotonic()
        self.check_stream(chunks, times, ended, stream.result)

    def test_async_stream(self):
        async def main():
            chunks, times = [], []
            async with cf.AsyncClient(settings(), request_topic=REQ, result_topic=RES) as aclient:
                stream = aclient.stream(cf.Request("shell", self.STREAM_PROGRAM), timeout=60)
                async for chunk in stream:
                    chunks.append(chunk)
                    times.append(time.monotonic())
                ended = time.monotonic()
                plain = await aclient.run(cf.Request("python", "print('async')"), timeout=60)
            return chunks, times, ended, stream.result, plain

        chunks, times, ended, result, plain = asyncio.run(main())
        self.check_stream(chunks, times, ended, result)
        self.assertEqual(plain.stdout, b"async\n")

    def test_follow_reattaches(self):
        # Sent by one client without reading its output; followed by
        # others: while it runs or after, the same chunks and the result.
        rid = client.submit(cf.Request("shell", self.STREAM_PROGRAM, stream=True))
        with cf.Client(settings(), request_topic=REQ, result_topic=RES) as other:
            with other.follow(rid, timeout=60) as stream:
                chunks = list(stream)
            result = stream.result
            self.assertIsNotNone(result)
            self.assertEqual(result.id, rid)
            self.assertEqual(result.status, cf.Status.SUCCESS, result.reason)
            self.assertEqual([c.seq for c in chunks], list(range(result.chunks)))
            self.assertEqual(b"".join(c.data for c in chunks if c.stream == cf.OutputStream.STDOUT), result.stdout)
            self.assertEqual(result.stdout, b"line1\nline2\nline3\nline4\nline5\n")
            # After the end: replayed whole.
            with other.follow(rid, timeout=60) as again:
                self.assertEqual([c.data for c in again], [c.data for c in chunks])
            self.assertEqual(again.result.id, rid)
            # An id nobody sent: no result, said as a timeout.
            with self.assertRaises(cf.Timeout):
                list(other.follow("never-sent-py-0001", timeout=2))

        async def main():
            async with cf.AsyncClient(settings(), request_topic=REQ, result_topic=RES) as aclient:
                stream = aclient.follow(rid, timeout=60)
                got = [c async for c in stream]
                return got, stream.result

        got, aresult = asyncio.run(main())
        self.assertEqual([c.data for c in got], [c.data for c in chunks])
        self.assertEqual(aresult.id, rid)

    def test_follow_refuses_bad_arguments_and_leaks_nothing(self):
        for bad in (dict(request_id=""), dict(request_id="a b"), dict(request_id="x", since=float("inf")),
                    dict(request_id="x", timeout=float("nan"))):
            rid = bad.pop("request_id")
            with self.assertRaises(cf.ClientError):
                client.follow(rid, **bad)

        async def main():
            async with cf.AsyncClient(settings(), request_topic=REQ, result_topic=RES) as aclient:
                inner = await aclient.start()
                for _ in range(3):
                    stream = aclient.follow("never-sent-py-0002", timeout=30)
                    with self.assertRaises(asyncio.TimeoutError):
                        await asyncio.wait_for(stream.__anext__(), 0.01)  # cancelled while it opens
                    await stream.aclose()
                return len(inner._owned)

        self.assertEqual(asyncio.run(main()), 0)

    def test_follow_without_an_output_topic(self):
        # A fleet that does not stream has no <result topic>.output: follow
        # still gives the result (and no chunks).
        from confluent_kafka import Producer
        noout = f"{PREFIX}.noout"
        create_topics([noout])
        try:
            producer = Producer(kafka_conf())
            forged = cf.Result("noout-1", cf.Status.SUCCESS, stdout=b"whole\n")
            producer.produce(noout, key=b"noout-1", value=forged.encode())
            self.assertEqual(producer.flush(30), 0)
            with cf.Client(settings(), request_topic=REQ, result_topic=noout) as other:
                with other.follow("noout-1", timeout=60) as stream:
                    self.assertEqual(list(stream), [])
                self.assertEqual(stream.result.stdout, b"whole\n")
        finally:
            delete_topics([noout])

    # -- cancel and batch -------------------------------------------------

    def test_cancel_a_running_request(self):
        rid = client.submit(cf.Request("command", argv=["/bin/sleep", "60"]))
        time.sleep(1.0)  # let the worker start it
        started = time.monotonic()
        client.cancel(rid, reason="python client test")
        res = client.wait(rid, timeout=30)
        self.assertEqual(res.status, cf.Status.CANCELLED)
        self.assertIn("python client test", res.reason or "")
        self.assertLess(time.monotonic() - started, 15)

    def test_batch(self):
        requests = [cf.Request("python", f"print({i} * {i})") for i in range(20)]
        results = client.batch(requests, concurrency=5, timeout=120)
        self.assertEqual(len(results), 20)
        self.assertEqual([r.status for r in results], [cf.Status.SUCCESS] * 20)
        self.assertEqual([r.stdout for r in results], [f"{i * i}\n".encode() for i in range(20)])

    def test_async_batch(self):
        async def main():
            async with cf.AsyncClient(settings(), request_topic=REQ, result_topic=RES) as aclient:
                return await aclient.batch([cf.Request("python", f"print({i})") for i in range(6)], concurrency=3,
                                           timeout=120)

        self.assertEqual([r.stdout for r in asyncio.run(main())], [f"{i}\n".encode() for i in range(6)])

    # -- hostile bytes on the topics -------------------------------------

    def produce_raw(self, topic: str, key: bytes, value: bytes) -> None:
        from confluent_kafka import Producer
        producer = Producer(kafka_conf())
        producer.produce(topic, key=key, value=value)
        self.assertEqual(producer.flush(30), 0)

    def test_malformed_request_goes_to_the_dlq_and_the_worker_goes_on(self):
        from confluent_kafka import Consumer, TopicPartition
        garbage = b"\xc1garbage"
        self.produce_raw(REQ, b"garbage-key", garbage)
        res = client.run(cf.Request("python", "print('still here')"), timeout=60)
        self.assertEqual(res.stdout, b"still here\n")
        dlq = Consumer({**kafka_conf(), "group.id": f"{PREFIX}-dlq-reader", "enable.auto.commit": False})
        try:
            dlq.assign([TopicPartition(DLQ, p, -2) for p in (0, 1)])  # -2: from the beginning
            deadline = time.monotonic() + 30
            found = None
            while found is None and time.monotonic() < deadline:
                msg = dlq.poll(0.2)
                if msg is not None and msg.error() is None and msg.value() == garbage:
                    found = msg
        finally:
            dlq.close()
        self.assertIsNotNone(found, "the malformed request did not reach the dead-letter topic")
        headers = dict(found.headers() or [])
        self.assertEqual(headers.get("codefleet-origin-topic"), REQ.encode())
        self.assertEqual(found.key(), b"garbage-key")

    def test_undecodable_results_do_not_stop_the_collector(self):
        before = client.stats().results_malformed
        rid = f"{PREFIX}-bad-result"
        # garbage without any id: skipped; a result with a readable id but an
        # unknown status: its waiter gets an internal_error saying so.
        # Same key, same partition: the garbage is read before the result.
        self.produce_raw(RES, rid.encode(), b"\xc1\xc1")
        self.produce_raw(RES, rid.encode(), msgpack.packb({"v": 1, "id": rid, "status": "exploded"}))
        res = client.wait(rid, timeout=30)
        self.assertEqual(res.status, cf.Status.INTERNAL_ERROR)
        self.assertIn("cannot be decoded", res.reason)
        self.assertIn("status", res.reason)
        self.assertEqual(client.stats().results_malformed - before, 2)
        self.assertEqual(client.run(cf.Request("python", "print(1)"), timeout=60).stdout, b"1\n")

    # -- events -----------------------------------------------------------

    def test_events_round_trip(self):
        correlation = f"task-{secrets.token_hex(4)}"
        with client.subscribe_events(correlation_id=correlation) as sub:
            published = client.publish_event(cf.Event(workspace="ws-py", correlation_id=correlation,
                                                      topic="parser", producer="agent:py",
                                                      kind=cf.EventKind.NEED_WORK, payload={"files": ["a.c"]}))
            got = sub.next(timeout=30)
        self.assertTrue(cf.id_valid(published.id))
        self.assertGreater(published.timestamp_us, 0)
        self.assertEqual(got, published)


if __name__ == "__main__":
    unittest.main()
