"""The client side of the service, for `exec --remote`, `events` and `hooks list --remote`.

Each call opens one socket, reads the server's messages (JSON lines) to the close, and turns
a refusal or an error message into a `RemoteError` that says what the server said.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Final, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    HandshakeError,
    WebSocketConnection,
)

from ..core.effects import AnsweredBy
from ..core.frames import STREAM_TYPES, Control, FrameType, ServiceMessage
from ..core.jsontext import is_unicode
from ..core.records import Record
from ..process.signals import serve_stop_signals
from .answering import AskWatcher, Responder
from .liveness import Heard, lost
from .remoteread import RemoteError, Unreachable, batches, event_problem, messages
from .remotewords import refusal, silent
from .wire import DEFAULT_HOST, DEFAULT_PORT, Close
from .wsopen import connect_failure, open_websocket

_T = TypeVar("_T")

DEFAULT_URL: Final = f"ws://{DEFAULT_HOST}:{DEFAULT_PORT}"
#: The largest message a client takes: the server coalesces to ~256 KiB, but one frame may
#: be larger (a hook's applied value).
MAX_INCOMING: Final = 64 * 1024 * 1024
CONNECT_TIMEOUT_S: Final = 10.0
CLOSE_TIMEOUT_S: Final = 2.0


@attrs.frozen(repr=False, eq=False)
class Remote(Record):
    url: str
    token: str | None = None

    def endpoint(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 - a bad port raises here, not later
        except ValueError as exc:
            raise RemoteError(f"--remote: {exc}: {self.url!r}", bad_input=True) from None
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise RemoteError(
                f"--remote: expected a ws:// or wss:// URL, got {self.url!r}", bad_input=True
            )
        base = parts.path.rstrip("/")
        given = {k: v for k, v in (query or {}).items() if v is not None}
        try:
            text = urlencode(given)
        except UnicodeEncodeError:
            bad = ", ".join(f"--{k}" for k, v in given.items() if not is_unicode(str(v)))
            raise RemoteError(f"{bad}: not valid text (lone surrogates)", bad_input=True) from None
        return urlunsplit((parts.scheme, parts.netloc, base + path, text, ""))


@contextlib.asynccontextmanager
async def open_remote(
    remote: Remote,
    path: str,
    query: Mapping[str, Any] | None = None,
    heard: Heard | None = None,
) -> AsyncIterator[WebSocketConnection]:
    """A socket to the server's `path`; `heard` notes when bytes last came on it."""
    url = remote.endpoint(path, query)
    headers = (
        [] if remote.token is None else [(b"authorization", f"Bearer {remote.token}".encode())]
    )
    try:
        async with open_websocket(
            url,
            headers,
            max_message_size=MAX_INCOMING,
            connect_s=CONNECT_TIMEOUT_S,
            close_s=CLOSE_TIMEOUT_S,
            wrap=None if heard is None else heard.wrap,
        ) as ws:
            yield ws
    except ConnectionRejected as exc:
        raise RemoteError(refusal(url, exc)) from None
    except ConnectionTimeout:  # (a HandshakeError too)
        why = f"no WebSocket handshake within {CONNECT_TIMEOUT_S:g} s"
        raise Unreachable(f"cannot connect to {remote.url}: {why}") from None
    except HandshakeError as exc:
        why = connect_failure(exc.__cause__ or exc)
        raise Unreachable(f"cannot connect to {remote.url}: {why}") from None


#: What `exec_remote` holds of a run for its caller besides its output, by frame type: the
#: first `result`, `error` and `end`, as many `artifact` frames as a run keeps, and (None) up
#: to `HELD_OTHERS` of its other frames (hooks, logs, emits, calls). The rest are shown as
#: they come but not held: a run of millions of `emit` frames, or a server that never stops
#: sending, costs the client bounded memory.
HELD_OTHERS: Final = 10_000
HELD: Final[Mapping[str | None, int]] = {
    **dict.fromkeys((FrameType.RESULT, FrameType.ERROR, FrameType.END), 1),
    FrameType.ARTIFACT: 1000,
    None: HELD_OTHERS,
}


@contextlib.asynccontextmanager
async def watched_remote(
    remote: Remote, path: str, query: Mapping[str, Any] | None = None
) -> AsyncIterator[WebSocketConnection]:
    """`open_remote`, the connection watched while the block runs (a frozen network closes
    nothing: `liveness.py`): one silent past `liveness.lost`'s bound cancels the block, and
    `RemoteError` says so."""
    heard = Heard()
    silence: list[float] = []
    async with open_remote(remote, path, query, heard=heard) as ws, trio.open_nursery() as nursery:

        async def alive() -> None:
            silence.append(await lost(ws, heard))
            nursery.cancel_scope.cancel()

        nursery.start_soon(alive)
        try:
            yield ws
        finally:
            nursery.cancel_scope.cancel()
    if silence:
        raise RemoteError(silent(silence[0]))


async def exec_remote(
    remote: Remote,
    request: Mapping[str, Any],
    on_frame: Callable[[dict[str, Any]], Any],
    responder: Responder | None = None,
    after_message: Callable[[], object] | None = None,
    *,
    on_stop: Callable[[int], object] | None = None,
    on_output: Callable[[list[dict[str, Any]]], Any] | None = None,
) -> list[dict[str, Any]]:
    """Runs `request` on the server, handing each frame to `on_frame` as it comes (`on_output`,
    when given, takes the output frames that come together at once instead: most of a run;
    `after_message` is called once those of each WebSocket message are handed on), and each
    `ask` frame to `responder`, whose answer goes to the server (which takes the first
    answer; one it refuses is said on stderr). The first Ctrl-C (or SIGTERM) asks the server
    to cancel the run (its suffix hooks and `end` still come); a second leaves at once, or
    with `on_stop` calls `on_stop(2)` and waits on, a third `on_stop(3)` and leaves. Returns
    the run's frames but its output (`stdout`, `stderr`), which is most of a run and which no
    caller looks at again, within the bounds of `HELD`. A connection silent past
    `liveness.lost`'s bound is lost: `RemoteError` says so."""
    held: list[dict[str, Any]] = []
    counts = dict.fromkeys(HELD, 0)
    failed: RemoteError | None = None  # raised outside the nursery, not in a group
    async with watched_remote(remote, "/v1/exec") as ws, trio.open_nursery() as nursery:
        # (a server that closed first has said why: the messages below read it)
        await _send(ws, request)

        def ask_cancel(_: signal.Signals) -> None:
            nursery.start_soon(_send, ws, {"type": Control.CANCEL})

        async def deliver(ask_id: str, word: str, by: AnsweredBy) -> None:
            await _send(ws, {"type": Control.ANSWER, "askId": ask_id, "answer": word})

        watcher = AskWatcher(nursery, responder, deliver)
        if on_stop is None:
            await nursery.start(serve_stop_signals, nursery.cancel_scope, ask_cancel)
        else:  # (no message cuts a cancelled run's suffix hooks short: the second stays)

            def leave(_: signal.Signals) -> None:
                on_stop(3)
                nursery.cancel_scope.cancel()

            signals = partial(serve_stop_signals, on_more=leave)
            await nursery.start(signals, trio.CancelScope(), ask_cancel, lambda _: on_stop(2))

        def take(frame: dict[str, Any]) -> None:
            if frame.get("askId") and "seq" not in frame:  # an answer the server refused
                print(f"mcpx-hooks: {frame.get('message')}", file=sys.stderr, flush=True)
                return
            if (kind := frame.get("type")) not in STREAM_TYPES:
                kept = kind if isinstance(kind, str) and kind in HELD else None
                if counts[kept] < HELD[kept]:
                    counts[kept] += 1
                    held.append(frame)
                watcher.see(frame)  # (before it is shown: a prompt it settles ends first)
            on_frame(frame)

        try:
            async with contextlib.aclosing(batches(ws, frames=True)) as each:
                async for batch in each:  # (a WebSocket message's frames at once)
                    if on_output is None:
                        for frame in batch:
                            take(frame)
                    else:
                        _output_apart(batch, take, on_output)
                    if after_message is not None:
                        after_message()
        except RemoteError as exc:
            failed = exc
        nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return held


def _output_apart(
    batch: list[dict[str, Any]],
    take: Callable[[dict[str, Any]], None],
    on_output: Callable[[list[dict[str, Any]]], Any],
) -> None:
    """`batch` in order: each run of output frames in it to `on_output` at once, each other
    frame to `take`."""
    start = 0
    for i, frame in enumerate(batch):
        if frame.get("type") not in STREAM_TYPES:
            if start < i:
                on_output(batch[start:i])
            take(frame)
            start = i + 1
    if start < len(batch):
        on_output(batch[start:] if start else batch)


async def _send(ws: WebSocketConnection, message: Mapping[str, Any]) -> None:
    with contextlib.suppress(ConnectionClosed):
        await ws.send_message(json.dumps(message))


async def follow_events(
    remote: Remote,
    kinds: str | None,
    since: int | None,
    on_event: Callable[[dict[str, Any]], Any],
) -> None:
    """Prints the bus until the server closes (1001 at its shutdown) or Ctrl-C; a connection
    gone silent is lost (`watched_remote`)."""
    query = {"kinds": kinds, "since": since}
    ends = (Close.NORMAL, Close.GOING_AWAY)

    async def follow() -> None:  # refused, unreachable, or what the server said on the socket
        async with (
            watched_remote(remote, "/v1/events", query) as ws,
            contextlib.aclosing(messages(ws, ends=ends, problem=event_problem)) as events,
        ):
            async for event in events:
                on_event(event)

    # The signals are taken before connecting: a Ctrl-C while connecting stops too (exit 0).
    await beside(lambda n: n.start(serve_stop_signals, n.cancel_scope), follow)


async def beside(
    start: Callable[[trio.Nursery], Awaitable[object]], body: Callable[[], Awaitable[_T]]
) -> _T | None:
    """`await body()` with the tasks `start` starts in a nursery around it, cancelled once
    it is done; None when one of them cancelled the nursery first (a Ctrl-C). A
    `RemoteError` from `body` comes out as itself, not in an exception group, so a command
    can report it by its message."""
    done: list[_T] = []
    failed: RemoteError | None = None
    async with trio.open_nursery() as nursery:
        try:
            await start(nursery)
            done.append(await body())
        except RemoteError as exc:
            failed = exc
        nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return done[0] if done else None


async def list_hooks(remote: Remote) -> list[dict[str, Any]]:
    """The hooks in force on the server, with provenance."""
    hooks = (await _hooks_message(remote)).get("hooks")
    if not isinstance(hooks, list) or not all(isinstance(h, dict) for h in hooks):
        raise RemoteError("the server's hooks message has no list of hooks")
    return hooks


async def list_servers(remote: Remote) -> list[dict[str, Any]]:
    """The tool servers the server declares, each in its state now (its `/v1/hooks`
    message's `servers`)."""
    servers = (await _hooks_message(remote)).get("servers")
    return [s for s in servers if isinstance(s, dict)] if isinstance(servers, list) else []


async def config_files(remote: Remote) -> tuple[list[str], list[dict[str, Any]]]:
    """The config files the server applies and its hooks in force (its `/v1/hooks`
    message's `files` and `hooks`)."""
    message = await _hooks_message(remote)
    files, hooks = message.get("files"), message.get("hooks")
    return (
        [f for f in files if isinstance(f, str)] if isinstance(files, list) else [],
        [h for h in hooks if isinstance(h, dict)] if isinstance(hooks, list) else [],
    )


async def _hooks_message(remote: Remote) -> dict[str, Any]:
    async with open_remote(remote, "/v1/hooks") as ws, contextlib.aclosing(messages(ws)) as each:
        async for message in each:
            if message.get("type") == ServiceMessage.HOOKS:
                return message
    raise RemoteError("the server sent no hooks message")


# ---- the readable view of what comes back ----------------------------------------------------


def event_line(event: Mapping[str, Any], since: int | None = None) -> str:
    """One bus event (or gap) for a person. A gap from `since` (the replay's first message)
    is events the server no longer holds: resuming from them would meet the same gap."""
    if event.get("kind") == "gap":
        start, end = event["from"], event["to"]
        if since is not None and start == since:
            return (
                f"gap: events {start}..{end} were dropped: the server no longer holds them"
                f" (it keeps its latest events only); the replay starts after {end}"
            )
        return f"gap: events {start}..{end} were missed (resume with --since {start})"
    run = f" run {event['runId']}" if event.get("runId") else ""
    return f"{event['seq']} {event['at']} {event['kind']}{run} {json.dumps(event.get('data', {}))}"
