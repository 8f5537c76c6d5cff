"""What the front door's protocol (`protocol.py`) hands its owner: where a connection is
(`Phase`), the request head, a client's whole message, a pong, the connection's end; how it
refuses a message by itself; and the JSON body of every HTTP refusal. Pure data."""

from __future__ import annotations

import enum
import json

import attrs

from ..core.errors import HooksError
from ..core.frames import ServiceMessage
from ..core.records import Record


class Phase(enum.Enum):
    """Where a connection is. HEAD -> ASKED -> OPEN -> CLOSING -> ENDED, or HEAD -> ASKED ->
    ANSWERED (a plain HTTP answer or a refused upgrade), then HEAD again for a request the
    client pipelined behind a plain one (`ServerProtocol.next_request`), or ENDED from
    anywhere."""

    HEAD = "head"  # reading the request head
    ASKED = "asked"  # a request is in, not answered yet: nothing more is read
    ANSWERED = "answered"  # an HTTP answer is given: nothing more is read
    OPEN = "open"  # upgraded: WebSocket frames both ways
    CLOSING = "closing"  # the server sent its close frame, the client's is awaited
    ENDED = "ended"  # nothing more comes from the client


@attrs.frozen(repr=False, eq=False)
class Request(Record):
    """A request head. `websocket`: a GET that asks for a WebSocket, with a handshake that
    wsproto found valid (one it refused never becomes a `Request`: it is answered)."""

    method: str
    target: str
    headers: tuple[tuple[bytes, bytes], ...]
    websocket: bool


@attrs.frozen(repr=False, eq=False)
class Message(Record):
    """One whole message from the client: text as `str`, binary as `bytes`."""

    data: str | bytes


@attrs.frozen(repr=False, eq=False)
class Pong(Record):
    payload: bytes


@attrs.frozen(repr=False, eq=False)
class Ended(Record):
    """Nothing more comes from the client: its close frame (`code`, `reason`), or 1006 when
    the stream ended without one, the request was malformed, or a frame broke the protocol."""

    code: int
    reason: str | None = None


Event = Request | Message | Pong | Ended


@attrs.frozen(repr=False, eq=False)
class Refusing(Record):
    """How the protocol itself ends a socket for a message: `message` (the error message's
    text) is sent, then a close frame with `code` and `reason`."""

    message: str
    code: int
    reason: str


class BadBody(HooksError):
    """A request body that cannot be read: broken framing, or cut short."""


def error_body(status: int, message: str) -> bytes:
    """The JSON body of every HTTP refusal or error the service answers."""
    error = {"type": ServiceMessage.ERROR, "code": status, "message": message}
    return json.dumps(error, separators=(",", ":")).encode()
