"""Typed messages of the codefleet wire schema v1 and their msgpack codec.

Everything here follows ``schema/SPEC.md`` (requests and results: sections
2-8, collaboration events: 10, cancel control messages: 12, output chunks:
13) and nothing else, so a message this module encodes is byte-identical to
what the C implementation writes for the same content (the golden vectors in
``schema/golden`` are checked both ways by the tests).

Decoding treats its input as hostile, like the C decoder: a bounded reader
checks every declared length and count against the bytes that are really
there and against :class:`Limits` *before* anything sized from the input is
built, the nesting depth is capped, and every failure is a
:class:`~codefleet.errors.WireError` naming the field, never another
exception.  The msgpack library is only handed ``input``/``output``/
``payload`` values, after the reader has validated them.

Representation choices:

* "bytes" fields (``code``, ``stdin``, ``files`` contents, ``stdout`` ...)
  are ``bytes``; constructors also take ``str`` (UTF-8 encoded) for the
  text-like ones.  The encoder writes ``code``/``stdin``/``files``/case
  fields as msgpack str when they are valid UTF-8, else bin, as SPEC.md
  section 2 says.
* ``input``, ``output`` and event ``payload`` hold any msgpack value as a
  Python object; :data:`ABSENT` means "not in the message" (``None`` is
  msgpack nil, a real value).  A value Python cannot hold faithfully (a map
  with array keys, a str that is not UTF-8) decodes to :class:`Raw`, which
  re-encodes to the same bytes.
* Zero, ``False``, empty and absent mean the same for optional fields
  (SPEC.md), so the objects use those defaults and the encoder omits them.
"""
from __future__ import annotations

import enum
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import msgpack

from .errors import WireError

__all__ = [
    "SCHEMA_VERSION",
    "Limits",
    "DEFAULT_LIMITS",
    "ABSENT",
    "Raw",
    "Language",
    "Status",
    "Network",
    "FsMode",
    "Harness",
    "OutputStream",
    "EventKind",
    "Filesystem",
    "Policy",
    "Case",
    "Request",
    "Diagnostic",
    "Metadata",
    "CompileInfo",
    "CaseResult",
    "OutFile",
    "Result",
    "Chunk",
    "Cancel",
    "Event",
    "encode",
    "new_id",
    "id_valid",
    "peek_id",
]

SCHEMA_VERSION = 1
ID_MAX = 128
CASES_MAX = 1000
COLLECT_MAX = 64
COMPILE_FLAGS_MAX = 64
CHUNK_RUN_MAX = 64
CHUNK_DATA_MAX = 256 * 1024
CANCEL_REASON_MAX = 256
EVENT_WORKSPACE_MAX = 128
EVENT_TEXT_MAX = 256
EVENT_PAYLOAD_MAX = 512 * 1024
# A case's input/output sits inside the message map, the cases array and
# the case map: that much less depth for the value itself.
_CASE_VALUE_LEVELS = 3
# Whatever a caller asks for, nesting is capped here (as in the C reader).
_DEPTH_HARD = 128
_INT64_MAX = (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True)
class Limits:
    """Decoder limits of SPEC.md section 6, applied before allocating."""

    max_total_bytes: int = 16 << 20
    max_str_bytes: int = 64 << 10
    max_bin_bytes: int = 8 << 20
    max_elements: int = 65536
    max_depth: int = 32


DEFAULT_LIMITS = Limits()


class _Absent:
    """Type of :data:`ABSENT`: a value field that is not in the message.

    ``None`` cannot play this role because msgpack nil is a real value for
    ``input``/``output``/``payload`` (SPEC.md section 2)."""

    _instance: Optional["_Absent"] = None

    def __new__(cls) -> "_Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:  # copy/pickle keep the singleton
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Raw:
    """One msgpack value kept as its encoded bytes.

    Decoding produces it for values Python cannot represent faithfully; it
    can also be given to send pre-encoded msgpack as it is."""

    data: bytes


class _WireEnum(str, enum.Enum):
    """String enum whose members compare equal to their wire text."""

    def __str__(self) -> str:
        return str(self.value)


class Language(_WireEnum):
    COMMAND = "command"
    SHELL = "shell"
    PYTHON = "python"
    JAVASCRIPT = "javascript"
    WASM = "wasm"
    C = "c"
    CPP = "cpp"
    RUST = "rust"
    GO = "go"
    TYPESCRIPT = "typescript"


_COMPILED = frozenset({Language.C, Language.CPP, Language.RUST, Language.GO, Language.TYPESCRIPT})
_HARNESS_LANGUAGES = frozenset({Language.PYTHON, Language.JAVASCRIPT, Language.TYPESCRIPT, Language.RUST})


class Status(_WireEnum):
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    MEMORY_EXCEEDED = "memory_exceeded"
    COMPILE_FAILED = "compile_failed"
    REJECTED = "rejected"
    INTERNAL_ERROR = "internal_error"
    CANCELLED = "cancelled"


class Network(_WireEnum):
    DISABLED = "disabled"
    ENABLED = "enabled"


class FsMode(_WireEnum):
    NONE = "none"
    WORKSPACE_RO = "workspace_ro"
    WORKSPACE_RW = "workspace_rw"
    PATHS = "paths"


class Harness(_WireEnum):
    FUNCTION = "function"


class WorkspaceOpKind(_WireEnum):
    """What a workspace operation does (SPEC.md section 3.5)."""
    LIST = "list"
    READ = "read"
    WRITE = "write"
    DELETE = "delete"
    GREP = "grep"
    STR_REPLACE = "str_replace"
    INSERT = "insert"
    APPLY_PATCH = "apply_patch"


class OutputStream(_WireEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


class EventKind(_WireEnum):
    NEED_WORK = "need_work"
    WORK_CLAIMED = "work_claimed"
    WORK_PUBLISHED = "work_published"
    FEEDBACK_REQUESTED = "feedback_requested"
    FEEDBACK_PROVIDED = "feedback_provided"
    BLOCKED = "blocked"
    COMPLETED = "completed"


BytesLike = Union[bytes, bytearray, memoryview, str]


def _to_bytes(v: Any) -> Any:
    """Constructor convenience: text becomes its UTF-8 bytes, so objects
    built from str compare equal to decoded ones.  Anything else is left
    for the encoder to judge."""
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError:
            return v  # lone surrogates: the encoder reports the field
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return v


# ---- data classes ------------------------------------------------------


@dataclass
class Filesystem:
    """``policy.filesystem`` (SPEC.md 3.1)."""

    mode: Optional[Union[FsMode, str]] = None
    read_only: List[str] = field(default_factory=list)
    read_write: List[str] = field(default_factory=list)


@dataclass
class Policy:
    """Requested controls (SPEC.md 3.1); 0 means "the worker's default".

    ``env_allow`` is ``None`` when not given; ``[]`` is an explicit empty
    allowlist, which differs (and is encoded)."""

    network: Optional[Union[Network, str]] = None
    filesystem: Filesystem = field(default_factory=Filesystem)
    env_allow: Optional[List[str]] = None
    timeout_us: int = 0
    cpu_time_us: int = 0
    memory_bytes: int = 0
    max_processes: int = 0
    max_stdout_bytes: int = 0
    max_stderr_bytes: int = 0
    max_file_size_bytes: int = 0
    compile_timeout_us: int = 0
    compile_memory_bytes: int = 0


@dataclass
class Case:
    """One test case of a request (SPEC.md 3.3).  ``expect_stdout`` is
    ``None`` for "no comparison"; ``b""`` compares with empty output."""

    name: Optional[str] = None
    stdin: bytes = b""
    input: Any = ABSENT
    argv: List[str] = field(default_factory=list)
    expect_stdout: Optional[bytes] = None

    def __post_init__(self) -> None:
        self.stdin = _to_bytes(self.stdin)
        self.expect_stdout = _to_bytes(self.expect_stdout)


@dataclass
class WorkspaceOp:
    """An operation on the request's workspace, done by the worker instead
    of a program (SPEC.md section 3.5).  Bytes may be given as str."""

    op: Union[WorkspaceOpKind, str]
    path: Optional[str] = None
    pattern: Optional[str] = None
    content: Optional[bytes] = None
    old_str: Optional[bytes] = None
    new_str: Optional[bytes] = None
    insert_line: Optional[int] = None
    expected_revision: Optional[int] = None
    first_line: Optional[int] = None  # read: from this line (1-based)
    last_line: Optional[int] = None   # read: up to this line, included

    def __post_init__(self) -> None:
        self.content = _to_bytes(self.content)
        self.old_str = _to_bytes(self.old_str)
        self.new_str = _to_bytes(self.new_str)


@dataclass
class Request:
    """An execution request (SPEC.md section 3).

    ``id`` may be left empty: :meth:`codefleet.Client.submit` then generates
    a time-ordered one.  ``code`` and file contents may be given as str."""

    language: Optional[Union[Language, str]] = None  # absent only with workspace_op
    code: Optional[bytes] = None
    argv: List[str] = field(default_factory=list)
    id: str = ""
    backend: Optional[str] = None
    module: bytes = b""
    stdin: bytes = b""
    input: Any = ABSENT
    env: Dict[str, str] = field(default_factory=dict)
    files: Dict[str, bytes] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)
    workspace: Optional[str] = None
    thread: Optional[str] = None
    identity: Optional[str] = None
    reply_to: Optional[str] = None
    deadline_us: int = 0
    created_us: int = 0
    trace: Dict[str, str] = field(default_factory=dict)
    harness: Optional[Union[Harness, str]] = None
    compile_flags: List[str] = field(default_factory=list)
    cases: List[Case] = field(default_factory=list)
    stop_on_failure: bool = False
    collect: List[str] = field(default_factory=list)
    stream: bool = False
    image: Optional[str] = None
    notify_start: bool = False
    workspace_op: Optional[WorkspaceOp] = None
    session: Optional[str] = None  # a python cell of this session (SPEC 3.6)

    def __post_init__(self) -> None:
        self.code = _to_bytes(self.code)
        self.module = _to_bytes(self.module)
        self.stdin = _to_bytes(self.stdin)
        if isinstance(self.files, Mapping):
            self.files = {k: _to_bytes(v) for k, v in self.files.items()}

    @property
    def kafka_key(self) -> str:
        """The Kafka key SPEC.md section 1 asks for: the workspace, else the
        thread, else the id (so a workspace's or thread's requests stay
        ordered on one partition)."""
        return self.workspace or self.session or self.thread or self.id

    def encode(self) -> bytes:
        """The canonical msgpack bytes; :class:`WireError` if invalid."""
        return _encode_request(self)

    @classmethod
    def decode(cls, data: bytes, limits: Limits = DEFAULT_LIMITS) -> "Request":
        """Decodes and validates untrusted bytes; :class:`WireError` if bad."""
        return _decode(data, limits, _REQUEST)


@dataclass
class Diagnostic:
    """A compiler/runtime message of a result (SPEC.md section 4).  Only a
    top-level diagnostic may have ``children``."""

    message: str
    level: Optional[str] = None
    file: Optional[str] = None
    line: int = 0
    column: int = 0
    code: Optional[str] = None
    end_line: int = 0
    end_column: int = 0
    children: List["Diagnostic"] = field(default_factory=list)


@dataclass
class Metadata:
    """``metadata`` of a result: who ran it, how (SPEC.md section 4)."""

    backend: Optional[str] = None
    isolation: Optional[str] = None
    language: Optional[str] = None
    worker: Optional[str] = None
    identity: Optional[str] = None
    attempt: int = 0
    replay: bool = False
    toolchain: Optional[str] = None
    sandbox: Optional[str] = None
    run: Optional[str] = None
    traceparent: Optional[str] = None


@dataclass
class CompileInfo:
    """``compile`` of a result (compiled languages)."""

    cached: bool = False
    wall_time_us: int = 0
    cpu_time_us: int = 0
    peak_memory_bytes: int = 0


@dataclass
class CaseResult:
    """One entry of a result's ``cases``.  ``match`` is ``None`` when there
    was no expectation or the case did not succeed."""

    status: Union[Status, str]
    name: Optional[str] = None
    exit_code: Optional[int] = None
    signal: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    output: Any = ABSENT
    wall_time_us: int = 0
    cpu_time_us: int = 0
    peak_memory_bytes: int = 0
    match: Optional[bool] = None
    reason: Optional[str] = None


@dataclass
class OutFile:
    """A collected file of a result (``size`` is the whole file's)."""

    path: str
    size: int = 0
    content: bytes = b""
    truncated: bool = False
    listed: bool = False  # a workspace op's listing entry: no content is sent (SPEC.md 3.5)


@dataclass
class Result:
    """An execution result (SPEC.md section 4)."""

    id: str
    status: Union[Status, str]
    exit_code: Optional[int] = None
    signal: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    output: Any = ABSENT
    diagnostics: List[Diagnostic] = field(default_factory=list)
    wall_time_us: int = 0
    cpu_time_us: int = 0
    peak_memory_bytes: int = 0
    metadata: Metadata = field(default_factory=Metadata)
    reason: Optional[str] = None
    reply_to_error: Optional[str] = None
    workspace_revision: int = 0
    changed_paths: List[str] = field(default_factory=list)
    workspace_conflict: bool = False
    checkpoint_id: Optional[str] = None
    checkpoint_conflict: bool = False
    finished_us: int = 0
    compile: Optional[CompileInfo] = None
    cases: List[CaseResult] = field(default_factory=list)
    files: List[OutFile] = field(default_factory=list)
    files_truncated: bool = False
    chunks: int = 0
    session_cell: int = 0  # a session's cell: its number (1 = the session started empty)
    session_restored: bool = False  # the cell started from the session's saved state
    session_lost: List[str] = field(default_factory=list)  # names the cell left that were not saved

    @property
    def ok(self) -> bool:
        """The program ran and exited with status 0."""
        return self.status == Status.SUCCESS

    def encode(self) -> bytes:
        return _encode_result(self)

    @classmethod
    def decode(cls, data: bytes, limits: Limits = DEFAULT_LIMITS) -> "Result":
        return _decode(data, limits, _RESULT)


@dataclass
class Chunk:
    """A piece of a streaming run's output (SPEC.md section 13)."""

    id: str
    run: str
    seq: int
    stream: Union[OutputStream, str]
    offset: int
    data: bytes
    at_us: int = 0

    def encode(self) -> bytes:
        return _encode_chunk(self)

    @classmethod
    def decode(cls, data: bytes, limits: Limits = DEFAULT_LIMITS) -> "Chunk":
        return _decode(data, limits, _CHUNK)


@dataclass
class StartNotice:
    """A worker took a request sent with ``notify_start`` into a slot: it is
    running, not queued (SPEC.md section 13.1).  On the output topic, beside
    the chunks; ``Chunk.decode`` refuses it."""

    id: str
    run: str
    worker: Optional[str] = None
    at_us: int = 0

    def encode(self) -> bytes:
        return _encode_start_notice(self)

    @classmethod
    def decode(cls, data: bytes, limits: Limits = DEFAULT_LIMITS) -> "StartNotice":
        return _decode(data, limits, _START_NOTICE)


@dataclass
class Cancel:
    """A cancel control message (SPEC.md section 12)."""

    id: str
    reason: Optional[str] = None
    created_us: int = 0

    def encode(self) -> bytes:
        return _encode_cancel(self)

    @classmethod
    def decode(cls, data: bytes, limits: Limits = DEFAULT_LIMITS) -> "Cancel":
        return _decode(data, limits, _CANCEL)


@dataclass
class Event:
    """A collaboration event (SPEC.md section 10).

    ``id`` and ``timestamp_us`` may be left empty/0:
    :meth:`codefleet.Client.publish_event` fills them."""

    workspace: str
    correlation_id: str
    topic: str
    producer: str
    kind: Union[EventKind, str]
    id: str = ""
    timestamp_us: int = 0
    consumer: Optional[str] = None
    payload: Any = ABSENT

    def encode(self) -> bytes:
        return _encode_event(self)

    @classmethod
    def decode(cls, data: bytes, limits: Limits = DEFAULT_LIMITS) -> "Event":
        return _decode(data, limits, _EVENT)


Message = Union[Request, Result, Chunk, StartNotice, Cancel, Event]


def encode(message: Message) -> bytes:
    """Encodes any schema object to its canonical msgpack bytes."""
    if not isinstance(message, (Request, Result, Chunk, StartNotice, Cancel, Event)):
        raise TypeError(f"cannot encode {type(message).__name__}: not a codefleet message")
    return message.encode()


# ---- ids ---------------------------------------------------------------


def id_valid(s: Any, max_len: int = ID_MAX) -> bool:
    """1..max_len bytes of printable ASCII without space (SPEC.md 3)."""
    return isinstance(s, str) and 0 < len(s) <= max_len and all(0x21 <= ord(c) <= 0x7E for c in s)


def new_id() -> str:
    """A fresh time-ordered id, like the C dispatcher's: 13 hex digits of
    epoch microseconds, '-', 16 random hex digits."""
    return f"{time.time_ns() // 1000:013x}-{secrets.randbits(64):016x}"


# ---- bounded reader ----------------------------------------------------

_END, _NIL, _BOOL, _UINT, _INT, _FLOAT, _STR, _BIN, _ARRAY, _MAP, _EXT, _INVALID = range(12)
_KIND_NAMES = ("end of data", "nil", "bool", "integer", "integer", "float", "str", "bin", "array", "map", "ext",
               "invalid byte 0xc1")


def _kind_table() -> Tuple[int, ...]:
    fixed = {0xC0: _NIL, 0xC1: _INVALID, 0xC2: _BOOL, 0xC3: _BOOL, 0xCA: _FLOAT, 0xCB: _FLOAT,
             0xDC: _ARRAY, 0xDD: _ARRAY, 0xDE: _MAP, 0xDF: _MAP}
    for b in (0xC4, 0xC5, 0xC6):
        fixed[b] = _BIN
    for b in (0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8):
        fixed[b] = _EXT
    for b in (0xCC, 0xCD, 0xCE, 0xCF):
        fixed[b] = _UINT
    for b in (0xD0, 0xD1, 0xD2, 0xD3):
        fixed[b] = _INT
    for b in (0xD9, 0xDA, 0xDB):
        fixed[b] = _STR
    out = []
    for b in range(256):
        if b <= 0x7F:
            out.append(_UINT)
        elif b <= 0x8F:
            out.append(_MAP)
        elif b <= 0x9F:
            out.append(_ARRAY)
        elif b <= 0xBF:
            out.append(_STR)
        elif b >= 0xE0:
            out.append(_INT)
        else:
            out.append(fixed[b])
    return tuple(out)


_KINDS = _kind_table()


class _Reader:
    """Allocation-free cursor over untrusted msgpack (SPEC.md section 6)."""

    __slots__ = ("data", "pos", "end", "lim")

    def __init__(self, data: bytes, lim: Limits) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)
        self.lim = lim

    def remaining(self) -> int:
        return self.end - self.pos

    def peek(self) -> int:
        return _KINDS[self.data[self.pos]] if self.pos < self.end else _END

    def expect(self, path: str, what: str) -> WireError:
        """The error for a value of the wrong kind at the cursor."""
        if self.peek() == _END:
            return WireError(path, "truncated message")
        return WireError(path, f"expected {what}")

    def _be(self, n: int, path: str) -> int:
        if self.end - self.pos < n:
            raise WireError(path, "truncated message")
        v = int.from_bytes(self.data[self.pos:self.pos + n], "big")
        self.pos += n
        return v

    def _count(self, n: int, depth: int, per: int, what: str, path: str) -> int:
        limit = min(self.lim.max_depth, _DEPTH_HARD)
        if depth > limit:
            raise WireError(path, f"nesting deeper than {limit} levels")
        if n > self.lim.max_elements:
            raise WireError(path, f"{what} declares {n} entries, limit is {self.lim.max_elements}")
        # Every entry needs at least `per` bytes: a larger count is a lie,
        # refused before anyone sizes anything from it.
        if n > self.remaining() // per:
            raise WireError(path, f"{what} declares {n} entries but only {self.remaining()} bytes remain")
        return n

    def map_header(self, depth: int, path: str) -> int:
        if self.peek() != _MAP:
            raise self.expect(path, "map")
        b = self.data[self.pos]
        self.pos += 1
        n = b & 0x0F if b <= 0x8F else self._be(2 if b == 0xDE else 4, path)
        return self._count(n, depth, 2, "map", path)

    def array_header(self, depth: int, path: str) -> int:
        if self.peek() != _ARRAY:
            raise self.expect(path, "array")
        b = self.data[self.pos]
        self.pos += 1
        n = b & 0x0F if b <= 0x9F else self._be(2 if b == 0xDC else 4, path)
        return self._count(n, depth, 1, "array", path)

    def _span(self, n: int, max_len: int, what: str, path: str) -> bytes:
        if n > max_len:
            raise WireError(path, f"{what} of {n} bytes exceeds the limit of {max_len}")
        if n > self.remaining():
            raise WireError(path, "truncated message")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s

    def str_raw(self, max_len: int, path: str) -> bytes:
        """The bytes of a msgpack str (not yet checked as UTF-8)."""
        if self.peek() != _STR:
            raise self.expect(path, "string")
        b = self.data[self.pos]
        self.pos += 1
        n = b & 0x1F if b <= 0xBF else self._be({0xD9: 1, 0xDA: 2}.get(b, 4), path)
        return self._span(n, max_len, "string", path)

    def bin_raw(self, max_len: int, path: str) -> bytes:
        if self.peek() != _BIN:
            raise self.expect(path, "bin")
        b = self.data[self.pos]
        self.pos += 1
        n = self._be({0xC4: 1, 0xC5: 2}.get(b, 4), path)
        return self._span(n, max_len, "binary", path)

    def integer(self, path: str, what: str) -> int:
        """Any msgpack integer, as a Python int (uint64 included)."""
        kind = self.peek()
        if kind not in (_UINT, _INT):
            raise self.expect(path, what)
        b = self.data[self.pos]
        self.pos += 1
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        n = 1 << (b & 0x03)  # cc..cf and d0..d3 carry 1, 2, 4, 8 bytes
        if self.remaining() < n:
            raise WireError(path, "truncated message")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return int.from_bytes(raw, "big", signed=b >= 0xD0)

    def _ext(self, path: str) -> None:
        b = self.data[self.pos]
        self.pos += 1
        n = 1 << (b - 0xD4) if 0xD4 <= b <= 0xD8 else self._be({0xC7: 1, 0xC8: 2}.get(b, 4), path)
        if self.remaining() < 1:
            raise WireError(path, "truncated message")
        self.pos += 1  # the ext type
        self._span(n, self.lim.max_bin_bytes, "ext", path)

    def skip(self, depth: int, path: str) -> None:
        """Skips one value whose own depth is `depth`, checking everything
        inside it.  Iterative: nesting is bounded by the depth limit, not
        by Python's recursion limit."""
        todo = [1]  # values still to skip in each open container
        while True:
            while len(todo) > 1 and todo[-1] == 0:
                todo.pop()
            if todo[-1] == 0:
                return
            todo[-1] -= 1
            d = depth + len(todo) - 1
            kind = self.peek()
            if kind == _END:
                raise WireError(path, "truncated message")
            if kind == _INVALID:
                raise WireError(path, "invalid msgpack byte 0xc1")
            if kind in (_NIL, _BOOL):
                self.pos += 1
            elif kind in (_UINT, _INT):
                self.integer(path, "integer")
            elif kind == _FLOAT:
                n = 4 if self.data[self.pos] == 0xCA else 8
                self.pos += 1
                if self.remaining() < n:
                    raise WireError(path, "truncated message")
                self.pos += n
            elif kind == _STR:
                self.str_raw(self.lim.max_bin_bytes, path)
            elif kind == _BIN:
                self.bin_raw(self.lim.max_bin_bytes, path)
            elif kind == _EXT:
                self._ext(path)
            elif kind == _ARRAY:
                n = self.array_header(d, path)
                if n:
                    todo.append(n)
            else:
                n = self.map_header(d, path)
                if n:
                    todo.append(2 * n)


def _key_name(raw: bytes) -> str:
    """A hostile key is echoed only when it is short printable ASCII."""
    try:
        s = raw[:47].decode("ascii")
    except UnicodeDecodeError:
        return "(field)"
    return s if id_valid(s) else "(field)"


def _prescan(data: Any, lim: Limits) -> None:
    """First pass (SPEC.md 5, 6): the framing, every limit and the version,
    before any field is looked at, so an unsupported version is reported
    as such whatever its fields look like."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError("message", f"expected bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise WireError("message", "empty message")
    if len(data) > lim.max_total_bytes:
        raise WireError("message", f"message of {len(data)} bytes exceeds the limit of {lim.max_total_bytes}")
    r = _Reader(bytes(data), lim)
    if r.peek() != _MAP:
        raise WireError("message", f"expected a msgpack map, got {_KIND_NAMES[r.peek()]}")
    n = r.map_header(1, "message")
    version: Optional[int] = None
    for _ in range(n):
        if r.peek() != _STR:
            raise r.expect("message", "string keys")
        key = r.str_raw(lim.max_str_bytes, "message")
        if key == b"v":
            if version is not None:
                raise WireError("v", "duplicate field")
            version = r.integer("v", "integer")
            continue
        r.skip(2, _key_name(key))
    if r.pos != r.end:
        raise WireError("message", f"{r.remaining()} trailing bytes after the message")
    if version is None:
        raise WireError("v", 'missing required field "v"')
    if version != SCHEMA_VERSION:
        raise WireError("v", f"unsupported schema version {version}")


# ---- field decoders ----------------------------------------------------
#
# A decoder reads one field's value at the cursor: (reader, path, depth) ->
# Python value, where depth is the value's own nesting level (the message
# map is 1, its fields' values 2).

_Dec = Callable[[_Reader, str, int], Any]


def _d_str(r: _Reader, path: str, depth: int) -> str:
    raw = r.str_raw(r.lim.max_str_bytes, path)
    if b"\0" in raw:
        raise WireError(path, "string is not valid UTF-8 without NUL bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(path, "string is not valid UTF-8 without NUL bytes") from None


def _d_bytes(r: _Reader, path: str, depth: int) -> bytes:
    kind = r.peek()
    if kind == _STR:
        return r.str_raw(r.lim.max_bin_bytes, path)
    if kind == _BIN:
        return r.bin_raw(r.lim.max_bin_bytes, path)
    raise r.expect(path, "bin or string")


def _d_bin(r: _Reader, path: str, depth: int) -> bytes:
    return r.bin_raw(CHUNK_DATA_MAX, path)


def _d_int_range(lo: int, hi: int, what: str) -> _Dec:
    def dec(r: _Reader, path: str, depth: int) -> int:
        v = r.integer(path, what)
        if not lo <= v <= hi:
            raise WireError(path, f"expected {what}")
        return v

    return dec


_d_uint = _d_int_range(0, _INT64_MAX, "non-negative integer")
_d_posint = _d_int_range(1, _INT64_MAX, "positive integer")
_d_int32 = _d_int_range(_INT32_MIN, _INT32_MAX, "32-bit integer")
_d_signal = _d_int_range(0, _INT32_MAX, "non-negative 32-bit integer")


def _d_bool(r: _Reader, path: str, depth: int) -> bool:
    if r.peek() != _BOOL:
        raise r.expect(path, "bool")
    v = r.data[r.pos] == 0xC3
    r.pos += 1
    return v


def _d_enum(cls: Any) -> _Dec:
    choices = ", ".join(m.value for m in cls)

    def dec(r: _Reader, path: str, depth: int) -> Any:
        raw = r.str_raw(r.lim.max_str_bytes, path)
        try:
            return cls(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            # The value is hostile: it is not echoed.
            raise WireError(path, f"unknown value (expected one of {choices})") from None

    return dec


def _d_strlist(r: _Reader, path: str, depth: int) -> List[str]:
    n = r.array_header(depth, path)
    return [_d_str(r, f"{path}[{i}]", depth + 1) for i in range(n)]


def _d_map_of(value: _Dec, what: str) -> _Dec:
    """A map with data keys (env, files, trace): entries are named by
    index in errors, never by their hostile content."""

    def dec(r: _Reader, path: str, depth: int) -> Dict[str, Any]:
        if r.peek() != _MAP:
            raise r.expect(path, what)
        n = r.map_header(depth, path)
        out: Dict[str, Any] = {}
        for i in range(n):
            ip = f"{path}[{i}]"
            k = _d_str(r, ip, depth + 1)
            v = value(r, ip, depth + 1)
            if k in out:
                raise WireError(path, "duplicate key")
            out[k] = v
        return out

    return dec


_d_strmap = _d_map_of(_d_str, "map of string to string")
_d_files = _d_map_of(_d_bytes, "map of path to bytes")


def _value_of(raw: bytes) -> Any:
    """A validated msgpack value as a Python object, or Raw when Python
    cannot hold it faithfully (array/map keys, non-UTF-8 str, bad ext)."""
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=True)
    except Exception:  # noqa: BLE001 - any refusal of the library means "keep the bytes"
        return Raw(raw)


def _d_value(r: _Reader, path: str, depth: int) -> Any:
    start = r.pos
    r.skip(depth, path)
    return _value_of(r.data[start:r.pos])


class _Spec:
    """How one schema map decodes: its keys in encoding order, each with a
    decoder and whether nil stands for absent (SPEC.md 2: it does, except
    for value fields and where the C decoder says otherwise); the keys an
    element of a list must carry; and how the object is built."""

    def __init__(self, fields: Sequence[Tuple[str, _Dec, bool]], build: Callable[[Dict[str, Any]], Any],
                 required: Tuple[str, ...] = ()) -> None:
        self.fields = {k.encode(): (k, dec, nil_absent) for k, dec, nil_absent in fields}
        self.build = build
        self.required = required


def _read_object(r: _Reader, spec: _Spec, path: str, depth: int) -> Dict[str, Any]:
    """Reads a schema map: known keys decoded (duplicates refused), unknown
    ones skipped (forward compatibility, SPEC.md 5)."""
    where = path or "message"
    if r.peek() != _MAP:
        raise r.expect(where, "map")
    n = r.map_header(depth, where)
    got: Dict[str, Any] = {}
    seen = set()
    for _ in range(n):
        if r.peek() != _STR:
            raise r.expect(where, "string keys")
        key = r.str_raw(r.lim.max_str_bytes, where)
        entry = spec.fields.get(key)
        if entry is None:
            r.skip(depth + 1, f"{path}.(unknown field)" if path else "(unknown field)")
            continue
        name, dec, nil_absent = entry
        fp = f"{path}.{name}" if path else name
        if name in seen:
            raise WireError(fp, "duplicate field")
        seen.add(name)
        if nil_absent and r.peek() == _NIL:
            r.pos += 1
            continue
        got[name] = dec(r, fp, depth + 1)
    return got


def _d_object(spec: _Spec) -> _Dec:
    def dec(r: _Reader, path: str, depth: int) -> Any:
        return spec.build(_read_object(r, spec, path, depth))

    return dec


def _d_list_of(spec: _Spec) -> _Dec:
    def dec(r: _Reader, path: str, depth: int) -> List[Any]:
        if r.peek() != _ARRAY:
            raise r.expect(path, "array of maps")
        n = r.array_header(depth, path)
        out = []
        for i in range(n):
            ip = f"{path}[{i}]"
            got = _read_object(r, spec, ip, depth + 1)
            for name in spec.required:
                if name not in got:
                    raise WireError(ip, f'missing required field "{name}"')
            out.append(spec.build(got))
        return out

    return dec


def _skip_v(r: _Reader, path: str, depth: int) -> None:
    r.skip(depth, path)  # checked by the prescan


def _decode(data: Any, lim: Limits, spec: _Spec) -> Any:
    _prescan(data, lim)
    r = _Reader(bytes(data), lim)
    got = _read_object(r, spec, "", 1)
    got.pop("v", None)
    return spec.build(got)


# ---- specs -------------------------------------------------------------


def _building(cls: Any) -> Callable[[Dict[str, Any]], Any]:
    return lambda got: cls(**got)


_FILESYSTEM = _Spec([
    ("mode", _d_enum(FsMode), True),
    ("read_only", _d_strlist, True),
    ("read_write", _d_strlist, True),
], _building(Filesystem))

_POLICY = _Spec([
    ("network", _d_enum(Network), True),
    ("filesystem", _d_object(_FILESYSTEM), True),
    ("env_allow", _d_strlist, True),
    ("timeout_us", _d_uint, True),
    ("cpu_time_us", _d_uint, True),
    ("memory_bytes", _d_uint, True),
    ("max_processes", _d_uint, True),
    ("max_stdout_bytes", _d_uint, True),
    ("max_stderr_bytes", _d_uint, True),
    ("max_file_size_bytes", _d_uint, True),
    ("compile_timeout_us", _d_uint, True),
    ("compile_memory_bytes", _d_uint, True),
], _building(Policy))

_CASE = _Spec([
    ("name", _d_str, True),
    ("stdin", _d_bytes, True),
    ("input", _d_value, False),
    ("argv", _d_strlist, True),
    ("expect_stdout", _d_bytes, True),
], _building(Case))


_WORKSPACE_OP = _Spec([
    ("op", _d_enum(WorkspaceOpKind), False),
    ("path", _d_str, True),
    ("pattern", _d_str, True),
    ("content", _d_bytes, True),
    ("old_str", _d_bytes, True),
    ("new_str", _d_bytes, True),
    ("insert_line", _d_uint, True),
    ("expected_revision", _d_uint, True),
    ("first_line", _d_uint, True),
    ("last_line", _d_uint, True),
], lambda got: WorkspaceOp(**got) if "op" in got else _no_op())


def _no_op() -> WorkspaceOp:
    raise WireError("workspace_op.op", f"required (one of {_OP_CHOICES})")


def _build_request(got: Dict[str, Any]) -> Request:
    for name in ("id",) if "workspace_op" in got else ("id", "language"):
        if name not in got:
            raise WireError(name, f'missing required field "{name}"')
    req = Request(**got)
    _check_request(req)
    return req


_REQUEST = _Spec([
    ("v", _skip_v, False),
    ("id", _d_str, False),
    ("language", _d_enum(Language), False),
    ("backend", _d_str, True),
    ("code", _d_bytes, True),
    ("argv", _d_strlist, True),
    ("module", _d_bytes, True),
    ("stdin", _d_bytes, True),
    ("input", _d_value, False),
    ("env", _d_strmap, True),
    ("files", _d_files, True),
    ("policy", _d_object(_POLICY), True),
    ("workspace", _d_str, True),
    ("thread", _d_str, True),
    ("identity", _d_str, True),
    ("reply_to", _d_str, True),
    ("deadline_us", _d_uint, True),
    ("created_us", _d_uint, True),
    ("trace", _d_strmap, True),
    ("harness", _d_enum(Harness), True),
    ("compile_flags", _d_strlist, True),
    ("cases", _d_list_of(_CASE), True),
    ("stop_on_failure", _d_bool, True),
    ("collect", _d_strlist, True),
    ("stream", _d_bool, True),
    ("image", _d_str, True),
    ("notify_start", _d_bool, True),
    ("workspace_op", _d_object(_WORKSPACE_OP), True),
    ("session", _d_str, True),
], _build_request)

def _d_diagnostics(r: _Reader, path: str, depth: int) -> List[Diagnostic]:
    """A diagnostics list; children have the same keys.  They nest one level
    only: a grandchild list is refused by the result check, and the depth
    limit bounds the reading before that."""
    return _d_list_of(_DIAGNOSTIC)(r, path, depth)


_DIAGNOSTIC: _Spec = _Spec([
    ("level", _d_str, True),
    ("message", _d_str, True),
    ("file", _d_str, True),
    ("line", _d_uint, True),
    ("column", _d_uint, True),
    ("code", _d_str, True),
    ("end_line", _d_uint, True),
    ("end_column", _d_uint, True),
    ("children", _d_diagnostics, True),
], _building(Diagnostic), required=("message",))

_METADATA = _Spec([
    ("backend", _d_str, True),
    ("isolation", _d_str, True),
    ("language", _d_str, True),
    ("worker", _d_str, True),
    ("identity", _d_str, True),
    ("attempt", _d_uint, True),
    ("replay", _d_bool, True),
    ("toolchain", _d_str, True),
    ("sandbox", _d_str, True),
    ("run", _d_str, True),
    ("traceparent", _d_str, True),
], _building(Metadata))

_COMPILE = _Spec([
    ("cached", _d_bool, True),
    ("wall_time_us", _d_uint, True),
    ("cpu_time_us", _d_uint, True),
    ("peak_memory_bytes", _d_uint, True),
], _building(CompileInfo))

_CASE_RESULT = _Spec([
    ("name", _d_str, True),
    ("status", _d_enum(Status), True),
    ("exit_code", _d_int32, True),
    ("signal", _d_signal, True),
    ("stdout", _d_bytes, True),
    ("stderr", _d_bytes, True),
    ("stdout_truncated", _d_bool, True),
    ("stderr_truncated", _d_bool, True),
    ("output", _d_value, False),
    ("wall_time_us", _d_uint, True),
    ("cpu_time_us", _d_uint, True),
    ("peak_memory_bytes", _d_uint, True),
    ("match", _d_bool, True),
    ("reason", _d_str, True),
], _building(CaseResult), required=("status",))

_OUT_FILE = _Spec([
    ("path", _d_str, True),
    ("size", _d_uint, True),
    ("content", _d_bytes, True),
    ("truncated", _d_bool, True),
], lambda got: OutFile(**got, listed="content" not in got), required=("path",))


def _build_result(got: Dict[str, Any]) -> Result:
    for name in ("id", "status"):
        if name not in got:
            raise WireError(name, f'missing required field "{name}"')
    res = Result(**got)
    _check_result(res)
    return res


_RESULT = _Spec([
    ("v", _skip_v, False),
    ("id", _d_str, False),
    ("status", _d_enum(Status), False),
    ("exit_code", _d_int32, True),
    ("signal", _d_signal, True),
    ("stdout", _d_bytes, True),
    ("stderr", _d_bytes, True),
    ("stdout_truncated", _d_bool, True),
    ("stderr_truncated", _d_bool, True),
    ("output", _d_value, False),
    ("diagnostics", _d_diagnostics, True),
    ("wall_time_us", _d_uint, True),
    ("cpu_time_us", _d_uint, True),
    ("peak_memory_bytes", _d_uint, True),
    ("metadata", _d_object(_METADATA), True),
    ("reason", _d_str, True),
    ("reply_to_error", _d_str, True),
    ("workspace_revision", _d_uint, True),
    ("changed_paths", _d_strlist, True),
    ("workspace_conflict", _d_bool, True),
    ("checkpoint_id", _d_str, True),
    ("checkpoint_conflict", _d_bool, True),
    ("finished_us", _d_uint, True),
    ("compile", _d_object(_COMPILE), True),
    ("cases", _d_list_of(_CASE_RESULT), True),
    ("files", _d_list_of(_OUT_FILE), True),
    ("files_truncated", _d_bool, True),
    ("chunks", _d_uint, True),
    ("session_cell", _d_uint, True),
    ("session_restored", _d_bool, True),
    ("session_lost", _d_strlist, True),
], _build_result)


def _build_chunk(got: Dict[str, Any]) -> Chunk:
    for name in ("id", "run", "seq", "stream", "offset"):
        if name not in got:
            raise WireError(name, f'missing required field "{name}"')
    if "data" not in got or not got["data"]:
        raise WireError("data", f'missing required field "data" (1..{CHUNK_DATA_MAX} bytes)')
    c = Chunk(**got)
    _check_chunk(c)
    return c


# The C chunk decoder gives nil no special meaning: it is a wrong type.
_CHUNK_FIELDS = [
    ("v", _skip_v, False),
    ("id", _d_str, False),
    ("run", _d_str, False),
    ("seq", _d_uint, False),
    ("stream", _d_enum(OutputStream), False),
    ("offset", _d_uint, False),
    ("data", _d_bin, False),
    ("at_us", _d_uint, False),
]
_CHUNK = _Spec(_CHUNK_FIELDS, _build_chunk)


def _d_start_event(r: _Reader, path: str, depth: int) -> str:
    if r.str_raw(r.lim.max_str_bytes, path) != b"start":
        raise WireError(path, 'must be "start" when present')
    return "start"


def _build_start_notice(got: Dict[str, Any]) -> StartNotice:
    for name in ("id", "run", "event"):
        if name not in got:
            raise WireError(name, f'missing required field "{name}"')
    got.pop("event")
    for name in ("seq", "stream", "offset", "data"):
        if got.pop(name, None) is not None:
            raise WireError(name, f'a start notice carries no "{name}"')
    n = StartNotice(**got)
    _check_start_notice(n)
    return n


# The output fields are read only to refuse them (as the C decoder does).
_START_NOTICE = _Spec(_CHUNK_FIELDS + [
    ("event", _d_start_event, False),
    ("worker", _d_str, False),
], _build_start_notice)


def _d_cancel_type(r: _Reader, path: str, depth: int) -> str:
    if r.str_raw(r.lim.max_str_bytes, path) != b"cancel":
        raise WireError(path, 'unknown control message type (expected "cancel")')
    return "cancel"


def _build_cancel(got: Dict[str, Any]) -> Cancel:
    if got.pop("type", None) is None:
        raise WireError("type", 'missing required field "type"')
    if "id" not in got:
        raise WireError("id", 'missing required field "id"')
    c = Cancel(**got)
    _check_cancel(c)
    return c


_CANCEL = _Spec([
    ("v", _skip_v, False),
    ("type", _d_cancel_type, True),
    ("id", _d_str, True),
    ("reason", _d_str, True),
    ("created_us", _d_uint, True),
], _build_cancel)


def _d_payload(r: _Reader, path: str, depth: int) -> Any:
    start = r.pos
    r.skip(depth, path)
    if r.pos - start > EVENT_PAYLOAD_MAX:
        raise WireError(path, f"{r.pos - start} bytes exceed the limit of {EVENT_PAYLOAD_MAX}")
    return _value_of(r.data[start:r.pos])


def _build_event(got: Dict[str, Any]) -> Event:
    for name in ("id", "workspace", "correlation_id", "topic", "producer", "kind"):
        if name not in got:
            raise WireError(name, f'missing required field "{name}"')
    if "timestamp_us" not in got:
        raise WireError("timestamp_us", 'missing required field "timestamp_us" (positive epoch microseconds)')
    ev = Event(**got)
    _check_event(ev)
    return ev


_EVENT = _Spec([
    ("v", _skip_v, False),
    ("id", _d_str, True),
    ("workspace", _d_str, True),
    ("correlation_id", _d_str, True),
    ("topic", _d_str, True),
    ("producer", _d_str, True),
    ("consumer", _d_str, True),
    ("kind", _d_enum(EventKind), True),
    ("payload", _d_payload, False),
    ("timestamp_us", _d_posint, True),
], _build_event)


# ---- semantic checks (shared by the encoders and the decoders) ---------


def _check_id(value: Any, name: str, max_len: int = ID_MAX) -> None:
    if not id_valid(value, max_len):
        raise WireError(name, f"must be 1..{max_len} printable ASCII characters without spaces")


_IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


_OP_CHOICES = "list, read, write, delete, grep, str_replace, insert, apply_patch"
_OP_WRITES = ("write", "delete", "str_replace", "insert", "apply_patch")


def _check_workspace_op(req: Request) -> None:
    """SPEC.md 3.5: the op's own fields, and none of a program's."""
    o = req.workspace_op
    if not isinstance(o, WorkspaceOp):
        raise WireError("workspace_op", "expected a WorkspaceOp")
    try:
        op = WorkspaceOpKind(o.op).value
    except ValueError:
        raise WireError("workspace_op.op", f"unknown value (expected one of {_OP_CHOICES})") from None
    if req.workspace is None:
        raise WireError("workspace_op", 'needs "workspace"')
    fs = req.policy.filesystem
    program = [("language", req.language is not None), ("backend", req.backend is not None),
               ("code", req.code is not None), ("argv", bool(req.argv)), ("module", bool(req.module)),
               ("stdin", bool(req.stdin)), ("input", req.input is not ABSENT), ("env", bool(req.env)),
               ("files", bool(req.files)), ("thread", req.thread is not None), ("harness", req.harness is not None),
               ("compile_flags", bool(req.compile_flags)), ("cases", bool(req.cases)), ("collect", bool(req.collect)),
               ("stream", req.stream), ("image", req.image is not None), ("session", req.session is not None),
               ("policy.network", req.policy.network is not None),
               ("policy.filesystem", fs.mode is not None or bool(fs.read_only) or bool(fs.read_write)),
               ("policy.env_allow", req.policy.env_allow is not None)]
    for name, given in program:
        if given:
            raise WireError(name, "not with workspace_op (no program runs)")
    if op == "apply_patch" and o.path is not None:
        raise WireError("workspace_op.path", "not with apply_patch (the patch names its files)")
    if op not in ("list", "grep", "apply_patch") and not o.path:
        raise WireError("workspace_op.path", f"required for {op}")
    if o.path == "":
        raise WireError("workspace_op.path", "empty")
    if o.path is not None and op == "list":
        raise WireError("workspace_op.path", "not with list (pattern narrows it)")
    if o.pattern is not None and op not in ("list", "grep"):
        raise WireError("workspace_op.pattern", "only for list and grep")
    if op == "grep" and not o.pattern:
        raise WireError("workspace_op.pattern", "required and non-empty for grep")
    if o.pattern == "":
        raise WireError("workspace_op.pattern", "empty")
    if (op in ("write", "apply_patch")) != (o.content is not None):
        raise WireError("workspace_op.content",
                        "only for write and apply_patch" if o.content is not None else f"required for {op}")
    if o.old_str is not None and op != "str_replace":
        raise WireError("workspace_op.old_str", "only for str_replace")
    if op == "str_replace" and not o.old_str:
        raise WireError("workspace_op.old_str", "required and non-empty for str_replace")
    if o.new_str is not None and op not in ("str_replace", "insert"):
        raise WireError("workspace_op.new_str", "only for str_replace and insert")
    if op == "insert" and (o.new_str is None or o.insert_line is None):
        raise WireError("workspace_op", "insert needs insert_line and new_str")
    if o.insert_line is not None and op != "insert":
        raise WireError("workspace_op.insert_line", "only for insert")
    if o.expected_revision is not None and op not in _OP_WRITES:
        raise WireError("workspace_op.expected_revision",
                        "only for write, delete, str_replace, insert and apply_patch")
    for name in ("first_line", "last_line"):
        if getattr(o, name) is not None and op != "read":
            raise WireError(f"workspace_op.{name}", "only for read")
    if o.first_line is not None and o.first_line < 1:
        raise WireError("workspace_op.first_line", "lines count from 1")
    if o.last_line is not None and o.last_line < (o.first_line if o.first_line is not None else 1):
        raise WireError("workspace_op.last_line", "before first_line")


def _check_session(req: Request, lang: "Language") -> None:
    """SPEC 3.6: a python cell, run no other way, in a read-write workspace."""
    if not _SESSION_ID.fullmatch(req.session or ""):
        raise WireError("session", "must be 1..128 characters of [A-Za-z0-9._-]")
    if lang not in (Language.PYTHON, Language.SHELL):
        raise WireError("session", f'only languages "python" and "shell" have sessions (not "{lang}")')
    for name, on in (("harness", req.harness is not None), ("cases", bool(req.cases)), ("thread", req.thread)):
        if on:
            raise WireError("session", f"not with {name} (a cell is one run of the session's code)")
    if req.policy.filesystem.mode not in (None, FsMode.WORKSPACE_RW, "workspace_rw"):
        raise WireError("session", "policy.filesystem.mode must be workspace_rw or absent "
                                   "(a cell saves its state into the workspace)")


_SESSION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _check_request(req: Request) -> None:
    _check_id(req.id, "id")
    if req.workspace_op is not None:
        _check_workspace_op(req)
        return
    if req.language is None:
        raise WireError("language", 'missing required field "language"')
    lang = Language(req.language)
    if lang == Language.COMMAND:
        if not req.argv:
            raise WireError("argv", f'required and non-empty for language "{lang}"')
        if req.argv[0] == "":
            raise WireError("argv[0]", "empty program name")
    elif lang == Language.WASM:
        if not req.module:
            raise WireError("module", f'required for language "{lang}"')
    elif req.code is None:
        raise WireError("code", f'required for language "{lang}"')
    if req.session is not None:
        _check_session(req, lang)
    for name in req.env:
        if name == "" or "=" in name:
            raise WireError("env", "invalid variable name")
    if any(path == "" for path in req.files):
        raise WireError("files", "empty path")
    if req.image is not None and not _IMAGE_NAME.fullmatch(req.image):
        raise WireError("image", "must be 1..64 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
    fs = req.policy.filesystem
    if (fs.read_only or fs.read_write) and fs.mode != FsMode.PATHS:
        raise WireError("policy.filesystem", 'read_only/read_write are only valid with mode "paths"')
    if req.harness is not None and lang not in _HARNESS_LANGUAGES:
        raise WireError("harness", f'"function" is available for python, javascript, typescript and rust, not {lang}')
    if len(req.compile_flags) > COMPILE_FLAGS_MAX:
        raise WireError("compile_flags", f"more than {COMPILE_FLAGS_MAX}")
    if req.compile_flags and lang not in _COMPILED:
        raise WireError("compile_flags", f"language {lang} is not compiled")
    if len(req.collect) > COLLECT_MAX:
        raise WireError("collect", f"more than {COLLECT_MAX} patterns")
    for i, pattern in enumerate(req.collect):
        if pattern == "":
            raise WireError(f"collect[{i}]", "empty pattern")
    if len(req.cases) > CASES_MAX:
        raise WireError("cases", f"more than {CASES_MAX}")
    if req.stream and req.cases:
        raise WireError("stream", "not with cases (each case's output is in its result)")


def _check_diagnostic(dg: Diagnostic, path: str, top: bool) -> None:
    if dg.children and not top:
        raise WireError(path, "nested children")
    for i, child in enumerate(dg.children):
        _check_diagnostic(child, f"{path}.children[{i}]", False)


def _check_result(res: Result) -> None:
    _check_id(res.id, "id")
    for i, dg in enumerate(res.diagnostics):
        _check_diagnostic(dg, f"diagnostics[{i}]", True)
    if res.checkpoint_id is not None:
        _check_id(res.checkpoint_id, "checkpoint_id")
    for i, f in enumerate(res.files):
        if f.path == "":
            raise WireError(f"files[{i}]", 'missing required field "path"')


def _check_chunk(c: Chunk) -> None:
    _check_id(c.id, "id")
    _check_id(c.run, "run", CHUNK_RUN_MAX)
    if not 1 <= len(c.data) <= CHUNK_DATA_MAX:
        raise WireError("data", f"must be 1..{CHUNK_DATA_MAX} bytes")


def _check_start_notice(n: StartNotice) -> None:
    _check_id(n.id, "id")
    _check_id(n.run, "run", CHUNK_RUN_MAX)
    if n.worker is not None:
        _check_id(n.worker, "worker", CHUNK_RUN_MAX)


def _check_text(value: str, name: str, max_len: int, allow_empty: bool) -> None:
    """Free text shown to humans: bounded, no control characters."""
    n = len(value.encode("utf-8"))
    if n > max_len or (n == 0 and not allow_empty):
        raise WireError(name, f"must be {0 if allow_empty else 1}..{max_len} bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise WireError(name, "control characters are not allowed")


def _check_cancel(c: Cancel) -> None:
    _check_id(c.id, "id")
    if c.reason is not None:
        _check_text(c.reason, "reason", CANCEL_REASON_MAX, allow_empty=True)


_WORKSPACE_RE = re.compile(r"[A-Za-z0-9._-]{1,%d}" % EVENT_WORKSPACE_MAX)


def _check_event(ev: Event) -> None:
    _check_id(ev.id, "id")
    if not isinstance(ev.workspace, str) or not _WORKSPACE_RE.fullmatch(ev.workspace):
        raise WireError("workspace", f"must be 1..{EVENT_WORKSPACE_MAX} characters of [A-Za-z0-9._-]")
    _check_id(ev.correlation_id, "correlation_id")
    _check_text(ev.topic, "topic", EVENT_TEXT_MAX, allow_empty=False)
    _check_text(ev.producer, "producer", EVENT_TEXT_MAX, allow_empty=False)
    if ev.consumer is not None:
        _check_text(ev.consumer, "consumer", EVENT_TEXT_MAX, allow_empty=False)
    if not (isinstance(ev.timestamp_us, int) and ev.timestamp_us > 0):
        raise WireError("timestamp_us", 'missing required field "timestamp_us" (positive epoch microseconds)')


# ---- encoder -----------------------------------------------------------
#
# Canonical form (SPEC.md 2): keys in the table order, the smallest header
# and integer forms, optional fields left out when absent/zero/false/empty.
# Every writer also checks the type of what it is given, so a wrong Python
# type is a WireError naming the field, not a TypeError from deep inside.


def _len_header(n: int, small_base: Optional[int], small_max: int, tags: Sequence[Tuple[int, int]]) -> bytes:
    if small_base is not None and n <= small_max:
        return bytes([small_base | n])
    for tag, width in tags:
        if n < 1 << (8 * width):
            return bytes([tag]) + n.to_bytes(width, "big")
    raise OverflowError(n)


def _map_header(n: int) -> bytes:
    return _len_header(n, 0x80, 15, ((0xDE, 2), (0xDF, 4)))


def _array_header(n: int) -> bytes:
    return _len_header(n, 0x90, 15, ((0xDC, 2), (0xDD, 4)))


def _str_out(raw: bytes) -> bytes:
    return _len_header(len(raw), 0xA0, 31, ((0xD9, 1), (0xDA, 2), (0xDB, 4))) + raw


def _bin_out(raw: bytes) -> bytes:
    return _len_header(len(raw), None, 0, ((0xC4, 1), (0xC5, 2), (0xC6, 4))) + raw


def _e_str(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise WireError(path, f"expected string, got {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise WireError(path, "string is not valid UTF-8 without NUL bytes") from None
    if b"\0" in raw:
        raise WireError(path, "string is not valid UTF-8 without NUL bytes")
    if len(raw) > DEFAULT_LIMITS.max_str_bytes:
        raise WireError(path, f"string of {len(raw)} bytes exceeds the limit of {DEFAULT_LIMITS.max_str_bytes}")
    return _str_out(raw)


def _as_bytes(value: Any, path: str, max_len: int = DEFAULT_LIMITS.max_bin_bytes) -> bytes:
    if isinstance(value, str):
        value = _to_bytes(value)
        if isinstance(value, str):
            raise WireError(path, "text is not valid Unicode")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise WireError(path, f"expected bytes, got {type(value).__name__}")
    raw = bytes(value)
    if len(raw) > max_len:
        raise WireError(path, f"binary of {len(raw)} bytes exceeds the limit of {max_len}")
    return raw


def _text_out(raw: bytes) -> bytes:
    """Text-like bytes: str when valid UTF-8 (what Python and Go clients
    expect for source code), bin otherwise."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return _bin_out(raw)
    return _str_out(raw)


def _e_int(value: Any, path: str, lo: int, hi: int, what: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise WireError(path, f"expected {what}")
    return msgpack.packb(value)


def _e_enum(value: Any, cls: Any, path: str) -> bytes:
    try:
        member = cls(value)
    except ValueError:
        raise WireError(path, "unknown value (expected one of %s)" % ", ".join(m.value for m in cls)) from None
    return _str_out(member.value.encode())


def _e_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise WireError(path, f"expected bool, got {type(value).__name__}")
    return value


def _e_value(value: Any, path: str, outer_levels: int) -> bytes:
    """Any msgpack value, checked against the decoder limits at the depth
    it will sit at, so the whole message decodes on the other side."""
    if isinstance(value, Raw):
        raw = bytes(value.data)
    else:
        try:
            raw = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:
            raise WireError(path, f"cannot encode as msgpack: {e}") from None
    if not raw:
        raise WireError(path, "empty value")
    r = _Reader(raw, DEFAULT_LIMITS)
    r.skip(outer_levels + 1, path)
    if r.pos != r.end:
        raise WireError(path, f"{r.remaining()} trailing bytes after the value")
    return raw


class _MapOut:
    """A map under construction: encoded entries, counted.  The put_*
    helpers leave a field out when it is absent, zero, false or empty."""

    __slots__ = ("parts", "n")

    def __init__(self) -> None:
        self.parts: List[bytes] = []
        self.n = 0

    def put(self, key: str, encoded: bytes) -> None:
        self.parts.append(_str_out(key.encode()))
        self.parts.append(encoded)
        self.n += 1

    def put_str(self, key: str, value: Optional[str], path: str) -> None:
        if value is not None:
            self.put(key, _e_str(value, path))

    def put_int(self, key: str, value: int, path: str, lo: int = 0, hi: int = _INT64_MAX,
                what: str = "non-negative integer") -> None:
        encoded = _e_int(value, path, lo, hi, what)
        if value:
            self.put(key, encoded)

    def put_flag(self, key: str, value: bool, path: str) -> None:
        if _e_bool(value, path):
            self.put(key, b"\xc3")

    def put_bool(self, key: str, value: bool, path: str) -> None:
        """A bool written even when false (compile.cached, case match)."""
        self.put(key, b"\xc3" if _e_bool(value, path) else b"\xc2")

    def put_text(self, key: str, value: Any, path: str) -> None:
        raw = _as_bytes(value, path)
        if raw:
            self.put(key, _text_out(raw))

    def put_bin(self, key: str, value: Any, path: str, max_len: int = DEFAULT_LIMITS.max_bin_bytes) -> None:
        raw = _as_bytes(value, path, max_len)
        if raw:
            self.put(key, _bin_out(raw))

    def put_strlist(self, key: str, value: Optional[Sequence[str]], path: str, even_empty: bool = False) -> None:
        if value is None:
            return
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise WireError(path, "expected a list of strings")
        if value or even_empty:
            self.put(key, _array_header(len(value)) + b"".join(_e_str(s, f"{path}[{i}]")
                                                               for i, s in enumerate(value)))

    def put_strmap(self, key: str, value: Mapping[str, Any], path: str, text_values: bool = False) -> None:
        if not isinstance(value, Mapping):
            raise WireError(path, "expected a map")
        if not value:
            return
        body = []
        for i, (k, v) in enumerate(value.items()):
            body.append(_e_str(k, f"{path}[{i}]"))
            body.append(_text_out(_as_bytes(v, f"{path}[{i}]")) if text_values else _e_str(v, f"{path}[{i}]"))
        self.put(key, _map_header(len(value)) + b"".join(body))

    def put_value(self, key: str, value: Any, path: str, outer_levels: int = 1) -> None:
        if value is not ABSENT:
            self.put(key, _e_value(value, path, outer_levels))

    def put_child(self, key: str, child: "_MapOut") -> None:
        if child.n:
            self.put(key, child.finish())

    def finish(self) -> bytes:
        return _map_header(self.n) + b"".join(self.parts)


def _list_out(values: Any, path: str, cls: type, one: Callable[[Any, str], bytes]) -> bytes:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise WireError(path, "expected a list")
    parts = []
    for i, v in enumerate(values):
        parts.append(one(_typed(v, cls, f"{path}[{i}]"), f"{path}[{i}]"))
    return _array_header(len(values)) + b"".join(parts)


def _finish(m: _MapOut, what: str) -> bytes:
    out = m.finish()
    if len(out) > DEFAULT_LIMITS.max_total_bytes:
        raise WireError("message", f"{what} of {len(out)} bytes exceeds the limit of {DEFAULT_LIMITS.max_total_bytes}")
    return out


def _typed(obj: Any, cls: type, path: str) -> Any:
    if not isinstance(obj, cls):
        raise WireError(path, f"expected {cls.__name__}, got {type(obj).__name__}")
    return obj


def _encode_case(c: Case, path: str) -> bytes:
    m = _MapOut()
    m.put_str("name", c.name, f"{path}.name")
    m.put_text("stdin", c.stdin, f"{path}.stdin")
    m.put_value("input", c.input, f"{path}.input", _CASE_VALUE_LEVELS)
    m.put_strlist("argv", c.argv, f"{path}.argv")
    if c.expect_stdout is not None:  # present, even empty, means "compare"
        m.put("expect_stdout", _text_out(_as_bytes(c.expect_stdout, f"{path}.expect_stdout")))
    return m.finish()


def _encode_request(req: Request) -> bytes:
    _typed(req, Request, "message")
    p = _typed(req.policy, Policy, "policy")
    fs = _typed(p.filesystem, Filesystem, "policy.filesystem")
    fsm = _MapOut()
    if fs.mode is not None:
        fsm.put("mode", _e_enum(fs.mode, FsMode, "policy.filesystem.mode"))
    fsm.put_strlist("read_only", fs.read_only, "policy.filesystem.read_only")
    fsm.put_strlist("read_write", fs.read_write, "policy.filesystem.read_write")
    pm = _MapOut()
    if p.network is not None:
        pm.put("network", _e_enum(p.network, Network, "policy.network"))
    pm.put_child("filesystem", fsm)
    pm.put_strlist("env_allow", p.env_allow, "policy.env_allow", even_empty=True)
    for name in ("timeout_us", "cpu_time_us", "memory_bytes", "max_processes", "max_stdout_bytes",
                 "max_stderr_bytes", "max_file_size_bytes", "compile_timeout_us", "compile_memory_bytes"):
        pm.put_int(name, getattr(p, name), f"policy.{name}")

    m = _MapOut()
    m.put("v", b"\x01")
    m.put("id", _e_str(req.id, "id"))
    if req.language is not None:
        m.put("language", _e_enum(req.language, Language, "language"))
    m.put_str("backend", req.backend, "backend")
    if req.code is not None:  # an empty program is still a program
        m.put("code", _text_out(_as_bytes(req.code, "code")))
    m.put_strlist("argv", req.argv, "argv")
    m.put_bin("module", req.module, "module")
    m.put_text("stdin", req.stdin, "stdin")
    m.put_value("input", req.input, "input")
    m.put_strmap("env", req.env, "env")
    m.put_strmap("files", req.files, "files", text_values=True)
    m.put_child("policy", pm)
    m.put_str("workspace", req.workspace, "workspace")
    m.put_str("thread", req.thread, "thread")
    m.put_str("identity", req.identity, "identity")
    m.put_str("reply_to", req.reply_to, "reply_to")
    m.put_int("deadline_us", req.deadline_us, "deadline_us")
    m.put_int("created_us", req.created_us, "created_us")
    m.put_strmap("trace", req.trace, "trace")
    if req.harness is not None:
        m.put("harness", _e_enum(req.harness, Harness, "harness"))
    m.put_strlist("compile_flags", req.compile_flags, "compile_flags")
    if req.cases:
        m.put("cases", _list_out(req.cases, "cases", Case, _encode_case))
    m.put_flag("stop_on_failure", req.stop_on_failure, "stop_on_failure")
    m.put_strlist("collect", req.collect, "collect")
    m.put_flag("stream", req.stream, "stream")
    m.put_str("image", req.image, "image")
    m.put_flag("notify_start", req.notify_start, "notify_start")
    if req.workspace_op is not None:
        m.put("workspace_op", _encode_workspace_op(_typed(req.workspace_op, WorkspaceOp, "workspace_op")))
    m.put_str("session", req.session, "session")
    out = _finish(m, "request")
    _check_request(req)
    return out


def _encode_workspace_op(o: WorkspaceOp) -> bytes:
    m = _MapOut()
    m.put("op", _e_enum(o.op, WorkspaceOpKind, "workspace_op.op"))
    m.put_str("path", o.path, "workspace_op.path")
    m.put_str("pattern", o.pattern, "workspace_op.pattern")
    for name in ("content", "old_str", "new_str"):  # written when given, even empty
        value = getattr(o, name)
        if value is not None:
            m.put(name, _text_out(_as_bytes(value, f"workspace_op.{name}")))
    for name in ("insert_line", "expected_revision", "first_line", "last_line"):  # written when given, even 0
        value = getattr(o, name)
        if value is not None:
            m.put(name, _e_int(value, f"workspace_op.{name}", 0, _INT64_MAX, "non-negative integer"))
    return m.finish()


def _encode_diagnostic(dg: Diagnostic, path: str) -> bytes:
    m = _MapOut()
    m.put_str("level", dg.level, f"{path}.level")
    m.put("message", _e_str(dg.message, f"{path}.message"))
    m.put_str("file", dg.file, f"{path}.file")
    m.put_int("line", dg.line, f"{path}.line")
    m.put_int("column", dg.column, f"{path}.column")
    m.put_str("code", dg.code, f"{path}.code")
    m.put_int("end_line", dg.end_line, f"{path}.end_line")
    m.put_int("end_column", dg.end_column, f"{path}.end_column")
    if dg.children:
        m.put("children", _list_out(dg.children, f"{path}.children", Diagnostic, _encode_diagnostic))
    return m.finish()


def _put_run_outcome(m: _MapOut, r: Union[Result, CaseResult], path: str) -> None:
    """The fields a result and a case result share, from exit_code to
    output, in encoding order."""
    if r.exit_code is not None:  # written whenever the process exited, even with 0
        m.put("exit_code", _e_int(r.exit_code, f"{path}exit_code", _INT32_MIN, _INT32_MAX, "32-bit integer"))
    m.put_int("signal", r.signal, f"{path}signal", 0, _INT32_MAX, "non-negative 32-bit integer")
    m.put_bin("stdout", r.stdout, f"{path}stdout")
    m.put_bin("stderr", r.stderr, f"{path}stderr")
    m.put_flag("stdout_truncated", r.stdout_truncated, f"{path}stdout_truncated")
    m.put_flag("stderr_truncated", r.stderr_truncated, f"{path}stderr_truncated")


def _encode_case_result(c: CaseResult, path: str) -> bytes:
    m = _MapOut()
    m.put_str("name", c.name, f"{path}.name")
    m.put("status", _e_enum(c.status, Status, f"{path}.status"))
    _put_run_outcome(m, c, f"{path}.")
    m.put_value("output", c.output, f"{path}.output", _CASE_VALUE_LEVELS)
    m.put_int("wall_time_us", c.wall_time_us, f"{path}.wall_time_us")
    m.put_int("cpu_time_us", c.cpu_time_us, f"{path}.cpu_time_us")
    m.put_int("peak_memory_bytes", c.peak_memory_bytes, f"{path}.peak_memory_bytes")
    if c.match is not None:
        m.put_bool("match", c.match, f"{path}.match")
    m.put_str("reason", c.reason, f"{path}.reason")
    return m.finish()


def _encode_out_file(f: OutFile, path: str) -> bytes:
    m = _MapOut()
    m.put("path", _e_str(f.path, f"{path}.path"))
    m.put("size", _e_int(f.size, f"{path}.size", 0, _INT64_MAX, "non-negative integer"))
    if not f.listed:
        m.put("content", _bin_out(_as_bytes(f.content, f"{path}.content")))
    m.put_flag("truncated", f.truncated, f"{path}.truncated")
    return m.finish()


def _encode_result(res: Result) -> bytes:
    _typed(res, Result, "message")
    m = _MapOut()
    m.put("v", b"\x01")
    m.put("id", _e_str(res.id, "id"))
    m.put("status", _e_enum(res.status, Status, "status"))
    _put_run_outcome(m, res, "")
    m.put_value("output", res.output, "output")
    if res.diagnostics:
        m.put("diagnostics", _list_out(res.diagnostics, "diagnostics", Diagnostic, _encode_diagnostic))
    m.put_int("wall_time_us", res.wall_time_us, "wall_time_us")
    m.put_int("cpu_time_us", res.cpu_time_us, "cpu_time_us")
    m.put_int("peak_memory_bytes", res.peak_memory_bytes, "peak_memory_bytes")
    md = _typed(res.metadata, Metadata, "metadata")
    mm = _MapOut()
    for name in ("backend", "isolation", "language", "worker", "identity"):
        mm.put_str(name, getattr(md, name), f"metadata.{name}")
    mm.put_int("attempt", md.attempt, "metadata.attempt")
    mm.put_flag("replay", md.replay, "metadata.replay")
    for name in ("toolchain", "sandbox", "run", "traceparent"):
        mm.put_str(name, getattr(md, name), f"metadata.{name}")
    m.put_child("metadata", mm)
    m.put_str("reason", res.reason, "reason")
    m.put_str("reply_to_error", res.reply_to_error, "reply_to_error")
    m.put_int("workspace_revision", res.workspace_revision, "workspace_revision")
    m.put_strlist("changed_paths", res.changed_paths, "changed_paths")
    m.put_flag("workspace_conflict", res.workspace_conflict, "workspace_conflict")
    m.put_str("checkpoint_id", res.checkpoint_id, "checkpoint_id")
    m.put_flag("checkpoint_conflict", res.checkpoint_conflict, "checkpoint_conflict")
    m.put_int("finished_us", res.finished_us, "finished_us")
    if res.compile is not None:
        cp = _typed(res.compile, CompileInfo, "compile")
        cm = _MapOut()
        cm.put_bool("cached", cp.cached, "compile.cached")
        cm.put_int("wall_time_us", cp.wall_time_us, "compile.wall_time_us")
        cm.put_int("cpu_time_us", cp.cpu_time_us, "compile.cpu_time_us")
        cm.put_int("peak_memory_bytes", cp.peak_memory_bytes, "compile.peak_memory_bytes")
        m.put_child("compile", cm)
    if res.cases:
        m.put("cases", _list_out(res.cases, "cases", CaseResult, _encode_case_result))
    if res.files:
        m.put("files", _list_out(res.files, "files", OutFile, _encode_out_file))
    m.put_flag("files_truncated", res.files_truncated, "files_truncated")
    m.put_int("chunks", res.chunks, "chunks")
    m.put_int("session_cell", res.session_cell, "session_cell")
    m.put_flag("session_restored", res.session_restored, "session_restored")
    m.put_strlist("session_lost", res.session_lost, "session_lost")
    out = _finish(m, "result")
    _check_result(res)
    return out


def _encode_chunk(c: Chunk) -> bytes:
    _typed(c, Chunk, "message")
    m = _MapOut()
    m.put("v", b"\x01")
    m.put("id", _e_str(c.id, "id"))
    m.put("run", _e_str(c.run, "run"))
    m.put("seq", _e_int(c.seq, "seq", 0, _INT64_MAX, "non-negative integer"))
    m.put("stream", _e_enum(c.stream, OutputStream, "stream"))
    m.put("offset", _e_int(c.offset, "offset", 0, _INT64_MAX, "non-negative integer"))
    m.put("data", _bin_out(_as_bytes(c.data, "data", CHUNK_DATA_MAX)))
    m.put_int("at_us", c.at_us, "at_us")
    out = m.finish()
    _check_chunk(c)
    return out


def _encode_start_notice(n: StartNotice) -> bytes:
    _typed(n, StartNotice, "message")
    _check_start_notice(n)
    m = _MapOut()
    m.put("v", b"\x01")
    m.put("id", _e_str(n.id, "id"))
    m.put("run", _e_str(n.run, "run"))
    m.put("event", _str_out(b"start"))
    m.put_str("worker", n.worker, "worker")
    m.put_int("at_us", n.at_us, "at_us")
    return m.finish()


def _encode_cancel(c: Cancel) -> bytes:
    _typed(c, Cancel, "message")
    m = _MapOut()
    m.put("v", b"\x01")
    m.put("type", _str_out(b"cancel"))
    m.put("id", _e_str(c.id, "id"))
    if c.reason:
        m.put("reason", _e_str(c.reason, "reason"))
    m.put_int("created_us", c.created_us, "created_us")
    out = m.finish()
    _check_cancel(c)
    return out


def _encode_event(ev: Event) -> bytes:
    _typed(ev, Event, "message")
    m = _MapOut()
    m.put("v", b"\x01")
    for name in ("id", "workspace", "correlation_id", "topic", "producer"):
        m.put(name, _e_str(getattr(ev, name), name))
    m.put_str("consumer", ev.consumer, "consumer")
    m.put("kind", _e_enum(ev.kind, EventKind, "kind"))
    if ev.payload is not ABSENT:  # nil is a payload too
        payload = _e_value(ev.payload, "payload", 1)
        if len(payload) > EVENT_PAYLOAD_MAX:
            raise WireError("payload", f"{len(payload)} bytes exceed the limit of {EVENT_PAYLOAD_MAX}")
        m.put("payload", payload)
    m.put("timestamp_us", _e_int(ev.timestamp_us, "timestamp_us", 1, _INT64_MAX, "positive integer"))
    out = m.finish()
    _check_event(ev)
    return out


# ---- best-effort id scan ------------------------------------------------


def peek_id(data: bytes) -> Optional[str]:
    """The ``id`` of a message that may not decode (SPEC.md 6, "best-effort
    id scan"): top-level entries are scanned in order, trusting neither the
    declared count beyond the bytes present nor anything else; ``None`` when
    no valid id comes before a malformed entry."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
        return None
    buf = bytes(data)
    b = buf[0]
    if 0x80 <= b <= 0x8F:
        n, pos = b & 0x0F, 1
    elif b == 0xDE and len(buf) >= 3:
        n, pos = int.from_bytes(buf[1:3], "big"), 3
    elif b == 0xDF and len(buf) >= 5:
        n, pos = int.from_bytes(buf[1:5], "big"), 5
    else:
        return None
    r = _Reader(buf, DEFAULT_LIMITS)
    r.pos = pos
    try:
        for _ in range(n):
            if r.pos >= r.end:
                return None
            key = r.str_raw(DEFAULT_LIMITS.max_str_bytes, "id") if r.peek() == _STR else None
            if key is None:
                r.skip(2, "id")
            if key == b"id":
                raw = r.str_raw(ID_MAX, "id")
                ident = raw.decode("ascii", "replace")
                return ident if id_valid(ident) else None
            r.skip(2, "id")
    except WireError:
        return None
    return None

