"""The result collector's bookkeeping, without a broker: bounded memory,
first result wins, waiters and listeners, undecodable results."""
import logging
import threading
import time
import unittest

import msgpack

import codefleet as cf
from codefleet.client import ChunkStream, _Counters, _murmur2, _ResultCollector


class FakeConsumer:
    """Stands in for a confluent_kafka.Consumer: nothing to read."""

    def __init__(self):
        self.closed = False

    def poll(self, timeout):
        time.sleep(min(timeout, 0.01))
        return None

    def close(self):
        self.closed = True


class FakeMessage:
    def __init__(self, value):
        self._value = value

    def error(self):
        return None

    def value(self):
        return self._value

    def topic(self):
        return "results"

    def partition(self):
        return 1

    def offset(self):
        return 42


class Collector(unittest.TestCase):
    def make(self, max_pending=100, max_pending_bytes=1 << 20):
        self.stats = _Counters()
        self.consumer = FakeConsumer()
        c = _ResultCollector(self.consumer, max_pending, max_pending_bytes, self.stats)
        self.addCleanup(c.close)
        return c

    def test_waited_result_is_handed_over_once(self):
        c = self.make()
        c.deliver("a", cf.Result("a", "success", stdout=b"1"))
        self.assertEqual(c.take("a", 1).stdout, b"1")
        self.assertIsNone(c.take_nowait("a"))

    def test_first_result_wins(self):
        c = self.make()
        c.deliver("a", cf.Result("a", "success"))
        c.deliver("a", cf.Result("a", "failed"))
        self.assertEqual(c.take("a", 1).status, cf.Status.SUCCESS)
        self.assertEqual(c.pending_count(), 0)

    def test_bounded_by_count_oldest_out(self):
        c = self.make(max_pending=3)
        for i in range(5):
            c.deliver(str(i), cf.Result(str(i), "success"))
        self.assertEqual(c.pending_count(), 3)
        self.assertEqual(self.stats.snapshot().results_evicted, 2)
        self.assertIsNone(c.take_nowait("0"))
        self.assertIsNotNone(c.take_nowait("4"))

    def test_bounded_by_bytes_but_the_newest_stays(self):
        c = self.make(max_pending_bytes=1000)
        c.deliver("small", cf.Result("small", "success"), 400)
        c.deliver("big", cf.Result("big", "success"), 5000)
        self.assertIsNone(c.take_nowait("small"))
        self.assertIsNotNone(c.take_nowait("big"))

    def test_wait_blocks_until_the_result_comes(self):
        c = self.make()
        threading.Timer(0.2, c.deliver, ("late", cf.Result("late", "success"))).start()
        started = time.monotonic()
        self.assertEqual(c.take("late", 5).id, "late")
        self.assertGreaterEqual(time.monotonic() - started, 0.15)

    def test_timeout(self):
        c = self.make()
        with self.assertRaises(cf.Timeout) as ctx:
            c.take("never", 0.1)
        self.assertEqual(ctx.exception.id, "never")

    def test_take_any(self):
        c = self.make()
        c.deliver("x", cf.Result("x", "success"))
        c.deliver("b", cf.Result("b", "success"))
        self.assertEqual(c.take_any({"a", "b"}, 1).id, "b")
        self.assertEqual(c.pending_count(), 1)

    def test_delivery_failure_reaches_the_waiter(self):
        c = self.make()
        c.deliver("a", cf.DeliveryError("refused"))
        with self.assertRaises(cf.DeliveryError):
            c.take("a", 1)

    def test_listener_gets_the_result_instead_of_the_map(self):
        c = self.make()
        got = []
        c.listen("a", got.append)
        c.deliver("a", cf.Result("a", "success"))
        self.assertEqual([r.id for r in got], ["a"])
        self.assertEqual(c.pending_count(), 0)
        c.deliver("b", cf.Result("b", "success"))  # already held: handed over at once
        c.listen("b", got.append)
        self.assertEqual([r.id for r in got], ["a", "b"])

    def test_close_wakes_waiters_and_closes_the_consumer(self):
        c = self.make()
        errors = []

        def wait():
            try:
                c.take("a", 30)
            except cf.ClientClosed as e:
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.1)
        c.close()
        t.join(5)
        self.assertEqual(len(errors), 1)
        self.assertTrue(self.consumer.closed)

    def test_undecodable_result_with_an_id_answers_its_waiter(self):
        c = self.make()
        c._handle(FakeMessage(msgpack.packb({"v": 1, "id": "r-1", "status": "exploded"})))
        c._handle(FakeMessage(b"\xc1 no id at all"))
        c._handle(FakeMessage(None))  # a tombstone
        res = c.take("r-1", 1)
        self.assertEqual(res.status, cf.Status.INTERNAL_ERROR)
        self.assertIn("results[1]@42", res.reason)
        self.assertIn("status: unknown value", res.reason)
        stats = self.stats.snapshot()
        self.assertEqual((stats.results_malformed, stats.results_seen), (3, 1))
        self.assertEqual(c.pending_count(), 0)


class KeyPartition(unittest.TestCase):
    def test_murmur2_is_kafkas(self):
        # The Java client's test vectors (Utils.murmur2): follow reads only
        # the partition its id's chunks are on, as the worker's producer
        # (murmur2_random) put them.
        def signed(x):
            return x - (1 << 32) if x >= 1 << 31 else x
        for key, want in [("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
                          ("a-little-bit-longer-string", -1486304829),
                          ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), ("abc", 479470107)]:
            self.assertEqual(signed(_murmur2(key.encode())), want, key)


class StartNoticesInAStream(unittest.TestCase):
    """A start notice (SPEC.md 13.1) on the output topic is neither output
    nor a malformed chunk: the stream skips it without a warning."""

    def stream(self):
        s = ChunkStream.__new__(ChunkStream)
        s.id, s._run, s._next_seq = "r1", None, 0
        s._client = type("FakeClient", (), {})()
        s._client._stats = _Counters()
        return s

    def test_a_notice_is_skipped_quietly(self):
        s = self.stream()
        notice = cf.StartNotice(id="r1", run="run-1", worker="w1", at_us=1).encode()
        with self.assertLogs("codefleet", level="WARNING") as logs:
            self.assertIsNone(s._accept(FakeMessage(notice)))
            logging.getLogger("codefleet").warning("sentinel")  # assertLogs needs one line (assertNoLogs: 3.10+)
        self.assertEqual([r.getMessage() for r in logs.records], ["sentinel"])
        self.assertEqual(s._client._stats.snapshot().chunks_malformed, 0)
        chunk = cf.Chunk(id="r1", run="run-1", seq=0, stream=cf.OutputStream.STDOUT, offset=0, data=b"x").encode()
        self.assertEqual(s._accept(FakeMessage(chunk)).data, b"x")
        self.assertIsNone(s._accept(FakeMessage(msgpack.packb({"v": 1, "id": "r1"}))))
        self.assertEqual(s._client._stats.snapshot().chunks_malformed, 1)


if __name__ == "__main__":
    unittest.main()


class Unreachable(unittest.TestCase):
    """A broker nobody can reach is one clear ClientError, told after about
    2 s (not the 30 s connect_timeout), never librdkafka's raw KafkaError."""

    def test_refused(self):
        with self.assertRaises(cf.ClientError) as ctx:
            cf.Client(brokers="127.0.0.1:1", connect_timeout=60.0)
        text = str(ctx.exception)
        self.assertIn("cannot reach the Kafka broker at 127.0.0.1:1 (Connection refused", text)
        self.assertNotIn("KafkaError{", text)

    def test_name_does_not_resolve(self):
        with self.assertRaises(cf.ClientError) as ctx:
            cf.Client(brokers="nosuch.invalid:9092", connect_timeout=60.0)
        self.assertIn("its name does not resolve", str(ctx.exception))


class WorkspaceGrep(unittest.TestCase):
    """grep's answer as (path, line, text): newlines only split it."""

    def test_lines(self):
        from codefleet.client import _ws_matches
        res = cf.Result("g", "success", stdout=b"a.py:1:x\x0cy\na:b.txt:3:hit\nsrc/c.py:12:a:1:b\n")
        self.assertEqual(_ws_matches(res), [("a.py", 1, "x\x0cy"), ("a:b.txt", 3, "hit"), ("src/c.py", 12, "a:1:b")])

    def test_a_line_cut_by_the_cap_is_left_out(self):
        from codefleet.client import _ws_matches
        res = cf.Result("g", "success", stdout=b"a.py:1:x\nsrc/b", stdout_truncated=True)
        self.assertEqual(_ws_matches(res), [("a.py", 1, "x")])
