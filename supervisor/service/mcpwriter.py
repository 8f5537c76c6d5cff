"""Where `mcpx-hooks mcp`'s messages to its client go (`ClientWriter`): each written whole as
one line, and what the client's requests are owed kept count of: those not yet answered
(at most `MAX_UNANSWERED` before the client's next line waits for one), and the server's
questions to the client not yet answered (while one waits, the client is read whatever else
is open: `mcpheld.py`). A request still open when the session ends is answered that the
connection closed."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Final

import trio
from mcp import types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage

from ..tools.jsonlines import BorrowedSend, LineWriter

#: How many of a client's requests may be unanswered before its next line waits for one.
MAX_UNANSWERED: Final = 256
#: How many of the server's questions to the client are kept track of at once.
MAX_QUESTIONS: Final = 4096
#: What a request still open when the session ends is answered (the SDK's own words).
CLOSED: Final = "Connection closed"
#: How long the end of a session spends answering those requests, at most.
CLOSING_S: Final = 2.0


def cancelled_id(message: types.JSONRPCMessage) -> object:
    """The id of the request `message` cancels, if it is a cancellation."""
    if not isinstance(message, types.JSONRPCNotification) or message.params is None:
        return None
    return message.params.get("requestId") if message.method == "notifications/cancelled" else None


def refusal(rid: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message)
    )


class ClientWriter(BorrowedSend):
    """Where the server's messages to the client go: each written as one line before `send`
    returns. Once the client has closed its end, what is sent is dropped (the end of its
    messages ends the session)."""

    def __init__(self, lines: LineWriter) -> None:
        self._lines = lines
        #: The client's requests not yet answered nor cancelled: their ids as the client
        #: wrote them, by `coerce_request_id`, in the order they were read.
        self._unanswered: dict[types.RequestId, types.RequestId] = {}
        #: The server's requests to the client (its questions) not yet answered nor
        #: cancelled: while one waits, the client is read whatever else is open.
        self._questions: dict[types.RequestId, None] = {}
        #: Set while the client may be read (`wait_readable`).
        self._readable = trio.Event()
        self._readable.set()
        #: Whether the session's end answers what is still open (`answer_unanswered`).
        self._closing = False

    def has_room(self) -> bool:
        """Whether fewer than `MAX_UNANSWERED` of the client's requests are unanswered."""
        return len(self._unanswered) < MAX_UNANSWERED

    def asking(self) -> bool:
        """Whether a request to the client (a question) waits for its answer."""
        return bool(self._questions)

    def _changed(self) -> None:
        if self.has_room() or self._questions:
            self._readable.set()
        elif self._readable.is_set():
            self._readable = trio.Event()

    def asked(self, rid: types.RequestId) -> None:
        """The client's request `rid` was read: unanswered until an answer to it is sent."""
        self._unanswered.setdefault(coerce_request_id(rid), rid)
        self._changed()

    def heard(self, rid: types.RequestId) -> None:
        """The client answered the request `rid` of the server's."""
        self._questions.pop(coerce_request_id(rid), None)
        self._changed()

    def dropped(self, rid: object) -> bool:
        """The client's request `rid` is answered (its answer is being written), or cancelled
        (never answered then). Whether an answer to it may still be written: not once the
        session's end has answered it (a call whose answer came as the session ended)."""
        if isinstance(rid, int | str) and not isinstance(rid, bool):
            open_ = self._unanswered.pop(coerce_request_id(rid), None) is not None
            self._changed()
            return open_ or not self._closing
        return True

    async def answer_unanswered(self) -> None:
        """The session ended with requests of the client's still open (it closed its end
        while they ran): each is answered -32000 "Connection closed", as the SDK's own
        server answers its requests in flight at that point, so that a client still reading
        waits for no answer that will not come. A client that reads nothing more holds this
        `CLOSING_S` at most."""
        self._closing = True
        with trio.move_on_after(CLOSING_S):
            while self._unanswered:
                rid = next(iter(self._unanswered.values()))
                await self.send(SessionMessage(refusal(rid, types.CONNECTION_CLOSED, CLOSED)))

    async def wait_readable(self) -> None:
        """Returns once the client may be read: it has room (`has_room`), or a question
        waits for its answer (`asking`)."""
        await self._readable.wait()

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        answer = (types.JSONRPCResponse, types.JSONRPCError)
        if isinstance(message, answer) and not self.dropped(message.id):
            return  # (answered already, as the session ended)
        if isinstance(message, types.JSONRPCRequest):  # a question: its answer is read
            if len(self._questions) >= MAX_QUESTIONS:  # (their cancellations went unseen)
                self._questions.clear()
            self._questions[coerce_request_id(message.id)] = None
            self._changed()
        elif (
            isinstance(message, types.JSONRPCNotification)
            and (rid := cancelled_id(message)) is not None
            and isinstance(rid, int | str)
        ):
            self.heard(rid)  # (given up: it will not be answered)
        await self._send(message.model_dump_json(by_alias=True, exclude_unset=True))

    async def send_line(self, line: bytes, answers: types.RequestId | None = None) -> None:
        """`line`, a message already written as one line (ending in a newline); the answer
        to the client's request `answers`, if given."""
        if answers is not None and not self.dropped(answers):
            return  # (answered already, as the session ended)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._lines.send(line)

    async def send_batch(self, ids: list[int | str | None], code: int, message: str) -> None:
        """A batch's answer, as one line: the error `code` and `message` for each of the
        requests `ids` (written here, not by a model each: a batch may hold many)."""
        error = json.dumps({"code": code, "message": message}, separators=(",", ":"))
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._lines.send_parts(_batch_parts(ids, error))

    async def _send(self, data: str) -> None:
        await self.send_line(data.encode() + b"\n")


def _batch_parts(ids: list[int | str | None], error: str) -> Iterator[bytes]:
    """The line answering a batch's `ids` each with `error`, in parts of `_BATCH_PART`
    answers: a batch of 16 MiB of `1,` has 8 million elements, each owed an answer."""
    for start in range(0, len(ids), _BATCH_PART):
        answers = ",".join(
            f'{{"jsonrpc":"2.0","id":{json.dumps(rid)},"error":{error}}}'
            for rid in ids[start : start + _BATCH_PART]
        )
        opening = "," if start else "["
        closing = "]\n" if start + _BATCH_PART >= len(ids) else ""
        yield f"{opening}{answers}{closing}".encode()


#: How many of a batch's answers are written at a time.
_BATCH_PART: Final = 512
