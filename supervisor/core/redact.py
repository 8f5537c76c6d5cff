"""Redaction: every occurrence of a secret's value in what the supervisor writes or sends
becomes `[secret NAME]`.

Pure: no trio, no I/O. A `Redactor` is built once per run from the run's secret values (and
once for the supervisor, from its own hooks' secrets) and applied where frames are stamped
(the run journal), where events are published (the bus) and to the server's log lines, so
that nothing made elsewhere can forget it.

What is looked for, for each secret: its value; its value as a JSON string holds it (quotes
and backslashes escaped, non-ASCII as is or as `\\uXXXX`), so a hook that prints JSON is
caught too; and, for a value of several lines, each line of at least `MIN_SECRET_CHARS`
characters, since output frames are made line by line. A text cut short, where the cut
is marked `CUT` (a start failure's report, cut by the spawner), loses whatever it ends with
before the mark that begins a secret's value, down to one character: what a cut took the
rest of is not given away by its start. What is not caught: a value cut in pieces some other
way, encoded (base64, hex, URL-quoted), or shorter lines of a multi-line value. Field names
of a frame itself (`type`, `text`, …) are never rewritten; keys inside a value (an `emit`, a
`result`) are.

The cost where no secret occurs is one substring search per needle over the frame's encoded
line (`seen_in`); only a frame that holds one is taken apart and encoded again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from .passenv import MIN_SECRET_CHARS

#: What a text cut short ends with (`runners/protocol.py`'s `fail`); a test keeps the two in
#: step.
CUT: Final = " [...]"
#: At most this many of a text's cuts are looked at (its own takes one; the rest bound work).
_CUTS: Final = 8


def mark(name: str) -> str:
    """What a secret's value is replaced with."""
    return f"[secret {name}]"


def _forms(value: str) -> list[str]:
    """The strings that give `value` away: it, its JSON-escaped forms, its long lines."""
    forms = [value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]]
    if "\n" in value or "\r" in value:
        forms += [line for line in value.splitlines() if len(line) >= MIN_SECRET_CHARS]
    return list(dict.fromkeys(forms))


class Redactor:
    """Replaces every secret's value (`secrets`: name → value) with `mark(name)`."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        self.secrets: Final = dict(secrets or {})
        needles: dict[str, str] = {}
        for name, value in self.secrets.items():
            for form in _forms(value):
                needles.setdefault(form, mark(name))
        # Longest first: a secret that contains another is replaced whole.
        ordered = sorted(needles, key=len, reverse=True)
        self._marks = needles
        self._text = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        encoded: list[str] = []
        walk_all = False  # a needle orjson cannot write (a lone surrogate from the environment)
        for needle in ordered:
            try:
                encoded.append(orjson.dumps(needle)[1:-1].decode())
            except orjson.JSONEncodeError:
                walk_all = True
        #: `seen_in`, as cheap as it gets (the journal calls it on every frame); None when
        #: there is no secret.
        self.line_search: Callable[[bytes], bool] | None = None
        if walk_all:
            self.line_search = _always
        elif encoded:
            self.line_search = _finder(tuple(dict.fromkeys(encoded)))

    @property
    def active(self) -> bool:
        return self._text is not None

    def __or__(self, other: Redactor) -> Redactor:
        if not other.active:
            return self
        if not self.active:
            return other
        return Redactor({**self.secrets, **other.secrets})

    def text(self, text: str) -> str:
        """`text` with every secret replaced (and, before a `CUT`, a secret's start)."""
        pattern = self._text
        if pattern is None:
            return text
        if pattern.search(text) is not None:
            text = pattern.sub(lambda m: self._marks[m.group()], text)
        return self._uncut(text) if CUT in text else text

    def _uncut(self, text: str) -> str:
        """`text` without the start of a secret's value right before each of its first
        `_CUTS` cuts (the longest such start, one character or more)."""
        pieces, rest = [], text
        for _ in range(_CUTS):
            head, cut, rest = rest.partition(CUT)
            if not cut:
                pieces.append(head)
                return "".join(pieces)
            pieces += [head[: len(head) - self._started(head)], cut]
        return "".join([*pieces, rest])

    def cut(self, text: str, *, start: bool = False, end: bool = False) -> str:
        """`text` redacted, where the supervisor cut it out of something longer: without the
        end of a secret's value it starts with (`start`: what came before was cut off) and
        the start of one it ends with (`end`: what came after was), one character or more.
        A cut never gives away the part of a secret it kept."""
        text = self.text(text)
        if self._text is None:
            return text
        if end:
            text = text[: len(text) - self._started(text)]
        if start:
            text = text[self._ended(text) :]
        return text

    def _ended(self, tail: str) -> int:
        """How many characters `tail` starts with that end a secret's value (a form of it)."""
        longest = 0
        for needle in self._marks:
            for size in range(min(len(needle) - 1, len(tail)), longest, -1):
                if tail.startswith(needle[-size:]):
                    longest = size
                    break
        return longest

    def _started(self, head: str) -> int:
        """How many characters `head` ends with that begin a secret's value (a form of it)."""
        longest = 0
        for needle in self._marks:
            for size in range(min(len(needle) - 1, len(head)), longest, -1):
                if head.endswith(needle[:size]):
                    longest = size
                    break
        return longest

    def value(self, obj: Any) -> Any:
        """A JSON value with every string (keys too) redacted; the rest as it is."""
        if self._text is None:
            return obj
        return self._value(obj)

    def _value(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {
                self.text(k) if isinstance(k, str) else k: self._value(v) for k, v in obj.items()
            }
        if isinstance(obj, list | tuple):
            return [self._value(v) for v in obj]
        return obj

    def seen_in(self, line: bytes) -> bool:
        """Whether a frame's encoded line (orjson's form) may hold a secret. False means it
        holds none; True that the frame must be redacted (`fields`)."""
        search = self.line_search
        return search is not None and search(line)

    def fields(self, wire: Mapping[str, Any]) -> dict[str, Any]:
        """A frame's wire form with its values redacted and its own field names kept."""
        return {key: self.value(v) for key, v in wire.items()}


def _always(line: bytes) -> bool:
    return True


def _finder(needles: tuple[str, ...]) -> Callable[[bytes], bool]:
    """Whether a line holds one of `needles`. `str.__contains__` on the decoded line, one
    needle after another, is several times faster than a regular expression or a search in
    the bytes (measured: bench/redaction.py)."""

    def seen(line: bytes) -> bool:
        text = line.decode()
        for needle in needles:  # noqa: SIM110 - any() and its generator cost more
            if needle in text:
                return True
        return False

    return seen


#: The redactor of a run without secrets: it changes nothing, at no cost.
NO_SECRETS: Final = Redactor()
