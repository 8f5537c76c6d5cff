"""One run's frames for a person, read in order: what a frame alone cannot say.

- A hook that asked: the run waits for the answer after the hook's process has ended, so the
  hook is not "still running" (the ask line says it waits), and its line says the wait beside
  the hook's own time (`durationMs` is the hook's; the wait is the time from its `ask` frame
  to its hook frame): `ok in 34 ms, then 3.0 s waiting for an answer`.
- The `end` of a run the script never finished says how `exec` exits (its `error` frame's
  cause), not "no exit code": `end: refused, exec exits 3, 3106 ms`.
- The `end` of a run whose exit code is not `exec`'s says both: a script that exited 4 and an
  `onError` hook that turned the failure into a result, `end: exit code 4, exec exits 0, 190
  ms`; a script that exited 0 and an `onSuccess` hook that refused it, `exec exits 3`.
- An `error` frame that already names the hook that refused is not followed by the same name.
- The `end` of an MCP session's run (`start` with argv `["mcp", CLIENT]`, a `result`, no
  exit code) says the session ended: nothing was executed, and `exec` exits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.frames import seconds_between
from ..core.servers import SESSION_ARGV0
from .printable import continued, printable
from .view import frame_lines, lasted


class RunView:
    """The readable lines of one run's frames, given in order (`lines`)."""

    def __init__(self, *, verbose: bool = False) -> None:
        #: A hook's line says what its process used (`runs show --verbose`).
        self.verbose = verbose
        #: The `at` of each hook's pending ask, by hook name.
        self.asking: dict[str, str] = {}
        self._error: Mapping[str, Any] | None = None
        #: The run's `result` or `error` frame, once it came.
        self._outcome: Mapping[str, Any] | None = None
        #: Whether the run is an MCP client's session (its `start` says so).
        self._session = False

    def waiting_for_answer(self, hook: str) -> bool:
        """Whether `hook` has asked and its answer is awaited (it is not running)."""
        return hook in self.asking

    def lines(self, frame: Mapping[str, Any]) -> list[str]:
        kind = frame.get("type")
        if kind == "start":
            argv = frame.get("argv")
            self._session = isinstance(argv, list) and argv[:1] == [SESSION_ARGV0]
        if kind == "ask":
            self.asking[str(frame.get("hook"))] = str(frame.get("at", ""))
            return frame_lines(frame, verbose=self.verbose)
        if kind == "hook" and (at := self.asking.pop(str(frame.get("name")), None)):
            lines = frame_lines(frame, verbose=self.verbose)
            waited = seconds_between(at, frame.get("at"))
            if waited is not None and lines:
                lines[0] += f", then {waited:.1f} s waiting for an answer"
            return lines
        if kind == "result":
            self._outcome = frame
        if kind == "error":
            self._error = self._outcome = frame
            lines = frame_lines(frame, verbose=self.verbose)
            by = frame.get("refusedBy")
            if by and str(frame.get("message", "")).startswith(f"refused by {by}"):
                lines = [line for line in lines if line != continued(f"  refused by {by}")]
            return lines
        if kind == "end" and frame.get("exitCode") is None and self._error is not None:
            from .common import EXIT_FAILED, cause_exit_codes

            cause = str(self._error.get("cause", "failed"))
            code = cause_exit_codes().get(cause, EXIT_FAILED)
            return [printable(f"end: {cause}, exec exits {code}, {lasted(frame)}")]
        session_end = kind == "end" and self._session and frame.get("exitCode") is None
        if session_end and self._outcome is not None and self._outcome.get("type") == "result":
            return [f"end: the session ended, {lasted(frame)}"]
        if kind == "end" and self._outcome is not None:
            from .common import outcome_exit_code

            own, execs = frame.get("exitCode"), outcome_exit_code(self._outcome)
            if own != execs:
                said = "no exit code" if own is None else f"exit code {own}"
                return [f"end: {said}, exec exits {execs}, {lasted(frame)}"]
        return frame_lines(frame, verbose=self.verbose)
