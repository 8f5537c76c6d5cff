"""Frames: the run's messages to its clients. attrs in, one cattrs converter out.

Field names are snake_case here and camelCase on the wire; fields that are None are left out.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override


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


_F = TypeVar("_F")


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
class HookFrame:
    """Everything that happened to one hook: the single description of it."""

    run_id: str
    seq: int
    at: str
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
    changed: bool = False
    #: The value before an `apply` replaced it (present only then), and the value after.
    original: Any = None
    value: Any = None
    advice: tuple[str, ...] = ()
    proposals: tuple[dict[str, Any], ...] = ()
    #: `{"reason": …, "failClosed": bool}` when this hook stops the run.
    refused: dict[str, Any] | None = None
    ask: dict[str, Any] | None = None
    dropped: tuple[dict[str, str], ...] = ()
    #: Why the hook failed or was skipped, in words.
    reason: str | None = None
    #: Said when `failure = "closed"` can no longer refuse because clamping lowered the effect.
    failure_note: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: str | None = None
    resources: Resources | None = None
    ran: Ran | None = None
    type: FrameType = FrameType.HOOK


@attrs.frozen
class StartFrame:
    run_id: str
    seq: int
    at: str
    argv: tuple[str, ...]
    cwd: str
    sandbox: str
    type: FrameType = FrameType.START


@attrs.frozen
class LogFrame:
    run_id: str
    seq: int
    at: str
    level: str
    message: str
    #: `attrs` on the wire (a name attrs and cattrs keep for themselves here).
    attributes: dict[str, Any] = attrs.field(factory=dict, metadata={"wire": "attrs"})
    type: FrameType = FrameType.LOG


@attrs.frozen
class EmitFrame:
    run_id: str
    seq: int
    at: str
    value: Any
    type: FrameType = FrameType.EMIT


@attrs.frozen
class OutputFrame:
    """One line the script wrote on stdout or stderr (`type` says which), newline removed."""

    run_id: str
    seq: int
    at: str
    text: str
    type: FrameType = FrameType.STDOUT


@attrs.frozen
class ArtifactFrame:
    run_id: str
    seq: int
    at: str
    id: str
    name: str
    mime: str
    size: int
    sha256: str
    type: FrameType = FrameType.ARTIFACT


@attrs.frozen
class ResultFrame:
    run_id: str
    seq: int
    at: str
    value: Any
    advice: tuple[str, ...] = ()
    proposals: tuple[dict[str, Any], ...] = ()
    type: FrameType = FrameType.RESULT


@attrs.frozen
class ErrorFrame:
    run_id: str
    seq: int
    at: str
    message: str
    exit_code: int | None = None
    advice: tuple[str, ...] = ()
    refused_by: str | None = None
    type: FrameType = FrameType.ERROR


@attrs.frozen
class EndFrame:
    run_id: str
    seq: int
    at: str
    exit_code: int | None
    duration_ms: int
    type: FrameType = FrameType.END


@attrs.frozen
class WarningFrame:
    run_id: str
    seq: int
    at: str
    message: str
    type: FrameType = FrameType.WARNING


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
)


def blank(frame_type: type[_F], **fields: Any) -> _F:
    """A frame without its envelope yet: the journal stamps `runId`, `seq` and `at`."""
    make: Any = frame_type
    frame: _F = make(run_id="", seq=-1, at="", **fields)
    return frame


#: Fields that stay on the wire even when empty: consumers rely on them being there.
_ALWAYS: Final = frozenset({"type", "changed", "dropped", "clamped_by", "refused", "status"})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


converter = cattrs.Converter()


def _unstructure_factory(cls: type) -> Any:
    overrides: dict[str, Any] = {
        a.name: override(
            rename=a.metadata.get("wire", _camel(a.name)),
            omit_if_default=a.default is not attrs.NOTHING and a.name not in _ALWAYS,
        )
        for a in attrs.fields(cls)
    }
    return make_dict_unstructure_fn(cls, converter, **overrides)


converter.register_unstructure_hook_factory(attrs.has, _unstructure_factory)


def to_json(frame: Any) -> dict[str, Any]:
    """The wire form of a frame (or any attrs object of this module)."""
    out: dict[str, Any] = converter.unstructure(frame)
    if out.get("changed"):  # a replaced `null` is still worth showing
        out.setdefault("original", None)
        out.setdefault("value", None)
    return out


class OrderError(ValueError):
    """A frame stream breaks the run's frame order; says which frame and why."""


#: Where each frame may stand: a stream's ranks never go down.
_RANK: Final[dict[tuple[str, str | None], int]] = {
    ("start", None): 0,
    ("hook", "before"): 1,
    ("log", None): 2,
    ("emit", None): 2,
    ("stdout", None): 2,
    ("stderr", None): 2,
    ("artifact", None): 3,
    ("hook", "onSuccess"): 4,
    ("hook", "onError"): 4,
    ("result", None): 5,
    ("error", None): 5,
    ("hook", "suffix"): 6,
    ("end", None): 7,
}


def check_order(frames: Iterable[Mapping[str, Any]]) -> None:
    """Checks one run's frames (wire form) against the frame order; raises `OrderError`.

    `start` first; `before` hooks; output; artifacts; `onSuccess` or `onError` hooks (not
    both); exactly one `result` or `error`; `suffix` hooks; `end` last; `warning` anywhere
    after `start`. `seq` runs 0, 1, 2…
    without gaps and every frame has the run's `runId`. Types it does not know are skipped
    (an open set), but still count for `seq`.
    """
    rank = -1
    run_id: str | None = None
    outcomes = 0
    landing: str | None = None
    ended = False
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
        phase = frame.get("phase") if kind == "hook" else None
        if kind == FrameType.WARNING and i == 0:
            raise OrderError(f"{where}: a run starts with start")
        if (str(kind), phase) not in _RANK:
            if kind == "hook":
                raise OrderError(f"{where}: a {phase!r} hook has no place in a run")
            continue
        new = _RANK[(str(kind), phase)]
        if i == 0 and kind != "start":
            raise OrderError(f"{where}: a run starts with start")
        if new < rank or (kind == "start" and i != 0):
            raise OrderError(f"{where}: out of order")
        if new == 4:
            if landing not in (None, phase):
                raise OrderError(f"{where}: onSuccess and onError hooks in one run")
            landing = phase
        if new == 5:
            outcomes += 1
            if outcomes > 1:
                raise OrderError(f"{where}: a second result or error")
        ended = kind == "end"
        rank = new
    if not ended:
        raise OrderError("the run has no end frame")
    if outcomes != 1:
        raise OrderError("the run has no result or error")
