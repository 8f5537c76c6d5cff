"""Frames: the run's messages to its clients, their envelope and their order.

A frame is made without its envelope (`blank`); the run's journal stamps it (`stamp`) as it
takes it in, so the run's frames are numbered in the one order readers see them. Their wire
form is the one converter's (`core/convert.py`): camelCase, defaults left out.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs

from .answers import Asked, Dropped, Refusal
from .convert import KEEP, SHOWN_WITH, WIRE
from .points import Phase


class FrameType(enum.StrEnum):
    """Frame types, in the order a run sends them. An open set for consumers."""

    START = "start"
    HOOK = "hook"
    LOG = "log"
    EMIT = "emit"
    STDOUT = "stdout"
    STDERR = "stderr"
    ARTIFACT = "artifact"
    RESULT = "result"
    ERROR = "error"
    END = "end"
    #: Anywhere after `start`: something a reader should know (output dropped, …).
    WARNING = "warning"
    #: A hook's question, right before its hook frame; the run waits for an answer.
    ASK = "ask"
    #: One tool call the script made, among its output (never its arguments or answer).
    CALL = "call"


class HookStatus(enum.StrEnum):
    """How a hook's process went. Anything but `ok` and `skipped` is a failure."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    KILLED = "killed"
    INVALID_OUTPUT = "invalid-output"
    SKIPPED = "skipped"

    @property
    def is_failure(self) -> bool:
        return self not in (HookStatus.OK, HookStatus.SKIPPED)


class ErrorCause(enum.StrEnum):
    """Why a run ended in `error` (the error frame's `cause`): what `exec`'s exit code and a
    client tell apart without reading the message."""

    #: The script ran and exited non-zero (or raised), and nothing turned that into a result.
    SCRIPT = "script"
    #: A hook refused: a `before` refusal, an unanswered or "no" `ask`, a fail-closed failure.
    REFUSED = "refused"
    #: The script's own timeout passed; its tree was killed.
    TIMEOUT = "timeout"
    #: The run was cancelled (Ctrl-C, a client's `cancel`, a closed output).
    CANCELLED = "cancelled"
    #: Anything else: the script could not start, was killed by a signal, a secret was unset.
    FAILED = "failed"


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@attrs.frozen
class Resources:
    cpu_ms: int
    max_rss_kb: int


@attrs.frozen
class Ran:
    """The command a `run`-effect answer executed, and how it went."""

    argv: tuple[str, ...]
    status: HookStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str | None = None
    stderr_tail: str | None = None


@attrs.frozen
class Envelope:
    """What every frame begins with: its run, its place in the run's stream, when it was
    stamped. `blank` leaves them empty and the journal fills them (`stamp`)."""

    run_id: str
    seq: int
    at: str


@attrs.frozen
class HookFrame(Envelope):
    """Everything that happened to one hook: the single description of it."""

    name: str
    on: str
    phase: str
    action: str
    effect: str
    requested_effect: str
    clamped_by: tuple[str, ...]
    status: HookStatus
    duration_ms: int
    sandbox: str
    changed: bool = attrs.field(default=False, metadata=KEEP)
    #: The value before an `apply` replaced it (present only then), and the value after.
    original: Any = attrs.field(default=None, metadata={SHOWN_WITH: "changed"})
    value: Any = attrs.field(default=None, metadata={SHOWN_WITH: "changed"})
    advice: tuple[str, ...] = ()
    proposals: tuple[dict[str, Any], ...] = ()
    #: Set when this hook stops the run.
    refused: Refusal | None = attrs.field(default=None, metadata=KEEP)
    #: What the hook asked, the answer and who gave it (the `ask` frame came before).
    asked: Asked | None = None
    dropped: tuple[Dropped, ...] = attrs.field(default=(), metadata=KEEP)
    #: Why the hook failed or was skipped, in words.
    reason: str | None = None
    #: Said when `failure = "closed"` can no longer refuse because clamping lowered the effect.
    failure_note: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: str | None = None
    resources: Resources | None = None
    ran: Ran | None = None
    #: `invalid-output`: the start of what the hook printed (its first KiB), so a person
    #: sees what was read.
    stdout_head: str | None = None
    #: A plugin hook's tool server and tool.
    server: str | None = None
    tool: str | None = None
    type: FrameType = attrs.field(default=FrameType.HOOK, metadata=KEEP)


@attrs.frozen
class StartFrame(Envelope):
    argv: tuple[str, ...]
    cwd: str
    sandbox: str
    type: FrameType = attrs.field(default=FrameType.START, metadata=KEEP)


@attrs.frozen
class LogFrame(Envelope):
    level: str
    message: str
    #: `attrs` on the wire (a name attrs and cattrs keep for themselves here).
    attributes: dict[str, Any] = attrs.field(factory=dict, metadata={WIRE: "attrs"})
    type: FrameType = attrs.field(default=FrameType.LOG, metadata=KEEP)


@attrs.frozen
class EmitFrame(Envelope):
    value: Any
    type: FrameType = attrs.field(default=FrameType.EMIT, metadata=KEEP)


@attrs.frozen
class OutputFrame(Envelope):
    """One line the script wrote on stdout or stderr (`type` says which), newline removed."""

    text: str
    type: FrameType = attrs.field(default=FrameType.STDOUT, metadata=KEEP)


@attrs.frozen
class ArtifactFrame(Envelope):
    id: str
    name: str
    mime: str
    size: int
    sha256: str
    type: FrameType = attrs.field(default=FrameType.ARTIFACT, metadata=KEEP)


@attrs.frozen
class ResultFrame(Envelope):
    value: Any
    advice: tuple[str, ...] = ()
    proposals: tuple[dict[str, Any], ...] = ()
    type: FrameType = attrs.field(default=FrameType.RESULT, metadata=KEEP)


@attrs.frozen
class ErrorFrame(Envelope):
    message: str
    exit_code: int | None = None
    advice: tuple[str, ...] = ()
    refused_by: str | None = None
    cause: ErrorCause | None = None
    type: FrameType = attrs.field(default=FrameType.ERROR, metadata=KEEP)


@attrs.frozen
class EndFrame(Envelope):
    exit_code: int | None
    duration_ms: int
    type: FrameType = attrs.field(default=FrameType.END, metadata=KEEP)


@attrs.frozen
class WarningFrame(Envelope):
    message: str
    type: FrameType = attrs.field(default=FrameType.WARNING, metadata=KEEP)


@attrs.frozen
class AskFrame(Envelope):
    """A question a hook asks, put in the stream right after its process ended and before
    its hook frame; the run waits for `{"type": "answer", "askId", "answer"}` until the
    deadline, then `default` applies."""

    ask_id: str
    hook: str
    question: str
    default: str
    deadline_ms: int
    type: FrameType = attrs.field(default=FrameType.ASK, metadata=KEEP)


@attrs.frozen
class CallFrame(Envelope):
    """A tool call the script made: the SHA-256 of its arguments as sent, never the
    arguments or the answer (they may hold secrets)."""

    id: Any
    server: str
    tool: str
    args_sha256: str
    duration_ms: int
    ok: bool = attrs.field(metadata=KEEP)
    error: str | None = None
    destructive_hint: bool | None = None
    refused_by: str | None = None
    type: FrameType = attrs.field(default=FrameType.CALL, metadata=KEEP)


Frame = (
    StartFrame
    | HookFrame
    | LogFrame
    | EmitFrame
    | OutputFrame
    | ArtifactFrame
    | ResultFrame
    | ErrorFrame
    | EndFrame
    | WarningFrame
    | AskFrame
    | CallFrame
)


_Framed = TypeVar("_Framed", bound=Frame)


def blank(frame_type: type[_Framed], **fields: Any) -> _Framed:
    """A frame without its envelope yet: the journal stamps `runId`, `seq` and `at`."""
    make: Any = frame_type
    frame: _Framed = make(run_id="", seq=-1, at="", **fields)
    return frame


def stamp(frame: _Framed, run_id: str, seq: int) -> _Framed:
    """`frame` in its envelope: its run, its place in the run, and the time now.

    The journal stamps every frame of a run as it appends it; a hook frame that belongs to
    no journal (an observe hook's, `hook test`'s) is stamped where it is sent, with seq 0.
    """
    return attrs.evolve(frame, run_id=run_id, seq=seq, at=now_rfc3339())


class OrderError(ValueError):
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
