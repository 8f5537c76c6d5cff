"""The service's wire: close codes, error messages, request parsing, encoding.

Pure: no trio, no sockets. Everything a client sends is checked here (an exec request by its
own table, `execrequest.py`) and either becomes an attrs object or a `WireError` that says what
was wrong and which close code ends the socket.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from ..core import jsontext
from ..core.convert import to_json
from ..core.effects import ANSWERS
from ..core.errors import HooksError
from ..core.fieldmeta import KEEP
from ..core.frames import Control, ServiceMessage
from ..core.records import Record
from ..core.spawntext import text_problem
from .protocolevents import Refusing

#: Where `mcpx-hooks serve` listens and the remote commands connect, unless told otherwise.
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765


class Close(enum.IntEnum):
    """Close codes the server ends a socket with, and why (RFC 6455 §7.4 and 4000-4999)."""

    NORMAL = 1000  # the stream is complete (`end` sent, hooks listed)
    GOING_AWAY = 1001  # the server is shutting down
    UNSUPPORTED = 1003  # a binary message: the protocol is JSON text
    TOO_BIG = 1009  # a message over the size cap
    INTERNAL_ERROR = 1011  # the run's record breaks off: nothing after the frames sent can be
    TRY_AGAIN = 1013  # a cap on concurrent runs is reached
    BAD_REQUEST = 4400  # malformed JSON, unknown field, wrong type, a message out of turn
    NOT_FOUND = 4404  # no retained run with that id
    TIMEOUT = 4408  # no request within the request timeout
    OUT_OF_RANGE = 4416  # `from` or `since` outside what exists


#: The reason of the close (1000) of a stream that sent everything.
COMPLETE: Final = "complete"
#: Why a message to an endpoint that takes none is refused (4400, at its first frame).
NO_MESSAGES: Final = "this endpoint takes no messages"
#: Why a message is refused while the service holds as much of clients' unfinished messages
#: and bodies as it may (1013; 503 for a body).
BUSY: Final = (
    "the server holds all it may of messages still coming in (--max-unfinished-bytes);"
    " try again later"
)

#: The word each close code is reported with in an error message (`error` key).
CLOSE_WORDS: Final[dict[Close, str]] = {
    Close.NORMAL: "normal",
    Close.GOING_AWAY: "going-away",
    Close.UNSUPPORTED: "unsupported-data",
    Close.TOO_BIG: "message-too-big",
    Close.INTERNAL_ERROR: "internal-error",
    Close.TRY_AGAIN: "try-again-later",
    Close.BAD_REQUEST: "bad-request",
    Close.NOT_FOUND: "not-found",
    Close.TIMEOUT: "request-timeout",
    Close.OUT_OF_RANGE: "out-of-range",
}


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ErrorMessage(Record):
    """The error message a `WireError` is sent as. It has no `seq` and no `runId`: that is
    how a client tells it from a run's own `error` frame."""

    type: str = attrs.field(default=ServiceMessage.ERROR, metadata=KEEP)
    code: int
    #: The close code's word (`CLOSE_WORDS`).
    error: str
    message: str
    problems: tuple[str, ...] = ()
    #: Set on the one error message that does not close its socket: an answer refused
    #: (its ask unknown, already answered or past its deadline).
    ask_id: str | None = None


class WireError(HooksError):
    """What the server answers a bad message or query with, then closes with `code`
    (unless it refuses an answer: `ask_id`, and the socket stays open)."""

    def __init__(
        self, code: Close, message: str, problems: Sequence[str] = (), ask_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.problems = tuple(problems)
        self.ask_id = ask_id

    @property
    def payload(self) -> ErrorMessage:
        """The error message this is sent as."""
        return ErrorMessage(
            code=int(self.code),
            error=CLOSE_WORDS[self.code],
            message=self.message,
            problems=self.problems,
            ask_id=self.ask_id,
        )

    @property
    def reason(self) -> str:
        """The close frame's reason: at most 123 bytes of UTF-8 (RFC 6455 §5.5)."""
        return _clip(self.message, 123)

    @property
    def text(self) -> str:
        """The error message as it is sent."""
        return encode(to_json(self.payload))

    def refusing(self) -> Refusing:
        """How the protocol itself refuses a message with this error (then closes)."""
        return Refusing(self.text, int(self.code), self.reason)


def _clip(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "..."


# ---- encoding ------------------------------------------------------------------------------


def encode(obj: Any) -> str:
    """One JSON object on one line, under the one encoding policy (`jsontext`): any value a
    script or hook produced goes out, as valid UTF-8."""
    return jsontext.encode(obj)


# ---- what clients send --------------------------------------------------------------------


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and text_problem(value) is None


def describe(value: Any) -> str:
    """A JSON value's type in words, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def parse_json_object(text: str | bytes, what: str) -> dict[str, Any]:
    """One JSON object from a client message, or `WireError` (4400 / 1003)."""
    if isinstance(text, bytes):
        raise WireError(Close.UNSUPPORTED, f"expected {what} as a text message, got binary")
    try:
        obj = jsontext.loads(text)
    except jsontext.JsonError as exc:
        raise WireError(Close.BAD_REQUEST, f"malformed JSON in {what}: {exc}") from None
    if not isinstance(obj, dict):
        raise WireError(Close.BAD_REQUEST, f"expected {what} as a JSON object, got {describe(obj)}")
    # A key given twice: JSON keeps the last, where a proxy, a log or a reviewer in front may
    # have read the first (an answer's "no" that is a "yes").
    if twice := jsontext.duplicate_keys(text):
        from ..config.problems import pointer

        problems = [f"{pointer(at)}: given more than once" for at in twice]
        raise WireError(Close.BAD_REQUEST, f"{what}: {'; '.join(problems)}", problems)
    return obj


@attrs.frozen(repr=False, eq=False)
class AnswerMessage(Record):
    """`{"type": "answer", "askId", "answer"}`: a client answers an `ask` frame of its run."""

    ask_id: str
    answer: str


#: The longest askId a client may send (the server's are `ask-N`).
ASK_ID_CHARS: Final = 64
#: The fields of an answer message: what each must be, in words, and the check.
ANSWER_FIELDS: Final[dict[str, tuple[str, Callable[[Any], bool]]]] = {
    "type": (f'"{Control.ANSWER}"', lambda v: v == Control.ANSWER),
    "askId": (
        f"the askId of an ask frame (a string of 1 to {ASK_ID_CHARS} characters)",
        lambda v: _is_text(v) and 0 < len(v) <= ASK_ID_CHARS,
    ),
    "answer": (" or ".join(ANSWERS), lambda v: v in ANSWERS),
}


def parse_control(text: str | bytes) -> Control | AnswerMessage:
    """A message after the request: `{"type": "cancel"}` (`Control.CANCEL`) or an answer."""
    obj = parse_json_object(text, "a message after the request")
    if obj == {"type": Control.CANCEL}:
        return Control.CANCEL
    if obj.get("type") == Control.CANCEL:
        extra = ", ".join(sorted(k for k in obj if k != "type"))
        raise WireError(Close.BAD_REQUEST, f"cancel takes no other field (found {extra})")
    if obj.get("type") == Control.ANSWER:
        problems = [
            f"unknown field {key!r} (fields: {', '.join(ANSWER_FIELDS)})"
            for key in obj
            if key not in ANSWER_FIELDS
        ]
        problems += [
            f"{key}: expected {want}, got {describe(obj[key]) if key in obj else 'nothing'}"
            for key, (want, ok) in ANSWER_FIELDS.items()
            if key not in obj or not ok(obj[key])
        ]
        if problems:
            said = "; ".join(problems)  # (each names its field: "answer: answer: …" read so)
            raise WireError(Close.BAD_REQUEST, f"a malformed answer message: {said}", problems)
        return AnswerMessage(obj["askId"], obj["answer"])
    raise WireError(
        Close.BAD_REQUEST,
        'a second request on an exec socket: after the request, only {"type": "cancel"} '
        'and {"type": "answer", "askId": …, "answer": "yes" | "no"} may be sent; open a new '
        "socket for another run",
    )


class ConnectionClosed(HooksError):
    """The WebSocket is closed or closing: nothing more can be sent or received."""

    def __init__(self, code: int, reason: str | None = None) -> None:
        super().__init__(f"{code} {reason or ''}".strip())
        self.code = code
        self.reason = reason

    def again(self) -> ConnectionClosed:
        """The same, to raise anew (an exception raised twice grows its traceback)."""
        return ConnectionClosed(self.code, self.reason)


@functools.cache
def refused(why: str) -> Refusing:
    """How the protocol itself refuses a message for `why`: on an endpoint that takes none
    (`NO_MESSAGES`, 4400), or one the service has no room for now (`BUSY`, 1013). Made at the
    first refusal, not at import: encoding one loads cattrs, which `exec` never needs."""
    code = Close.TRY_AGAIN if why == BUSY else Close.BAD_REQUEST
    return WireError(code, why).refusing()
