"""What the remote client reads from a server's socket: its JSON objects, a WebSocket
message at a time, each held to the shape it must have, and the error it fails with.

A run's output lines are most of what a followed run sends (a WebSocket message holds many):
`batches` reads an output frame's line by orjson alone where it reads it exactly, and hands a
message's objects on together, so that a client printing 400,000 lines does not pay a
generator's step for each.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from typing import Any, Final

import orjson
from trio_websocket import ConnectionClosed, WebSocketConnection

from ..core.errors import HooksError
from ..core.events import Event, Gap
from ..core.frames import STREAM_ENDS, STREAM_TYPES, ServiceMessage
from ..core.hookframes import FRAME_CLASSES
from ..core.jsontext import orjson_exact, wire_loads
from ..core.wireshape import shape_problem
from .remotewords import closed, words
from .wire import Close

#: How an output frame's line ends (its type last, as the journal writes it).
_OUTPUT_ENDS: Final = tuple(end.decode() for end in STREAM_ENDS.values())


class RemoteError(HooksError):
    """The server could not be reached, refused, or ended the socket with an error.
    `bad_input` when the server said the request itself was wrong (exit 2, not 1);
    `shutting_down` when it closed the socket as it stopped (1001)."""

    def __init__(
        self, message: str, *, bad_input: bool = False, shutting_down: bool = False
    ) -> None:
        super().__init__(message)
        self.bad_input = bad_input
        self.shutting_down = shutting_down


class Unreachable(RemoteError):
    """No connection to the server, or no handshake within `CONNECT_TIMEOUT_S`: another
    connection to it now would fare no better."""


async def messages(
    ws: WebSocketConnection,
    ends: tuple[Close, ...] = (Close.NORMAL,),
    after: Callable[[], object] | None = None,
    problem: Callable[[dict[str, Any]], str | None] | None = None,
    *,
    frames: bool = False,
) -> AsyncGenerator[dict[str, Any], None]:
    """`batches`, one object at a time; `after` is called once those of each WebSocket
    message are handed on."""
    async with contextlib.aclosing(batches(ws, ends, problem, frames=frames)) as each:
        async for batch in each:
            for obj in batch:
                yield obj
            if after is not None:
                after()


async def batches(
    ws: WebSocketConnection,
    ends: tuple[Close, ...] = (Close.NORMAL,),
    problem: Callable[[dict[str, Any]], str | None] | None = None,
    *,
    frames: bool = False,
) -> AsyncGenerator[list[dict[str, Any]], None]:
    """The JSON objects of each WebSocket message the server sends, in order, until it closes
    with one of `ends`. An error message (one without `seq`) then another close code raises
    `RemoteError`; one with `askId` (an answer refused, the socket stays open) is handed on
    like a frame. An object `problem` finds wrong raises `RemoteError` saying so (the objects
    of its message before it handed on first): the server is not one. `frames`: a run's
    frames, held to `frame_problem`; its output lines (most of a run) by their text alone."""
    error: dict[str, Any] | None = None
    if frames:
        problem = frame_problem
    while True:
        try:
            message = await ws.get_message()
        except ConnectionClosed as exc:
            if exc.reason is not None and exc.reason.code in ends:
                return
            going = exc.reason is not None and exc.reason.code == Close.GOING_AWAY
            if error is not None:  # (its words, else what the close says)
                said = words(error.get("message"))
                raise RemoteError(
                    f"the server said: {said}" if said else closed(exc.reason),
                    bad_input=error.get("code") == Close.BAD_REQUEST,
                    shutting_down=going,
                ) from None
            raise RemoteError(closed(exc.reason), shutting_down=going) from None
        text = message.decode(errors="replace") if isinstance(message, bytes) else message
        batch: list[dict[str, Any]] = []
        try:
            for output, obj in _parsed(text, frames):
                if output:
                    if obj.get("text").__class__ is not str:
                        said = frame_problem(obj) or "an output frame without its text"
                        raise RemoteError(f"the server sent {said}")
                    batch.append(obj)
                    continue
                kind = obj.get("type")
                if kind == ServiceMessage.ERROR and "seq" not in obj and "askId" not in obj:
                    error = obj
                    continue
                if problem is not None and (wrong := problem(obj)) is not None:
                    raise RemoteError(f"the server sent {wrong}")
                batch.append(obj)
        except RemoteError:
            if batch:  # (what came before it in its message, handed on first)
                yield batch
            raise
        yield batch


def _parsed(text: str, frames: bool) -> Iterator[tuple[bool, dict[str, Any]]]:
    """The JSON object of each line of a message, and whether the line is a run's output frame
    (`frames`). Each line is read on its own: joined, a message's lines could read as other
    objects than its lines do (a line ending the object another began, a line of two). An
    output frame's line is read by orjson alone where it reads the message exactly (no integer
    past 64 bits), and as any other line where it refuses it (an escaped lone surrogate)."""
    exact = frames and orjson_exact(text)
    for line in text.split("\n"):
        if not line:
            continue
        if frames and line.endswith(_OUTPUT_ENDS):
            yield True, _output_of(line) if exact else _object_of(line)
        else:
            yield False, _object_of(line)


def _output_of(line: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:  # (as an escaped lone surrogate)
        return _object_of(line)
    return obj if obj.__class__ is dict else _object_of(line)


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


def event_problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with an event (or gap) from the server, else None."""
    gap = obj.get("kind") == "gap"
    wrong = shape_problem(Gap if gap else Event, obj)
    return None if wrong is None else f"{'a gap' if gap else 'an event'} that is not one: {wrong}"


def _object_of(line: str) -> dict[str, Any]:
    """One line the server sent, as the JSON object it must be; `RemoteError` otherwise."""
    obj: Any = None
    with contextlib.suppress(ValueError, RecursionError):
        obj = wire_loads(line)
    if not isinstance(obj, dict):
        shown = line if len(line) <= 80 else f"{line[:80]}…"
        raise RemoteError(f"the server sent what is not a JSON object: {shown!r}")
    return obj
