"""What the search index takes for a word, beyond its tokenizer (unicode61, which splits at
anything not a letter or digit): each character of a script written without spaces between
its words (Chinese, Japanese, Korean: `CJK`) is a word of its own, and so is each symbol such
as an emoji, which the tokenizer would drop.

A text is `spaced` before it is indexed and a query's term before it is looked for: a CJK
character gets a space on each side, so that a term `日本語` is the phrase of its three
characters and finds them anywhere in `日本語テキスト`, as a substring; a symbol (Unicode's
"other symbol", but the characters that draw boxes, blocks and braille spinners) becomes one
private-use character, which the tokenizer keeps as a word (`🚀` is U+F0000 + U+1F680), and an
emoji's skin tone and its joiners are spaces. Latin and the other scripts are as they were.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Final, NamedTuple

#: The characters each a word of their own: Hangul jamo, CJK radicals, iteration marks,
#: kana, Hangul, CJK ideographs (and their extensions), half-width kana and Hangul.
CJK: Final = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c"
    "\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uffdc\U00020000-\U0003134f"
)
#: Where symbols that are words may be (each is one if it is an "other symbol", `_symbol`).
_SYMBOLS: Final = (
    "\u00a6-\u00ae\u00b0\u2100-\u24ff\u25a0-\u27ff\u2900-\u2bff\u3012\u3020\U0001f000-\U0001faff"
)
#: What stands between an emoji's parts: its skin tone, a joiner, its presentation selector.
_JOINERS: Final = "\U0001f3fb-\U0001f3ff\u200d\ufe0e\ufe0f\u20e3"
#: The joiner of an emoji's sequence (`👩‍💻`: woman, joiner, laptop).
ZWJ: Final = "\u200d"
#: Where a symbol's word is: a private-use plane, which the tokenizer keeps as letters.
_PRIVATE: Final = 0xF0000


class _Patterns(NamedTuple):
    attached: re.Pattern[str]
    split: re.Pattern[str]
    #: A word of a text as the index splits it: a CJK character, a symbol's, or a run of
    #: letters and digits (`[^\W_]`) of no CJK character.
    token: re.Pattern[str]


@functools.cache
def _patterns() -> _Patterns:
    """Compiled at first use, not at import: their classes of CJK and symbol ranges take
    about 5 ms to compile, which every `exec` paid (the history's writer imports this),
    though only a line holding such a character needs them."""
    return _Patterns(
        re.compile(f"[{_JOINERS}]"),
        re.compile(f"([{CJK}])|([{_JOINERS}])|[{_SYMBOLS}]"),
        re.compile(f"[{CJK}]|[{_SYMBOLS}]|(?:(?![{CJK}])[^\\W_])+"),
    )


def spaced(text: str) -> str:
    """`text` as the index is given it: each CJK character spaced out, each symbol its word."""
    if text.isascii():
        return text
    split = _patterns().split
    return text if split.search(text) is None else split.sub(_part, text)


def _part(found: re.Match[str]) -> str:
    char = found.group(0)
    if found.group(1) is not None:
        return f" {char} "
    if found.group(2) is not None:
        return " "
    return f" {chr(_PRIVATE + ord(char))} " if _symbol(char) else char


def _symbol(char: str) -> bool:
    return unicodedata.category(char) == "So"


def attached(char: str) -> bool:
    """Whether `char` is shown as part of the character before it: an accent, an emoji's skin
    tone, joiner or presentation selector."""
    return _patterns().attached.match(char) is not None or unicodedata.combining(char) != 0


def alone(char: str) -> bool:
    """Whether `char` is a word of its own (a CJK character, or a symbol that is a word)."""
    found = _patterns().split.fullmatch(char)
    if found is None or found.group(2) is not None:
        return False
    return found.group(1) is not None or _symbol(char)


def tokens(text: str) -> list[str]:
    """The words of `text` as the index takes them, each as it is in `text`."""
    return [t for t in _patterns().token.findall(text) if len(t) > 1 or t.isalnum() or alone(t)]
