"""The run journal: every frame of a run, in order, so a reader can replay from any seq.

A run appends frames; readers follow it at their own pace from the frames retained, so a slow
reader never slows the run and never loses a frame. Each frame is encoded once, when it is
appended (under `jsontext`'s policy: whatever a script or hook produced, the frame can be
sent), and kept as that line of UTF-8 JSON: what the journal holds is what goes on the wire.
Every frame is redacted as it is stamped (`redactor`, the run's secrets as `[secret NAME]`),
so no frame type can reach a reader, the bus or a file with a secret in it.

Memory is bounded twice, counting what a frame really costs (its line plus `FRAME_OVERHEAD`):
- per run, `run_bytes`: past it, the run's output frames (`stdout`, `stderr`, `log`, `emit`)
  are dropped and counted, with one `warning` frame at the first drop; the frames that say
  what happened (`start`, hooks, artifacts, `result`/`error`, `end`, warnings) are always
  kept, so a reader still sees the run's outcome, whole;
- over all retained runs, `retain_bytes`, and at most `retain` runs: past either, `Journals`
  forgets the oldest finished runs first (a running run is never forgotten), and their
  artifacts with them (`artifacts.py`, which holds those to a budget of their own).
"""

from __future__ import annotations

import array
import time
from collections.abc import AsyncIterator, Callable, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final

import attrs
import orjson
import trio

from ..core.amounts import shown_size
from ..core.chain import GENESIS, extend
from ..core.frames import (
    OUTPUT_TYPES,
    STREAM_ENDS,
    EndFrame,
    ErrorFrame,
    FrameType,
    HookStatus,
    OutputFrame,
    WarningFrame,
    blank,
    lasted_ms,
    now_rfc3339,
    stamped_json,
)
from ..core.hooks import DEFAULT_RUN_BYTES
from ..core.jsontext import dumps, wire_loads, wire_safe
from ..core.redact import CUT, NO_SECRETS
from ..core.scripts import listed_argv
from .artifacts import ArtifactStore
from .storedrun import SEALED, sealing
from .telemetry import Told

if TYPE_CHECKING:
    from ..core.hookframes import Frame

#: Bytes a retained frame costs besides its line: the `bytes` object's header (33), its slot
#: in the list (8), its end offset (8), and the allocator's rounding (measured: 2,000,000
#: empty stdout frames of 99 bytes grow a process by 163 bytes each).
FRAME_OVERHEAD: Final = 64
#: Frames a run may lose to its budget: its output. The rest always stays.
DROPPABLE: Final = OUTPUT_TYPES
#: Output frames encoded in one step (what that step holds at once is bounded).
_SLICE: Final = 4096
#: Lines hashed into the chain between two checkpoints (`chain_lines`).
_CHAIN_SLICE: Final = 2048
#: How a line of the script's output ends (`offer_output`'s form).
_STREAM_ENDS: Final = tuple(STREAM_ENDS.values())
#: Hook statuses that are failures, as the wire says them.
_FAILED: Final = frozenset(s.value for s in HookStatus if s.is_failure)
#: A frame whose text was cut short is redacted whole: what it was cut in may be a secret's.
_CUT: Final = CUT.encode()


class RunJournal:
    """The frames of one run as encoded lines, stamped on append (`seq` 0, 1, 2, …): every
    frame of a run is made blank and gets its envelope here, and nowhere else."""

    #: Whether this process runs the run (its history names this process its owner while it
    #: runs: `interrupted.py`); a cluster gateway's mirror of a worker's run does not.
    owned = True
    #: Why the run's record breaks off before its `end`, if it does: its readers get the
    #: frames it holds, then this (only a gateway's copy of a run does: `MirrorJournal`).
    broken: str | None = None

    def __init__(
        self,
        run_id: str,
        run_bytes: int = DEFAULT_RUN_BYTES,
        on_end: Callable[[], object] | None = None,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        self.run_id = run_id
        #: Where the run's artifacts are kept (None: framed only, as in a bare journal).
        self.artifacts = artifacts
        self.run_bytes = run_bytes
        #: Called once the `end` frame is in (the retained runs may then forget old ones).
        self._on_end = on_end
        #: Each frame's line of UTF-8 JSON (no newline), in seq order.
        self.lines: list[bytes] = []
        #: `ends[k]`: the bytes of lines 0..k-1, a newline after each (`ends[0]` is 0).
        self.ends = array.array("q", [0])
        #: What the frames held cost, in bytes (see `FRAME_OVERHEAD`).
        self.cost = 0
        #: Output frames dropped past `run_bytes`, and their lines' bytes.
        self.dropped_frames = 0
        self.dropped_bytes = 0
        #: The run's `result` or `error` frame, once there is one.
        self.outcome: dict[str, Any] | None = None
        #: The hooks that refused the run and that failed, in frame order (`GET /v1/runs`).
        self.refused: list[str] = []
        self.failed: list[str] = []
        self.finished = False
        #: The run's redaction of every frame as it is stamped (set before its first frame).
        self.redactor = NO_SECRETS
        #: The `artifact` frames, in order (the history copies their bytes at the end).
        self.artifact_frames: list[dict[str, Any]] = []
        #: Told of each batch of frames appended (`recording.py`): never blocks.
        self.recorder: Callable[[RunJournal], object] | None = None
        #: Told of each frame kept but output, as sent (`telemetry.py`): never blocks.
        self.telemetry: Told | None = None
        #: Whether a `warning` has said the history is not keeping this run.
        self.history_warned = False
        #: When the run started, in seconds since the epoch (the history's order).
        self.started = time.time()
        self._grew = trio.Event()
        #: The chain of `lines[:_chained]` (`_chained_now`).
        self._chain = GENESIS
        self._chained = 0

    def __len__(self) -> int:
        return len(self.lines)

    @classmethod
    def restored(cls, run_id: str, lines: Sequence[bytes], finished: bool) -> RunJournal:
        """A journal holding a stored run's lines as they were sent (`history`); a run whose
        `end` was never stored is sealed here, in memory, so that a reader sees it end."""
        journal = cls(run_id, run_bytes=1 << 62)
        for line in lines:
            if line.endswith(_STREAM_ENDS):  # output says nothing of the outcome
                journal._keep((line, len(line) + FRAME_OVERHEAD, FrameType.STDOUT, {}))
            else:
                wire = wire_loads(line)
                kind = FrameType(wire["type"])
                journal._keep((line, len(line) + FRAME_OVERHEAD, kind, wire))
        if not finished:
            journal.seal(SEALED)
        return journal

    @property
    def frames(self) -> list[dict[str, Any]]:
        """The frames as wire dicts, decoded anew at each call (for tests and `exec`)."""
        return self.decoded(0)

    def decoded(self, start: int) -> list[dict[str, Any]]:
        """The frames from seq `start` on, as wire dicts (output, most of a run, by orjson
        alone: its every number is one orjson reads exactly)."""
        return [
            orjson.loads(line) if line.endswith(_STREAM_ENDS) else wire_loads(line)
            for line in self.lines[start:]
        ]

    def append(self, frame: Frame) -> dict[str, Any]:
        """Stamps `seq`, `runId` and `at`, keeps the frame, wakes readers; returns its wire
        form. Never blocks, never drops: for the frames that say what happened. An `end`
        frame gets the chain of the lines before it (`core/chain.py`)."""
        if isinstance(frame, EndFrame) and frame.chain is None and not self.finished:
            frame = attrs.evolve(frame, chain=self._chained_now().hex())
        wire, line = self._stamp(frame, cut=True)
        self._keep((line, len(line) + FRAME_OVERHEAD, frame.type, wire))
        return wire

    def offer(self, frame: Frame) -> bool:
        """`append` for an output frame (`DROPPABLE`), within the run's budget: past it, the
        frame is dropped and counted (the first drop adds a `warning`). False when dropped."""
        assert frame.type in DROPPABLE, frame.type
        wire, line = self._stamp(frame)
        if (cost := self._within_budget(line)) is None:
            return False
        self._keep((line, cost, frame.type, wire))
        return True

    def _within_budget(self, line: bytes) -> int | None:
        """What keeping output `line` costs; None past the budget: dropped and counted (the
        first drop adds a `warning`), and so is all later output (no gap filled again)."""
        cost = len(line) + FRAME_OVERHEAD
        if self.dropped_frames or self.cost + cost > self.run_bytes:
            if not self.dropped_frames:
                self.append(self._over_budget())
            self.dropped_frames += 1
            self.dropped_bytes += len(line)
            return None
        return cost

    def offer_output(self, kind: FrameType, texts: Sequence[str]) -> None:
        """`offer` of an `OutputFrame` for each of `texts`, in order, stamped together: the
        frames of one batch share their `at`, and readers are woken once for all of them."""
        if self.finished:
            raise RuntimeError(f"run {self.run_id} has ended; no frame may follow end")
        # `_stamp`'s line for each frame, written out (orjson's form, keys in the same order).
        run = orjson.dumps(self.run_id).replace(b"%", b"%%")
        form = b'{"runId":%b,"seq":%%d,"at":"%b","text":%%b' % (run, now_rfc3339().encode())
        form += STREAM_ENDS[kind]
        for first in range(0, len(texts), _SLICE):
            self._offer_slice(kind, texts[first : first + _SLICE], form)
        self._woken()

    def _offer_slice(self, kind: FrameType, texts: Sequence[str], form: bytes) -> None:
        search = self.redactor.line_search
        made: list[bytes] = []  # none past the budget (each is then only counted)
        try:
            if not self.dropped_frames:
                made = [form % (n, orjson.dumps(t)) for n, t in enumerate(texts, len(self.lines))]
        except orjson.JSONEncodeError:  # a lone surrogate: `_offer_each` takes the slice
            made.clear()
        sizes = [len(line) + 1 for line in made]  # with its newline, as `ends` counts
        cost = sum(sizes) + (FRAME_OVERHEAD - 1) * len(made)
        if (
            made
            and self.cost + cost <= self.run_bytes
            and (search is None or not any(map(search, made)))
        ):  # the whole slice kept as it is: the way of almost every one
            self.lines += made
            sizes[0] += self.ends[-1]
            self.ends.extend(accumulate(sizes))
            self.cost += cost
        else:
            self._offer_each(kind, texts, form)
        self._woken()

    def _offer_each(self, kind: FrameType, texts: Sequence[str], form: bytes) -> None:
        """`_offer_slice` frame by frame: past the budget, with a secret or a lone surrogate."""
        search, lines, ends = self.redactor.line_search, self.lines, self.ends
        for text in texts:
            try:
                line = form % (len(lines), orjson.dumps(text))
            except orjson.JSONEncodeError:
                self.offer(blank(OutputFrame, text=text, type=kind))
                continue
            if search is not None and search(line):
                line = self._stamp(blank(OutputFrame, text=text, type=kind))[1]
            if (cost := self._within_budget(line)) is None:
                continue
            lines.append(line)
            ends.append(ends[-1] + len(line) + 1)
            self.cost += cost

    def _chained_now(self) -> bytes:
        """The chain of the lines held (`core/chain.py`), each line hashed once."""
        self._chain = extend(self._chain, self.lines[self._chained :])
        self._chained = len(self.lines)
        return self._chain

    async def chain_lines(self) -> None:
        """Extends the chain over the lines held, `_CHAIN_SLICE` at a time with a checkpoint
        between: called before `end` is appended, so the other tasks (a worker sending the
        frames, the streams) go on meanwhile (200,000 lines take 0.1-0.3 s to chain)."""
        while self._chained < len(self.lines):
            upto = min(len(self.lines), self._chained + _CHAIN_SLICE)
            self._chain = extend(self._chain, self.lines[self._chained : upto])
            self._chained = upto
            await trio.lowlevel.checkpoint()

    def seal(self, message: str) -> None:
        """Ends a journal its run left open: an `error` with `message` and the least the run
        lasted (if it has no outcome yet), then `end`, its `durationMs` null (not known)."""
        if self.finished:
            return
        if self.outcome is None:
            self.append(blank(ErrorFrame, message=sealing(message, lasted_ms(self.lines))))
        self.append(blank(EndFrame, exit_code=None, duration_ms=None))

    def _stamp(self, frame: Frame, *, cut: bool = False) -> tuple[dict[str, Any], bytes]:
        """The frame's wire form and line, redacted (whole where `cut` and it holds `_CUT`)."""
        if self.finished:
            raise RuntimeError(f"run {self.run_id} has ended; no frame may follow end")
        wire, line, walk = _encoded(stamped_json(frame, self.run_id, len(self.lines)))
        search = self.redactor.line_search
        if search is not None and (walk or search(line) or (cut and _CUT in line)):
            wire, line, _ = _encoded(self.redactor.fields(wire))
        return wire, line

    def _keep(self, item: tuple[bytes, int, FrameType, dict[str, Any]]) -> None:
        line, cost, kind, wire = item
        self.lines.append(line)
        self.ends.append(self.ends[-1] + len(line) + 1)
        self.cost += cost
        if kind in (FrameType.RESULT, FrameType.ERROR):
            self.outcome = wire
        elif kind is FrameType.HOOK:
            if wire.get("refused") is not None:
                self.refused.append(str(wire.get("name")))
            if wire.get("status") in _FAILED:
                self.failed.append(str(wire.get("name")))
        elif kind is FrameType.ARTIFACT:
            self.artifact_frames.append(wire)
        if kind is FrameType.END:
            self.finished = True
        if self.telemetry is not None:
            self.telemetry(kind, wire)
        self._woken()
        if kind is FrameType.END and self._on_end is not None:
            self._on_end()

    def _woken(self) -> None:
        """Wakes the readers, and tells the recorder (if any) the journal grew."""
        self._grew.set()
        self._grew = trio.Event()
        if self.recorder is not None:
            self.recorder(self)

    def _over_budget(self) -> WarningFrame:
        budget = f"runs.runBytes, {shown_size(self.run_bytes)}"
        held = f"the run's output reached its budget ({budget}); later output is dropped"
        return blank(WarningFrame, message=f"{held} (counted in a warning when the script ends)")

    async def wait_past(self, seen: int) -> None:
        """Waits until the journal holds more than `seen` frames, has ended, or is broken."""
        while len(self.lines) <= seen and not self.finished and self.broken is None:
            await self._grew.wait()

    def summary(self) -> dict[str, Any]:
        """The run as `GET /v1/runs` lists it: `running` until its `end` frame, then the
        type of its outcome frame (`result` or `error`), with the end frame's figures."""
        start = wire_loads(self.lines[0]) if self.lines else {}
        end = wire_loads(self.lines[-1]) if self.finished else {}
        status = "running"
        if self.finished:
            status = self.outcome["type"] if self.outcome is not None else FrameType.ERROR.value
        return {
            "runId": self.run_id,
            **listed_argv(start.get("argv", [])),
            "cwd": start.get("cwd"),
            "startedAt": start.get("at"),
            "status": status,
            "exitCode": end.get("exitCode"),
            "durationMs": end.get("durationMs"),
            "refused": self.refused,
            "failed": self.failed,
        }

    def follow(self, start: int = 0) -> Follower:
        """Batches of frames from seq `start` (all that is waiting, in order), live, until
        the `end` frame (or the last before a break, `broken`) has been given. A reader that
        lags gets larger batches. `ValueError` when `start` cannot be reached (negative, or
        past a finished run)."""
        if start < 0 or (start > len(self.lines) and self.finished):
            raise ValueError(f"from={start} is outside 0..{len(self.lines)}")
        return Follower(self, start)


def _encoded(wire: dict[str, Any]) -> tuple[dict[str, Any], bytes, bool]:
    """The frame, its line, and whether the encoding policy had to change the frame (a lone
    surrogate, a huge integer): then the frame kept and returned is the changed one (what
    readers of the journal and of the bus see is what is sent), and its line is not
    orjson's, so redaction walks it rather than search it."""
    changed = False
    try:
        line = orjson.dumps(wire)
    except orjson.JSONEncodeError:
        wire = wire_safe(wire)
        line = dumps(wire)
        changed = True
    # orjson's bytes keep the 4 KiB buffer they were written into: a frame kept as it came
    # would cost 4 KiB, whatever its size. A copy is exact.
    return wire, bytes(memoryview(line)), changed


class Follower:
    """An async iterator over a journal's frames (as wire dicts); needs no closing."""

    def __init__(self, journal: RunJournal, start: int) -> None:
        self._journal = journal
        self.at = start

    def __aiter__(self) -> Follower:
        return self

    async def __anext__(self) -> list[dict[str, Any]]:
        journal = self._journal
        await journal.wait_past(self.at)
        if self.at >= len(journal):
            raise StopAsyncIteration
        batch = journal.decoded(self.at)
        self.at += len(batch)
        return batch

    async def encoded(self) -> AsyncIterator[list[bytes]]:
        """The same batches as the frames' lines as kept (no newline), to send as they are."""
        journal = self._journal
        while True:
            await journal.wait_past(self.at)
            if self.at >= len(journal):
                return
            batch = journal.lines[self.at :]
            self.at += len(batch)
            yield batch
