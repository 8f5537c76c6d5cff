"""A hook's stdout read as its answer: nothing (no opinion), one JSON object valid against
the `hook-output` schema, or plain text (advice), or exactly why not. Pure: no I/O, no trio.

What the effect in force lets through of it is `core/answers.py`'s `bound_answer`.
"""

from __future__ import annotations

import codecs
from typing import Any, Final

from ..core.errors import HooksError
from ..core.jsontext import JsonError, loads
from ..core.redact import Redactor

_BOM: Final = b"\xef\xbb\xbf"
#: The first characters (after a BOM and whitespace) that make stdout a JSON answer; any
#: other text is advice, the convention of git hook managers (text plus an exit status).
JSON_STARTS: Final = ("{", "[")
#: The answer key plain text counts as.
TEXT_KEY: Final = "advise"
#: How much of stdout an `invalid-output` hook frame shows (`stdoutHead`).
STDOUT_HEAD_BYTES: Final = 1024


class InvalidOutput(HooksError, ValueError):
    """The hook's stdout is not nothing, not plain text and not one valid JSON object."""


def read_output(stdout: bytes, *, source: str = "stdout") -> dict[str, Any] | None:
    """The hook's answer as a JSON object, or None when it printed nothing (no opinion).

    A UTF-8 BOM and surrounding whitespace are tolerated. Text whose first character is
    neither `{` nor `[` is advice: `{"advise": "<the text>"}`, stripped. Otherwise the whole
    of stdout must be one JSON object valid against the schema. Raises `InvalidOutput`
    naming why, and what was read by `source` (a prompt hook's: "the model's answer").
    """
    text = stdout.removeprefix(_BOM)
    if not text.strip():
        return None
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        from ..config.files import not_utf8

        raise InvalidOutput(f"{source} is {not_utf8(exc)}") from exc
    stripped = decoded.strip()
    if not stripped.startswith(JSON_STARTS):
        return {TEXT_KEY: stripped}
    try:
        obj = loads(decoded)
    except JsonError as exc:
        raise InvalidOutput(f"{source} starts like JSON but is not one JSON object: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidOutput(f"{source} is JSON but not an object: found {_json_type(obj)}")
    # Here, not at the top: a run with no hook printing JSON loads no schema.
    from ..config.schemas import quick_check, validator

    if quick_check("hook-output")(obj):  # the usual case; a no is judged and explained below
        return obj
    errors = sorted(validator("hook-output").iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        from ..config.problems import in_words

        where, said = in_words(errors[0])  # (not jsonschema's `True is not of type 'integer'`)
        raise InvalidOutput(f"{source} does not match hook-output schema at {where or '/'}: {said}")
    return obj


def stdout_head(stdout: bytes, redactor: Redactor) -> str:
    """The start of what a hook printed, for a person: its first `STDOUT_HEAD_BYTES` as
    text (a character cut at the end is left out, bytes that are not UTF-8 become U+FFFD),
    redacted, and without the start of a secret's value where the cut fell in one."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    head = decoder.decode(bytes(stdout[:STDOUT_HEAD_BYTES]), final=False)
    return redactor.cut(head, end=len(stdout) > STDOUT_HEAD_BYTES)


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
