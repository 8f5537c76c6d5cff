"""How a script run ends (`scriptrun.py`): its `result` or `error` frame from what the run
learnt (`RunState`), why it is an error, and the `error` its hooks see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.frames import ErrorCause, ErrorFrame, ResultFrame, blank
from .phases import RunState

if TYPE_CHECKING:
    from ..core.hookframes import Frame


def outcome_frame(state: RunState) -> Frame:
    """The `result` frame of a run that has a value, else its `error` frame."""
    if state.value is not None:
        return blank(
            ResultFrame,
            value=state.value[0],
            advice=tuple(state.advice),
            proposals=tuple(state.proposals),
        )
    return blank(
        ErrorFrame,
        message=state.message,
        exit_code=state.exit_code,
        advice=tuple(state.advice),
        refused_by=state.refused_by,
        cause=_cause(state),
    )


def _cause(state: RunState) -> ErrorCause:
    """Why the run is an error: what the run learnt (a timeout, a cancellation), else a
    refusal, else the script's own exit status, else a failure around it."""
    if state.cause is not None:
        return state.cause
    if state.refused_by is not None:
        return ErrorCause.REFUSED
    if state.exit_code not in (None, 0):
        return ErrorCause.SCRIPT
    return ErrorCause.FAILED


def error_input(state: RunState) -> dict[str, Any]:
    """The `error` the `onError` and `suffix` hooks see of a run that failed."""
    error: dict[str, Any] = {"message": state.message}
    if state.exit_code is not None:
        error["exitCode"] = state.exit_code
    if state.stderr_tail:
        error["stderrTail"] = state.stderr_tail
    if state.stdout_tail:
        error["stdoutTail"] = state.stdout_tail
    return error
