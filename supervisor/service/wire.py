"""The service's wire: close codes, error messages, request parsing, encoding.

Pure: no trio, no sockets. Everything a client sends is checked here and either becomes an
attrs object or a `WireError` that says what was wrong and which close code ends the socket.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from ..config.schemaparts import SCRIPT_PHASES
from ..core import jsontext
from ..core.answers import ANSWERS
from ..core.convert import KEEP
from ..core.effects import Effect
from ..core.errors import HooksError
from ..core.frames import Control, ServiceMessage
from ..core.hooks import Config, Profile
from ..core.models import is_name
from ..core.passenv import reference_problem
from ..core.points import Phase
from ..core.scripts import Script
from ..core.spawntext import env_problems, text_problem

#: Where `mcpx-hooks serve` listens and the remote commands connect, unless told otherwise.
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765


class Close(enum.IntEnum):
    """Close codes the server ends a socket with, and why (RFC 6455 §7.4 and 4000-4999)."""

    NORMAL = 1000  # the stream is complete (`end` sent, hooks listed)
    GOING_AWAY = 1001  # the server is shutting down
    UNSUPPORTED = 1003  # a binary message: the protocol is JSON text
    TOO_BIG = 1009  # a message over the size cap
    TRY_AGAIN = 1013  # a cap on concurrent runs is reached
    BAD_REQUEST = 4400  # malformed JSON, unknown field, wrong type, a message out of turn
    NOT_FOUND = 4404  # no retained run with that id
    TIMEOUT = 4408  # no request within the request timeout
    OUT_OF_RANGE = 4416  # `from` or `since` outside what exists


#: The word each close code is reported with in an error message (`error` key).
CLOSE_WORDS: Final[dict[Close, str]] = {
    Close.NORMAL: "normal",
    Close.GOING_AWAY: "going-away",
    Close.UNSUPPORTED: "unsupported-data",
    Close.TOO_BIG: "message-too-big",
    Close.TRY_AGAIN: "try-again-later",
    Close.BAD_REQUEST: "bad-request",
    Close.NOT_FOUND: "not-found",
    Close.TIMEOUT: "request-timeout",
    Close.OUT_OF_RANGE: "out-of-range",
}


@attrs.frozen(kw_only=True)
class ErrorMessage:
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


# ---- the exec request ----------------------------------------------------------------------


@attrs.frozen
class ExecRequest:
    """A checked `/v1/exec` request. `script_lines` and `hooks` are per call."""

    script: Script
    cwd: str | None = None
    #: The run's sandbox profile, when the request names one.
    sandbox: Profile | None = None
    stdin: bytes = b""
    input: tuple[Any] | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    pass_env: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    #: The caller's environment values for the names the run and its per-call hooks pass.
    caller_env: Mapping[str, str] = attrs.field(factory=dict)
    timeout_ms: int | None = None
    hooks: tuple[Mapping[str, Any], ...] = ()
    script_lines: Mapping[str, Sequence[str | None]] | None = None
    autonomy: Effect | None = None
    cancel_on_disconnect: bool = False
    #: The run's values for its prompt hooks' placeholders (names of their `vars`).
    placeholders: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def per_call(self) -> bool:
        """Whether the request layers anything on the server's config."""
        return bool(self.hooks) or self.script_lines is not None


def _is_script(value: Any) -> bool:
    return isinstance(value, dict) and all(
        k in SCRIPT_PHASES
        and isinstance(v, list)
        and all(x is None or isinstance(x, str) for x in v)
        for k, v in value.items()
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and text_problem(value) is None


def _is_argv(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(_is_text(x) for x in value)
        and value[0] != ""
    )


def _is_env(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and all(isinstance(x, str) for x in value.values())
        and not env_problems(value, "env")
    )


def _is_names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(x, str) for x in value)
        and not env_problems(dict.fromkeys(value, ""), "names")
    )


def _env_problems(obj: Mapping[str, Any]) -> list[str]:
    """An `env` value that looks like `${NAME}`: said with what to send instead. Only
    names are quoted, never a value (a caller's value may be a secret)."""
    env = obj.get("env")
    if not isinstance(env, dict):
        return []
    found = []
    for name, value in env.items():
        if isinstance(value, str) and reference_problem(value) is not None:
            found.append(
                f"env.{name}: values are literal strings, never expanded; to pass a variable,"
                " name it in passEnv or secrets and send its value in callerEnv"
            )
    return found


#: Every field of an exec request: what it must be, in words, and the check. Text that
#: reaches a process (argv, env, cwd, code, stdin) holds no NUL and no lone surrogate.
EXEC_FIELDS: Final[dict[str, tuple[str, Callable[[Any], bool]]]] = {
    "argv": (
        "a non-empty array of strings (no NUL or lone surrogate; the first not empty)",
        _is_argv,
    ),
    "python": ("a string of Python code", _is_text),
    "file": ("a string: a Python file, relative to cwd", lambda v: _is_text(v) and v != ""),
    "stdin": ("a string (sent as UTF-8)", lambda v: isinstance(v, str) and jsontext.is_unicode(v)),
    "input": ("any JSON value", lambda v: True),
    "env": (
        "an object of strings, names without '=', NUL or lone surrogates, values without "
        "NUL or lone surrogates",
        _is_env,
    ),
    "passEnv": (
        "an array of variable names or globs the run copies from callerEnv",
        _is_names,
    ),
    "secrets": (
        "an array of variable names the run copies from callerEnv, as secrets",
        _is_names,
    ),
    "callerEnv": (
        "an object of strings: the caller's values for the names the run and its per-call"
        " hooks pass (passEnv, secrets)",
        _is_env,
    ),
    "cwd": ("an absolute path", lambda v: _is_text(v) and os.path.isabs(v)),
    "sandbox": (
        f"a sandbox profile ({', '.join(p.value for p in Profile)})",
        lambda v: isinstance(v, str) and v in {p.value for p in Profile},
    ),
    "timeoutMs": ("a positive integer", lambda v: _is_int(v) and v > 0),
    "hooks": (
        "an array of hook objects",
        lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    ),
    "script": (
        f"an object of source phases ({', '.join(SCRIPT_PHASES)}) to arrays of strings or null",
        _is_script,
    ),
    "autonomy": (
        f"an effect level ({', '.join(e.word for e in Effect)})",
        lambda v: isinstance(v, str) and v in {e.word for e in Effect},
    ),
    "cancelOnDisconnect": ("true or false", lambda v: isinstance(v, bool)),
    "placeholders": (
        "an object of any JSON values, for prompt hooks' placeholders, each name a letter or _"
        " then letters, digits, _ or -",
        lambda v: isinstance(v, dict) and all(is_name(k) for k in v),
    ),
}
_WHAT: Final = ("argv", "python", "file")


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
    return obj


def parse_exec(text: str | bytes) -> ExecRequest:
    """The first message on `/v1/exec`, checked field by field; every problem is listed."""
    obj = parse_json_object(text, "the exec request")
    problems = [
        f"unknown field {key!r} (fields: {', '.join(EXEC_FIELDS)})"
        for key in obj
        if key not in EXEC_FIELDS
    ]
    problems += [
        f"{key}: expected {want}, got {describe(obj[key])}"
        for key, (want, ok) in EXEC_FIELDS.items()
        if key in obj and not ok(obj[key])
    ]
    problems += _env_problems(obj)
    given = [key for key in _WHAT if key in obj]
    if len(given) != 1:
        found = ", ".join(given) if given else "none"
        problems.append(f"expected exactly one of argv, python, file; found {found}")
    if problems:
        raise WireError(Close.BAD_REQUEST, "; ".join(problems), problems)
    return ExecRequest(
        script=Script(
            argv=tuple(obj["argv"]) if "argv" in obj else None,
            python_file=obj.get("file"),
            python_code=obj.get("python"),
        ),
        cwd=obj.get("cwd"),
        sandbox=Profile(obj["sandbox"]) if "sandbox" in obj else None,
        stdin=obj.get("stdin", "").encode(),
        input=(obj["input"],) if "input" in obj else None,
        env=dict(obj.get("env", {})),
        pass_env=tuple(obj.get("passEnv", ())),
        secrets=tuple(obj.get("secrets", ())),
        caller_env=dict(obj.get("callerEnv", {})),
        timeout_ms=obj.get("timeoutMs"),
        hooks=tuple(obj.get("hooks", ())),
        script_lines=obj.get("script"),
        autonomy=Effect.parse(obj["autonomy"]) if "autonomy" in obj else None,
        cancel_on_disconnect=obj.get("cancelOnDisconnect", False),
        placeholders=dict(obj.get("placeholders", {})),
    )


@attrs.frozen
class AnswerMessage:
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
            raise WireError(Close.BAD_REQUEST, "answer: " + "; ".join(problems), problems)
        return AnswerMessage(obj["askId"], obj["answer"])
    raise WireError(
        Close.BAD_REQUEST,
        'a second request on an exec socket: after the request, only {"type": "cancel"} '
        'and {"type": "answer", "askId": …, "answer": "yes" | "no"} may be sent; open a new '
        "socket for another run",
    )


def sources(config: Config) -> dict[Phase, tuple[str, ...]]:
    """The run's inline source phases, from the config in force (as `exec` does)."""
    return {Phase(k): tuple(v) for k, v in config.script.items()}
