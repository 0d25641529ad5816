"""asyncio client: the same operations as :class:`codefleet.Client`,
awaitable, with ``async for chunk in client.stream(request)``.

Waiting for a result costs no thread: the result collector hands it to the
event loop (``call_soon_threadsafe``).  The Kafka calls that block (creating
the client, producing, a stream's polls) run in the loop's default executor.
"""
from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Iterable, List, Optional, Tuple, TypeVar, Union

from .client import (ChunkStream, Client, ClientStats, FollowStream, ResultOrError, WorkspaceEntry, _ws_content,
                     _ws_format, _ws_lines, _ws_listing, _ws_matches, _ws_request)
from .config import Settings
from .errors import BatchTimeout, ClientClosed, Timeout, WorkspaceOpError
from .wire import Chunk, Event, Request, Result, Status

__all__ = ["AsyncClient", "AsyncChunkStream"]

T = TypeVar("T")


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


class AsyncClient:
    """An asyncio client.  Takes the arguments of :class:`Client`; the
    connection is made by :meth:`start`, by ``async with``, or by the first
    call that needs it.  Close it with :meth:`close` (or ``async with``)."""

    def __init__(self, settings: Optional[Settings] = None, **kwargs: Any) -> None:
        self._settings = settings
        self._kwargs = kwargs
        self._client: Optional[Client] = None
        self._starting: Optional[asyncio.Lock] = None
        self._closed = False

    async def start(self) -> Client:
        """Connects (creates the producer and the result collector) and
        returns the underlying blocking client."""
        if self._client is not None:
            return self._client
        if self._closed:
            raise ClientClosed("client is closed")
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._client is None:
                self._client = await _in_thread(Client, self._settings, **self._kwargs)
            return self._client

    async def submit(self, request: Request) -> str:
        """See :meth:`Client.submit`."""
        client = await self.start()
        return await _in_thread(client.submit, request)

    async def wait(self, request_id: str, timeout: float = 60.0) -> Result:
        """See :meth:`Client.wait`; no thread is held while waiting."""
        client = await self.start()
        collector = client._need_collector()
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[Result]" = loop.create_future()

        def settle(value: ResultOrError) -> None:  # on the loop
            if future.done():
                # The waiter gave up meanwhile: keep the result for a later wait.
                if isinstance(value, Result):
                    collector.deliver(request_id, value)
            elif isinstance(value, Exception):
                future.set_exception(value)
            else:
                future.set_result(value)

        def listener(value: ResultOrError) -> None:  # on the collector's thread
            try:
                loop.call_soon_threadsafe(settle, value)
            except RuntimeError:  # the loop is closed: nobody waits any more
                if isinstance(value, Result):
                    collector.deliver(request_id, value)

        collector.listen(request_id, listener)
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise Timeout(f"no result for request {request_id} within {timeout:g} s", request_id) from None
        finally:
            collector.unlisten(request_id, listener)

    async def run(self, request: Request, timeout: float = 60.0) -> Result:
        """Submits and waits (see :meth:`Client.run`)."""
        return await self.wait(await self.submit(request), timeout)

    def session(self, session_id: str, workspace: Optional[str] = None, timeout: float = 60.0, *,
                language: str = "python", **fields: Any) -> "AsyncSession":
        """:meth:`codefleet.Client.session` for asyncio."""
        from .session import AsyncSession
        return AsyncSession(self, session_id, workspace, timeout, language=language, **fields)

    def files(self, workspace: str, timeout: float = 60.0) -> "AsyncWorkspaceFiles":
        """See :meth:`Client.files`: the same operations, awaited."""
        return AsyncWorkspaceFiles(self, workspace, timeout)

    def stream(self, request: Request, timeout: float = 60.0, *, grace: float = 2.0) -> "AsyncChunkStream":
        """``async for chunk in client.stream(request)``; the result is
        ``.result`` of the stream afterwards (see :class:`ChunkStream`)."""
        return AsyncChunkStream(self, request, timeout, grace)

    def follow(self, request_id: str, timeout: float = 60.0, *, since: float = 600.0,
               grace: float = 2.0) -> "AsyncChunkStream":
        """Reattaches to a request, running or finished (see
        :meth:`Client.follow`): ``async for`` its chunks, then ``.result``."""
        return AsyncChunkStream(self, None, timeout, grace, follow=(request_id, since))

    async def cancel(self, request_id: str, reason: Optional[str] = None, timeout: float = 10.0) -> None:
        """See :meth:`Client.cancel`."""
        client = await self.start()
        await _in_thread(client.cancel, request_id, reason, timeout)

    async def batch(self, requests: Iterable[Request], concurrency: int = 8, timeout: float = 60.0) -> List[Result]:
        """See :meth:`Client.batch`: at most `concurrency` in flight, results
        in request order, :class:`BatchTimeout` with the partial results."""
        client = await self.start()
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        prepared = [client._prepared(r) for r in requests]
        if len({r.id for r in prepared}) != len(prepared):
            raise ValueError("batch: two requests have the same id")
        for r in prepared:
            r.encode()  # every request valid before the first is sent
        slots = asyncio.Semaphore(concurrency)

        async def one(req: Request) -> Optional[Result]:
            async with slots:
                try:
                    return await self.run(req, timeout)
                except Timeout:
                    return None

        results = await asyncio.gather(*(one(r) for r in prepared))
        missing = sum(1 for r in results if r is None)
        if missing:
            raise BatchTimeout(f"{missing} of {len(prepared)} requests got no result within {timeout:g} s",
                               list(results))
        return [r for r in results if r is not None]

    async def publish_event(self, event: Event, timeout: float = 10.0) -> Event:
        """See :meth:`Client.publish_event`."""
        client = await self.start()
        return await _in_thread(client.publish_event, event, timeout)

    def stats(self) -> ClientStats:
        return self._client.stats() if self._client is not None else ClientStats()

    async def close(self) -> None:
        """See :meth:`Client.close`.  Idempotent."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await _in_thread(client.close)

    async def __aenter__(self) -> "AsyncClient":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


_END = object()  # StopIteration cannot travel through a Future: this does


class AsyncChunkStream:
    """Async iterator over a streaming request's chunks; see
    :class:`ChunkStream` for what it yields and when it ends.  The request
    is sent at the first ``__anext__``."""

    def __init__(self, client: AsyncClient, request: Optional[Request], timeout: float, grace: float, *,
                 follow: Optional[Tuple[str, float]] = None) -> None:
        self._client = client
        self._request = request
        self._timeout = timeout
        self._grace = grace
        self._follow = follow  # (request id, since): AsyncClient.follow
        self._stream: Optional[ChunkStream] = None
        self._opening: Optional["asyncio.Future[ChunkStream]"] = None

    @property
    def id(self) -> Optional[str]:
        """The request id, once sent."""
        return self._stream.id if self._stream is not None else None

    @property
    def result(self) -> Optional[Result]:
        """The request's result once iteration ended normally."""
        return self._stream.result if self._stream is not None else None

    def __aiter__(self) -> "AsyncChunkStream":
        return self

    async def __anext__(self) -> Chunk:
        if self._stream is None:
            if self._opening is None:
                self._opening = asyncio.ensure_future(self._open())
            # Shielded: a cancelled first __anext__ leaves the opening to
            # finish, and aclose() then closes what it opened.
            self._stream = await asyncio.shield(self._opening)
        chunk = await _in_thread(next, self._stream, _END)
        if chunk is _END:
            raise StopAsyncIteration
        return chunk

    async def _open(self) -> ChunkStream:
        client = await self._client.start()
        if self._follow is not None:
            rid, since = self._follow
            return await _in_thread(FollowStream, client, rid, self._timeout, self._grace, since)
        return await _in_thread(ChunkStream, client, self._request, self._timeout, self._grace)

    async def aclose(self) -> None:
        """Stops the stream early and releases its consumer."""
        if self._stream is None and self._opening is not None:
            try:
                self._stream = await self._opening
            except BaseException:  # it never opened: nothing to release
                pass
        if self._stream is not None:
            await _in_thread(self._stream.close)

    async def __aenter__(self) -> "AsyncChunkStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncWorkspaceFiles:
    """:class:`codefleet.WorkspaceFiles` for asyncio: the same methods,
    as coroutines."""

    def __init__(self, client: AsyncClient, workspace: str, timeout: float = 60.0) -> None:
        self.client = client
        self.workspace = workspace
        self.timeout = timeout
        self.revision = 0

    async def _op(self, op: str, **fields: Any) -> Result:
        res = await self.client.run(_ws_request(self.workspace, op, **fields), self.timeout)
        self.revision = res.workspace_revision
        if res.status != Status.SUCCESS:
            raise WorkspaceOpError(res)
        return res

    async def list(self, pattern: Optional[str] = None) -> List[WorkspaceEntry]:
        return _ws_listing(await self._op("list", pattern=pattern))

    async def read(self, path: str, format: str = "text", *, lines: Optional[Tuple[int, Optional[int]]] = None
                   ) -> Union[str, bytes]:
        _ws_format(format)
        return _ws_content(await self._op("read", path=path, **_ws_lines(lines)), path, format)

    async def write(self, path: str, data: Union[str, bytes], *, expected_revision: Optional[int] = None) -> int:
        return (await self._op("write", path=path, content=data, expected_revision=expected_revision)).workspace_revision

    async def remove(self, path: str, *, expected_revision: Optional[int] = None) -> int:
        return (await self._op("delete", path=path, expected_revision=expected_revision)).workspace_revision

    async def grep(self, text: str, path: Optional[str] = None) -> List[Tuple[str, int, str]]:
        return _ws_matches(await self._op("grep", pattern=text, path=path))

    async def replace(self, path: str, old: str, new: str = "", *, expected_revision: Optional[int] = None) -> int:
        return (await self._op("str_replace", path=path, old_str=old, new_str=new,
                               expected_revision=expected_revision)).workspace_revision

    async def insert(self, path: str, line: int, text: str, *, expected_revision: Optional[int] = None) -> int:
        return (await self._op("insert", path=path, insert_line=line, new_str=text,
                               expected_revision=expected_revision)).workspace_revision

    async def apply_patch(self, patch: str, *, expected_revision: Optional[int] = None) -> List[str]:
        return (await self._op("apply_patch", content=patch, expected_revision=expected_revision)).changed_paths
