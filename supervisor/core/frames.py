"""Frames: the run's messages to its clients, their envelope and their order.

A frame is made without its envelope (`blank`); the run's journal stamps it (`stamp`) as it
takes it in, so the run's frames are numbered in the one order readers see them. Their wire
form is the one converter's (`core/convert.py`): camelCase, defaults left out.

The types are a table (`FrameType`, with `FRAME_CLASSES`, `OUTPUT_TYPES`, `ENVELOPE_KEYS`),
and so are the messages beside the frames on a run's socket: what a client sends a run
(`Control`) and the service's own (`ServiceMessage`). Whatever shows or carries frames (the
CLI's view, the console, the cluster) takes their names from here.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from typing import Any, Final, TypeVar

import attrs

from .answers import Asked, Dropped, Refusal
from .convert import KEEP, SHOWN_WITH, WIRE


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


#: The frame types that are the script's output: what a run's journal may drop past its
#: budget, what the console draws in its output list, what the cluster replaces by a
#: `warning` when one is too large to carry.
OUTPUT_TYPES: Final = frozenset({FrameType.STDOUT, FrameType.STDERR, FrameType.LOG, FrameType.EMIT})


class Control(enum.StrEnum):
    """What a client may send a run after its request (`{"type": …}` on the run's socket),
    and what a gateway passes on to the run's worker."""

    #: `{"type": "cancel"}`: the run stops; its suffix hooks and `end` still come.
    CANCEL = "cancel"
    #: `{"type": "answer", "askId", "answer"}`: the answer to an `ask` frame.
    ANSWER = "answer"


class ServiceMessage(enum.StrEnum):
    """The service's own messages beside a run's frames. They carry no `seq`: that is how a
    client tells the error message from a run's `error` frame, whose type it shares."""

    ERROR = FrameType.ERROR.value
    #: `/v1/hooks`' one message: the hooks in force, the files, the tool servers.
    HOOKS = "hooks"


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
class Tokens:
    """What a prompt hook's request cost: the model's count (or, where it gives none, an
    estimate at 4 bytes a token)."""

    prompt: int
    completion: int


#: The wire names of the envelope's fields (`Envelope`), which every frame begins with.
ENVELOPE_KEYS: Final = ("runId", "seq", "at")


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
    #: The floor held: a locked hook of the operator's config kept an effect above the
    #: caller's level (`hooks.autonomy`), which does not clamp it. Present only then.
    caller_autonomy_ignored: bool = False
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
    #: The end of what the process wrote on stderr; for a hook that failed, its last 4 KiB,
    #: with its last 4 KiB of stdout beside it (`stdoutTail`): what a hook author writes
    #: there ("jq is missing: …") is seen under the failure.
    stderr_tail: str | None = None
    stdout_tail: str | None = None
    resources: Resources | None = None
    ran: Ran | None = None
    #: `invalid-output`: the start of what the hook printed (its first KiB), so a person
    #: sees what was read.
    stdout_head: str | None = None
    #: Prompt hooks: the model `{name, provider, model}`, what the request cost, how long
    #: the model took, and whether the answer came from the cache (never the request or reply).
    model: dict[str, str] | None = None
    tokens: Tokens | None = None
    latency_ms: int | None = None
    cached: bool | None = None
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


#: The class of each frame type (an output frame's class is one for both streams).
FRAME_CLASSES: Final[Mapping[FrameType, type[Frame]]] = {
    FrameType.START: StartFrame,
    FrameType.HOOK: HookFrame,
    FrameType.LOG: LogFrame,
    FrameType.EMIT: EmitFrame,
    FrameType.STDOUT: OutputFrame,
    FrameType.STDERR: OutputFrame,
    FrameType.ARTIFACT: ArtifactFrame,
    FrameType.RESULT: ResultFrame,
    FrameType.ERROR: ErrorFrame,
    FrameType.END: EndFrame,
    FrameType.WARNING: WarningFrame,
    FrameType.ASK: AskFrame,
    FrameType.CALL: CallFrame,
}

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
