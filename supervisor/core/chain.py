"""A run's hash chain: each frame line, as sent, extends it (SHA-256 over the previous hash
and the line), from 32 zero bytes; the `end` frame carries the chain of the lines before it
(`chain`, hex). So a download of a run's frames, or a stored run, can be checked: one changed
byte anywhere changes the chain. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

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
    stored = None if reference is None else (lambda _, seq: _at(reference, seq))
    checking = ChainCheck(stored)
    for line in lines:
        if (problem := checking.line(line)) is not None:
            return problem
    return checking.finish()


def _at(lines: Sequence[bytes], index: int) -> bytes | None:
    return lines[index] if index < len(lines) else None


#: A line longer than this is not held whole: it is hashed as it comes (`ChainCheck`).
LINE_HELD: Final = 1024 * 1024

#: How every frame line starts as the journal writes it (`frames.ENVELOPE_KEYS`, in order):
#: all that is read of a line too long to hold.
_ENVELOPE: Final = re.compile(
    rb'\{"runId":"([0-9A-Za-z_.-]{1,128})","seq":(0|[1-9][0-9]{0,18})[,}]'
)
_HEAD: Final = 256

#: The same run's line at a seq, by the run's id, from elsewhere (the history); None: none.
Stored = Callable[[str, int], "bytes | None"]


class ChainCheck:
    """A run's frame lines checked as they come, in memory bounded by `LINE_HELD`, whatever
    their length: each line given whole (`line`) or in pieces (`piece`…, `end_line`), then
    `finish` says whether they are intact, as `check` does. A line of blanks only is no frame
    (skipped), and its trailing `\\r`s are not its own (as a file saved with CRLF has them).
    A line up to `LINE_HELD` is parsed; a longer one is hashed as it comes and known by its
    envelope (its first bytes, as the journal writes every frame), and is never an end frame.
    `stored` names the first frame that differs from the same run kept elsewhere."""

    def __init__(self, stored: Stored | None = None) -> None:
        self.count = 0
        #: The first frame's `runId` (None before it, or when it names none).
        self.run_id: str | None = None
        self._stored = stored
        self._chain = self._before = GENESIS  # (_before: the chain an end frame holds)
        self._last: dict[str, object] = {}
        self._held = bytearray()
        self._crs = 0  # (the `\\r`s last given, not known yet to end the line)
        self._blank = True
        #: The hashes of a line too long to hold (its chain's, then its own when compared
        #: with a stored run's; none when its first bytes are no frame's); None: it is held.
        self._long: list[Any] | None = None
        self._differs: int | None = None

    def line(self, line: bytes) -> str | None:
        """The next line, whole; a sentence when the lines are already known to be changed."""
        self.piece(line)
        return self.end_line()

    def piece(self, data: bytes) -> None:
        """More of the current line."""
        if self._crs:
            data, self._crs = b"\r" * self._crs + data, 0
        kept = data.rstrip(b"\r")
        if len(data) - len(kept) > _HEAD:  # (so many are the line's own, not a CRLF's)
            kept = data
        self._crs = len(data) - len(kept)
        if not kept:
            return
        if self._blank and kept.strip():
            self._blank = False
        if self._long is None and len(self._held) + len(kept) <= LINE_HELD:
            self._held += kept
            return
        if self._long is None:
            head = (bytes(self._held[:_HEAD]) + kept[:_HEAD])[:_HEAD]
            self._long = []
            if _ENVELOPE.match(head):  # (else no frame: the rest is only read past)
                self._long.append(hashlib.sha256(self._chain))
                if self._stored is not None:
                    self._long.append(hashlib.sha256())
            for h in self._long:
                h.update(self._held)
            self._held = bytearray(head)
        for h in self._long:
            h.update(kept)

    def end_line(self) -> str | None:
        """The current line is whole; a sentence when the lines are known to be changed."""
        held, self._held, self._crs = bytes(self._held), bytearray(), 0
        long, self._long = self._long, None
        if self._blank:
            return None
        self._blank = True
        self.count += 1
        number, self._before = self.count, self._chain
        frame: object
        own: bytes | None
        if long is None:
            self._chain, own = hashlib.sha256(self._chain + held).digest(), held
            try:
                frame = wire_loads(held)
            except ValueError:
                frame = None
            seq = frame.get("seq") if isinstance(frame, dict) else None
            run_id = frame.get("runId") if isinstance(frame, dict) else None
        else:
            envelope = _ENVELOPE.match(held) if long else None
            self._chain = long[0].digest() if long else self._chain
            own = long[1].digest() if len(long) > 1 else None
            frame = {} if envelope else None
            seq = int(envelope[2]) if envelope else None
            run_id = envelope[1].decode() if envelope else None
        if number == 1 and isinstance(run_id, str):
            self.run_id = run_id
        self._compare(number - 1, own, hashed=long is not None)
        if not isinstance(frame, dict):
            return f"line {number} is not a JSON frame"
        if seq != number - 1:
            said = "no seq" if seq is None else f"seq {seq}"
            return (
                f"line {number} holds {said}, where seq {number - 1} belongs: a frame was"
                " removed, added or moved there"
            )
        self._last = frame
        return None

    def _compare(self, seq: int, own: bytes | None, *, hashed: bool) -> None:
        if self._stored is None or self.run_id is None or self._differs is not None or not own:
            return
        stored = self._stored(self.run_id, seq)
        if stored is not None and own != (hashlib.sha256(stored).digest() if hashed else stored):
            self._differs = seq

    def finish(self) -> str | None:
        """None when the lines given are intact; else how they were changed, as a sentence."""
        last = self._last
        if last.get("type") != "end" or not last.get("chain"):
            return (
                f"the last line ({self.count}) is not an end frame with a chain: the run had"
                " not ended, or the frames were cut short"
            )
        if self._before.hex() == last["chain"]:
            return None
        if (seq := self._differs) is not None:
            return f"frame seq {seq} (line {seq + 1}) differs from the stored run"
        return (
            f"the frames do not give the chain their end frame holds: a byte was changed in one"
            f" of seq 0..{self.count - 1} (nothing here to compare them with says which)"
        )
