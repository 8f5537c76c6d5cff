"""A hook's stdout read as its answer: nothing (no opinion) or one JSON object valid against
the `hook-output` schema, or exactly why not. Pure: no I/O, no trio.

What the effect in force lets through of it is `core/answers.py`'s `bound_answer`.
"""

from __future__ import annotations

from typing import Any, Final

from ..config.schemas import quick_check, validator
from ..core.jsontext import JsonError, loads

_BOM: Final = b"\xef\xbb\xbf"


class InvalidOutput(ValueError):
    """The hook's stdout is not nothing and not one valid JSON object."""


def read_output(stdout: bytes) -> dict[str, Any] | None:
    """The hook's JSON object, or None when it printed nothing (no opinion).

    A UTF-8 BOM and surrounding whitespace are tolerated. Raises `InvalidOutput` naming why.
    """
    text = stdout.removeprefix(_BOM)
    if not text.strip():
        return None
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidOutput(f"stdout is not UTF-8: {exc}") from exc
    try:
        obj = loads(decoded)
    except JsonError as exc:
        raise InvalidOutput(f"stdout is not one JSON object: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidOutput(f"stdout is JSON but not an object: found {_json_type(obj)}")
    if quick_check("hook-output")(obj):  # the usual case; a no is judged and explained below
        return obj
    errors = sorted(validator("hook-output").iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = "/" + "/".join(str(p) for p in first.absolute_path)
        raise InvalidOutput(f"output does not match hook-output schema at {where}: {first.message}")
    return obj


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
