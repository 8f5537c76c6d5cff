"""The frames about a run's hooks and its tool calls (`hook`, `ask`, `call`, with the parts a
hook frame carries), and the table of every frame's class (`FRAME_CLASSES`, `Frame`).

They live apart from `core/frames.py` because a run without hooks or tool calls sends none
of them: `exec` of a script with no hooks does not build these classes at its start (attrs
compiles each class's methods as it is built). The table is here, beside the last classes
it names, so the frame types' own module stays free of them; the types' names, the
envelope, `blank` and `stamp` are `core/frames.py`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .answers import Asked, Dropped, Refusal
from .fieldmeta import KEEP, SHOWN_WITH
from .frames import (
    ArtifactFrame,
    EmitFrame,
    EndFrame,
    Envelope,
    ErrorFrame,
    FrameType,
    HookStatus,
    LogFrame,
    OutputFrame,
    ResultFrame,
    StartFrame,
    WarningFrame,
)
from .records import Record


@attrs.frozen(repr=False, eq=False)
class Resources(Record):
    cpu_ms: int
    max_rss_kb: int


@attrs.frozen(repr=False, eq=False)
class Ran(Record):
    """The command a `run`-effect answer executed, and how it went."""

    argv: tuple[str, ...]
    status: HookStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str | None = None
    stderr_tail: str | None = None
    #: How long it ran (it has a timeout of its own, the hook's `timeoutMs`, after the hook's
    #: own time, which the frame's `durationMs` is); None: it never started.
    duration_ms: int | None = None


@attrs.frozen(repr=False, eq=False)
class Tokens(Record):
    """What a prompt hook's request cost: the model's count (or, where it gives none, an
    estimate at 4 bytes a token)."""

    prompt: int
    completion: int


@attrs.frozen(repr=False, eq=False)
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
    #: Said when a plugin hook's `answer = "auto"` took as advice an object that looked like
    #: an answer object (an answer key beside others, `Refuse` for `refuse`), and why.
    answer_note: str | None = None
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
    #: "blocked: HOST not in network", for each host the proxy refused its child.
    egress: tuple[str, ...] = ()
    #: A plugin hook's tool server and tool.
    server: str | None = None
    tool: str | None = None
    type: FrameType = attrs.field(default=FrameType.HOOK, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
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


@attrs.frozen(repr=False, eq=False)
class CallFrame(Envelope):
    """A tool call the script made: the SHA-256 of its arguments as sent, never the
    arguments or the answer (they may hold secrets); `note`, what an operator should know
    of a failure (a server without network that tried to reach one)."""

    id: Any
    server: str
    tool: str
    args_sha256: str
    duration_ms: int
    ok: bool = attrs.field(metadata=KEEP)
    error: str | None = None
    destructive_hint: bool | None = None
    refused_by: str | None = None
    note: str | None = None
    type: FrameType = attrs.field(default=FrameType.CALL, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class EgressFrame(Envelope):
    """A connection the proxy refused a sandboxed child (`core/egress.py`): the hook whose
    child it was, else the tool server a call of the run was served by, else (`run`) the
    run's script; the host and port asked for, and `why` (`core/egress.py`'s `refusal`: the
    list, and the item that would admit the host there). At most one per host per run."""

    host: str
    port: int
    hook: str | None = None
    run: str | None = None
    server: str | None = None
    why: str | None = None
    allowed: bool = attrs.field(default=False, metadata=KEEP)
    type: FrameType = attrs.field(default=FrameType.EGRESS, metadata=KEEP)


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
    | EgressFrame
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
    FrameType.EGRESS: EgressFrame,
}
