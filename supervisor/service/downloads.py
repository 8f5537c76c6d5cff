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

What a download holds at once is bounded by the run's own budget (`[runs] runBytes`): the text
is made from the lines the journal holds, in pieces of `PIECE_LINES` lines.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from ..core.frames import OUTPUT_TYPES, FrameType
from ..core.jsontext import dumps, wire_loads

#: The downloads by the last segment of their path, each with its content type.
KINDS: Final = {
    "output.txt": b"text/plain; charset=utf-8",
    "frames.ndjson": b"application/x-ndjson",
}
#: Lines joined into one piece of a download.
PIECE_LINES: Final = 4096
_OUTPUT: Final = frozenset(t.value for t in OUTPUT_TYPES)


def frames_pieces(lines: Sequence[bytes]) -> Iterator[bytes]:
    """`frames.ndjson`: the lines as they are, a newline after each."""
    for at in range(0, len(lines), PIECE_LINES):
        yield b"".join(line + b"\n" for line in lines[at : at + PIECE_LINES])


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


def output_pieces(lines: Sequence[bytes]) -> Iterator[bytes]:
    """`output.txt`: each output frame's line of text, a newline after each."""
    for at in range(0, len(lines), PIECE_LINES):
        texts = (output_line(wire_loads(line)) for line in lines[at : at + PIECE_LINES])
        yield "".join(f"{t}\n" for t in texts if t is not None).encode()


def download(kind: str, lines: Sequence[bytes]) -> list[bytes]:
    """The download `kind` (a key of `KINDS`) of a run's lines, in pieces."""
    make = output_pieces if kind == "output.txt" else frames_pieces
    return [piece for piece in make(lines) if piece]


def filename(run_id: str, kind: str) -> bytes:
    """The file name a browser saves the download as: `run-ID-output.txt`."""
    safe = "".join(c for c in run_id if c.isalnum() or c in "-_")[:64]
    return f'attachment; filename="run-{safe}-{kind}"'.encode()
