"""A run's stored frames by seq, and which of them hold the pieces of one long output line.

A script's stdout or stderr line over `MAX_OUTPUT_LINE` bytes becomes several frames of its
stream, each a piece of it, and nothing in a frame says so: a frame whose text is at least
that many bytes of UTF-8 is taken for a piece the next frame of its stream goes on with (as
the console reads them). A line of exactly that many bytes, or one whose bytes that are not
UTF-8 grew to that many as U+FFFD, is taken for one too. Each frame is indexed alone, so a
match is in one piece: `line_of` says which frames hold the whole line, for a reader to join.
"""

from __future__ import annotations

import sqlite3
import zlib
from typing import Any, Final

from ..core.frames import MAX_OUTPUT_LINE, FrameType
from ..core.jsontext import JsonError, wire_loads

#: The frame types whose long lines are cut in pieces.
STREAMS: Final = frozenset({FrameType.STDOUT.value, FrameType.STDERR.value})
#: The frames of other types looked past between two pieces of one line (the other
#: stream's, a log's: what the script wrote meanwhile), at most.
_GAP: Final = 4096


class Frames:
    """A run's stored frame lines, read a chunk at a time and kept for the next."""

    def __init__(self, db: sqlite3.Connection, key: int) -> None:
        self.db, self.key = db, key
        self._chunks: dict[int, list[bytes]] = {}  # by first seq
        self._frames: dict[int, Any] = {}  # parsed, by seq
        self._lines: dict[int, dict[str, int] | None] = {}  # `line_of`, by seq

    def line(self, seq: int) -> bytes | None:
        """The stored line of frame `seq` (None: not stored)."""
        if seq < 0:
            return None
        row = self.db.execute(
            "SELECT first FROM chunks WHERE run = ? AND first <= ? ORDER BY first DESC LIMIT 1",
            (self.key, seq),
        ).fetchone()
        if row is None:
            return None
        first = row[0]
        if first not in self._chunks:
            packed, data = self.db.execute(
                "SELECT packed, data FROM chunks WHERE run = ? AND first = ?", (self.key, first)
            ).fetchone()
            self._chunks[first] = (zlib.decompress(data) if packed else bytes(data)).split(b"\n")
        lines = self._chunks[first]
        return lines[seq - first] if seq - first < len(lines) else None

    def frame(self, seq: int) -> Any:
        """Frame `seq` parsed (None: not stored, or not JSON)."""
        if seq not in self._frames:
            line = self.line(seq)
            try:
                self._frames[seq] = None if line is None else wire_loads(line)
            except JsonError:
                self._frames[seq] = None
        return self._frames[seq]


def line_of(frames: Frames, seq: int) -> dict[str, int] | None:
    """Where the line frame `seq` is a piece of is: `{from, to, piece, pieces}` (the seqs of
    its first and last pieces, which of them `seq` is from 1, how many); None when the frame
    is no piece of a longer line."""
    if seq in frames._lines:
        return frames._lines[seq]
    frame = frames.frame(seq)
    stream = frame.get("type") if isinstance(frame, dict) else None
    if stream not in STREAMS:
        return None
    seqs = [seq]
    while (before := _beside(frames, seqs[0], stream, -1)) is not None and _long(frames, before):
        seqs.insert(0, before)
    while _long(frames, seqs[-1]) and (after := _beside(frames, seqs[-1], stream, 1)) is not None:
        seqs.append(after)
    found = None
    if len(seqs) > 1:
        found = {"from": seqs[0], "to": seqs[-1], "pieces": len(seqs)}
    for n, each in enumerate(seqs, 1):
        frames._lines[each] = None if found is None else {**found, "piece": n}
    return frames._lines[seq]


def _beside(frames: Frames, seq: int, stream: str, step: int) -> int | None:
    """The seq of the frame of `stream` next to `seq` (before it: `step` -1), if near."""
    for at in range(seq + step, seq + step * (_GAP + 2), step):
        line = frames.line(at)
        if line is None:
            return None
        if len(line) < MAX_OUTPUT_LINE and stream.encode() not in line:
            continue  # (short, and of no stream of this name: not worth parsing)
        frame = frames.frame(at)
        if isinstance(frame, dict) and frame.get("type") == stream:
            return at
    return None


def _long(frames: Frames, seq: int) -> bool:
    """Whether frame `seq` is as long as a piece that the next one goes on with."""
    line = frames.line(seq)
    if line is None or len(line) < MAX_OUTPUT_LINE:
        return False
    frame = frames.frame(seq)
    text = frame.get("text") if isinstance(frame, dict) else None
    return isinstance(text, str) and len(text.encode(errors="replace")) >= MAX_OUTPUT_LINE
