"""The client's requests read while it has `MAX_UNANSWERED` unanswered and the gateway waits
for its answers (a question to the person at the client, `elicitation/create`): held here,
unparsed, and handed to the server once it has room, in the order they came.

A client is not read while it has that many requests unanswered, so that one that sends
calls and does not read their answers holds up only itself. But a call whose hook asks the
client waits for the client's answer, and calls with hooks are served one after another: a
client with 256 calls open and its answer behind a 257th request would wait until each
question's deadline. So while a question waits, the client is read on: its answers and
notifications go to the server at once, its requests are held here, at most `MAX_HELD_BYTES`
of them; past that, a request is answered with an error (`TOO_MANY`), not held. A request
held and then cancelled by the client is dropped, never served; one still held when the
client closes its end is answered that the connection closed, as a request open then is.
"""

from __future__ import annotations

import collections
import json
from typing import Final

from mcp import types
from mcp.shared.dispatcher import coerce_request_id

#: How many bytes of the client's requests may be held at once.
MAX_HELD_BYTES: Final = 1024 * 1024
#: What a request past `MAX_HELD_BYTES` is answered (-32603).
TOO_MANY: Final = (
    "too many requests at once: 256 are unanswered, some of them waiting for your answers to"
    " questions, and 1 MiB of later requests is held: this one was not served; answer the"
    " questions, then send it again"
)


class HeldRequests:
    """The requests held (their lines, in order, by their ids)."""

    def __init__(self) -> None:
        self._lines: collections.OrderedDict[types.RequestId, bytes] = collections.OrderedDict()
        #: Each request's id as the client wrote it.
        self._ids: dict[types.RequestId, types.RequestId] = {}
        self._bytes = 0

    def __bool__(self) -> bool:
        return bool(self._lines)

    def take(self, line: bytes) -> tuple[bool, types.RequestId | None]:
        """Whether `line` is held (a request), and the id of a request not held for it is
        past `MAX_HELD_BYTES` (to be answered `TOO_MANY`). What is not a request (an answer,
        a notification, what cannot be read) is not held: it goes on now; a cancellation of
        a held request drops that request first."""
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return False, None
        if not isinstance(message, dict) or not isinstance(method := message.get("method"), str):
            return False, None
        rid = message.get("id")
        if not isinstance(rid, int | str) or isinstance(rid, bool):  # a notification
            params = message.get("params")
            if method == "notifications/cancelled" and isinstance(params, dict):
                cancelled = params.get("requestId")
                if isinstance(cancelled, int | str) and not isinstance(cancelled, bool):
                    self._drop(coerce_request_id(cancelled))
            return False, None
        key = coerce_request_id(rid)
        if key in self._lines:
            return False, None  # (an id in use: the server says what it says of it)
        if self._bytes + len(line) > MAX_HELD_BYTES:
            return False, rid
        self._lines[key] = line
        self._ids[key] = rid
        self._bytes += len(line)
        return True, None

    def next(self) -> bytes:
        """The first request held, now no longer held."""
        key, line = self._lines.popitem(last=False)
        del self._ids[key]
        self._bytes -= len(line)
        return line

    def abandon(self) -> list[types.RequestId]:
        """The ids of the requests held, as the client wrote them, no longer held (the client
        closed its end: they are answered that the connection closed)."""
        ids = list(self._ids.values())
        self._lines.clear()
        self._ids.clear()
        self._bytes = 0
        return ids

    def _drop(self, key: types.RequestId) -> None:
        line = self._lines.pop(key, None)
        if line is not None:
            del self._ids[key]
            self._bytes -= len(line)
