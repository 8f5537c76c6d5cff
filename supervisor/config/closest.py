"""The "did you mean" of a problem: the closest of the words a place takes to a word it
does not, by difflib's ratio, asked of difflib only for the words that could be close."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Final


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`; did you mean "x"?` for the closest choice, or nothing."""
    return _closest(word, tuple(choices))


#: How alike a word and a choice must be for "did you mean" (difflib's ratio).
_CUTOFF: Final = 0.6


@functools.lru_cache(maxsize=256)  # the same slip in 50,000 hooks: looked up once
def _closest(word: str, choices: tuple[str, ...]) -> str:
    # Only the choices that could be close enough go to difflib (`_near`): 300,000 keys each
    # unknown in its own way took 15 s there.
    counted, lowered = _counted(choices)
    chars = set(word)
    near = [choice for choice, its in counted if _near(word, chars, choice, its)]
    close: list[str] = []
    if near:
        import difflib  # here: only a config with a problem needs it

        close = difflib.get_close_matches(word, near, n=1, cutoff=_CUTOFF)
    if not close:
        close = [lowered[word.lower()]] if word.lower() in lowered else []
    return f'; did you mean "{close[0]}"?' if close else ""


def _near(word: str, chars: set[str], choice: str, its: dict[str, int]) -> bool:
    """Whether difflib's quick_ratio of `word` and `choice` (twice the characters they
    share, as multisets, over their lengths, computed as difflib does) reaches the cutoff:
    it bounds their ratio above, so a choice below it there is never close."""
    common = chars.intersection(its)
    shared = sum(min(word.count(c), its[c]) for c in common) if common else 0
    return 2.0 * shared / (len(word) + len(choice)) >= _CUTOFF


@functools.lru_cache(maxsize=64)
def _counted(
    choices: tuple[str, ...],
) -> tuple[list[tuple[str, dict[str, int]]], dict[str, str]]:
    """Each choice and how many times each character is in it; the choices by their lower
    case."""
    counted = [(choice, {c: choice.count(c) for c in set(choice)}) for choice in choices]
    return counted, {c.lower(): c for c in choices}
