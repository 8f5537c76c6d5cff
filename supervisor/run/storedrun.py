"""A run the history holds, read back a chunk at a time (its downloads): what a reader holds at
once is one stored chunk (`CHUNK_LINES` lines), never the run, whatever the run's size.

Its lines come as they were sent; a run whose `end` was never stored is sealed at the end, as
`RunJournal.restored` seals it (an `error` if it has no outcome, then an `end` whose chain
covers every line before it), so `runs verify` passes on what is read. Each read is one
snapshot of the history: a run that another process still records is read as far as it has
gone when its last chunk is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

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
from ..history.store import History, HistoryFault

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


class RunGone(HistoryFault):
    """The run was dropped from the history (retention) while it was read."""


class StoredRun:
    """Run `run_id` as `history` holds it; `batches` reads it (blocking: a worker thread)."""

    def __init__(self, history: History, run_id: str) -> None:
        self.history = history
        self.run_id = run_id

    def batches(self) -> Iterator[list[bytes]]:
        """The run's lines, a stored chunk at a time, then its seal if it has no `end`.
        `RunGone` (or another `HistoryFault`) when the history cannot give the rest."""
        chain, seq, outcome = GENESIS, 0, False
        first = last = b""
        while True:
            found = self.history.lines(self.run_id, seq, 1)
            if found is None:
                raise RunGone(f"run {self.run_id} was dropped from the history meanwhile")
            lines, finished = found
            if not lines:
                break
            chain = extend(chain, lines)
            outcome = outcome or any(_is_outcome(line) for line in lines)
            first, last, seq = first or lines[0], lines[-1], seq + len(lines)
            yield lines
        if not finished:
            yield self._seal(seq, chain, outcome, lasted_ms([first, last]) if seq else 0)

    def _seal(self, seq: int, chain: bytes, outcome: bool, known: int) -> list[bytes]:
        """What `RunJournal.seal` appends to lines `0..seq-1` whose chain is `chain`."""
        lines = []
        if not outcome:
            error = blank(ErrorFrame, message=sealing(SEALED, known))
            lines.append(orjson.dumps(stamped_json(error, self.run_id, seq)))
            chain, seq = extend(chain, lines), seq + 1
        end = blank(EndFrame, exit_code=None, duration_ms=None, chain=chain.hex())
        lines.append(orjson.dumps(stamped_json(end, self.run_id, seq)))
        return lines


def _is_outcome(line: bytes) -> bool:
    return not line.endswith(_STREAM_ENDS) and wire_loads(line).get("type") in _OUTCOMES
