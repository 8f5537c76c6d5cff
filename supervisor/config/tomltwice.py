"""Where in a TOML document a key given twice is: `tomllib` refuses the document and says only
the line and column ("Cannot overwrite a value (at line 3, column 11)", "Cannot declare
('hooks', 'when') twice"), where a config problem names a JSON pointer (`/hooks/0/name`), as
it does for a JSON key given twice.

The pointer is worked out from the text: the part before the line refused (which parses, the
refusal being the first thing wrong) says how many tables each array of tables holds so far;
the line's key, and the table header above it, are read by `tomllib` itself (a quoted key may
hold dots, brackets and equals signs). Where any of this cannot be told (a key given twice on
one line of an inline table, a header inside a multi-line string), there is no pointer: the
caller says tomllib's words at the document's root, as for any other TOML error.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from typing import Any, Final

_AT: Final = re.compile(r"\(at line (\d+), column \d+\)$")
_TWICE: Final = ("Cannot overwrite a value", "Cannot declare")
_END: Final = 0  # (the value put after a key read alone, where its path ends)
#: How many places a key may end at that are tried on a line (each an `=` or a `]`, each a
#: parse of the line up to it): a hostile file's key of a million `=` in quotes, given twice,
#: would otherwise take a parse per `=`, each as long as the line.
_TRIES: Final = 64


def twice_at(text: str, said: str) -> tuple[list[str | int], int] | None:
    """The path (keys and array indexes) of the key that `said`, tomllib's refusal of `text`,
    says is given twice, and its line; None when `said` says something else or the key's
    place cannot be told."""
    found = _AT.search(said)
    if not said.startswith(_TWICE) or found is None:
        return None
    line = int(found.group(1))
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return None
    try:
        before = tomllib.loads("\n".join(lines[: line - 1]))
    except ValueError:
        return None
    if said.startswith("Cannot declare"):
        table: list[str] | None = []
        keys = _header_keys(lines[line - 1])
    else:
        table, keys = _table_above(lines[: line - 1]), _line_keys(lines[line - 1])
    if table is None or not keys:
        return None
    return _indexed(before, [*table, *keys]), line


def _table_above(lines: list[str]) -> list[str] | None:
    """The keys of the last table header in `lines` ([] for none: the root table)."""
    for raw in reversed(lines):
        if raw.lstrip().startswith("["):
            return _header_keys(raw)
    return []


def _header_keys(raw: str) -> list[str] | None:
    """The keys of a table header line (`[a."b.c"]`, `[[hooks]]`, a comment after it)."""
    text = raw.strip()
    inner = text[2:] if text.startswith("[[") else text[1:]
    for end in itertools.islice((i for i, char in enumerate(inner) if char == "]"), _TRIES):
        if (keys := _keys(inner[:end])) is not None:
            return keys
    return None


def _line_keys(raw: str) -> list[str] | None:
    """The keys of a `key = value` line (`a.b`, `"x=y"`)."""
    for end in itertools.islice((i for i, char in enumerate(raw) if char == "="), _TRIES):
        if (keys := _keys(raw[:end])) is not None:
            return keys
    return None


def _keys(text: str) -> list[str] | None:
    """The path of the dotted key `text`, read by tomllib; None when it is not one."""
    try:
        doc: Any = tomllib.loads(f"{text} = {_END}")
    except ValueError:
        return None
    path: list[str] = []
    while isinstance(doc, dict) and len(doc) == 1:
        key, doc = next(iter(doc.items()))
        path.append(key)
    return path if doc == _END and path else None


def _indexed(doc: Any, keys: list[str]) -> list[str | int]:
    """`keys` with the index of the last table of each array of tables on their way, as
    `doc` (the document up to the key) holds them."""
    path: list[str | int] = []
    for key in keys:
        if isinstance(doc, list) and doc and isinstance(doc[-1], dict):
            path.append(len(doc) - 1)
            doc = doc[-1]
        path.append(key)
        doc = doc.get(key) if isinstance(doc, dict) else None
    return path
