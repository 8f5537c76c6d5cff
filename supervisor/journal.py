"""The run journal: every frame of a run, in order, so a reader can replay from any seq.

A run appends frames; readers follow it at their own pace from the frames retained, so a slow
reader never slows the run and never loses a frame. `Journals` keeps the last `runs.retain`
runs; the oldest finished run is forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import attrs
import trio

from .frames import Frame, FrameType, now_rfc3339, to_json


class UnknownRun(LookupError):
    """No run with that id is retained."""


class RunJournal:
    """The frames of one run, as wire dicts, with `seq` stamped on append (0, 1, 2, …)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.frames: list[dict[str, Any]] = []
        self.finished = False
        self._grew = trio.Event()

    def append(self, frame: Frame) -> dict[str, Any]:
        """Stamps `seq`, `runId` and `at`, keeps the frame, wakes readers. Never blocks."""
        if self.finished:
            raise RuntimeError(f"run {self.run_id} has ended; no frame may follow end")
        stamped = attrs.evolve(frame, run_id=self.run_id, seq=len(self.frames), at=now_rfc3339())
        wire = to_json(stamped)
        self.frames.append(wire)
        if stamped.type is FrameType.END:
            self.finished = True
        self._grew.set()
        self._grew = trio.Event()
        return wire

    async def wait_past(self, seen: int) -> None:
        """Waits until the journal holds more than `seen` frames, or has ended."""
        while len(self.frames) <= seen and not self.finished:
            await self._grew.wait()

    def follow(self, start: int = 0) -> Follower:
        """Batches of frames from seq `start` (all that is waiting, in order), live, until
        the `end` frame has been given. A reader that lags gets larger batches.

        Raises `ValueError` when `start` cannot be reached (negative, or past a finished run).
        """
        if start < 0 or (start > len(self.frames) and self.finished):
            raise ValueError(f"from={start} is outside 0..{len(self.frames)}")
        return Follower(self, start)


class Follower:
    """An async iterator over a journal's frames; needs no closing (holds no resources)."""

    def __init__(self, journal: RunJournal, start: int) -> None:
        self._journal = journal
        self.at = start

    def __aiter__(self) -> Follower:
        return self

    async def __anext__(self) -> list[dict[str, Any]]:
        journal = self._journal
        await journal.wait_past(self.at)
        if self.at >= len(journal.frames):
            raise StopAsyncIteration
        batch = journal.frames[self.at :]
        self.at += len(batch)
        return batch


class Journals:
    """The retained runs, at most `retain` of them (running ones are never dropped)."""

    def __init__(self, retain: int) -> None:
        self.retain = retain
        self._runs: OrderedDict[str, RunJournal] = OrderedDict()

    def open(self, run_id: str) -> RunJournal:
        journal = RunJournal(run_id)
        self._runs[run_id] = journal
        self._forget_old()
        return journal

    def get(self, run_id: str) -> RunJournal:
        try:
            return self._runs[run_id]
        except KeyError:
            raise UnknownRun(run_id) from None

    def __len__(self) -> int:
        return len(self._runs)

    def _forget_old(self) -> None:
        excess = len(self._runs) - self.retain
        for run_id in [r for r, j in self._runs.items() if j.finished][: max(excess, 0)]:
            del self._runs[run_id]
