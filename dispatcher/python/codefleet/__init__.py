"""Python client of codefleet: submit code to a Kafka-based worker fleet
and read its results, output chunks and collaboration events.

Wire format: schema/SPEC.md (:mod:`codefleet.wire`).  Clients:
:class:`Client` (blocking, thread-safe) and :class:`AsyncClient` (asyncio).
Settings: :func:`load_settings` reads the CLI's settings file and
environment.
"""
import logging

from .aio import AsyncChunkStream, AsyncClient, AsyncWorkspaceFiles
from .client import ChunkStream, Client, ClientStats, EventSubscription, FollowStream, WorkspaceEntry, WorkspaceFiles
from .config import Settings, load_settings, read_settings_file
from .session import AsyncSession, Session, SessionCommands
from .errors import (BatchTimeout, ClientClosed, ClientError, CodefleetError, ConfigError, DeliveryError, Timeout,
                     WireError, WorkspaceOpError)
from .wire import (ABSENT, DEFAULT_LIMITS, SCHEMA_VERSION, Cancel, Case, CaseResult, Chunk, CompileInfo, Diagnostic,
                   Event, EventKind, Filesystem, FsMode, Harness, Language, Limits, Metadata, Network, OutFile,
                   OutputStream, Policy, Raw, Request, Result, StartNotice, Status, WorkspaceOp, WorkspaceOpKind, encode,
                   id_valid, new_id, peek_id)

# A library leaves logging to its application (warnings about undecodable
# messages go to "codefleet", librdkafka's own lines to "codefleet.kafka").
logging.getLogger("codefleet").addHandler(logging.NullHandler())

__version__ = "0.14.0"

__all__ = [
    "ABSENT", "DEFAULT_LIMITS", "SCHEMA_VERSION", "AsyncChunkStream", "AsyncClient", "AsyncWorkspaceFiles", "AsyncSession", "BatchTimeout", "Cancel",
    "Case", "CaseResult", "Chunk", "ChunkStream", "Client", "FollowStream", "ClientClosed", "ClientError", "ClientStats",
    "CodefleetError", "CompileInfo", "ConfigError", "DeliveryError", "Diagnostic", "Event", "EventKind",
    "EventSubscription", "Filesystem", "FsMode", "Harness", "Language", "Limits", "Metadata", "Network", "OutFile",
    "OutputStream", "Policy", "Raw", "Request", "Result", "Session", "SessionCommands", "Settings", "StartNotice", "Status", "Timeout", "WireError",
    "WorkspaceEntry", "WorkspaceFiles", "WorkspaceOp", "WorkspaceOpError", "WorkspaceOpKind", "encode",
    "id_valid", "load_settings", "new_id", "peek_id", "read_settings_file",
]
