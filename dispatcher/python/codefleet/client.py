"""Blocking codefleet client: submit requests, wait for results, stream
output chunks, cancel, run batches, publish and follow events.

It behaves like the C dispatcher (``dispatcher/client/cf_dispatcher.h``):

* one idempotent producer (``acks=all``, ``murmur2_random`` partitioner like
  the C clients and Java, so a workspace maps to the same partition whoever
  sends);
* a **result collector**: a consumer *assigned* (no consumer group, nothing
  committed) to every partition of the result topic at its high watermark
  when the client is created, so the result of any later submit is seen, and
  a thread that keeps each result by id until someone waits for it (bounded:
  the oldest are evicted past ``max_pending`` results or
  ``max_pending_bytes``).  A result that does not decode but whose id can be
  read is handed to its waiter as an ``internal_error`` result saying so,
  rather than letting the waiter time out; anything else undecodable is
  skipped and counted.

Thread safety: every method may be called from several threads at once.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple, Union

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from .config import Settings
from .errors import BatchTimeout, ClientClosed, ClientError, DeliveryError, Timeout, WireError, WorkspaceOpError
from .wire import (Cancel, Chunk, Event, EventKind, Request, Result, StartNotice, Status, WorkspaceOp, id_valid,
                   new_id, peek_id)

__all__ = ["Client", "ChunkStream", "EventSubscription", "ClientStats"]

log = logging.getLogger("codefleet")

_POLL_SLICE = 0.1  # seconds a blocked poll waits before re-checking for close
_PRODUCE_QUEUE_FULL_WAIT = 5.0  # how long a produce waits for room in a full queue
_UNKNOWN_TOPIC_RETRY = 5.0  # a topic created just now may take a moment to be seen
# A broker that refuses connections, whose name does not resolve, or that
# wants SASL or TLS this client did not offer is reported after this long,
# not after the whole connect_timeout (the C client does the same).
_UNREACHABLE_GIVE_UP = 2.0
_UNREACHABLE_SIGNS = ("Connection refused", "Failed to resolve", "security.protocol", "might require SASL",
                      "SASL authentication error", "Authentication failed")
_log = logging.getLogger("codefleet.kafka")


class _BrokerProblems:
    """What librdkafka last said about reaching the brokers (its error_cb,
    served by the producer's poller thread), and when."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text = ""
        self._at = 0.0

    def __call__(self, err: KafkaError) -> None:
        _log.warning("%s", err.str())  # what librdkafka would have logged without the callback
        with self._lock:
            self._text = err.str()
            self._at = time.monotonic()

    def unreachable_since(self, t0: float) -> Optional[str]:
        """librdkafka's words, when it said since t0 that no broker is
        going to answer soon; else None."""
        with self._lock:
            if self._at >= t0 and any(s in self._text for s in _UNREACHABLE_SIGNS):
                return self._text
        return None
_CLOSE_FLUSH = 10.0  # seconds close() waits for unsent messages, like the C client

ResultOrError = Union[Result, Exception]


def _now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class ClientStats:
    """Counters, for diagnostics and tests."""

    submitted: int = 0  # requests handed to the producer
    delivery_failed: int = 0  # messages the broker did not take
    results_seen: int = 0  # result messages the collector read (decoded or answered as undecodable)
    results_malformed: int = 0  # result messages that did not decode
    results_evicted: int = 0  # results dropped unclaimed past max_pending(_bytes)
    results_pending: int = 0  # results held for a future wait
    chunks_seen: int = 0  # output chunks of this client's streams
    chunks_malformed: int = 0  # output messages that did not decode
    events_malformed: int = 0  # event messages that did not decode


class _Counters:
    """ClientStats updated from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = ClientStats()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + n)

    def snapshot(self) -> ClientStats:
        with self._lock:
            return dataclasses.replace(self._stats)


def _murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's, and librdkafka's murmur2_random
    for a key): which partition a key's messages are on."""
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = data[4 * n4:]
    if len(rest) == 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h ^= rest[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def _key_partition(key: str, partitions: int) -> int:
    return (_murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def _assign_at_end(consumer: Consumer, topic: str, timeout: float, problems: Optional[_BrokerProblems] = None,
                   brokers: str = "", since_us: Optional[int] = None, key: Optional[str] = None) -> None:
    """Assigns every partition of `topic` at its current high watermark
    (with `since_us`: at its first message at or after that epoch time,
    or the high watermark when none is; with `key`: only the partition
    that key's messages are on).

    Explicit offsets, not OFFSET_END: the logical end is resolved only when
    fetching starts, after which a message produced in between would be
    missed.  Waits briefly for a topic that was created just now, and not
    long for a broker that cannot be reached (`problems`)."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    unknown_deadline = t0 + min(timeout, _UNKNOWN_TOPIC_RETRY)
    slice_s = 0.25  # while no broker answers; a request on its way gets longer
    while True:
        left = deadline - time.monotonic()
        try:
            meta = consumer.list_topics(topic, timeout=max(min(left, slice_s), 0.1)).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                offsets = []
                found = {}
                parts = sorted(meta.partitions)
                if key is not None:
                    parts = [_key_partition(key, len(parts))]
                if since_us is not None:
                    wanted = [TopicPartition(topic, p, max(since_us // 1000, 0)) for p in parts]
                    found = {tp.partition: tp.offset for tp in consumer.offsets_for_times(
                        wanted, timeout=max(deadline - time.monotonic(), 0.1)) if tp.error is None}
                for p in parts:
                    if found.get(p, -1) >= 0:
                        offsets.append(TopicPartition(topic, p, found[p]))
                        continue
                    tp = TopicPartition(topic, p)
                    _, high = consumer.get_watermark_offsets(tp, timeout=max(deadline - time.monotonic(), 0.1),
                                                             cached=False)
                    offsets.append(TopicPartition(topic, p, high))
                consumer.assign(offsets)
                return
            problem = str(meta.error) if meta is not None and meta.error is not None else "no partitions"
            give_up = time.monotonic() >= unknown_deadline
        except KafkaException as e:
            kerr = e.args[0] if e.args else None
            problem = kerr.str() if isinstance(kerr, KafkaError) else str(e)
            now = time.monotonic()
            said = problems.unreachable_since(t0) if problems else None
            if said and now - t0 >= _UNREACHABLE_GIVE_UP:
                raise ClientError(_unreachable_message(brokers, said)) from None
            if isinstance(kerr, KafkaError) and kerr.code() == KafkaError._TIMED_OUT:
                slice_s = _UNREACHABLE_GIVE_UP
            if now >= deadline:
                raise ClientError(_unreachable_message(brokers, said or problem)
                                  if isinstance(kerr, KafkaError) and kerr.code() in (
                                      KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
                                  else f"topic {topic}: {problem}") from None
            time.sleep(0.05)
            continue
        if give_up:
            raise ClientError(f"topic {topic}: {problem}")
        time.sleep(0.2)


def _unreachable_message(brokers: str, said: str) -> str:
    """One line a person can act on, from what librdkafka said."""
    if "security.protocol" in said or "might require SASL" in said:
        return (f"the Kafka broker at {brokers} expects authentication (SASL) or TLS that this client did not "
                f"offer: pass your principal's settings (codefleet.load_settings, CODEFLEET_CONFIG)")
    if "SASL authentication error" in said or "Authentication failed" in said:
        detail = said.split("SASL authentication error: ", 1)[-1]
        return (f"the Kafka broker at {brokers} refused this client's credentials ({detail[:160]}): check "
                f"sasl.username, sasl.password and sasl.mechanisms in the settings (the stack's clients use "
                f"SCRAM-SHA-512); a confluent-kafka older than 2.6.1 cannot do SCRAM with Kafka 4 at all")
    if "Failed to resolve" in said:
        return f"cannot reach the Kafka broker at {brokers}: its name does not resolve: check brokers"
    detail = said.split("failed: ", 1)[1] if "failed: " in said else said
    return f"cannot reach the Kafka broker at {brokers} ({detail[:120]}): is it running? check brokers"


class _ResultCollector:
    """The result topic's reader and the map of unclaimed results."""

    def __init__(self, consumer: Consumer, max_pending: int, max_pending_bytes: int, stats: _Counters) -> None:
        self._consumer = consumer
        self._max_pending = max_pending
        self._max_pending_bytes = max_pending_bytes
        self._stats = stats
        self._cond = threading.Condition()
        # id -> (result or error for its waiter, bytes it holds); oldest first.
        self._pending: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()
        self._bytes = 0
        self._listeners: Dict[str, Callable[[ResultOrError], None]] = {}
        self._closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="codefleet-results", daemon=True)
        self._thread.start()

    # -- reading ---------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(_POLL_SLICE)
            if msg is None:
                continue
            try:
                self._handle(msg)
            except Exception:  # noqa: BLE001 - a dead collector would leave every waiter hanging
                log.exception("result collector: unexpected error handling %s[%s]@%s",
                              msg.topic(), msg.partition(), msg.offset())

    def _handle(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("result collector: %s", err)
            return
        value = msg.value()
        if value is None:  # a tombstone is not a result
            self._stats.add("results_malformed")
            return
        try:
            result = Result.decode(value)
        except WireError as e:
            self._stats.add("results_malformed")
            where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
            log.warning("undecodable result at %s: %s", where, e)
            rid = peek_id(value)
            if rid is None:
                return
            # Its waiter learns now that the answer came, instead of
            # waiting out its timeout for a result that will not decode.
            result = Result(rid, Status.INTERNAL_ERROR,
                            reason=f"a result for this request arrived ({where}) but cannot be decoded: {e}")
        self._stats.add("results_seen")
        self.deliver(result.id, result, len(value))

    # -- the map ---------------------------------------------------------

    def deliver(self, rid: str, value: ResultOrError, size: int = 0) -> None:
        """Hands a result (or a delivery failure) to the listener of its
        id, or keeps it for a later wait.  A second result for an id still
        held is dropped: the first result is the answer (SPEC.md 4.3)."""
        with self._cond:
            listener = self._listeners.pop(rid, None)
            if listener is None:
                if rid in self._pending:
                    return
                self._pending[rid] = (value, size)
                self._bytes += size
                evicted = 0
                while (len(self._pending) > self._max_pending or self._bytes > self._max_pending_bytes) \
                        and len(self._pending) > 1:
                    _, (_, old_size) = self._pending.popitem(last=False)
                    self._bytes -= old_size
                    evicted += 1
                if evicted:
                    self._stats.add("results_evicted", evicted)
                self._cond.notify_all()
        if listener is not None:
            listener(value)

    def _pop(self, rid: str) -> Result:
        value, size = self._pending.pop(rid)
        self._bytes -= size
        if isinstance(value, Exception):
            raise value
        return value

    def take(self, rid: str, timeout: float) -> Result:
        """The result of `rid`, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if rid in self._pending:
                    return self._pop(rid)
                if self._closed:
                    raise ClientClosed("client closed while waiting for a result")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout(f"no result for request {rid} within {timeout:g} s", rid)
                self._cond.wait(left)

    def take_nowait(self, rid: str) -> Optional[Result]:
        with self._cond:
            return self._pop(rid) if rid in self._pending else None

    def take_any(self, ids: Set[str], timeout: float) -> Result:
        """The first result held for any of `ids`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                small, large = (ids, self._pending) if len(ids) <= len(self._pending) else (self._pending, ids)
                for rid in small:
                    if rid in large:
                        return self._pop(rid)
                if self._closed:
                    raise ClientClosed("client closed while waiting for results")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout(f"no result for {len(ids)} request(s) within {timeout:g} s")
                self._cond.wait(left)

    def listen(self, rid: str, listener: Callable[[ResultOrError], None]) -> None:
        """Calls `listener` once with the result of `rid` (from the
        collector thread, or at once when it is already held)."""
        with self._cond:
            if self._closed:
                raise ClientClosed("client closed")
            held = self._pending.pop(rid, None)
            if held is None:
                self._listeners[rid] = listener
                return
            self._bytes -= held[1]
        listener(held[0])

    def unlisten(self, rid: str, listener: Callable[[ResultOrError], None]) -> None:
        with self._cond:
            if self._listeners.get(rid) is listener:
                del self._listeners[rid]

    def pending_count(self) -> int:
        with self._cond:
            return len(self._pending)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()
        with self._cond:
            self._closed = True
            listeners, self._listeners = self._listeners, {}
            self._cond.notify_all()
        for listener in listeners.values():
            listener(ClientClosed("client closed while waiting for a result"))


class Client:
    """A blocking client of the fleet.  Use it as a context manager, or call
    :meth:`close` to flush what is unsent and stop its threads.

    ``settings`` (see :func:`codefleet.config.load_settings` for reading the
    CLI's settings file and environment) gives the brokers, topics and
    librdkafka properties; keyword arguments override single values, and
    ``kafka`` adds properties.  With ``collect_results=False`` no result
    topic is read: only submit, cancel and events work."""

    def __init__(self, settings: Optional[Settings] = None, *, brokers: Optional[str] = None,
                 request_topic: Optional[str] = None, result_topic: Optional[str] = None,
                 events_topic: Optional[str] = None, kafka: Optional[Mapping[str, str]] = None,
                 client_id: str = "codefleet-python", collect_results: bool = True,
                 max_pending: int = 100_000, max_pending_bytes: int = 256 << 20,
                 connect_timeout: float = 30.0) -> None:
        base = settings or Settings()
        self.settings = Settings(
            brokers=brokers or base.brokers,
            request_topic=request_topic or base.request_topic,
            result_topic=result_topic or base.result_topic,
            events_topic=events_topic or base.events_topic,
            kafka={**base.kafka, **(kafka or {})},
        )
        self._client_id = client_id
        self._connect_timeout = connect_timeout
        self._stats = _Counters()
        self._problems = _BrokerProblems()
        self._lock = threading.Lock()
        self._closed = False
        self._owned: Set[Any] = set()  # open streams and subscriptions, closed with the client
        self._last_delivery_error: Optional[DeliveryError] = None
        self._producer = self._kafka_client(Producer, {
            **self._common_conf(),
            "enable.idempotence": True,  # keeps per-partition order across retries
            "acks": "all",
            "linger.ms": 0,
            # Same partition as the C and Java clients for a key: readers
            # compute a workspace's partition with murmur2.
            "partitioner": "murmur2_random",
            **self.settings.kafka,
        })
        self._stop_poller = threading.Event()
        self._poller = threading.Thread(target=self._serve_producer, name="codefleet-producer", daemon=True)
        self._poller.start()
        self._collector: Optional[_ResultCollector] = None
        if collect_results:
            try:
                consumer = self._new_consumer(self.settings.result_topic)
                self._collector = _ResultCollector(consumer, max_pending, max_pending_bytes, self._stats)
            except BaseException:
                self._shutdown_producer()
                raise

    # -- plumbing --------------------------------------------------------

    def _common_conf(self) -> Dict[str, Any]:
        return {
            "bootstrap.servers": self.settings.brokers,
            "client.id": self._client_id,
            "socket.nagle.disable": True,  # small request/response exchanges
            # A KRaft broker fenced for a moment answers metadata without
            # itself, and librdkafka >= 2.10 then bootstraps again only after
            # this (default 5 minutes): the C clients set the same.
            "metadata.recovery.rebootstrap.trigger.ms": 3000,
            "logger": _log,
            "error_cb": self._problems,
        }

    @staticmethod
    def _kafka_client(cls: Any, conf: Dict[str, Any]) -> Any:
        try:
            return cls(conf)
        except KafkaException as e:  # e.g. an unknown or invalid property in the settings
            raise ClientError(f"cannot create a Kafka {cls.__name__.lower()}: {e.args[0] if e.args else e}") from None

    def _new_consumer(self, topic: str, since_us: Optional[int] = None, key: Optional[str] = None) -> Consumer:
        """A consumer assigned at the end of `topic` (with `since_us`: at
        its first message at or after that time).  It needs a group.id
        for assign() but never joins that group or commits to it, so a
        unique throwaway name is right."""
        consumer = self._kafka_client(Consumer, {
            **self._common_conf(),
            "group.id": f"codefleet-python-{secrets.token_hex(8)}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 5,
            "fetch.error.backoff.ms": 10,
            "allow.auto.create.topics": False,
            **self.settings.kafka,
        })
        try:
            _assign_at_end(consumer, topic, self._connect_timeout, self._problems, self.settings.brokers, since_us,
                           key)
        except BaseException:
            consumer.close()
            raise
        return consumer

    def _serve_producer(self) -> None:
        # Delivery reports are only reported from poll(): serve them here so
        # failures reach their waiters without any caller polling.
        while not self._stop_poller.is_set():
            self._producer.poll(_POLL_SLICE)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("client is closed")

    def _need_collector(self) -> _ResultCollector:
        self._check_open()
        if self._collector is None:
            raise ClientError("this client was created with collect_results=False: it cannot wait for results")
        return self._collector

    def _produce(self, topic: str, key: Optional[str], value: bytes,
                 on_delivery: Callable[[Optional[KafkaError], Message], None]) -> None:
        deadline = time.monotonic() + _PRODUCE_QUEUE_FULL_WAIT
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    raise DeliveryError(f"{topic}: the producer queue stayed full for "
                                        f"{_PRODUCE_QUEUE_FULL_WAIT:g} s") from None
                self._producer.poll(_POLL_SLICE)
            except KafkaException as e:
                raise DeliveryError(f"{topic}: {e.args[0] if e.args else e}") from None

    def _produce_and_wait(self, topic: str, key: str, value: bytes, timeout: float, what: str) -> None:
        """Produces one message and waits until the broker acknowledged it."""
        done = threading.Event()
        outcome: List[Optional[KafkaError]] = []

        def delivered(err: Optional[KafkaError], msg: Message) -> None:
            outcome.append(err)
            done.set()

        self._produce(topic, key, value, delivered)
        if not done.wait(timeout):
            raise Timeout(f"{what}: not acknowledged by the broker within {timeout:g} s")
        if outcome[0] is not None:
            self._stats.add("delivery_failed")
            raise DeliveryError(f"{what} to {topic}: {outcome[0].str()}")

    def _request_delivered(self, rid: str, err: Optional[KafkaError], msg: Message) -> None:
        if err is None:
            return
        self._stats.add("delivery_failed")
        failure = DeliveryError(f"request {rid} to {msg.topic()}: {err.str()}")
        with self._lock:
            self._last_delivery_error = failure
        if self._collector is not None:
            self._collector.deliver(rid, failure)  # its waiter learns at once

    def _prepared(self, request: Request, **changes: Any) -> Request:
        """A copy ready to send: an id when it had none, created_us when 0.
        The caller's object is left alone."""
        if not isinstance(request, Request):
            raise TypeError(f"expected a codefleet.Request, got {type(request).__name__}")
        return dataclasses.replace(request, id=request.id or new_id(), created_us=request.created_us or _now_us(),
                                   **changes)

    def _send(self, req: Request, data: bytes) -> None:
        self._produce(self.settings.request_topic, req.kafka_key, data,
                      functools.partial(self._request_delivered, req.id))
        self._stats.add("submitted")

    # -- requests --------------------------------------------------------

    def submit(self, request: Request) -> str:
        """Sends a request and returns its id (generated when empty).

        Asynchronous: the broker's acknowledgement is not waited for.  A
        request the broker refuses is reported to :meth:`wait` for its id
        (as :class:`DeliveryError`) and by :meth:`flush`."""
        self._check_open()
        req = self._prepared(request)
        self._send(req, req.encode())
        return req.id

    def wait(self, request_id: str, timeout: float = 60.0) -> Result:
        """The result of a request submitted through this client (or any
        result for that id read since this client started).

        Raises :class:`Timeout` when none arrives within `timeout` seconds;
        the result stays collectable by a later wait."""
        return self._need_collector().take(request_id, timeout)

    def run(self, request: Request, timeout: float = 60.0) -> Result:
        """Submits and waits: the result within `timeout` seconds of the
        submit, or :class:`Timeout`."""
        self._need_collector()
        return self.wait(self.submit(request), timeout)

    def files(self, workspace: str, timeout: float = 60.0) -> "WorkspaceFiles":
        """A workspace's files through the fleet (SPEC.md section 3.5):
        read, write, list, remove, grep, replace, insert, apply_patch, each
        a request the worker does under the profile of this client's
        request topic (no Redis settings needed)."""
        return WorkspaceFiles(self, workspace, timeout)

    def session(self, session_id: str, workspace: Optional[str] = None, timeout: float = 60.0, *,
                language: str = "python", **fields: Any) -> "Session":
        """A session (SPEC.md section 3.6; `language` python or shell): ``run_code`` runs cells
        whose variables, functions and classes persist, in the workspace
        `workspace` (default: the session id; the tenant's state prefix
        applies); ``commands.run`` runs shell in it; ``files`` are its
        files.  `fields` (``policy``, ``backend``, ...) go into every
        request of the session."""
        from .session import Session
        return Session(self, session_id, workspace, timeout, language=language, **fields)

    def stream(self, request: Request, timeout: float = 60.0, *, grace: float = 2.0) -> "ChunkStream":
        """Submits `request` with ``stream`` set and returns an iterator of
        its output chunks; the result is ``.result`` of the iterator once
        iteration ended (see :class:`ChunkStream`)."""
        return ChunkStream(self, request, timeout, grace)

    def follow(self, request_id: str, timeout: float = 60.0, *, since: float = 600.0,
               grace: float = 2.0) -> "FollowStream":
        """Reattaches to a request sent by anyone, running or finished: an
        iterator of the output chunks its run has published since `since`
        seconds ago (requests sent with ``stream``), then those to come,
        ending with its result in ``.result``, as :meth:`stream` does (see
        :class:`FollowStream`)."""
        return FollowStream(self, request_id, timeout, grace, since)

    def cancel(self, request_id: str, reason: Optional[str] = None, timeout: float = 10.0) -> None:
        """Asks the fleet to stop a request of this client's request topic,
        or never to start it (SPEC.md 12); returns once the broker took the
        cancel.  The request is then answered ``cancelled``, unless it had
        finished already."""
        self._check_open()
        data = Cancel(request_id, reason=reason, created_us=_now_us()).encode()
        self._produce_and_wait(self.settings.cancel_topic, request_id, data, timeout, f"cancel of {request_id}")

    def batch(self, requests: Iterable[Request], concurrency: int = 8, timeout: float = 60.0) -> List[Result]:
        """Runs many requests with at most `concurrency` in flight; results
        in request order.  `timeout` applies to each request from its
        submit.  Every request is validated before the first is sent.

        Raises :class:`BatchTimeout` (with the results that did arrive) when
        some got none in time, :class:`DeliveryError` at once when the
        broker refuses a request."""
        collector = self._need_collector()
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        prepared = [self._prepared(r) for r in requests]
        index = {r.id: i for i, r in enumerate(prepared)}
        if len(index) != len(prepared):
            raise ValueError("batch: two requests have the same id")
        encoded = [r.encode() for r in prepared]
        results: List[Optional[Result]] = [None] * len(prepared)
        inflight: Dict[str, float] = {}  # id -> deadline
        missing = 0
        sent = 0
        while sent < len(prepared) or inflight:
            while sent < len(prepared) and len(inflight) < concurrency:
                self._send(prepared[sent], encoded[sent])
                inflight[prepared[sent].id] = time.monotonic() + timeout
                sent += 1
            try:
                res = collector.take_any(set(inflight), min(inflight.values()) - time.monotonic())
            except Timeout:
                now = time.monotonic()
                late = [rid for rid, deadline in inflight.items() if deadline <= now]
                for rid in late:
                    del inflight[rid]
                missing += len(late)
                continue
            results[index[res.id]] = res
            del inflight[res.id]
        if missing:
            raise BatchTimeout(f"{missing} of {len(prepared)} requests got no result within {timeout:g} s", results)
        return [r for r in results if r is not None]

    def flush(self, timeout: float = 10.0) -> None:
        """Waits until every message sent is acknowledged; raises the first
        delivery failure since the last flush."""
        self._check_open()
        left = self._producer.flush(timeout)
        with self._lock:
            failure, self._last_delivery_error = self._last_delivery_error, None
        if failure is not None:
            raise failure
        if left:
            raise Timeout(f"flush: {left} message(s) still in flight after {timeout:g} s")

    # -- events ----------------------------------------------------------

    def publish_event(self, event: Event, timeout: float = 10.0) -> Event:
        """Publishes a collaboration event (SPEC.md 10), keyed by its
        workspace, and waits for the broker's acknowledgement.  Returns the
        event as published, with ``id`` and ``timestamp_us`` filled when
        they were empty."""
        self._check_open()
        if not isinstance(event, Event):
            raise TypeError(f"expected a codefleet.Event, got {type(event).__name__}")
        ev = dataclasses.replace(event, id=event.id or new_id(), timestamp_us=event.timestamp_us or _now_us())
        self._produce_and_wait(self.settings.events_topic, ev.workspace, ev.encode(), timeout,
                               f"event {ev.id}")
        return ev

    def subscribe_events(self, *, workspace: Optional[str] = None, correlation_id: Optional[str] = None,
                         kind: Optional[Union[EventKind, str]] = None) -> "EventSubscription":
        """Follows the events topic from now on (events published after this
        returns are all seen), optionally filtered."""
        return EventSubscription(self, workspace=workspace, correlation_id=correlation_id, kind=kind)

    # -- lifecycle -------------------------------------------------------

    def stats(self) -> ClientStats:
        s = self._stats.snapshot()
        s.results_pending = self._collector.pending_count() if self._collector else 0
        return s

    def _own(self, resource: Any) -> None:
        with self._lock:
            self._check_open()
            self._owned.add(resource)

    def _disown(self, resource: Any) -> None:
        with self._lock:
            self._owned.discard(resource)

    def _shutdown_producer(self) -> None:
        self._stop_poller.set()
        self._poller.join()
        left = self._producer.flush(_CLOSE_FLUSH)
        if left:
            log.warning("%d message(s) not delivered at close", left)

    def close(self) -> None:
        """Closes open streams and subscriptions, stops the collector (its
        waiters get :class:`ClientClosed`) and flushes unsent messages (up
        to 10 s).  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            owned, self._owned = list(self._owned), set()
        for resource in owned:
            resource.close()
        if self._collector is not None:
            self._collector.close()
        self._shutdown_producer()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclasses.dataclass
class WorkspaceEntry:
    """A file of a listing: its path and size in bytes."""

    path: str
    size: int


def _ws_request(workspace: str, op: str, **fields: Any) -> Request:
    return Request(workspace=workspace, workspace_op=WorkspaceOp(op, **fields))


def _ws_listing(res: Result) -> List[WorkspaceEntry]:
    return [WorkspaceEntry(f.path, f.size) for f in res.files]


def _ws_lines(lines: Optional[Tuple[int, Optional[int]]]) -> Dict[str, int]:
    if lines is None:
        return {}
    first, last = lines
    return {"first_line": first} if last is None else {"first_line": first, "last_line": last}


def _ws_content(res: Result, path: str, format: str) -> Union[str, bytes]:
    f = res.files[0]
    if f.truncated:
        raise ClientError(f"{path}: more than the output cap asked for ({len(f.content)} bytes came back, the file "
                          f"has {f.size}): read it in parts (lines=)")
    return f.content.decode() if format == "text" else f.content


_GREP_LINE = re.compile(r"(.*?):([0-9]+):(.*)", re.S)


def _ws_matches(res: Result) -> List[Tuple[str, int, str]]:
    """grep's ``path:line:text`` lines, split on newlines only (a file's
    text may hold form feeds and the like); a last line cut by the output
    cap is left out.  The first ``:<digits>:`` ends the path."""
    lines = res.stdout.split(b"\n")
    lines.pop()  # after the last newline: nothing, or the cut line
    out = []
    for raw in lines:
        m = _GREP_LINE.fullmatch(raw.decode(errors="replace"))
        if m:
            out.append((m.group(1), int(m.group(2)), m.group(3)))
    return out


def _ws_format(format: str) -> None:
    if format not in ("text", "bytes"):
        raise ValueError('format: "text" or "bytes"')


class WorkspaceFiles:
    """A workspace's files through the fleet, shaped like E2B's
    ``sandbox.files`` (``read``, ``write``, ``list``, ``remove``) with the
    editing tools agents use (``grep``, ``replace``, ``insert``,
    ``apply_patch``).  Each call is one workspace operation (SPEC.md
    section 3.5) on the client's request topic, keyed by the workspace, so
    it runs in order with the workspace's programs.  The changing calls
    return the workspace's new revision and take ``expected_revision`` for
    compare-and-set.  An operation the fleet did not do raises
    :class:`WorkspaceOpError`; ``revision`` is the revision the last answer
    named."""

    def __init__(self, client: "Client", workspace: str, timeout: float = 60.0) -> None:
        self.client = client
        self.workspace = workspace
        self.timeout = timeout
        self.revision = 0

    def _op(self, op: str, **fields: Any) -> Result:
        res = self.client.run(_ws_request(self.workspace, op, **fields), self.timeout)
        self.revision = res.workspace_revision
        if res.status != Status.SUCCESS:
            raise WorkspaceOpError(res)
        return res

    def list(self, pattern: Optional[str] = None) -> List[WorkspaceEntry]:
        """Paths and sizes (``pattern``: a glob, ``*`` within a directory, a
        leading ``**/`` at any depth)."""
        return _ws_listing(self._op("list", pattern=pattern))

    def read(self, path: str, format: str = "text", *, lines: Optional[Tuple[int, Optional[int]]] = None
             ) -> Union[str, bytes]:
        """The file: ``str`` (``format="text"``, UTF-8) or ``bytes``
        (``format="bytes"``); with ``lines=(first, last)`` only those lines
        (1-based, `last` included; ``None``: to the end), as a big file is
        read in parts.  What is over the output cap raises
        :class:`ClientError` rather than handing back part of it."""
        _ws_format(format)
        return _ws_content(self._op("read", path=path, **_ws_lines(lines)), path, format)

    def write(self, path: str, data: Union[str, bytes], *, expected_revision: Optional[int] = None) -> int:
        """Creates or replaces the file; returns the workspace's revision."""
        return self._op("write", path=path, content=data, expected_revision=expected_revision).workspace_revision

    def remove(self, path: str, *, expected_revision: Optional[int] = None) -> int:
        return self._op("delete", path=path, expected_revision=expected_revision).workspace_revision

    def grep(self, text: str, path: Optional[str] = None) -> List[Tuple[str, int, str]]:
        """(path, line, text) of every line holding ``text`` (a fixed
        string); ``path``: a glob of the files searched."""
        return _ws_matches(self._op("grep", pattern=text, path=path))

    def replace(self, path: str, old: str, new: str = "", *, expected_revision: Optional[int] = None) -> int:
        """Anthropic's text_editor ``str_replace``: ``old`` must occur
        exactly once."""
        return self._op("str_replace", path=path, old_str=old, new_str=new,
                        expected_revision=expected_revision).workspace_revision

    def insert(self, path: str, line: int, text: str, *, expected_revision: Optional[int] = None) -> int:
        """``text`` as whole lines after line ``line`` (0: at the top)."""
        return self._op("insert", path=path, insert_line=line, new_str=text,
                        expected_revision=expected_revision).workspace_revision

    def apply_patch(self, patch: str, *, expected_revision: Optional[int] = None) -> List[str]:
        """A patch in OpenAI's V4A format, as one revision or nothing;
        returns the changed paths."""
        return self._op("apply_patch", content=patch, expected_revision=expected_revision).changed_paths


def _is_start_notice(value: Optional[bytes]) -> bool:
    try:
        StartNotice.decode(value if value is not None else b"")
        return True
    except WireError:
        return False


class ChunkStream(Iterator[Chunk]):
    """The output chunks of one streaming request, as they come.

    Created by :meth:`Client.stream`: the output topic is read from its end
    *before* the request is sent, so no chunk is missed.  Iteration yields
    the chunks of the first run seen (a request redelivered after a worker
    died has several runs; ``Chunk.run`` says which), in increasing ``seq``
    order; a chunk lost in transit is a gap in ``seq`` (the result still
    holds every byte).  It ends when the result has arrived and chunks
    0..``result.chunks``-1 of ``result.metadata.run`` were yielded, or
    `grace` seconds after the result.  :class:`Timeout` is raised when no
    result arrives within `timeout` seconds of the submit.

    ``result`` is the request's :class:`Result` once iteration ended
    normally (``None`` before).  Close it (or use ``with``) to stop early."""

    def __init__(self, client: Client, request: Request, timeout: float, grace: float) -> None:
        self._client = client
        self._collector = client._need_collector()
        req = client._prepared(request, stream=True)
        data = req.encode()
        self.id: str = req.id
        self.result: Optional[Result] = None
        self._grace = grace
        self._run: Optional[str] = None
        self._next_seq = 0
        self._result_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer: Optional[Consumer] = client._new_consumer(client.settings.output_topic)
        try:
            client._own(self)
            client._send(req, data)
        except BaseException:
            self._release()
            raise
        self._deadline = time.monotonic() + timeout
        self._timeout = timeout

    def __iter__(self) -> "ChunkStream":
        return self

    def __next__(self) -> Chunk:
        with self._lock:
            try:
                return self._step()
            except BaseException:  # the end, a timeout or a failure: the consumer goes
                self._release()
                raise

    def _result_now(self) -> Optional[Result]:
        return self._collector.take_nowait(self.id)

    def _step(self) -> Chunk:
        while True:
            if self._consumer is None or self._stop.is_set():
                raise StopIteration
            now = time.monotonic()
            if self.result is None:
                self.result = self._result_now()
                if self.result is not None:
                    self._result_at = now
                    self._run = self._run or self.result.metadata.run
            if self.result is not None and (self._complete() or now >= self._result_at + self._grace):
                raise StopIteration
            if self.result is None and now >= self._deadline:
                raise Timeout(f"no result for streaming request {self.id} within {self._timeout:g} s", self.id)
            chunk = self._accept(self._consumer.poll(_POLL_SLICE))
            if chunk is not None:
                return chunk

    def _complete(self) -> bool:
        assert self.result is not None
        return self.result.chunks == 0 or (self._run == self.result.metadata.run
                                           and self._next_seq >= self.result.chunks)

    def _accept(self, msg: Optional[Message]) -> Optional[Chunk]:
        if msg is None:
            return None
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("output chunk reader: %s", err)
            return None
        value = msg.value()
        try:
            chunk = Chunk.decode(value if value is not None else b"")
        except WireError as e:
            if _is_start_notice(value):
                return None  # a start notice (SPEC.md 13.1) is not output

            self._client._stats.add("chunks_malformed")
            log.warning("undecodable output chunk at %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), e)
            return None
        if chunk.id != self.id:
            return None  # another request's
        if self._run is None:
            self._run = chunk.run
        if chunk.run != self._run or chunk.seq < self._next_seq:
            return None  # another run, or a duplicate
        self._next_seq = chunk.seq + 1
        self._client._stats.add("chunks_seen")
        return chunk

    def _release(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
            self._client._disown(self)

    def close(self) -> None:
        """Stops the stream (an iteration in another thread ends within
        about 0.1 s) and releases its consumer.  The result can still be
        waited for with :meth:`Client.wait`."""
        self._stop.set()
        with self._lock:
            self._release()

    def __enter__(self) -> "ChunkStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FollowStream(ChunkStream):
    """A request's output chunks and result, for a client that did not
    send it (:meth:`Client.follow`): the output and result topics are read
    from `since` seconds ago, so chunks published before the call are
    yielded too.  Iteration and its end are :class:`ChunkStream`'s;
    :class:`Timeout` when no result arrives within `timeout` seconds of
    the call.  Nothing is replayed for a request sent without ``stream``:
    the result's output is then all there is."""

    def __init__(self, client: Client, request_id: str, timeout: float, grace: float, since: float) -> None:
        # Not ChunkStream.__init__: nothing is sent, and the result is read
        # from the result topic here, not from the client's collector.
        client._check_open()
        if not id_valid(request_id):
            raise ClientError(f"follow: {request_id!r:.80} is not a request id")
        if not (isinstance(since, (int, float)) and 0 <= since < 10 * 365 * 86400):
            raise ClientError("follow: since must be seconds ago, from 0 to ten years")
        if not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
            raise ClientError("follow: timeout must be a positive, finite number of seconds")
        since_us = _now_us() - int(since * 1_000_000)
        self._client = client
        self.id = request_id
        self.result = None
        self._grace = grace
        self._run = None
        self._next_seq = 0
        self._result_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = None
        self._results: Optional[Consumer] = client._new_consumer(client.settings.result_topic, since_us)
        self._no_output = False
        try:
            try:
                self._consumer = client._new_consumer(client.settings.output_topic, since_us, request_id)
            except ClientError as e:
                if not str(e).startswith(f"topic {client.settings.output_topic}:"):
                    raise
                self._no_output = True  # a fleet that does not stream: the result says everything
            client._own(self)
        except BaseException:
            self._release()
            raise
        self._deadline = time.monotonic() + timeout
        self._timeout = timeout

    def _step(self) -> Chunk:
        if not self._no_output:
            return super()._step()
        while self.result is None and not self._stop.is_set() and self._results is not None:
            if time.monotonic() >= self._deadline:
                raise Timeout(f"no result for request {self.id} within {self._timeout:g} s", self.id)
            self.result = self._result_now(_POLL_SLICE)
        raise StopIteration

    def _accept(self, msg: Optional[Message]) -> Optional[Chunk]:
        # Chunks are keyed by their request's id: others are not decoded.
        if msg is not None and msg.error() is None and msg.key() is not None and msg.key() != self.id.encode():
            return None
        chunk = super()._accept(msg)
        if chunk is not None and self.result is not None:
            # A replay may still be catching up after the result came: the
            # grace counts from its last chunk.
            self._result_at = time.monotonic()
        return chunk

    def _result_now(self, wait: float = 0.0) -> Optional[Result]:
        """The result if it has come: the result consumer drained (its
        first poll waits up to `wait` seconds)."""
        if self._results is None:
            return None
        while True:
            msg = self._results.poll(wait)
            wait = 0.0
            if msg is None or msg.error() is not None:
                return None
            value = msg.value()
            if value is None or (msg.key() != self.id.encode() and peek_id(value) != self.id):
                continue
            try:
                result = Result.decode(value)
            except WireError:
                continue
            if result.id == self.id:
                return result

    def _release(self) -> None:
        if self._results is not None:
            self._results.close()
            self._results = None
        super()._release()
        self._client._disown(self)  # (without an output consumer the base does not)


class EventSubscription(Iterator[Event]):
    """Collaboration events published after the subscription was created
    (every partition of the events topic, assigned at its end), optionally
    filtered.  Undecodable events are skipped and counted."""

    def __init__(self, client: Client, *, workspace: Optional[str], correlation_id: Optional[str],
                 kind: Optional[Union[EventKind, str]]) -> None:
        self._client = client
        self._workspace = workspace
        self._correlation_id = correlation_id
        self._kind = EventKind(kind) if kind is not None else None
        self._lock = threading.Lock()
        self._consumer: Optional[Consumer] = client._new_consumer(client.settings.events_topic)
        try:
            client._own(self)
        except BaseException:
            self.close()
            raise

    def next(self, timeout: float) -> Optional[Event]:
        """The next matching event, or ``None`` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._consumer is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                event = self._accept(self._consumer.poll(min(left, _POLL_SLICE)))
                if event is not None:
                    return event
        raise ClientClosed("event subscription is closed")

    def __iter__(self) -> "EventSubscription":
        return self

    def __next__(self) -> Event:
        """Blocks until the next matching event; ends when closed."""
        while True:
            try:
                event = self.next(_POLL_SLICE * 10)
            except ClientClosed:
                raise StopIteration from None
            if event is not None:
                return event

    def _accept(self, msg: Optional[Message]) -> Optional[Event]:
        if msg is None or msg.error() is not None:
            return None
        value = msg.value()
        try:
            event = Event.decode(value if value is not None else b"")
        except WireError as e:
            self._client._stats.add("events_malformed")
            log.warning("undecodable event at %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), e)
            return None
        if (self._workspace is not None and event.workspace != self._workspace) or \
                (self._correlation_id is not None and event.correlation_id != self._correlation_id) or \
                (self._kind is not None and event.kind != self._kind):
            return None
        return event

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
                self._client._disown(self)

    def __enter__(self) -> "EventSubscription":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
