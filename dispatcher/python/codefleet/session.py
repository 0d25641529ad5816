"""Python sessions through the fleet (SPEC.md section 3.6), shaped like the
E2B SDK agents already use: ``run_code`` for cells whose names persist,
``commands.run`` for a shell command in the session's workspace, ``files``
for its files.

A session keeps nothing on a worker: every cell is a request keyed by the
session's workspace (so cells run in order), and its state is a file of
that workspace, written back after each cell that succeeded.  A cell that
fails saves nothing.  What could not be saved is in ``Result.session_lost``.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .errors import ClientError
from .wire import Request, Result, Status

if TYPE_CHECKING:  # the clients import this module lazily
    from .aio import AsyncClient, AsyncWorkspaceFiles
    from .client import Client, WorkspaceFiles

_NOT_FIELDS = ("language", "code", "session", "workspace")


def _fields(defaults: Dict[str, Any], given: Dict[str, Any]) -> Dict[str, Any]:
    """The session's request fields, then the call's: a call cannot move the
    code to another session or workspace (they are the session's)."""
    for name in given:
        if name in _NOT_FIELDS:
            raise TypeError(f"{name}: set by the session, not per call")
    known = {f.name for f in dataclasses.fields(Request)}
    for name in list(defaults) + list(given):
        if name not in known:
            raise TypeError(f"{name}: not a request field")
    return {**defaults, **given}


class _SessionBase:
    def __init__(self, session_id: str, workspace: Optional[str], timeout: float, language: str,
                 fields: Dict[str, Any]) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise TypeError("session_id: a non-empty str is required")
        if language not in ("python", "shell"):
            raise ValueError(f"language: python or shell, not {language!r}")
        self.language = language
        self.id = session_id
        self.workspace = workspace or session_id
        self.timeout = timeout
        self._defaults = _fields(fields, {})
        self.cells = 0  # the last cell's number (Result.session_cell)
        self.lost: List[str] = []  # names the last cell left unsaved

    def _cell(self, code: str, fields: Dict[str, Any]) -> Request:
        return Request(self.language, code, session=self.id,
                       workspace=None if self.workspace == self.id else self.workspace, **_fields(self._defaults, fields))

    def _command(self, cmd: str, fields: Dict[str, Any]) -> Request:
        return Request("shell", cmd, workspace=self.workspace, **_fields(self._defaults, fields))

    def _note(self, res: Result) -> Result:
        if res.status == Status.SUCCESS and not res.session_cell:
            # A worker that predates sessions runs the code as a plain
            # program: nothing of it was kept.
            raise ClientError(f"request {res.id}: the worker that ran it ({res.metadata.worker or '?'}) does not "
                              "know sessions: the code ran, but nothing of it was kept")
        if res.session_cell:
            self.cells = res.session_cell
            self.lost = list(res.session_lost)
        return res


class Session(_SessionBase):
    """A Python session on the fleet (``Client.session``).  Not thread-safe:
    cells of one session run one after another anyway."""

    def __init__(self, client: "Client", session_id: str, workspace: Optional[str] = None, timeout: float = 60.0,
                 *, language: str = "python", **fields: Any) -> None:
        super().__init__(session_id, workspace, timeout, language, fields)
        self.client = client
        self.commands = SessionCommands(self)

    @property
    def files(self) -> "WorkspaceFiles":
        """The session's workspace files (:class:`codefleet.WorkspaceFiles`)."""
        return self.client.files(self.workspace, self.timeout)

    def run_code(self, code: str, *, timeout: Optional[float] = None, **fields: Any) -> Result:
        """Runs `code` (in the session's `language`) as its next cell and
        returns its result:
        ``stdout`` (with the ``repr`` of a last expression), ``status``
        (``failed`` with the traceback in ``stderr`` when it raised),
        ``session_cell``, ``session_restored`` and ``session_lost``.
        Extra request fields (``policy``, ``env``, ``files``, ...) apply to
        this cell only."""
        return self._note(self.client.run(self._cell(code, fields), timeout or self.timeout))


class SessionCommands:
    """``session.commands``: shell commands in the session's workspace
    (its changes written back when the command succeeds)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def run(self, cmd: str, *, timeout: Optional[float] = None, **fields: Any) -> Result:
        s = self._session
        return s.client.run(s._command(cmd, fields), timeout or s.timeout)


class AsyncSession(_SessionBase):
    """:class:`Session` for asyncio (``AsyncClient.session``)."""

    def __init__(self, client: "AsyncClient", session_id: str, workspace: Optional[str] = None,
                 timeout: float = 60.0, *, language: str = "python", **fields: Any) -> None:
        super().__init__(session_id, workspace, timeout, language, fields)
        self.client = client
        self.commands = AsyncSessionCommands(self)

    @property
    def files(self) -> "AsyncWorkspaceFiles":
        return self.client.files(self.workspace, self.timeout)

    async def run_code(self, code: str, *, timeout: Optional[float] = None, **fields: Any) -> Result:
        return self._note(await self.client.run(self._cell(code, fields), timeout or self.timeout))


class AsyncSessionCommands:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def run(self, cmd: str, *, timeout: Optional[float] = None, **fields: Any) -> Result:
        s = self._session
        return await s.client.run(s._command(cmd, fields), timeout or s.timeout)
