"""A run the history holds, read back a chunk at a time (its downloads, and its replays over a
WebSocket): what a reader holds at once is one stored chunk (`CHUNK_LINES` lines), never the
run, whatever the run's size.

Its lines come as they were sent; a run whose `end` was never stored is sealed at the end, as
`RunJournal.restored` seals it (an `error` if it has no outcome, then an `end` whose chain
covers every line before it), so `runs verify` passes on what is read. Each read is one
snapshot of the history: a run that another process still records is read as far as it has
gone when its last chunk is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import orjson

from ..core.chain import GENESIS, extend
from ..core.frames import (
    STREAM_ENDS,
    EndFrame,
    ErrorFrame,
    FrameType,
    blank,
    lasted_ms,
    stamped_json,
)
from ..core.jsontext import wire_loads
from ..history.faults import HistoryFault
from ..history.store import History

#: What seals a stored run that has no `end`.
SEALED: Final = (
    "the run's history ends here: the supervisor that ran it stopped before its end, or runs"
    " it still"
)
_STREAM_ENDS: Final = tuple(STREAM_ENDS.values())


def sealing(message: str, known_ms: int) -> str:
    """The `error` that seals a run left open, with the least it ran (how long is not known:
    its `end`'s `durationMs` is null)."""
    return f"{message}; it ran for at least {known_ms} ms (start to last frame)"


_OUTCOMES: Final = (FrameType.RESULT.value, FrameType.ERROR.value)
_GONE: Final = "run {} was dropped from the history meanwhile"


class RunGone(HistoryFault):
    """The run was dropped from the history (retention) while it was read."""


class StoredRun:
    """Run `run_id` as `history` holds it; `batches` reads it (blocking: a worker thread)."""

    def __init__(self, history: History, run_id: str) -> None:
        self.history = history
        self.run_id = run_id

    def batches(self, start: int = 0) -> Iterator[list[bytes]]:
        """The run's lines from seq `start`, a stored chunk at a time, then its seal if it has
        no `end` (such a run is read from its first line: the seal's chain covers them all).
        `RunGone` (or another `HistoryFault`) when the history cannot give the rest."""
        if start:
            lines, finished = self._read(start)
            if finished:  # no seal to make: nothing before `start` is read
                while lines:
                    yield lines
                    start += len(lines)
                    lines = self._read(start)[0]
                return
        scan = _Scan()
        for lines in self._through(scan):
            if scan.seq > start:
                yield lines[max(0, len(lines) - (scan.seq - start)) :]
        if not scan.finished:
            seal = self._seal(scan, SEALED)
            if scan.seq + len(seal) > start:
                yield seal[max(0, start - scan.seq) :]

    def sealed(self, message: str) -> tuple[int, list[bytes], dict[str, Any]] | None:
        """What seals the run with `message`, read through a chunk at a time: how many lines
        are stored, the `error` (if it has no outcome) and `end` that follow them, and what
        the run's summary then says of its start and end; None when its end is stored or it
        has no line."""
        scan = _Scan()
        for _ in self._through(scan):
            pass
        if scan.finished or not scan.seq:
            return None
        start = wire_loads(scan.first)
        summary = {
            "argv": start.get("argv", []),
            "cwd": start.get("cwd"),
            "startedAt": start.get("at"),
            "status": scan.outcome or FrameType.ERROR.value,
            "exitCode": None,
            "durationMs": None,
        }
        return scan.seq, self._seal(scan, message), summary

    def _through(self, scan: _Scan) -> Iterator[list[bytes]]:
        """The run's lines from its first, a stored chunk at a time, each taken by `scan`."""
        while True:
            lines, scan.finished = self._read(scan.seq)
            if not lines:
                return
            scan.take(lines)
            yield lines

    def length(self, enough: int = 1 << 62) -> int:
        """How many frames a reader gets: the stored lines, and the seal's when the run's
        `end` was never stored (such a run is read through, a chunk at a time, unless it
        stores `enough` lines already)."""
        extent = self.history.extent(self.run_id)
        if extent is None:
            raise RunGone(_GONE.format(self.run_id))
        stored, finished = extent
        if finished or stored >= enough:
            return stored
        return sum(map(len, self.batches()))

    def _read(self, seq: int) -> tuple[list[bytes], bool]:
        """The stored chunk holding seq `seq` (from it on), whether the run's end is in."""
        found = self.history.lines(self.run_id, seq, 1)
        if found is None:
            raise RunGone(_GONE.format(self.run_id))
        return found

    def _seal(self, scan: _Scan, message: str) -> list[bytes]:
        """What `RunJournal.seal` appends, with `message`, to the lines `scan` read."""
        lines, chain, seq = [], scan.chain, scan.seq
        if scan.outcome is None:
            known = lasted_ms([scan.first, scan.last]) if seq else 0
            error = blank(ErrorFrame, message=sealing(message, known))
            lines.append(orjson.dumps(stamped_json(error, self.run_id, seq)))
            chain, seq = extend(chain, lines), seq + 1
        end = blank(EndFrame, exit_code=None, duration_ms=None, chain=chain.hex())
        lines.append(orjson.dumps(stamped_json(end, self.run_id, seq)))
        return lines


class _Scan:
    """What a read through a stored run keeps: its chain, its first and last lines, the type
    of its last outcome frame, and how far it got."""

    def __init__(self) -> None:
        self.chain, self.seq, self.finished = GENESIS, 0, False
        self.first = self.last = b""
        self.outcome: str | None = None

    def take(self, lines: list[bytes]) -> None:
        self.chain = extend(self.chain, lines)
        for line in lines:
            if not line.endswith(_STREAM_ENDS):
                kind = wire_loads(line).get("type")
                if kind in _OUTCOMES:
                    self.outcome = str(kind)
        self.first, self.last, self.seq = self.first or lines[0], lines[-1], self.seq + len(lines)
