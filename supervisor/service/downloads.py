"""A run's downloads: `GET /v1/runs/{runId}/output.txt` and `/v1/runs/{runId}/frames.ndjson`.
Pure: no trio, no socket; `plain.py` finds the run and sends what this makes.

Both are made from the run's journal (in memory, or as the history stored it), never from what
a console drew: every line the run kept, as far as it has gone when the download is asked.

- `frames.ndjson`: the frames' JSON lines exactly as they were sent (and stored), each ending
  in a newline: what `runs verify` checks.
- `output.txt`: the script's output as text, one line per output frame in seq order: a
  `stdout` or `stderr` frame's text as the script wrote it (escape sequences, colour codes
  included), a `log` frame as `[level] message` (and its attributes as JSON), an `emit` frame
  as its value's JSON.

A download is made a piece at a time as it is sent, never whole: from a run in memory, of
`PIECE_LINES` of the lines it holds; from a run only the history holds, of each stored chunk
as it is read (`run/storedrun.py`). What one download holds at once is a piece, whatever the
run's size; its length is not known before it ends, so it is sent chunked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from ..core.batches import bounded
from ..core.frames import OUTPUT_TYPES, FrameType
from ..core.jsontext import dumps, wire_loads

#: The downloads by the last segment of their path, each with its content type.
KINDS: Final = {
    "output.txt": b"text/plain; charset=utf-8",
    "frames.ndjson": b"application/x-ndjson",
}
#: Lines joined into one piece of a download, and their bytes at most (a longer line is a
#: piece by itself): a client that reads slowly holds a piece in the server, so a piece is
#: bounded in bytes too (4,096 lines of 60 KB were a run's whole 54 MB, for each client).
PIECE_LINES: Final = 4096
PIECE_BYTES: Final = 256 * 1024
_OUTPUT: Final = frozenset(t.value for t in OUTPUT_TYPES)


def frames_piece(lines: Sequence[bytes]) -> bytes:
    """`frames.ndjson`: the lines as they are, a newline after each."""
    return b"".join(line + b"\n" for line in lines)


def output_line(frame: dict[str, Any]) -> str | None:
    """One output frame as a line of text (None for a frame that is not output)."""
    kind = frame.get("type")
    if kind not in _OUTPUT:
        return None
    if kind == FrameType.LOG:
        attrs = frame.get("attrs")
        extra = f" {dumps(attrs).decode()}" if attrs else ""
        return f"[{frame.get('level')}] {frame.get('message')}{extra}"
    if kind == FrameType.EMIT:
        return dumps(frame.get("value")).decode()
    return str(frame.get("text", ""))


def output_piece(lines: Sequence[bytes]) -> bytes:
    """`output.txt`: each output frame's line of text, a newline after each."""
    texts = (output_line(wire_loads(line)) for line in lines)
    return "".join(f"{t}\n" for t in texts if t is not None).encode()


def in_pieces(lines: Sequence[bytes], end: int | None = None) -> Iterator[Sequence[bytes]]:
    """A run's lines held in memory (the first `end`: as far as it had gone when asked, its
    journal not copied), `PIECE_LINES` at a time."""
    end = len(lines) if end is None else end
    for at in range(0, end, PIECE_LINES):
        yield lines[at : min(at + PIECE_LINES, end)]


def download(kind: str, batches: Iterable[Sequence[bytes]]) -> Iterator[bytes]:
    """The download `kind` (a key of `KINDS`) of a run's lines, a piece per batch of lines
    (cut at `PIECE_BYTES`; empty pieces left out), each made as it is asked for."""
    make = output_piece if kind == "output.txt" else frames_piece
    parts = (part for batch in batches for part in bounded(batch, PIECE_BYTES))
    return (piece for part in parts if (piece := make(part)))


def filename(run_id: str, kind: str) -> bytes:
    """The file name a browser saves the download as: `run-ID-output.txt`."""
    safe = "".join(c for c in run_id if c.isalnum() or c in "-_")[:64]
    return f'attachment; filename="run-{safe}-{kind}"'.encode()
