"""The checked documents of the config files read lately, by their bytes (what `validate`
still layers of a document with problems is `salvage.py`'s).

A command may read one file more than once: `validate FILE` checks it on its own, then
layered with the files found (for the warnings of what runs); `serve` layers its files again
for every request. Parsing and checking a file of tens of thousands of hooks against the
schema takes seconds, and the answer is the same for the same bytes under the same name. So
the parsed document and its problems are kept here, keyed by the file's name (as problems say
it), its suffix (TOML or JSON) and the SHA-256 of its bytes: a file that changed, in any way,
is a new key. A few are kept (`KEPT`), the oldest dropped first; the documents are never
changed by their readers (layering builds new mappings).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from ..core.errors import Problem
from . import files

#: How many checked documents are kept (a command layers a handful of files).
KEPT: Final = 8

_kept: OrderedDict[tuple[str, str, str], tuple[Any, tuple[Problem, ...]]] = OrderedDict()


def checked_document(
    data: bytes, path: Path, file: str, check: Callable[[Any, str], list[Problem]]
) -> tuple[Any, list[Problem]]:
    """The document in `data` (the bytes of `path`, named `file` in problems) and its
    problems: the parser's, else `check(doc, file)`'s; from the kept ones when these bytes
    were checked under this name before."""
    key = (file, path.suffix.lower(), hashlib.sha256(data).hexdigest())
    if (found := _kept.get(key)) is not None:
        _kept.move_to_end(key)
        return found[0], list(found[1])
    doc, problems = files.parse_bytes(data, path, file)
    if doc is not None:
        problems += check(doc, file)
    _kept[key] = (doc, tuple(problems))
    while len(_kept) > KEPT:
        _kept.popitem(last=False)
    return doc, problems
