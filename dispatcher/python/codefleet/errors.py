"""Exceptions raised by the codefleet client.

Every exception the package raises on purpose derives from
:class:`CodefleetError`, so a caller can catch the whole family at once and
still tell a malformed message (:class:`WireError`) from a missing answer
(:class:`Timeout`) or a broker problem (:class:`DeliveryError`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:  # pragma: no cover - import cycle only for type checkers
    from .wire import Result

__all__ = [
    "CodefleetError",
    "WireError",
    "ConfigError",
    "Timeout",
    "BatchTimeout",
    "DeliveryError",
    "ClientError",
    "ClientClosed",
    "WorkspaceOpError",
]


class CodefleetError(Exception):
    """Base class of every error raised by this package."""


class WireError(CodefleetError, ValueError):
    """A message does not follow schema/SPEC.md (decoding), or an object
    cannot be encoded into one that does (encoding).

    ``field`` is the path of the offending field (``"policy.timeout_us"``,
    ``"argv[2]"``, ``"message"`` for the framing itself), so callers can
    report it without parsing the text.  The hostile value itself is never
    echoed.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.reason = message
        super().__init__(f"{field}: {message}")


class ConfigError(CodefleetError, ValueError):
    """A settings file cannot be read or parsed."""


class Timeout(CodefleetError, TimeoutError):
    """Nothing arrived in time.  ``id`` names the request waited for, when
    there is one."""

    def __init__(self, message: str, id: Optional[str] = None) -> None:
        self.id = id
        super().__init__(message)


class BatchTimeout(Timeout):
    """Some requests of a batch got no result in time.  ``results`` holds
    every result that did arrive, in request order, ``None`` for the
    others, so a batch that mostly worked is not lost."""

    def __init__(self, message: str, results: "List[Optional[Result]]") -> None:
        self.results = results
        super().__init__(message)


class DeliveryError(CodefleetError):
    """The broker did not accept a message (a request, cancel or event)."""


class ClientError(CodefleetError):
    """Setting up Kafka failed (a topic is missing, the broker refused the
    credentials, ...)."""


class ClientClosed(CodefleetError):
    """The client was closed while an operation was waiting or was started
    after close()."""


class WorkspaceOpError(CodefleetError):
    """A workspace operation (:class:`codefleet.WorkspaceFiles`) the fleet
    answered but did not do: ``status`` is ``failed`` (a missing file, text
    not found or not unique, a hunk that does not apply, a stale
    ``expected_revision``: ``conflict`` is then true) or ``rejected`` (a bad
    path, a workspace the profile does not allow).  ``result`` is the whole
    answer; the message is its reason."""

    def __init__(self, result: "Result") -> None:
        super().__init__(f"{result.status}: {result.reason or '(no reason given)'}")
        self.result = result
        self.status = str(result.status)
        self.conflict = result.workspace_conflict
