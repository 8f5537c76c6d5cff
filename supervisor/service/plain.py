"""The trio side of a plain HTTP request: `routes.py` decides the answer, this writes it.

An artifact is streamed from its file in pieces, never read whole: it is opened before the
head is written (one dropped since it was found is a 404 like any other unknown one), and
once open it is read to its end even if the store removes it meanwhile. A run's download is
made a piece at a time in a worker thread as it is sent (chunked), from its journal in
memory as far as the run has gone when it is asked, or read from the history as it goes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import BinaryIO, Final
from urllib.parse import urlsplit

import trio

from ..history import HistoryFault
from ..run.artifacts import ArtifactGone, Stored
from ..run.journals import UnknownRun
from ..run.storedrun import StoredRun
from . import downloads, routes
from .access import Refusal, check_access
from .asgi import respond_unread
from .connection import ServerConnection
from .mcphttp import MCP_PATH, McpHttp, refusal_body
from .protocolevents import Request, error_body
from .seats import Seats
from .targets import query_tokens
from .wire import ConnectionClosed

#: Bytes read from an artifact's file at a time.
PIECE_BYTES: Final = 256 * 1024


async def serve_plain(
    conn: ServerConnection,
    request: Request,
    *,
    token: str | None,
    origins: frozenset[str],
    stopping: bool,
    state: routes.RouteState,
    names: frozenset[str] | None = None,
    mcp: McpHttp | None = None,
    seats: Seats | None = None,
) -> None:
    """Answers one plain request on `conn`; the caller ends the connection afterwards.
    `/mcp` goes to `mcp` (MCP's streamable HTTP), when the service serves it. With `seats`
    a request whose access is granted (as an upgrade's: its token, Origin and Host) holds
    one while it is answered, as a WebSocket does (a download or an `/mcp` event stream may
    hold its connection as long); past `max_connections` it is refused (503) at once, its
    body unread. Any other is answered at once (its refusal, or a route that asks no
    token), holding none: clients without the token cannot fill the cap."""
    granted = seats is not None and (
        check_access(
            request.headers,
            query_tokens(request.target),
            token=token,
            origins=origins,
            names=names,
        )
        is None
    )
    seat = seats.take(None) if seats is not None and granted else None
    if isinstance(seat, Refusal):
        body = routes.refused(seat).body
        if mcp is not None and urlsplit(request.target).path == MCP_PATH:
            body = refusal_body(seat.status, seat.message)  # (an MCP client reads it)
        await respond_unread(conn, seat.status, body, seat.headers)
        return
    try:
        await _answer(
            conn,
            request,
            token=token,
            origins=origins,
            stopping=stopping,
            state=state,
            names=names,
            mcp=mcp,
        )
    finally:
        if seat is not None:
            seat.give_back()


async def _answer(
    conn: ServerConnection,
    request: Request,
    *,
    token: str | None,
    origins: frozenset[str],
    stopping: bool,
    state: routes.RouteState,
    names: frozenset[str] | None,
    mcp: McpHttp | None,
) -> None:
    if stopping:  # (its answer is a 503: a pipeline ends there, not at the drain's end)
        conn.protocol.last()
    if mcp is not None and urlsplit(request.target).path == MCP_PATH:
        await mcp.answer(
            conn, request, token=token, origins=origins, names=names, stopping=stopping
        )
        return
    answer = routes.answer(
        request, token=token, origins=origins, names=names, stopping=stopping, state=state
    )
    if isinstance(answer, routes.Later):
        if answer.settle:
            await state.settle()
        answer = await trio.to_thread.run_sync(answer.make)
    if isinstance(answer, routes.Answer):
        await conn.respond(answer.status, answer.body, answer.headers, answer.content_type)
        return
    if isinstance(answer, routes.RunDownload):
        await _serve_download(conn, state, answer)
        return
    stored = answer.artifact
    if not isinstance(stored, Stored):
        await _serve_source(conn, stored, answer.headers)
        return
    try:
        fd = await trio.to_thread.run_sync(os.open, stored.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        message = f"the artifact {stored.name} is no longer kept"
        await conn.respond(404, error_body(404, message))
        return
    with os.fdopen(fd, "rb", buffering=0) as file:
        async with contextlib.aclosing(_pieces(file)) as pieces:
            await _respond_stream(
                conn,
                200,
                stored.size,
                pieces,
                headers=answer.headers,
                content_type=stored.mime.encode(),
            )


async def _serve_download(
    conn: ServerConnection, state: routes.RouteState, asked: routes.RunDownload
) -> None:
    """A run's `output.txt` or `frames.ndjson`: its lines so far, all of them, a piece at
    a time."""
    try:
        journal = await state.download(asked.run_id)
    except UnknownRun:
        message = f"no run {asked.run_id[:200]!r} is kept here to download"
        await conn.respond(404, error_body(404, message))
        return
    except routes.SourceDown as exc:  # (a gateway that cannot reach the cluster to ask)
        await conn.respond(503, error_body(503, str(exc)))
        return
    if isinstance(journal, StoredRun):
        batches: Iterator[Sequence[bytes]] = journal.batches()
    else:  # (as far as the run has gone now)
        batches = downloads.in_pieces(journal.lines, len(journal.lines))
    headers = (
        *routes.ARTIFACT_HEADERS,
        (b"Content-Disposition", downloads.filename(asked.run_id, asked.kind)),
    )
    pieces = downloads.download(asked.kind, batches)

    async def sent() -> AsyncGenerator[bytes, None]:
        # Each piece made (and read from the history) in a worker thread, as it is sent: a
        # slow client holds one piece. A fault midway ends the connection without the body's
        # end, so the client sees the download cut short.
        while (piece := await trio.to_thread.run_sync(next, pieces, None)) is not None:
            yield piece

    with contextlib.suppress(HistoryFault):  # (its end unsent: the caller ends the connection)
        async with contextlib.aclosing(sent()) as body:
            await _respond_stream(
                conn, 200, None, body, headers=headers, content_type=downloads.KINDS[asked.kind]
            )


async def _serve_source(
    conn: ServerConnection, source: routes.ArtifactSource, headers: tuple[tuple[bytes, bytes], ...]
) -> None:
    """An artifact kept elsewhere: found before the head is written (404 if it is not)."""
    try:
        found = await source.find()
    except ArtifactGone as exc:
        await conn.respond(404, error_body(404, str(exc)))
        return
    except routes.SourceDown as exc:
        await conn.respond(503, error_body(503, str(exc)))
        return
    async with source.pieces() as pieces:
        await _respond_stream(
            conn, 200, found.size, pieces, headers=headers, content_type=found.mime.encode()
        )


async def _pieces(file: BinaryIO) -> AsyncGenerator[bytes, None]:
    """The file's bytes, a piece at a time, each read in a worker thread."""
    while piece := await trio.to_thread.run_sync(file.read, PIECE_BYTES):
        yield piece


async def _respond_stream(
    conn: ServerConnection,
    status: int,
    length: int | None,
    pieces: AsyncIterator[bytes],
    *,
    headers: tuple[tuple[bytes, bytes], ...],
    content_type: bytes,
) -> None:
    """Answers with a body of exactly `length` bytes taken from `pieces` as they come (a
    file, never held whole); without a `length`, chunked, every piece. A HEAD request gets
    the head alone; a body that ends short of `length`, whose `pieces` raise, or whose client
    takes a piece for longer than the connection's send bound (it has stopped reading: the
    connection is marked broken), has no end written (the caller ends the connection: the
    client sees it cut)."""
    protocol = conn.protocol
    with contextlib.suppress(ConnectionClosed):
        await conn.write_answer(protocol.respond_head(status, length, headers, content_type))
        if not protocol.wants_body:
            await conn.write_answer(protocol.respond_end())
            return
        sent, most = 0, length
        async for piece in pieces:
            cut = piece if most is None else piece[: most - sent]
            sent += len(cut)
            await conn.write_answer(protocol.respond_body(cut))
            if most is not None and sent >= most:
                break
        if most is None or sent == most:
            await conn.write_answer(protocol.respond_end())
