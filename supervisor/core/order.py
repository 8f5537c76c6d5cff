"""The order of a run's frames, as every reader sees it: the checker tests and clients use.

A run sends `start`, then `hook` frames of `before`, then its output interleaved with `call`
sequences (`hook{on: call, before}`…, `call`, `hook{on: call, onSuccess|onError}`…,
`hook{on: call, suffix}`…), then `onSuccess`/`onError` hooks, `result` or `error`, `suffix`
hooks, `end`; `warning` and `ask` frames anywhere after `start`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .errors import HooksError
from .frames import FrameType
from .points import Phase


class OrderError(HooksError, ValueError):
    """A frame stream breaks the run's frame order; says which frame and why."""


#: Where each frame may stand: a stream's ranks never go down.
_RANK: Final[dict[tuple[str, str | None], int]] = {
    (FrameType.START, None): 0,
    (FrameType.HOOK, Phase.BEFORE): 1,
    (FrameType.LOG, None): 2,
    (FrameType.EMIT, None): 2,
    (FrameType.STDOUT, None): 2,
    (FrameType.STDERR, None): 2,
    (FrameType.ARTIFACT, None): 3,
    (FrameType.HOOK, Phase.ON_SUCCESS): 4,
    (FrameType.HOOK, Phase.ON_ERROR): 4,
    (FrameType.RESULT, None): 5,
    (FrameType.ERROR, None): 5,
    (FrameType.HOOK, Phase.SUFFIX): 6,
    (FrameType.END, None): 7,
}
_OUTCOME: Final = 5
#: Frames without a rank of their own: anywhere after `start` (`ask`: before the outcome).
_AFTER_START: Final = frozenset({FrameType.WARNING, FrameType.ASK})


def check_order(frames: Iterable[Mapping[str, Any]]) -> None:
    """Checks one run's frames (wire form) against the frame order; raises `OrderError`.

    `start` first; `before` hooks; output; artifacts; `onSuccess` or `onError` hooks (not
    both); exactly one `result` or `error`; `suffix` hooks; `end` last; `warning` anywhere
    after `start`; an `ask` after `start`, followed by its hook's frame before the outcome.
    A script's tool calls sit in the interleaved part, each as `call` hooks `before`, its
    `call` frame, `onSuccess` (ok) or `onError` hooks, `suffix` hooks (`_call_step`).
    `seq` runs 0, 1, 2…
    without gaps and every frame has the run's `runId`. Types it does not know are skipped
    (an open set), but still count for `seq`.
    """
    rank = -1
    run_id: str | None = None
    outcomes = 0
    landing: str | None = None
    ended = False
    asking: list[str] = []  # hooks whose `ask` frame came and whose hook frame has not
    call: tuple[str, bool | None] = ("", None)  # where the last call is (`_call_step`)
    for i, frame in enumerate(frames):
        kind = frame.get("type")
        where = f"frame {i} ({kind})"
        if frame.get("seq") != i:
            raise OrderError(f"{where}: seq is {frame.get('seq')!r}, expected {i}")
        run_id = run_id if run_id is not None else frame.get("runId")
        if frame.get("runId") != run_id:
            raise OrderError(f"{where}: runId {frame.get('runId')!r} is not {run_id!r}")
        if ended:
            raise OrderError(f"{where}: after end")
        phase = frame.get("phase") if kind == FrameType.HOOK else None
        if kind in _AFTER_START and i == 0:
            raise OrderError(f"{where}: a run starts with start")
        if kind == FrameType.ASK:
            if rank >= _OUTCOME:
                raise OrderError(f"{where}: an ask after the outcome")
            asking.append(str(frame.get("hook")))
        elif kind == FrameType.HOOK and frame.get("name") in asking:
            asking.remove(str(frame.get("name")))
        if kind == FrameType.CALL or (kind == FrameType.HOOK and frame.get("on") == "call"):
            call = _call_step(call, frame, where)
            kind, phase = FrameType.LOG, None  # the interleaved part's rank
        if (str(kind), phase) not in _RANK:
            if kind == FrameType.HOOK:
                raise OrderError(f"{where}: a {phase!r} hook has no place in a run")
            continue
        new = _RANK[(str(kind), phase)]
        if i == 0 and kind != FrameType.START:
            raise OrderError(f"{where}: a run starts with start")
        if new < rank or (kind == FrameType.START and i != 0):
            raise OrderError(f"{where}: out of order")
        if new == 4:
            if landing not in (None, phase):
                raise OrderError(f"{where}: onSuccess and onError hooks in one run")
            landing = phase
        if new == _OUTCOME:
            if asking:
                raise OrderError(f"{where}: the ask of {asking[0]} has no hook frame before it")
            outcomes += 1
            if outcomes > 1:
                raise OrderError(f"{where}: a second result or error")
        ended = kind == FrameType.END
        rank = new
    if not ended:
        raise OrderError("the run has no end frame")
    if outcomes != 1:
        raise OrderError("the run has no result or error")


def _call_step(at: tuple[str, bool | None], frame: Mapping[str, Any], where: str) -> Any:
    """Where a call stands after `frame` (a `call` frame or a hook on `call`), from `at`
    (the step reached, and the call frame's `ok`); raises `OrderError` for a step back."""
    step, ok = at
    phase = frame.get("phase")
    if frame.get("type") == FrameType.CALL:
        return "call", bool(frame.get("ok"))
    if phase == Phase.BEFORE:
        return phase, None
    if phase in (Phase.ON_SUCCESS, Phase.ON_ERROR, Phase.SUFFIX):
        if step not in ("call", "landing", Phase.SUFFIX)[: 3 if phase == Phase.SUFFIX else 2]:
            raise OrderError(f"{where}: a call's {phase} hook out of order")
        if phase != Phase.SUFFIX and (phase == Phase.ON_SUCCESS) is not ok:
            raise OrderError(f"{where}: a {phase} hook after a call with ok {ok}")
        return ("landing" if phase != Phase.SUFFIX else phase), ok
    raise OrderError(f"{where}: a {phase!r} hook has no place in a call")
