"""codefleet.wire against schema/SPEC.md: the golden vectors both ways, and
hostile input refused with WireError (never another exception).  No broker
needed."""
import os
import random
import unittest
from pathlib import Path

import codefleet as cf


def _golden_dir() -> Path:
    src = os.environ.get("CF_SOURCE_DIR")
    root = Path(src) if src else Path(__file__).resolve().parents[3]
    return root / "schema" / "golden"


GOLDEN = _golden_dir()

# The expected message of every vector, as typed objects (the same content
# as schema/tools/mp_check.py and mp_check_events.py spell out in msgpack).
INPUT_VALUE = {"n": 3, "tags": ["a", "b"], "ok": True, "pi": 1.5, "none": None}

EXPECTED = {
    "request_min": cf.Request(id="req-min-0001", language=cf.Language.PYTHON, code=b"print(1)\n"),
    "request_full": cf.Request(
        id="req-full-0001",
        language=cf.Language.PYTHON,
        backend="process",
        code=b"import sys\nprint(sys.stdin.read())\n",
        argv=["--verbose", "x"],
        module=b"\x00asm\x01\x00\x00\x00",
        stdin=b"\xff\xfe\x00\x01",
        input=INPUT_VALUE,
        env={"LANG": "C.UTF-8", "DEBUG": "1"},
        files={"main.py": b"print(1)\n", "data.bin": b"\x00\xff"},
        policy=cf.Policy(
            network=cf.Network.DISABLED,
            filesystem=cf.Filesystem(mode=cf.FsMode.PATHS, read_only=["/usr", "/lib"], read_write=["/tmp/out"]),
            env_allow=["PATH", "HOME"],
            timeout_us=5000000,
            cpu_time_us=2000000,
            memory_bytes=268435456,
            max_processes=16,
            max_stdout_bytes=1048576,
            max_stderr_bytes=65536,
            max_file_size_bytes=10485760,
        ),
        workspace="ws-42",
        thread="thread-7",
        identity="agent:alice",
        reply_to="codefleet.results.alice",
        deadline_us=1767225600000000,
        created_us=1767225590000000,
        trace={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
    ),
    "request_compiled": cf.Request(
        id="req-compiled-0001",
        language=cf.Language.RUST,
        code=b"fn run(input: &str) -> String { input.to_string() }\n",
        policy=cf.Policy(timeout_us=2000000, compile_timeout_us=30000000, compile_memory_bytes=1073741824),
        harness=cf.Harness.FUNCTION,
        compile_flags=["-Copt-level=1"],
        cases=[
            cf.Case(name="small", stdin=b"1 2\n", expect_stdout=b"3\n"),
            cf.Case(input={"n": 7}, argv=["--fast"], expect_stdout=b""),
        ],
        stop_on_failure=True,
        collect=["out/*.png", "report/"],
    ),
    "request_stream": cf.Request(id="req-stream-0001", language=cf.Language.SHELL,
                                 code=b"echo a; sleep 1; echo b >&2\n", stream=True),
    "result_min": cf.Result(id="req-min-0001", status=cf.Status.SUCCESS),
    "result_full": cf.Result(
        id="req-full-0001",
        status=cf.Status.FAILED,
        exit_code=3,
        signal=9,
        stdout=b"hello\n",
        stderr=b"oops\xff\n",
        stdout_truncated=True,
        stderr_truncated=True,
        output={"answer": 42},
        diagnostics=[
            cf.Diagnostic(level="error", message="NameError: name 'x' is not defined", file="main.py", line=3,
                          column=5),
            cf.Diagnostic(level="warning", message="unused import"),
        ],
        wall_time_us=12345,
        cpu_time_us=6789,
        peak_memory_bytes=10485760,
        metadata=cf.Metadata(backend="process", isolation="host_local", language="python", worker="worker-1",
                             identity="agent:alice", attempt=2),
        reason="exited with status 3",
        workspace_revision=43,
        changed_paths=["out/report.txt", "main.py"],
        workspace_conflict=True,
        finished_us=1767225600123456,
    ),
    "result_compiled": cf.Result(
        id="req-compiled-0001",
        status=cf.Status.FAILED,
        diagnostics=[cf.Diagnostic(
            level="warning", message="unused variable: `x`", file="main.rs", line=2, column=9,
            code="unused_variables", end_line=2, end_column=10,
            children=[cf.Diagnostic(level="help",
                                    message="if this is intentional, prefix it with an underscore: `_x`",
                                    file="main.rs", line=2, column=9)],
        )],
        wall_time_us=3000,
        cpu_time_us=2000,
        peak_memory_bytes=2097152,
        metadata=cf.Metadata(backend="sandbox", isolation="sandbox", language="rust", toolchain="rustc 1.63.0"),
        reason="1 of 2 cases did not pass (1 stdout mismatch); first: case 1 (small): stdout does not match",
        compile=cf.CompileInfo(cached=True, wall_time_us=412000, cpu_time_us=380000, peak_memory_bytes=134217728),
        cases=[
            cf.CaseResult(name="small", status=cf.Status.SUCCESS, exit_code=0, stdout=b"4\n", wall_time_us=1500,
                          match=False),
            cf.CaseResult(status=cf.Status.SUCCESS, exit_code=0, output=7, wall_time_us=1500, match=True),
        ],
        files=[cf.OutFile(path="out/plot.png", size=70000, content=b"\x89PNG", truncated=True)],
        files_truncated=True,
    ),
    "request_workspace_op": cf.Request(id="req-wsop-0001", workspace="tenant-a.repo", workspace_op=cf.WorkspaceOp(
        cf.WorkspaceOpKind.STR_REPLACE, path="src/app.py", old_str=b"x = 1", new_str=b"x = 41", expected_revision=3)),
    "request_workspace_read": cf.Request(id="req-wsop-0002", workspace="tenant-a.repo", workspace_op=cf.WorkspaceOp(
        cf.WorkspaceOpKind.READ, path="src/app.py", first_line=10, last_line=20)),
    "request_session_cell": cf.Request(id="req-cell-0002", language=cf.Language.PYTHON, code=b"print(x + 1)\n",
                                       session="tenant-a.s1"),
    "result_session_cell": cf.Result(id="req-cell-0002", status=cf.Status.SUCCESS, exit_code=0, stdout=b"42\n",
                                     workspace_revision=3,
                                     changed_paths=[".codefleet/sessions/tenant-a.s1.python"], session_cell=2,
                                     session_restored=True, session_lost=["lock"]),
    "result_stream": cf.Result(id="req-stream-0001", status=cf.Status.SUCCESS, exit_code=0, stdout=b"a\n",
                               stderr=b"b\n", metadata=cf.Metadata(backend="sandbox", run="3f2a9c0d1e4b5a67-42"),
                               chunks=2),
    "chunk": cf.Chunk(id="req-stream-0001", run="3f2a9c0d1e4b5a67-42", seq=1, stream=cf.OutputStream.STDERR,
                      offset=0, data=b"b\n", at_us=1764000000500000),
    "start_notice": cf.StartNotice(id="req-stream-0001", run="3f2a9c0d1e4b5a67-42", worker="w1",
                                   at_us=1764000000400000),
    "event_min": cf.Event(id="evt-min-0001", workspace="ws-42", correlation_id="task-7", topic="parser",
                          producer="agent:alice", kind=cf.EventKind.NEED_WORK, timestamp_us=1767225600000000),
    "event_full": cf.Event(
        id="evt-full-0001", workspace="ws-42", correlation_id="task-7", topic="parser/review",
        producer="agent:alice", consumer="agent:bob", kind=cf.EventKind.FEEDBACK_REQUESTED,
        payload={"question": "LALR or PEG?", "files": ["src/parse.c", "src/lex.c"], "priority": 2,
                 "blocking": True, "score": 0.5, "context": None},
        timestamp_us=1767225600123456,
    ),
}


def golden(name: str) -> bytes:
    return (GOLDEN / f"{name}.msgpack").read_bytes()


def request_bytes(**fields):
    """A request map built by hand, for inputs our encoder refuses."""
    body = {"v": 1, "id": "req-1", "language": "python", "code": "print(1)"}
    body.update(fields)
    return mp(body)


def mp(value) -> bytes:
    import msgpack
    return msgpack.packb(value, use_bin_type=True)


class GoldenVectors(unittest.TestCase):
    def test_every_vector_is_covered(self):
        on_disk = {p.stem for p in GOLDEN.glob("*.msgpack")}
        self.assertEqual(on_disk, set(EXPECTED))

    def test_decode_gives_the_expected_object(self):
        for name, want in EXPECTED.items():
            with self.subTest(name):
                got = type(want).decode(golden(name))
                self.assertEqual(got, want)

    def test_encode_gives_the_file_bytes(self):
        for name, want in EXPECTED.items():
            with self.subTest(name):
                self.assertEqual(want.encode(), golden(name))
                self.assertEqual(cf.encode(want), golden(name))

    def test_hex_dumps_agree(self):
        for name in EXPECTED:
            with self.subTest(name):
                text = (GOLDEN / f"{name}.hex").read_text()
                self.assertEqual(bytes.fromhex(text), golden(name))

    def test_decoded_types(self):
        req = cf.Request.decode(golden("request_full"))
        self.assertIs(req.language, cf.Language.PYTHON)
        self.assertIsInstance(req.code, bytes)  # sent as msgpack str, a bytes field all the same
        self.assertIsInstance(req.files["main.py"], bytes)
        self.assertIs(req.policy.network, cf.Network.DISABLED)
        res = cf.Result.decode(golden("result_full"))
        self.assertIs(res.status, cf.Status.FAILED)
        self.assertFalse(res.ok)
        self.assertEqual(res.status, "failed")  # enums compare equal to their wire text

    def test_text_fields_travel_as_str_or_bin(self):
        # code is valid UTF-8: str (0xa0..0xbf / 0xd9); stdin is not: bin8 (0xc4).
        data = cf.Request("python", "x", id="r", stdin=b"\xff").encode()
        self.assertIn(b"\xa4code\xa1x", data)
        self.assertIn(b"\xa5stdin\xc4\x01\xff", data)
        # result stdout is always bin, even when it is text
        self.assertIn(b"\xa6stdout\xc4\x02hi", cf.Result("r", "success", stdout=b"hi").encode())

    def test_cancel_matches_the_spec_example(self):
        data = cf.Cancel("req-1", reason="user stopped it", created_us=1767225600000000).encode()
        self.assertTrue(data.startswith(bytes.fromhex(
            "85 a1 76 01 a4 74 79 70 65 a6 63 61 6e 63 65 6c a2 69 64 a5 72 65 71 2d 31 a6 72 65 61 73 6f 6e af")))
        self.assertEqual(cf.Cancel.decode(data), cf.Cancel("req-1", "user stopped it", 1767225600000000))
        self.assertEqual(cf.Cancel("req-1").encode(), bytes.fromhex("83 a1 76 01 a4 74 79 70 65 a6 63 61 6e 63 65 6c "
                                                                    "a2 69 64 a5 72 65 71 2d 31"))


class Values(unittest.TestCase):
    def test_nil_input_is_a_value_absent_is_not(self):
        with_nil = cf.Request("python", "x", id="r", input=None).encode()
        self.assertIn(b"\xa5input\xc0", with_nil)
        self.assertIsNone(cf.Request.decode(with_nil).input)
        without = cf.Request("python", "x", id="r").encode()
        self.assertNotIn(b"input", without)
        self.assertIs(cf.Request.decode(without).input, cf.ABSENT)

    def test_value_python_cannot_hold_round_trips_as_raw(self):
        odd = bytes.fromhex("81 92 01 02 a1 78")  # {[1, 2]: "x"}: an array as a map key
        data = cf.Result("r", "success", output=cf.Raw(odd)).encode()
        res = cf.Result.decode(data)
        self.assertEqual(res.output, cf.Raw(odd))
        self.assertEqual(res.encode(), data)

    def test_value_too_deep_is_refused_on_encode(self):
        deep = []
        for _ in range(40):
            deep = [deep]
        with self.assertRaises(cf.WireError) as ctx:
            cf.Request("python", "x", id="r", input=deep).encode()
        self.assertEqual(ctx.exception.field, "input")

    def test_value_that_is_not_msgpack_is_refused(self):
        with self.assertRaises(cf.WireError) as ctx:
            cf.Result("r", "success", output=object()).encode()
        self.assertEqual(ctx.exception.field, "output")


def wire_error(test, data, decode=cf.Request.decode, field=None, contains=None):
    """Asserts that decoding `data` raises WireError (and nothing else)."""
    with test.assertRaises(cf.WireError) as ctx:
        decode(data)
    if field is not None:
        test.assertEqual(ctx.exception.field, field, str(ctx.exception))
    if contains is not None:
        test.assertIn(contains, str(ctx.exception))
    return ctx.exception


class HostileInput(unittest.TestCase):
    DECODERS = {"request": cf.Request.decode, "result": cf.Result.decode, "chunk": cf.Chunk.decode,
                "start": cf.StartNotice.decode, "event": cf.Event.decode}

    def decoder_for(self, name):
        return self.DECODERS[name.split("_")[0]]

    def test_every_truncation_is_refused(self):
        for name in EXPECTED:
            data = golden(name)
            for n in range(len(data)):
                with self.subTest(name=name, length=n):
                    wire_error(self, data[:n], self.decoder_for(name))

    def test_trailing_bytes(self):
        wire_error(self, golden("request_min") + b"\x00", field="message", contains="1 trailing bytes")

    def test_mutations_never_raise_anything_but_wire_error(self):
        rng = random.Random(12)
        for name in EXPECTED:
            data = golden(name)
            decode = self.decoder_for(name)
            for _ in range(400):
                b = bytearray(data)
                for _ in range(rng.randint(1, 4)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                try:
                    decode(bytes(b))
                except cf.WireError:
                    pass

    def test_not_a_map_or_not_bytes(self):
        wire_error(self, b"", field="message", contains="empty")
        wire_error(self, b"\xc1garbage", field="message", contains="expected a msgpack map")
        wire_error(self, mp([1, 2]), field="message")
        wire_error(self, "a str", field="message", contains="expected bytes")

    def test_version(self):
        wire_error(self, request_bytes(v=2), field="v", contains="unsupported schema version 2")
        wire_error(self, mp({"id": "r", "language": "python", "code": "x"}), field="v", contains="missing")
        wire_error(self, request_bytes(v="1"), field="v", contains="expected integer")
        # the version is checked before any field type
        wire_error(self, request_bytes(v=2, id=7), field="v")
        for decode in self.DECODERS.values():
            wire_error(self, mp({"v": 2}), decode, field="v")

    def test_wrong_types_name_the_field(self):
        wire_error(self, request_bytes(id=7), field="id", contains="expected string")
        wire_error(self, request_bytes(argv=["a", 2]), field="argv[1]", contains="expected string")
        wire_error(self, request_bytes(policy={"timeout_us": -1}), field="policy.timeout_us",
                   contains="expected non-negative integer")
        wire_error(self, request_bytes(policy={"timeout_us": 1.5}), field="policy.timeout_us")
        wire_error(self, request_bytes(policy={"filesystem": {"read_only": "x"}}),
                   field="policy.filesystem.read_only")
        wire_error(self, request_bytes(stream=1), field="stream", contains="expected bool")
        wire_error(self, request_bytes(env={"A": 1}), field="env[0]")
        wire_error(self, request_bytes(cases=[{"argv": "x"}]), field="cases[0].argv")
        wire_error(self, request_bytes(deadline_us=1 << 63), field="deadline_us")  # beyond int64
        wire_error(self, mp({"v": 1, "id": "r", "status": "success", "exit_code": 1 << 40}), cf.Result.decode,
                   field="exit_code", contains="32-bit")
        wire_error(self, mp({"v": 1, "id": "r", "status": "success", "diagnostics": [{"level": "error"}]}),
                   cf.Result.decode, field="diagnostics[0]", contains="message")
        wire_error(self, mp({"v": 1, "id": "r", "status": "success", "cases": [{}]}), cf.Result.decode,
                   field="cases[0]", contains="status")

    def test_str_fields_must_be_utf8_without_nul(self):
        body = request_bytes(backend="XX").replace(b"\xa2XX", b"\xa2\xff\xfe")
        wire_error(self, body, field="backend", contains="UTF-8")
        wire_error(self, request_bytes(backend="a\0b"), field="backend", contains="NUL")

    def test_bad_ids(self):
        for bad in ("", "has space", "x" * 129, "tab\tid", "é"):
            with self.subTest(id=bad):
                wire_error(self, request_bytes(id=bad), field="id")
        wire_error(self, mp({"v": 1, "language": "python", "code": "x"}), field="id", contains="missing")
        self.assertEqual(cf.Request.decode(request_bytes(id="x" * 128)).id, "x" * 128)

    def test_unknown_enums_are_refused_without_echo(self):
        e = wire_error(self, request_bytes(language="cobol"), field="language", contains="unknown value")
        self.assertNotIn("cobol", str(e))
        wire_error(self, mp({"v": 1, "id": "r", "status": "exploded"}), cf.Result.decode, field="status")
        wire_error(self, request_bytes(policy={"network": "sometimes"}), field="policy.network")
        wire_error(self, request_bytes(harness="method"), field="harness")

    def test_required_fields_and_language_rules(self):
        wire_error(self, mp({"v": 1, "id": "r", "code": "x"}), field="language")
        wire_error(self, mp({"v": 1, "id": "r", "language": "python"}), field="code")
        wire_error(self, mp({"v": 1, "id": "r", "language": "command"}), field="argv")
        wire_error(self, mp({"v": 1, "id": "r", "language": "command", "argv": [""]}), field="argv[0]")
        wire_error(self, mp({"v": 1, "id": "r", "language": "wasm"}), field="module")
        wire_error(self, request_bytes(stream=True, cases=[{}]), field="stream")
        wire_error(self, mp({"v": 1, "id": "r"}), cf.Result.decode, field="status")

    def test_duplicates(self):
        dup = bytes.fromhex("85 a1 76 01") + mp("id") + mp("a") + mp("language") + mp("python") + \
            mp("code") + mp("x") + mp("id") + mp("b")
        wire_error(self, dup, field="id", contains="duplicate field")
        dup_env = request_bytes(env={"A": "1", "B": "2"}).replace(b"\xa1B", b"\xa1A")
        wire_error(self, dup_env, field="env", contains="duplicate key")

    def test_non_string_key(self):
        data = bytes.fromhex("82 a1 76 01 01 02")
        wire_error(self, data, field="message", contains="string keys")

    def test_unknown_fields_are_skipped(self):
        data = request_bytes(future_field={"nested": [1, 2, 3]}, policy={"future_limit": 5})
        self.assertEqual(cf.Request.decode(data), cf.Request("python", "print(1)", id="req-1"))

    def test_nil_means_absent(self):
        self.assertIsNone(cf.Request.decode(request_bytes(backend=None, workspace=None)).backend)

    def test_lying_counts_are_refused_before_allocating(self):
        # map32 declaring 2^28 entries with a few bytes behind it
        wire_error(self, b"\xdf\x10\x00\x00\x00\xa1v\x01", field="message", contains="entries")
        wire_error(self, request_bytes(argv=["a"]).replace(b"\x91\xa1a", b"\xdd\x10\x00\x00\x00\xa1a"),
                   field="argv", contains="entries")
        # a str claiming more bytes than there are
        wire_error(self, b"\x82\xa1v\x01\xa1x\xdb\x00\x00\x10\x00abc", field="x", contains="truncated")

    def test_limits(self):
        data = golden("request_full")
        wire_error(self, data, lambda d: cf.Request.decode(d, cf.Limits(max_total_bytes=100)), field="message",
                   contains="exceeds the limit")
        wire_error(self, data, lambda d: cf.Request.decode(d, cf.Limits(max_str_bytes=20)), contains="limit of 20")
        wire_error(self, data, lambda d: cf.Request.decode(d, cf.Limits(max_bin_bytes=3)), contains="limit of 3")
        wire_error(self, data, lambda d: cf.Request.decode(d, cf.Limits(max_elements=4)), contains="limit is 4")
        wire_error(self, request_bytes(backend="x" * 70000), field="backend", contains="65536")
        deep = 1
        for _ in range(40):
            deep = [deep]
        wire_error(self, request_bytes(input=deep), field="input", contains="nesting deeper than 32")
        ok = 1
        for _ in range(31):  # input at depth 2: 31 nested arrays reach depth 32
            ok = [ok]
        self.assertEqual(cf.Request.decode(request_bytes(input=ok)).input, ok)

    def test_chunk_rules(self):
        base = {"v": 1, "id": "r", "run": "run-1", "seq": 0, "stream": "stdout", "offset": 0, "data": b"x"}
        self.assertEqual(cf.Chunk.decode(mp(base)).data, b"x")
        for change, field in (({"data": "x"}, "data"), ({"data": b""}, "data"), ({"stream": "stdin"}, "stream"),
                              ({"seq": -1}, "seq"), ({"run": "r" * 65}, "run"), ({"run": None}, "run")):
            with self.subTest(change=change):
                wire_error(self, mp({**base, **change}), cf.Chunk.decode, field=field)
        wire_error(self, mp({k: v for k, v in base.items() if k != "offset"}), cf.Chunk.decode, field="offset")
        wire_error(self, mp({**base, "data": b"x" * (256 * 1024 + 1)}), cf.Chunk.decode, field="data")

    def test_cancel_rules(self):
        wire_error(self, mp({"v": 1, "type": "pause", "id": "r"}), cf.Cancel.decode, field="type")
        wire_error(self, mp({"v": 1, "id": "r"}), cf.Cancel.decode, field="type")
        wire_error(self, mp({"v": 1, "type": "cancel", "id": "r", "reason": "a\nb"}), cf.Cancel.decode,
                   field="reason")
        wire_error(self, mp({"v": 1, "type": "cancel", "id": "r", "reason": "x" * 257}), cf.Cancel.decode,
                   field="reason")

    def test_event_rules(self):
        base = {"v": 1, "id": "e", "workspace": "ws", "correlation_id": "c", "topic": "t", "producer": "p",
                "kind": "blocked", "timestamp_us": 5}
        self.assertIs(cf.Event.decode(mp(base)).kind, cf.EventKind.BLOCKED)
        for change, field in (({"workspace": "a/b"}, "workspace"), ({"kind": "dancing"}, "kind"),
                              ({"timestamp_us": 0}, "timestamp_us"), ({"topic": "a\x07"}, "topic"),
                              ({"producer": ""}, "producer"), ({"consumer": "x" * 257}, "consumer"),
                              ({"correlation_id": "a b"}, "correlation_id"),
                              ({"payload": "x" * (600 * 1024)}, "payload")):
            with self.subTest(change=change):
                wire_error(self, mp({**base, **change}), cf.Event.decode, field=field)
        self.assertIsNone(cf.Event.decode(mp({**base, "payload": None})).payload)  # nil is a payload


class Encoding(unittest.TestCase):
    def assert_refused(self, message, field):
        with self.assertRaises(cf.WireError) as ctx:
            message.encode()
        self.assertEqual(ctx.exception.field, field, str(ctx.exception))

    def test_invalid_objects_are_refused(self):
        self.assert_refused(cf.Request("python", id="r"), "code")
        self.assert_refused(cf.Request("python", "x"), "id")  # the client fills it; encode needs it
        self.assert_refused(cf.Request("python", "x", id="bad id"), "id")
        self.assert_refused(cf.Request("cobol", "x", id="r"), "language")
        self.assert_refused(cf.Request("command", id="r"), "argv")
        self.assert_refused(cf.Request("python", "x", id="r", argv=["a", 3]), "argv[1]")
        self.assert_refused(cf.Request("python", "x", id="r", backend="a\0b"), "backend")
        self.assert_refused(cf.Request("python", "x", id="r", deadline_us=-1), "deadline_us")
        self.assert_refused(cf.Request("python", "x", id="r", created_us=True), "created_us")
        self.assert_refused(cf.Request("python", "x", id="r", env={"A=B": "1"}), "env")
        self.assert_refused(cf.Request("python", "x", id="r", stream=True, cases=[cf.Case()]), "stream")
        self.assert_refused(cf.Request("python", "x", id="r", compile_flags=["-O2"]), "compile_flags")
        self.assert_refused(cf.Request("shell", "x", id="r", harness="function"), "harness")
        self.assert_refused(cf.Request("python", "x", id="r", policy=cf.Policy(timeout_us=-5)), "policy.timeout_us")
        self.assert_refused(cf.Request("python", "x", id="r", policy=cf.Policy(
            filesystem=cf.Filesystem(read_only=["/usr"]))), "policy.filesystem")
        self.assert_refused(cf.Request("python", "x", id="r", cases=["not a case"]), "cases[0]")
        self.assert_refused(cf.Result("r", "success", exit_code=1 << 40), "exit_code")
        self.assert_refused(cf.Result("r", "success", diagnostics=[cf.Diagnostic(
            "m", children=[cf.Diagnostic("c", children=[cf.Diagnostic("gc")])])]), "diagnostics[0].children[0]")
        self.assert_refused(cf.Chunk("r", "run", 0, "stdout", 0, b""), "data")
        self.assert_refused(cf.Event("w s", "c", "t", "p", "blocked", id="e", timestamp_us=1), "workspace")
        self.assert_refused(cf.Event("ws", "c", "t", "p", "blocked", id="e"), "timestamp_us")
        self.assert_refused(cf.Cancel("r", reason="line\nbreak"), "reason")

    def test_zero_false_empty_are_left_out(self):
        data = cf.Request("python", "", id="r", policy=cf.Policy(), env={}, stream=False).encode()
        self.assertEqual(data, mp({"v": 1, "id": "r", "language": "python", "code": ""}))
        explicit_none = cf.Request("python", "", id="r", policy=cf.Policy(env_allow=[])).encode()
        self.assertIn(b"\xa9env_allow\x90", explicit_none)  # an empty allowlist is said
        self.assertIn(b"\xa9exit_code\x00", cf.Result("r", "success", exit_code=0).encode())

    def test_round_trip_of_a_rich_request(self):
        req = cf.Request("cpp", "int main(){}", id="r-1", files={"a.h": "#pragma once\n", "b.bin": b"\x80"},
                         input={"k": [1, -2, 3.5, None, True, b"\x00"]}, workspace="ws",
                         policy=cf.Policy(network="enabled", env_allow=[], memory_bytes=1 << 40),
                         cases=[cf.Case(name="c", stdin="in", input=None, expect_stdout="")],
                         compile_flags=["-O1"])
        self.assertEqual(cf.Request.decode(req.encode()), req)
        self.assertEqual(req.kafka_key, "ws")


class Helpers(unittest.TestCase):
    def test_new_id(self):
        a, b = cf.new_id(), cf.new_id()
        self.assertRegex(a, r"^[0-9a-f]{13}-[0-9a-f]{16}$")
        self.assertNotEqual(a, b)
        self.assertTrue(cf.id_valid(a))
        self.assertLessEqual(a[:13], b[:13])  # time-ordered

    def test_kafka_key(self):
        self.assertEqual(cf.Request("python", "x", id="i").kafka_key, "i")
        self.assertEqual(cf.Request("python", "x", id="i", thread="t").kafka_key, "t")
        self.assertEqual(cf.Request("python", "x", id="i", thread="t", workspace="w").kafka_key, "w")

    def test_peek_id(self):
        self.assertEqual(cf.peek_id(golden("result_full")), "req-full-0001")
        # malformed after the id, and a count that lies: still found
        self.assertEqual(cf.peek_id(bytes.fromhex("83") + mp("v") + mp(1) + mp("id") + mp("req-9") + b"\xc1"),
                         "req-9")
        self.assertIsNone(cf.peek_id(b"\xc1garbage"))
        self.assertIsNone(cf.peek_id(b"\xde\x00"))  # a map16 header cut short
        self.assertIsNone(cf.peek_id(mp({"v": 1, "id": "bad id"})))
        self.assertIsNone(cf.peek_id(b""))
        # a malformed entry before the id stops the scan
        self.assertIsNone(cf.peek_id(bytes.fromhex("82") + mp("x") + b"\xc1" + mp("id") + mp("r")))


if __name__ == "__main__":
    unittest.main()
