"""What the client of the service says when a socket ends otherwise than with its stream
whole: a refusal, an error message, a close code, a connection lost (`remote.py`)."""

from __future__ import annotations

import contextlib
import json
from typing import Final
from urllib.parse import urlsplit

from trio_websocket import CloseReason, ConnectionRejected

from .liveness import LOST_AFTER_S, PING_AFTER_S
from .wire import Close

#: The close code of a socket that ended without a close frame (RFC 6455 §7.1.5): nobody
#: closed it, the connection was lost.
NO_CLOSE_FRAME = 1006
#: How much of a server's own message (a refusal's, an error message's) is said: a server
#: that answers 100 KB of it does not flood the terminal (as a frame's message is bounded).
SAID_CHARS: Final = 2000


def refusal(url: str, exc: ConnectionRejected) -> str:
    said = said_in(exc.body or b"")
    hint = ""
    if exc.status_code == 401:
        hint = " (pass --token-file F or set MCPX_HOOKS_TOKEN)"
    return f"{urlsplit(url).netloc} refused the connection: HTTP {exc.status_code} {said}{hint}"


def said_in(body: bytes | bytearray) -> str:
    """The `message` of a refusal's JSON body (`words`), or "" when it holds none that can
    be read."""
    with contextlib.suppress(ValueError, AttributeError, RecursionError):
        return words(json.loads(body).get("message"))
    return ""


def words(message: object) -> str:
    """A server's `message`, at most `SAID_CHARS` of it (then how much more there was); ""
    when it is no string (`null`, a number, an object: nothing said in words)."""
    if not isinstance(message, str):
        return ""
    if len(message) <= SAID_CHARS:
        return message
    return f"{message[:SAID_CHARS]}... ({len(message) - SAID_CHARS} more characters)"


def closed(reason: CloseReason | None) -> str:
    """Why a socket ended with `reason` (None: no close frame), in words."""
    code = reason.code if reason is not None else NO_CLOSE_FRAME
    said = f" ({reason.reason})" if reason is not None and reason.reason else ""
    if code == NO_CLOSE_FRAME:
        return (
            "the connection to the server was lost (it ended without a close frame, 1006:"
            " the network cut it, or the server's process ended at once)"
        )
    if code == Close.GOING_AWAY:
        return f"the server is shutting down (it closed the socket: 1001{said})"
    return f"the server closed the socket: {code}{said}"


def silent(seconds: float) -> str:
    """The connection taken for lost: nothing came from the server for `seconds`."""
    return (
        f"the connection to the server was lost: nothing came from it for {seconds:.0f} s, not"
        f" even an answer to a ping (sent after {PING_AFTER_S:g} s of silence, answered within"
        f" {LOST_AFTER_S:g} s on a live connection)"
    )
