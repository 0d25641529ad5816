#!/usr/bin/python3
"""Independent check of the schema v1 golden vectors (schema/golden/).

A from-scratch msgpack decoder and encoder written only from the msgpack
spec and schema/SPEC.md, sharing no code with the C implementation.  For
every vector it checks both ways:
  decode(file bytes) == the expected message written out below, and
  encode(expected message) == the file bytes (key order and the smallest
  integer/length encodings, as SPEC.md requires).

Usage: mp_check.py GOLDEN_DIR     (exit 0 = all vectors agree)
Only the standard library is used (python3-msgpack is not required).
"""
import struct
import sys


# ---- decoder -----------------------------------------------------------

class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("truncated at offset %d" % self.pos)
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, n):
        return int.from_bytes(self.take(n), "big")

    def value(self):
        b = self.uint(1)
        if b <= 0x7F:
            return b
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0x0F)
        if 0x90 <= b <= 0x9F:
            return [self.value() for _ in range(b & 0x0F)]
        if 0xA0 <= b <= 0xBF:
            return self.take(b & 0x1F).decode("utf-8")
        if b >= 0xE0:
            return b - 0x100
        if b == 0xC0:
            return None
        if b == 0xC2:
            return False
        if b == 0xC3:
            return True
        if b in (0xC4, 0xC5, 0xC6):
            return bytes(self.take(self.uint({0xC4: 1, 0xC5: 2, 0xC6: 4}[b])))
        if b == 0xCA:
            return struct.unpack(">f", self.take(4))[0]
        if b == 0xCB:
            return struct.unpack(">d", self.take(8))[0]
        if b in (0xCC, 0xCD, 0xCE, 0xCF):
            return self.uint({0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}[b])
        if b in (0xD0, 0xD1, 0xD2, 0xD3):
            n = {0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}[b]
            return int.from_bytes(self.take(n), "big", signed=True)
        if b in (0xD9, 0xDA, 0xDB):
            return self.take(self.uint({0xD9: 1, 0xDA: 2, 0xDB: 4}[b])).decode("utf-8")
        if b in (0xDC, 0xDD):
            return [self.value() for _ in range(self.uint(2 if b == 0xDC else 4))]
        if b in (0xDE, 0xDF):
            return self.map(self.uint(2 if b == 0xDE else 4))
        raise ValueError("unsupported byte 0x%02x at offset %d" % (b, self.pos - 1))

    def map(self, n):
        out = {}
        for _ in range(n):
            k = self.value()
            out[k] = self.value()
        return out


def decode(data):
    r = Reader(data)
    v = r.value()
    if r.pos != len(data):
        raise ValueError("%d trailing bytes" % (len(data) - r.pos))
    return v


# ---- encoder (smallest forms, insertion order) --------------------------

def encode(v):
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v <= 0x7F:
            return bytes([v])
        if -32 <= v < 0:
            return bytes([v + 0x100])
        if v >= 0:
            for tag, n in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
                if v < 1 << (8 * n):
                    return bytes([tag]) + v.to_bytes(n, "big")
        for tag, n in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
            if v >= -(1 << (8 * n - 1)):
                return bytes([tag]) + v.to_bytes(n, "big", signed=True)
        raise ValueError("integer out of range")
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        raw = v.encode("utf-8")
        n = len(raw)
        if n <= 31:
            return bytes([0xA0 | n]) + raw
        for tag, w in ((0xD9, 1), (0xDA, 2), (0xDB, 4)):
            if n < 1 << (8 * w):
                return bytes([tag]) + n.to_bytes(w, "big") + raw
    if isinstance(v, bytes):
        n = len(v)
        for tag, w in ((0xC4, 1), (0xC5, 2), (0xC6, 4)):
            if n < 1 << (8 * w):
                return bytes([tag]) + n.to_bytes(w, "big") + v
    if isinstance(v, list):
        n = len(v)
        head = bytes([0x90 | n]) if n <= 15 else (b"\xdc" + n.to_bytes(2, "big") if n < 65536 else b"\xdd" + n.to_bytes(4, "big"))
        return head + b"".join(encode(x) for x in v)
    if isinstance(v, dict):
        n = len(v)
        head = bytes([0x80 | n]) if n <= 15 else (b"\xde" + n.to_bytes(2, "big") if n < 65536 else b"\xdf" + n.to_bytes(4, "big"))
        return head + b"".join(encode(k) + encode(x) for k, x in v.items())
    raise TypeError(type(v))


# ---- the expected messages (key order = SPEC.md order) ------------------

INPUT_VALUE = {"n": 3, "tags": ["a", "b"], "ok": True, "pi": 1.5, "none": None}

EXPECTED = {
    "request_min": {
        "v": 1,
        "id": "req-min-0001",
        "language": "python",
        "code": "print(1)\n",
    },
    "request_full": {
        "v": 1,
        "id": "req-full-0001",
        "language": "python",
        "backend": "process",
        "code": "import sys\nprint(sys.stdin.read())\n",
        "argv": ["--verbose", "x"],
        "module": b"\x00asm\x01\x00\x00\x00",
        "stdin": b"\xff\xfe\x00\x01",
        "input": INPUT_VALUE,
        "env": {"LANG": "C.UTF-8", "DEBUG": "1"},
        "files": {"main.py": "print(1)\n", "data.bin": b"\x00\xff"},
        "policy": {
            "network": "disabled",
            "filesystem": {"mode": "paths", "read_only": ["/usr", "/lib"], "read_write": ["/tmp/out"]},
            "env_allow": ["PATH", "HOME"],
            "timeout_us": 5000000,
            "cpu_time_us": 2000000,
            "memory_bytes": 268435456,
            "max_processes": 16,
            "max_stdout_bytes": 1048576,
            "max_stderr_bytes": 65536,
            "max_file_size_bytes": 10485760,
        },
        "workspace": "ws-42",
        "thread": "thread-7",
        "identity": "agent:alice",
        "reply_to": "codefleet.results.alice",
        "deadline_us": 1767225600000000,
        "created_us": 1767225590000000,
        "trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
    },
    "request_compiled": {
        "v": 1,
        "id": "req-compiled-0001",
        "language": "rust",
        "code": "fn run(input: &str) -> String { input.to_string() }\n",
        "policy": {"timeout_us": 2000000, "compile_timeout_us": 30000000, "compile_memory_bytes": 1073741824},
        "harness": "function",
        "compile_flags": ["-Copt-level=1"],
        "cases": [
            {"name": "small", "stdin": "1 2\n", "expect_stdout": "3\n"},
            {"input": {"n": 7}, "argv": ["--fast"], "expect_stdout": ""},
        ],
        "stop_on_failure": True,
        "collect": ["out/*.png", "report/"],
    },
    "result_compiled": {
        "v": 1,
        "id": "req-compiled-0001",
        "status": "failed",
        "diagnostics": [
            {
                "level": "warning",
                "message": "unused variable: `x`",
                "file": "main.rs",
                "line": 2,
                "column": 9,
                "code": "unused_variables",
                "end_line": 2,
                "end_column": 10,
                "children": [
                    {
                        "level": "help",
                        "message": "if this is intentional, prefix it with an underscore: `_x`",
                        "file": "main.rs",
                        "line": 2,
                        "column": 9,
                    }
                ],
            }
        ],
        "wall_time_us": 3000,
        "cpu_time_us": 2000,
        "peak_memory_bytes": 2097152,
        "metadata": {"backend": "sandbox", "isolation": "sandbox", "language": "rust", "toolchain": "rustc 1.63.0"},
        "reason": "1 of 2 cases did not pass (1 stdout mismatch); first: case 1 (small): stdout does not match",
        "compile": {"cached": True, "wall_time_us": 412000, "cpu_time_us": 380000, "peak_memory_bytes": 134217728},
        "cases": [
            {"name": "small", "status": "success", "exit_code": 0, "stdout": b"4\n", "wall_time_us": 1500,
             "match": False},
            {"status": "success", "exit_code": 0, "output": 7, "wall_time_us": 1500, "match": True},
        ],
        "files": [{"path": "out/plot.png", "size": 70000, "content": b"\x89PNG", "truncated": True}],
        "files_truncated": True,
    },
    "result_min": {
        "v": 1,
        "id": "req-min-0001",
        "status": "success",
    },
    "result_full": {
        "v": 1,
        "id": "req-full-0001",
        "status": "failed",
        "exit_code": 3,
        "signal": 9,
        "stdout": b"hello\n",
        "stderr": b"oops\xff\n",
        "stdout_truncated": True,
        "stderr_truncated": True,
        "output": {"answer": 42},
        "diagnostics": [
            {"level": "error", "message": "NameError: name 'x' is not defined", "file": "main.py", "line": 3, "column": 5},
            {"level": "warning", "message": "unused import"},
        ],
        "wall_time_us": 12345,
        "cpu_time_us": 6789,
        "peak_memory_bytes": 10485760,
        "metadata": {
            "backend": "process",
            "isolation": "host_local",
            "language": "python",
            "worker": "worker-1",
            "identity": "agent:alice",
            "attempt": 2,
        },
        "reason": "exited with status 3",
        "workspace_revision": 43,
        "changed_paths": ["out/report.txt", "main.py"],
        "workspace_conflict": True,
        "finished_us": 1767225600123456,
    },
    "request_workspace_op": {
        "v": 1,
        "id": "req-wsop-0001",
        "workspace": "tenant-a.repo",
        "workspace_op": {
            "op": "str_replace",
            "path": "src/app.py",
            "old_str": "x = 1",
            "new_str": "x = 41",
            "expected_revision": 3,
        },
    },
    "request_workspace_read": {
        "v": 1,
        "id": "req-wsop-0002",
        "workspace": "tenant-a.repo",
        "workspace_op": {
            "op": "read",
            "path": "src/app.py",
            "first_line": 10,
            "last_line": 20,
        },
    },
    "request_session_cell": {
        "v": 1,
        "id": "req-cell-0002",
        "language": "python",
        "code": "print(x + 1)\n",
        "session": "tenant-a.s1",
    },
    "result_session_cell": {
        "v": 1,
        "id": "req-cell-0002",
        "status": "success",
        "exit_code": 0,
        "stdout": b"42\n",
        "workspace_revision": 3,
        "changed_paths": [".codefleet/sessions/tenant-a.s1.python"],
        "session_cell": 2,
        "session_restored": True,
        "session_lost": ["lock"],
    },
    "request_stream": {
        "v": 1,
        "id": "req-stream-0001",
        "language": "shell",
        "code": "echo a; sleep 1; echo b >&2\n",
        "stream": True,
    },
    "result_stream": {
        "v": 1,
        "id": "req-stream-0001",
        "status": "success",
        "exit_code": 0,
        "stdout": b"a\n",
        "stderr": b"b\n",
        "metadata": {"backend": "sandbox", "run": "3f2a9c0d1e4b5a67-42"},
        "chunks": 2,
    },
    "chunk": {
        "v": 1,
        "id": "req-stream-0001",
        "run": "3f2a9c0d1e4b5a67-42",
        "seq": 1,
        "stream": "stderr",
        "offset": 0,
        "data": b"b\n",
        "at_us": 1764000000500000,
    },
    "start_notice": {
        "v": 1,
        "id": "req-stream-0001",
        "run": "3f2a9c0d1e4b5a67-42",
        "event": "start",
        "worker": "w1",
        "at_us": 1764000000400000,
    },
}


def same(a, b):
    """Deep equality that also insists on the same types (str vs bytes)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    failures = 0
    for name, want in EXPECTED.items():
        path = "%s/%s.msgpack" % (sys.argv[1].rstrip("/"), name)
        with open(path, "rb") as f:
            data = f.read()
        try:
            got = decode(data)
        except Exception as e:  # any decoder failure is a mismatch
            print("%s: decode failed: %s" % (name, e), file=sys.stderr)
            failures += 1
            continue
        if not same(got, want):
            print("%s: decoded message differs:\n  got  %r\n  want %r" % (name, got, want), file=sys.stderr)
            failures += 1
        if encode(want) != data:
            print("%s: encoding the expected message does not give the file bytes" % name, file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
