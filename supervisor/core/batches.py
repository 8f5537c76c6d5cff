"""Runs of lines cut into batches bounded in bytes (and, where asked, in lines): what one
stored chunk of a run holds (`history/store.py`), one piece of a download and one message of
a stored run's replay (`service/`). Whoever holds a batch at once, a reader that reads slowly
among them, holds at most that, however long the run's lines are."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def bounded(
    lines: Sequence[bytes], most_bytes: int, most_lines: int | None = None
) -> Iterator[Sequence[bytes]]:
    """`lines` in consecutive slices of at most `most_bytes` bytes counting a newline after
    each line, and at most `most_lines` lines; each slice has at least one line (a longer
    line is a slice by itself)."""
    start = size = 0
    for at, line in enumerate(lines):
        if size and (size + len(line) + 1 > most_bytes or at - start == most_lines):
            yield lines[start:at]
            start, size = at, 0
        size += len(line) + 1
    if start < len(lines):
        yield lines[start:]
