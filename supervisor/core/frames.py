"""Frames: the run's messages to its clients, their envelope and their order.

A frame is made without its envelope (`blank`); the run's journal stamps it (`stamp`) as it
takes it in, so the run's frames are numbered in the one order readers see them. Their wire
form is the one converter's (`core/convert.py`): camelCase, defaults left out.

The types are a table (`FrameType`, with `OUTPUT_TYPES`, `ENVELOPE_KEYS`; each type's class
is in `core/hookframes.py`'s `FRAME_CLASSES`, beside the hook frames a run without hooks never
builds), and so are the messages beside the frames on a run's socket: what a client sends a
run (`Control`) and the service's own (`ServiceMessage`). Whatever shows or carries frames (the
CLI's view, the console, the cluster) takes their names from here.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, Final, TypeVar

import attrs

from .convert import frame_json
from .fieldmeta import KEEP, WIRE
from .records import Record


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
    #: A host a sandboxed child was refused by the proxy (once per host per run), right
    #: before its hook's frame.
    EGRESS = "egress"


#: The frame types that are the script's output: what a run's journal may drop past its
#: budget, what the console draws in its output list, what the cluster replaces by a
#: `warning` when one is too large to carry.
OUTPUT_TYPES: Final = frozenset({FrameType.STDOUT, FrameType.STDERR, FrameType.LOG, FrameType.EMIT})
#: The longest stdout or stderr line a frame holds whole, in bytes as written: a longer one
#: is cut into pieces of this size, each a frame of its own, which nothing in the frames
#: marks (a reader takes a frame of at least this many bytes of UTF-8 for a piece).
MAX_OUTPUT_LINE: Final = 64 * 1024
#: Of those, the lines the script's process wrote to its stdout and stderr: most of a run,
#: which `exec` draws by their text alone and its remote client does not keep.
STREAM_TYPES: Final = (FrameType.STDOUT, FrameType.STDERR)
#: How the journal's line of each of those ends (`RunJournal.offer_output` writes its type as
#: the last member, in the converter's key order): such a line is known by its end alone, as
#: no text can end a line so (a raw newline or an unescaped quote never stands in a string).
STREAM_ENDS: Final = {kind: b',"type":"%b"}' % kind.encode() for kind in STREAM_TYPES}


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


#: The `reason` of a hook its run's cancellation cut short (`killed`): no run carries on. A
#: hook of a kind that runs as a process (`Kind.process`) adds `RUN_CANCELLED_TREE`; a prompt
#: or plugin hook has no process of its own to kill.
RUN_CANCELLED_REASON: Final = "the run was cancelled while the hook ran"
RUN_CANCELLED_TREE: Final = "; its process tree was killed"
#: The fields of a hook frame (as the wire names them) that hold a note for the hook's
#: author or operator, shown under the hook as `note: …` by the readable view and the console:
#: `failure = "closed"` that cannot refuse, a plugin answer `auto` took as advice.
HOOK_NOTES: Final = ("failureNote", "answerNote")


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


def at_time(at: object) -> dt.datetime | None:
    """A frame's `at` (RFC 3339, as `now_rfc3339` writes it) as an aware time, or None where
    it is not one: the one reading of `at` for every part that measures between frames."""
    if not isinstance(at, str):
        return None
    try:
        when = dt.datetime.fromisoformat(at)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def seconds_between(start: object, end: object) -> float | None:
    """Seconds from one `at` to a later one (0 where the later is not later), or None where
    either is not an `at`."""
    first, last = at_time(start), at_time(end)
    if first is None or last is None:
        return None
    return max(0.0, (last - first).total_seconds())


def lasted_ms(lines: list[bytes]) -> int:
    """How long the wire `lines` span, from the first's `at` to the last's, in ms: what is
    known of a run whose `end` was never written (0 where it cannot be read)."""
    import json

    try:
        span = seconds_between(*(json.loads(lines[i]).get("at") for i in (0, -1)))
    except (IndexError, AttributeError, ValueError):  # (JSONDecodeError is a ValueError)
        return 0
    return 0 if span is None else round(span * 1000)


#: The wire names of the envelope's fields (`Envelope`), which every frame begins with.
ENVELOPE_KEYS: Final = ("runId", "seq", "at")


@attrs.frozen(repr=False, eq=False)
class Envelope(Record):
    """What every frame begins with: its run, its place in the run's stream, when it was
    stamped. `blank` leaves them empty and the journal fills them (`stamp`)."""

    run_id: str
    seq: int
    at: str


@attrs.frozen(repr=False, eq=False)
class StartFrame(Envelope):
    argv: tuple[str, ...]
    cwd: str
    sandbox: str
    type: FrameType = attrs.field(default=FrameType.START, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class LogFrame(Envelope):
    level: str
    message: str
    #: `attrs` on the wire (a name attrs and cattrs keep for themselves here).
    attributes: dict[str, Any] = attrs.field(factory=dict, metadata={WIRE: "attrs"})
    type: FrameType = attrs.field(default=FrameType.LOG, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class EmitFrame(Envelope):
    value: Any
    type: FrameType = attrs.field(default=FrameType.EMIT, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class OutputFrame(Envelope):
    """One line the script wrote on stdout or stderr (`type` says which), newline removed."""

    text: str
    type: FrameType = attrs.field(default=FrameType.STDOUT, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class ArtifactFrame(Envelope):
    id: str
    name: str
    mime: str
    size: int
    sha256: str
    type: FrameType = attrs.field(default=FrameType.ARTIFACT, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class ResultFrame(Envelope):
    value: Any
    advice: tuple[str, ...] = ()
    proposals: tuple[dict[str, Any], ...] = ()
    type: FrameType = attrs.field(default=FrameType.RESULT, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class ErrorFrame(Envelope):
    message: str
    exit_code: int | None = None
    advice: tuple[str, ...] = ()
    refused_by: str | None = None
    cause: ErrorCause | None = None
    type: FrameType = attrs.field(default=FrameType.ERROR, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class EndFrame(Envelope):
    exit_code: int | None
    #: None: not known (a run whose supervisor stopped before its end: `RunJournal.seal`).
    duration_ms: int | None
    type: FrameType = attrs.field(default=FrameType.END, metadata=KEEP)
    #: The hash chain of the run's frame lines before this one (`core/chain.py`), hex.
    chain: str | None = None


@attrs.frozen(repr=False, eq=False)
class WarningFrame(Envelope):
    message: str
    type: FrameType = attrs.field(default=FrameType.WARNING, metadata=KEEP)


_Framed = TypeVar("_Framed", bound=Envelope)


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


def stamped_json(frame: Envelope, run_id: str, seq: int) -> dict[str, Any]:
    """`frame_json(stamp(frame, run_id, seq))` without the stamped copy of the frame (an
    `attrs.evolve`, which builds every field again: most of what appending a frame cost).
    The envelope's keys come first in every frame's JSON; they are set in place."""
    wire = frame_json(frame)
    for key, value in zip(ENVELOPE_KEYS, (run_id, seq, now_rfc3339()), strict=True):
        wire[key] = value
    return wire
