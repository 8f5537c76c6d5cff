"""A run's hash chain: each frame line, as sent, extends it (SHA-256 over the previous hash
and the line), from 32 zero bytes; the `end` frame carries the chain of the lines before it
(`chain`, hex). So a download of a run's frames, or a stored run, can be checked: one changed
byte anywhere changes the chain. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Final

from .jsontext import wire_loads

#: Where every chain starts.
GENESIS: Final = bytes(32)


def extend(previous: bytes, lines: Iterable[bytes]) -> bytes:
    """The chain after `lines`, from `previous`."""
    sha256 = hashlib.sha256
    for line in lines:
        previous = sha256(previous + line).digest()
    return previous


def check(lines: Sequence[bytes], reference: Sequence[bytes] | None = None) -> str | None:
    """None when `lines` (a run's frame lines, its `end` last) give the chain their `end`
    holds; else where and how they were changed, as a sentence. `reference` (the same run's
    lines from elsewhere: the history) names the first frame that differs."""
    last: dict[str, object] = {}  # (the end frame, when it is last: the only one kept)
    for number, line in enumerate(lines, 1):
        try:
            frame = wire_loads(line)
        except ValueError:
            return f"line {number} is not a JSON frame"
        if not isinstance(frame, dict):
            return f"line {number} is not a JSON frame"
        if frame.get("seq") != number - 1:
            seq = frame.get("seq")
            held = "no seq" if seq is None else f"seq {seq}"
            return (
                f"line {number} holds {held}, where seq {number - 1} belongs: a frame was"
                " removed, added or moved there"
            )
        last = frame
    if last.get("type") != "end" or not last.get("chain"):
        return (
            f"the last line ({len(lines)}) is not an end frame with a chain: the run had not"
            " ended, or the frames were cut short"
        )
    if extend(GENESIS, lines[:-1]).hex() == last["chain"]:
        return None
    if reference is not None:
        for seq, (ours, theirs) in enumerate(zip(lines, reference, strict=False)):
            if ours != theirs:
                return f"frame seq {seq} (line {seq + 1}) differs from the stored run"
    return (
        f"the frames do not give the chain their end frame holds: a byte was changed in one"
        f" of seq 0..{len(lines) - 1} (nothing here to compare them with says which)"
    )
