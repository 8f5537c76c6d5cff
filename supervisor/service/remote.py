"""The client side of the service, for `exec --remote`, `events` and `hooks list --remote`.

Each call opens one socket, reads the server's messages (JSON lines) to the close, and turns
a refusal or an error message into a `RemoteError` that says what the server said.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Final, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

import attrs
import orjson
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    HandshakeError,
    WebSocketConnection,
)

from ..core.effects import AnsweredBy
from ..core.errors import HooksError
from ..core.events import Event, Gap
from ..core.frames import STREAM_ENDS, STREAM_TYPES, Control, FrameType, ServiceMessage
from ..core.hookframes import FRAME_CLASSES
from ..core.jsontext import is_unicode, wire_loads
from ..core.records import Record
from ..core.wireshape import shape_problem
from ..process.signals import serve_stop_signals
from .answering import AskWatcher, Responder
from .liveness import Heard, lost
from .remotewords import closed, refusal, silent
from .wire import DEFAULT_HOST, DEFAULT_PORT, Close
from .wsopen import connect_failure, open_websocket

_T = TypeVar("_T")

DEFAULT_URL: Final = f"ws://{DEFAULT_HOST}:{DEFAULT_PORT}"
#: The largest message a client takes: the server coalesces to ~256 KiB, but one frame may
#: be larger (a hook's applied value).
MAX_INCOMING: Final = 64 * 1024 * 1024
CONNECT_TIMEOUT_S: Final = 10.0
CLOSE_TIMEOUT_S: Final = 2.0


#: How an output frame's line ends (its type last, as the journal writes it).
_OUTPUT_ENDS: Final = tuple(end.decode() for end in STREAM_ENDS.values())


class RemoteError(HooksError):
    """The server could not be reached, refused, or ended the socket with an error.
    `bad_input` when the server said the request itself was wrong (exit 2, not 1)."""

    def __init__(self, message: str, *, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bad_input


class Unreachable(RemoteError):
    """No connection to the server, or no handshake within `CONNECT_TIMEOUT_S`: another
    connection to it now would fare no better."""


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


async def messages(
    ws: WebSocketConnection,
    ends: tuple[Close, ...] = (Close.NORMAL,),
    after: Callable[[], object] | None = None,
    problem: Callable[[dict[str, Any]], str | None] | None = None,
    *,
    frames: bool = False,
) -> AsyncGenerator[dict[str, Any], None]:
    """Every JSON object the server sends, in order, until it closes with one of `ends`;
    `after` is called once those of each WebSocket message are handed on. An error message
    (one without `seq`) then another close code raises `RemoteError`; one with `askId` (an
    answer refused, the socket stays open) is handed on like a frame. An object `problem`
    finds wrong raises `RemoteError` saying so: the server is not one. `frames`: a run's
    frames, held to `frame_problem`; its output lines (most of a run) by their text alone,
    read on a path of their own."""
    error: dict[str, Any] | None = None
    if frames:
        problem = frame_problem
    while True:
        try:
            message = await ws.get_message()
        except ConnectionClosed as exc:
            if exc.reason is not None and exc.reason.code in ends:
                return
            if error is not None:
                raise RemoteError(
                    f"the server said: {error.get('message')}",
                    bad_input=error.get("code") == Close.BAD_REQUEST,
                ) from None
            raise RemoteError(closed(exc.reason)) from None
        text = message.decode(errors="replace") if isinstance(message, bytes) else message
        for line in text.split("\n"):
            if not line:
                continue
            if frames and line.endswith(_OUTPUT_ENDS):
                try:  # (orjson reads its every number exactly)
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:  # (as an escaped lone surrogate)
                    obj = _object_of(line)
                if obj.__class__ is not dict or obj.get("text").__class__ is not str:
                    raise RemoteError("the server sent an output frame without its text")
                yield obj
                continue
            obj = _object_of(line)
            if obj.get("type") == ServiceMessage.ERROR and "seq" not in obj and "askId" not in obj:
                error = obj
                continue
            if problem is not None and (wrong := problem(obj)) is not None:
                raise RemoteError(f"the server sent {wrong}")
            yield obj
        if after is not None:
            after()


#: The class of each frame type this client knows the shape of, by its name.
_CLASS_OF: Final[Mapping[str, type]] = {str(kind): cls for kind, cls in FRAME_CLASSES.items()}


def frame_problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with a run's frame from the server (a frame of a type this client knows,
    not of the shape of its class; an answer refused that is not one), else None. Output
    frames, most of a run, are held to their text alone (all the views read of them)."""
    kind = obj.get("type")
    if kind in STREAM_TYPES:
        return None if isinstance(obj.get("text"), str) else f"a {kind} frame without its text"
    if "seq" not in obj:
        ok = isinstance(obj.get("askId"), str) and isinstance(obj.get("message"), str)
        return None if ok else "a message that is neither a frame nor an answer refused"
    # (a type this client does not know is shown as it is)
    cls = _CLASS_OF.get(kind) if isinstance(kind, str) else None
    wrong = None if cls is None else shape_problem(cls, obj)
    return None if wrong is None else f"a {kind} frame that is not one: {wrong}"


def _object_of(line: str) -> dict[str, Any]:
    """One line the server sent, as the JSON object it must be; `RemoteError` otherwise."""
    obj: Any = None
    with contextlib.suppress(ValueError, RecursionError):
        obj = wire_loads(line)
    if not isinstance(obj, dict):
        shown = line if len(line) <= 80 else f"{line[:80]}…"
        raise RemoteError(f"the server sent what is not a JSON object: {shown!r}")
    return obj


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


async def exec_remote(
    remote: Remote,
    request: Mapping[str, Any],
    on_frame: Callable[[dict[str, Any]], Any],
    responder: Responder | None = None,
    after_message: Callable[[], object] | None = None,
    *,
    on_stop: Callable[[int], object] | None = None,
) -> list[dict[str, Any]]:
    """Runs `request` on the server, handing each frame to `on_frame` as it comes (and
    calling `after_message` once those of each WebSocket message are handed on), and each
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
    heard = Heard()
    async with open_remote(remote, "/v1/exec", heard=heard) as ws, trio.open_nursery() as nursery:
        # (a server that closed first has said why: the messages below read it)
        await _send(ws, request)

        async def alive() -> None:  # (a frozen network closes nothing: `liveness.py`)
            nonlocal failed
            failed = RemoteError(silent(await lost(ws, heard)))
            nursery.cancel_scope.cancel()

        nursery.start_soon(alive)

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
        try:
            async for frame in messages(ws, after=after_message, frames=True):
                if frame.get("askId") and "seq" not in frame:  # an answer the server refused
                    print(f"mcpx-hooks: {frame.get('message')}", file=sys.stderr, flush=True)
                    continue
                if (kind := frame.get("type")) not in STREAM_TYPES:
                    kept = kind if isinstance(kind, str) and kind in HELD else None
                    if counts[kept] < HELD[kept]:
                        counts[kept] += 1
                        held.append(frame)
                    watcher.see(frame)  # (before it is shown: a prompt it settles ends first)
                on_frame(frame)
        except RemoteError as exc:
            failed = exc
        nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return held


async def _send(ws: WebSocketConnection, message: Mapping[str, Any]) -> None:
    with contextlib.suppress(ConnectionClosed):
        await ws.send_message(json.dumps(message))


async def follow_events(
    remote: Remote,
    kinds: str | None,
    since: int | None,
    on_event: Callable[[dict[str, Any]], Any],
) -> None:
    """Prints the bus until the server closes (1001 at its shutdown) or Ctrl-C."""
    query = {"kinds": kinds, "since": since}

    async def follow() -> None:  # refused, unreachable, or what the server said on the socket
        async with open_remote(remote, "/v1/events", query) as ws:
            ends = (Close.NORMAL, Close.GOING_AWAY)
            async for event in messages(ws, ends=ends, problem=event_problem):
                on_event(event)

    # The signals are taken before connecting: a Ctrl-C while connecting stops too (exit 0).
    await beside(lambda n: n.start(serve_stop_signals, n.cancel_scope), follow)


def event_problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with an event (or gap) from the server, else None."""
    gap = obj.get("kind") == "gap"
    wrong = shape_problem(Gap if gap else Event, obj)
    return None if wrong is None else f"{'a gap' if gap else 'an event'} that is not one: {wrong}"


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
