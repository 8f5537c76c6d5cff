"""The frames channel of a script run, and `mcpx`, the helper a script imports to write to it
(the launcher, `launcher.py`, makes both), and the tool calls a script makes (`mcpx_call`,
`mcpx.call`): `{"type": "call", "id": n, "tool": "server.tool", "args": {...}}` on the frames
channel, the answer `{"id": n, "ok": true, "value": V}` or `{"id": n, "ok": false, "error":
"..."}` one line on `MCPX_CALLS_FD`.

The frames channel. One JSON object per line, `\\n`-terminated, written whole with `os.write`
under a lock (threads may log at the same time):

    {"type": "log", "level": L, "message": M, "attrs": {...}}      mcpx.log
    {"type": "emit", "value": V}                                   mcpx.emit
    {"type": "result", "value": V}       exactly once, on success, after `onSuccess` ran
    {"type": "exception", "exceptionType": "ValueError", "message": "..."}
                                         exactly once, for the exception that ends the process
                                         (after `suffix` ran), just before it is re-raised

Standard library only; never imports the supervisor. Loaded by the launcher from this folder
under its own name (the launcher runs as a script, outside the package).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import types

TYPE_CHECKING = False  # typing costs ~7 ms of start-up; annotations are strings at run time
if TYPE_CHECKING:
    from typing import Any, Final

    from .launcher import Launcher

#: `mcpx.log` levels.
LEVELS: Final = ("debug", "info", "warning", "error", "critical")
#: What a script is given (copies of the supervisor's names, `supervisor/core/hookenv.py`, held
#: equal by a test): the frames channel's fd, the directory for artifacts.
FRAMES_FD_VAR: Final = "MCPX_FRAMES_FD"
ARTIFACTS_VAR: Final = "MCPX_ARTIFACTS_DIR"
CALLS_FD_VAR: Final = "MCPX_CALLS_FD"


class CallError(Exception):
    """A tool call that was refused or failed; the message is the supervisor's reason."""


class Calls:
    """`mcpx_call`: a `call` line on the frames channel, then its answer read from the fd
    `MCPX_CALLS_FD` names. One call at a time (a lock), so answers come in order."""

    def __init__(self, frames: Frames) -> None:
        self._frames = frames
        self._lock = threading.Lock()
        self._next = 0
        self._answers: Any = None

    def call(self, tool: str, args: dict[str, Any] | None = None) -> Any:
        """Calls `tool` ("server.tool") with `args`; returns its value, or raises
        `CallError` with the reason (refused by a hook, the server failing, the tool's
        error)."""
        with self._lock:
            if self._answers is None:
                fd = os.environ.get(CALLS_FD_VAR, "")
                if not (fd.isascii() and fd.isdigit()):
                    raise CallError(f"{CALLS_FD_VAR} is not set (not run by mcpx-hooks?)")
                self._answers = open(int(fd), "rb", closefd=False)  # noqa: SIM115
            self._next += 1
            try:
                line = _dumps({"type": "call", "id": self._next, "tool": tool, "args": args or {}})
            except _NOT_JSON as exc:
                raise CallError(f"the arguments are not JSON: {exc}") from None
            self._frames._write(line)
            while True:
                raw = self._answers.readline()
                if not raw:
                    raise CallError("the supervisor closed the calls channel")
                answer = json.loads(raw)
                if answer.get("id") == self._next:
                    break
        if answer.get("ok"):
            return answer.get("value")
        raise CallError(str(answer.get("error")))


class Frames:
    """The frames channel: JSON lines to an fd, or to stderr prefixed `mcpx: ` without one."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def send_value(self, kind: str, value: Any) -> None:
        """A `{"type": kind, "value": value}` line; a value that is not JSON goes as its repr."""
        try:
            line = _dumps({"type": kind, "value": value})
        except _NOT_JSON as exc:
            self.log(
                f"the {kind} value is not JSON-serialisable ({type(exc).__name__}: {exc}); "
                "sent its repr instead",
                "warning",
                {"valueType": type(value).__qualname__},
            )
            line = _dumps({"type": kind, "value": _safe_repr(value)})
        self._write(line)

    def log(self, message: str, level: str, attrs: dict[str, Any]) -> None:
        """A `log` line; an attribute that is not JSON goes as its repr."""
        frame = {"type": "log", "level": level, "message": message, "attrs": attrs}
        try:
            line = _dumps(frame)
        except _NOT_JSON:
            frame["attrs"] = {k: v if _is_json(v) else _safe_repr(v) for k, v in attrs.items()}
            line = _dumps(frame)
        self._write(line)

    def send_exception(self, exc: BaseException) -> None:
        exc_type = type(exc).__qualname__
        self._write(
            _dumps({"type": "exception", "exceptionType": exc_type, "message": safe_str(exc)})
        )

    def _write(self, line: str) -> None:
        with self._lock:
            if self._fd is None:
                sys.stderr.write(f"mcpx: {line}\n")
                sys.stderr.flush()
                return
            view = memoryview((line + "\n").encode())
            while view:
                view = view[os.write(self._fd, view) :]


def make_mcpx_module(launcher: Launcher) -> types.ModuleType:
    """The `mcpx` helper, as scripts and source lines import it."""
    module = types.ModuleType(
        "mcpx",
        "Talks to mcpx-hooks on the frames channel (the fd named by MCPX_FRAMES_FD).\n\n"
        "Each call writes one JSON line. Without MCPX_FRAMES_FD (a script run by hand), the\n"
        "lines go to stderr instead, prefixed `mcpx: `.",
    )
    frames = launcher.frames

    def log(message: object, level: str = "info", **attrs: Any) -> None:
        """A `log` frame; `attrs` values that are not JSON are sent as their repr."""
        if level not in LEVELS:
            raise ValueError(f"mcpx.log level must be one of {', '.join(LEVELS)}, not {level!r}")
        frames.log(str(message), level, attrs)

    def emit(value: Any) -> None:
        """An `emit` frame carrying `value`."""
        frames.send_value("emit", value)

    def result(value: Any) -> None:
        """Sets the run's result when the script has no `main` (or `main` returns None).

        The last call wins; the launcher sends the result once, when the run succeeds.
        """
        launcher.result = value

    def artifacts_dir() -> str:
        """The directory whose files become the run's artifacts."""
        try:
            return os.environ[ARTIFACTS_VAR]
        except KeyError:
            raise KeyError(f"{ARTIFACTS_VAR} is not set (not run by mcpx-hooks?)") from None

    calls = Calls(frames)

    def call(tool: str, args: dict[str, Any] | None = None) -> Any:
        """Calls `tool` ("server.tool") with `args` through mcpx-hooks (the `call` hooks
        run around it); returns the tool's value, or raises `mcpx.CallError` saying why."""
        return calls.call(tool, args)

    module.CallError = CallError  # type: ignore[attr-defined]
    for fn in (log, emit, result, artifacts_dir, call):
        fn.__module__ = "mcpx"
        setattr(module, fn.__name__, fn)
    return module


#: What json.dumps raises for a value it cannot encode: a type, NaN, a cycle, deep nesting.
_NOT_JSON: Final = (TypeError, ValueError, RecursionError)


def _dumps(frame: dict[str, Any]) -> str:
    return json.dumps(frame, separators=(",", ":"), allow_nan=False)


def _is_json(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except _NOT_JSON:
        return False
    return True


def safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as str_failed:  # a broken __str__ must not hide the real error
        return f"<str() failed: {type(str_failed).__qualname__}>"


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception as repr_failed:  # a broken __repr__ must not lose the frame
        return f"<{type(value).__qualname__} object; repr() failed: {repr_failed!r}>"
