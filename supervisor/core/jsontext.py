"""JSON in and out of the supervisor: one depth limit in, one encoding policy out.

Pure: no trio, no I/O. Everything that comes from outside as JSON text (a client's request, a
hook's stdout, a script's frames channel, a config file, a flag or a file a command reads) is
read by `loads`, which refuses what would hurt later: nesting deeper than `MAX_DEPTH`, integers
longer than Python converts, anything that makes the parser raise something other than a clear
error. A leading UTF-8 byte order mark (what some editors save) is ignored, as JSON allows.
Everything that goes out (frames, events, messages) is written by `dumps`, which never fails
for a JSON value:

- a lone surrogate (`"\\ud800"` in a request or a hook's output, or a Python string a script
  returned) is replaced by U+FFFD, so every frame is valid UTF-8;
- an integer past 64 bits is written exactly (the slow path), one too long to print is
  written as a string saying how long it was;
- a value nested deeper than `MAX_DEPTH` (only code of ours could build one) is cut there;
- a number that is not finite (`1e999` reads as infinity) is written as `null`, as JSON has
  no infinity; `NaN` and `Infinity` are not JSON and `loads` refuses them.

What the supervisor reads back of what `dumps` wrote (a frame's line, an event, a run's
summary) is read by `wire_loads`, which gives an integer past 64 bits back exactly, as
written (orjson alone reads one as a float, or refuses it).

The fast path is orjson on the value as it is; the policy only costs when it applies.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, Final

import orjson

from .errors import HooksError

#: Containers inside containers, at most. Deep enough for any real document; shallow enough
#: that every recursive thing downstream (schemas, encoders, views) stays far from a limit.
MAX_DEPTH: Final = 128
#: What a lone surrogate becomes on the wire.
REPLACEMENT: Final = "\ufffd"
#: A UTF-8 byte order mark, as text and as bytes: ignored at the start of any JSON read.
BOM: Final = "\ufeff"
BOM_BYTES: Final = BOM.encode()

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_CUT: Final = "[nested too deeply]"


class JsonError(HooksError, ValueError):
    """Text that is not JSON we accept; the message says why, in words."""


def loads(text: str | bytes) -> Any:
    """The JSON value in `text`, or `JsonError` naming why not (malformed, nested deeper
    than `MAX_DEPTH`, an integer too long to convert). Never raises anything else. One
    leading byte order mark is ignored."""
    text = text.removeprefix(BOM) if isinstance(text, str) else text.removeprefix(BOM_BYTES)
    try:
        value = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        if exc.msg.endswith(" at"):  # ("Invalid control character at", "… starting at")
            raise JsonError(f"{exc.msg} {where}") from None
        raise JsonError(f"{exc.msg} (at {where})") from None
    except RecursionError:
        raise JsonError(f"nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:
        raise JsonError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:  # an integer past sys.get_int_max_str_digits()
        raise JsonError(str(exc).split(";")[0]) from None
    if _could_be_deep(text) and depth(value) > MAX_DEPTH:
        raise JsonError(f"nested deeper than {MAX_DEPTH} levels")
    return value


def duplicate_keys(text: str | bytes) -> list[list[str | int]]:
    """The path of each key that an object of `text` (a JSON text `loads` took) gives more
    than once, the key last; `[]` when there is none. JSON parsers keep the last value
    silently: a config file is held to this (TOML refuses it), what is read at speed (a
    hook's output, frames, requests) is not. A key inside an object that a later duplicate
    replaced has no path in the document: its outer key is said."""
    found: list[tuple[dict[str, Any], str]] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in items:
            if key in obj:
                found.append((obj, key))
            obj[key] = value
        return obj

    text = text.removeprefix(BOM) if isinstance(text, str) else text.removeprefix(BOM_BYTES)
    doc = json.loads(text, object_pairs_hook=pairs)
    if not found:
        return []
    where: dict[int, list[str | int]] = {}
    todo: list[tuple[Any, list[str | int]]] = [(doc, [])]
    while todo:
        item, path = todo.pop()
        if isinstance(item, dict):
            where[id(item)] = path
            todo.extend((v, [*path, k]) for k, v in item.items())
        elif isinstance(item, list):
            todo.extend((v, [*path, i]) for i, v in enumerate(item))
    return [[*where[id(obj)], key] for obj, key in found if id(obj) in where]


def _not_json(word: str) -> Any:
    raise JsonError(f"{word} is not JSON")


def _could_be_deep(text: str | bytes) -> bool:
    # A document nested N deep opens N containers: a short or flat one needs no walk.
    if isinstance(text, str):
        return text.count("[") + text.count("{") > MAX_DEPTH
    return text.count(b"[") + text.count(b"{") > MAX_DEPTH


def depth(value: Any) -> int:
    """How many containers deep `value` goes (a scalar is 0, `[]` is 1). Iterative."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        todo.extend((child, level + 1) for child in children)
    return deepest


def dumps(value: Any) -> bytes:
    """One line of UTF-8 JSON for `value`, under the policy in the module docstring."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        pass
    clean = wire_safe(value)
    try:
        return orjson.dumps(clean)
    except orjson.JSONEncodeError:  # integers past 64 bits: the standard library has them
        return json.dumps(clean, ensure_ascii=False, separators=(",", ":")).encode()


#: Every digit as "0", and nineteen of them in a row: where a line `dumps` wrote may hold an
#: integer past 64 bits (a translation and a search, several times faster than a regex).
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_DIGITS: Final = b"0" * 19


def orjson_exact(text: bytes | str) -> bool:
    """Whether orjson reads every number of `text` exactly: no nineteen digits in a row (the
    least an integer past 64 bits has, which orjson reads as a float without a word)."""
    raw = text if isinstance(text, bytes) else text.encode(errors="surrogatepass")
    return _LONG_DIGITS not in raw.translate(_DIGITS_AS_ZERO)


def wire_loads(line: bytes | str) -> Any:
    """A line `dumps` wrote (a frame, an event, a summary), decoded exactly. orjson reads an
    integer past 64 bits as a float, and refuses one past a float's range, where `dumps`
    wrote it exactly: a line with nineteen digits in a row (the least such an integer has)
    is read by the standard library instead, as is one orjson refuses. Raises `ValueError`
    for bytes that are not JSON, or nested past the standard library's recursion (a line no
    `dumps` wrote: one read from a file a person names)."""
    if orjson_exact(line):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(line, parse_constant=_not_json)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def wire_safe(value: Any) -> Any:
    """A copy of `value` that `dumps` can write exactly (see the module docstring), for a
    value orjson refused. Iterative: any depth is safe to pass."""
    root: list[Any] = [None]
    todo: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 1)]
    while todo:
        item, parent, key, level = todo.pop()
        if isinstance(item, dict):
            if level > MAX_DEPTH:
                parent[key] = _CUT
                continue
            copy: Any = {}
            parent[key] = copy
            for k, v in item.items():
                safe_key = _text(k if isinstance(k, str) else str(k))
                copy[safe_key] = None
                todo.append((v, copy, safe_key, level + 1))
        elif isinstance(item, list | tuple):
            if level > MAX_DEPTH:
                parent[key] = _CUT
                continue
            copy = [None] * len(item)
            parent[key] = copy
            todo.extend((v, copy, i, level + 1) for i, v in enumerate(item))
        elif isinstance(item, str):
            parent[key] = _text(item)
        elif isinstance(item, float):
            parent[key] = item if math.isfinite(item) else None  # as orjson writes them
        elif isinstance(item, bool) or item is None:
            parent[key] = item
        elif isinstance(item, int):
            parent[key] = _integer(item)
        else:
            parent[key] = _text(str(item))
    return root[0]


def _text(text: str) -> str:
    return _SURROGATE.sub(REPLACEMENT, text)


def _integer(number: int) -> int | str:
    # Writing a decimal past the interpreter's digit limit raises; say what it was instead.
    if number.bit_length() > _MAX_BITS:
        return f"[an integer of {number.bit_length()} bits]"
    return number


# Bits of the longest integer `str()` converts (sys.get_int_max_str_digits() digits).
_MAX_BITS: Final = int((sys.get_int_max_str_digits() or 4300) * 3.32) - 8


def is_unicode(text: str) -> bool:
    """Whether `text` has a UTF-8 form (no lone surrogate)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def encode(value: Any) -> str:
    """`dumps` as text."""
    return dumps(value).decode()
