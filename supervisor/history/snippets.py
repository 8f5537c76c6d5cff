"""A search match's snippet: the line of the frame's text that holds the words, as printed.

Its spaces and tabs are kept (a run of spaces, an indent, a tab between columns), so that a
snippet never shows text that was not printed; a line longer than `SNIPPET` characters is
cut around the first term found, with `…` where it was cut, and `…` also stands for the
frame's other lines when it has several. Where a term is, is found as the index finds it:
case and accents aside, and a phrase's words with any spaces or punctuation between them
(`"needle 42"` is in `needle-42`, `"two  spaces"` in `two spaces`), each CJK character and
each symbol such as an emoji a word of its own (`words.py`: `本語` is in `日本語テキスト`),
and a Latin word whole (`need` is not in `needle`). `marks` says where in a snippet the terms
are, for the console to mark them: a phrase from its first word to its last, the spaces or
punctuation between included, an emoji with its skin tone or the rest of its sequence.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Final

from .words import CJK, ZWJ, alone, attached, tokens

#: The characters of a snippet at most, around the first term found.
SNIPPET: Final = 160
#: What the index's tokenizer (unicode61) splits a text at: anything not a letter or digit
#: (none is needed beside a word of one character, CJK or a symbol).
_SEPARATOR: Final = r"[\W_]+"
_ANY_SEPARATOR: Final = r"[\W_]*?"
#: A character that goes on a Latin word (a letter or a digit, not CJK): a term whose end is
#: a Latin word matches no part of a longer word, as the index matches whole words.
_WORD: Final = f"(?![{CJK}])[^\\W_]"


def snippet(text: str, words: Sequence[str]) -> str:
    """At most `SNIPPET` characters of the line of `text` that holds the first term found
    (its first line when none is), spaces and tabs as they are, with `…` where it was cut."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # (a text ending with its line break is one line)
    pattern = _pattern(words)
    at, hit = 0, None
    if pattern is not None:
        for n, line in enumerate(lines):
            if (hit := _find(pattern, line)) is not None:
                at = n
                break
    line = lines[at]
    before, after = ("…" if at else ""), ("…" if at + 1 < len(lines) else "")
    if len(line) <= SNIPPET:
        return before + line + after
    start = max(0, min(len(line) - SNIPPET, (hit or 0) - SNIPPET // 4))
    while start and unicodedata.combining(line[start]):  # (never an accent without its letter)
        start -= 1
    end = start + SNIPPET
    while end < len(line) and unicodedata.combining(line[end]):
        end += 1
    return ("…" if start else before) + line[start:end] + ("…" if end < len(line) else after)


def marks(text: str, words: Sequence[str]) -> list[tuple[int, int]]:
    """Where in `text` (a snippet) the terms are, as the index finds them: each
    `(start, end)` in characters (code points), in order and apart."""
    pattern = _pattern(words)
    if pattern is None:
        return []
    folded, origin = _folded(text)
    found: list[tuple[int, int]] = []
    for hit in pattern.finditer(folded):
        if hit.end() == hit.start():
            continue
        start, end = _whole(text, origin[hit.start()], origin[hit.end() - 1] + 1)
        if found and start < found[-1][1]:  # (an emoji's sequence holds the next one)
            start = found[-1][1]
        if start < end:
            found.append((start, end))
    return found


def _whole(text: str, start: int, end: int) -> tuple[int, int]:
    """`start` to `end` widened to whole characters as shown: a letter with its accents, an
    emoji with its skin tone, or with the rest of its sequence (`👩‍💻`, `1️⃣`)."""
    while start > 1 and text[start - 1] == ZWJ:
        start -= 2
        while start > 0 and attached(text[start]):
            start -= 1
    while end < len(text) and (attached(text[end]) or text[end - 1] == ZWJ):
        end += 1
    return start, end


def _pattern(words: Sequence[str]) -> re.Pattern[str] | None:
    """Each term as its words (folded) with any separators between them, one alternative."""
    terms = [_joined(tokens(_folded(w)[0])) for w in words]
    terms = [t for t in terms if t]
    return re.compile("|".join(f"(?:{t})" for t in terms)) if terms else None


def _joined(words: Sequence[str]) -> str:
    """A pattern of `words` one after the other, with what the index splits at between, and
    no letter or digit of a longer word at the ends of a Latin word."""
    if not words:
        return ""
    out = "" if alone(words[0][0]) else f"(?<!{_WORD})"
    for n, word in enumerate(words):
        if n:
            lone = alone(words[n - 1][-1]) or alone(word[0])
            out += _ANY_SEPARATOR if lone else _SEPARATOR
        out += re.escape(word)
    return out + ("" if alone(words[-1][-1]) else f"(?!{_WORD})")


def _find(pattern: re.Pattern[str], line: str) -> int | None:
    """Where in `line` (its own index) the first term is, case and accents aside."""
    folded, origin = _folded(line)
    found = pattern.search(folded)
    return None if found is None else origin[found.start()]


def _folded(text: str) -> tuple[str, list[int]]:
    """`text` case-folded and without its accents, and where each of its characters came from."""
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    origin: list[int] = []
    for at, char in enumerate(text):
        base = "".join(
            c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c)
        )
        folded = base.casefold()
        out.append(folded)
        origin += [at] * len(folded)
    return "".join(out), origin
