"""jsonschema errors translated into `Problem`s a person can act on: what was expected and
what was found, at an RFC 6901 JSON pointer; an unknown key at its own pointer, with a "did you
mean" (or, for another hook system's word, what it is here: `foreign`); a hook's action rule in
one sentence, never a dump of `oneOf` branches; a failed `pattern` in words, never the regex.
Everything returned can be printed: a lone surrogate or a NUL taken from the input is written
as its `\\uXXXX` escape."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..core import egress, spawntext
from ..core.errors import Problem
from ..core.events import ANY_KIND
from ..core.models import NAME_PATTERN as MODEL_NAME_PATTERN
from ..core.models import URL_PATTERN as MODEL_URL_PATTERN
from ..core.passenv import SECRET_NAME_PATTERN, unshown
from ..core.points import CWD_GLOB_PATTERN, DEFAULT_PHASE, POINTS
from ..core.servers import SEPARATOR_PATTERN
from .closest import did_you_mean
from .foreign import moment, unknown_key
from .runschema import HISTORY_PATH_PATTERN
from .serverschema import SERVER_NAME_PATTERN

if TYPE_CHECKING:  # imported by whoever has a validator: a valid config needs none
    import jsonschema
    from jsonschema.exceptions import ValidationError

_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
    "array": "an array",
    "object": "an object",
    "null": "null",
}
#: What `_printable` escapes: NUL (invisible on a terminal), lone surrogates (no UTF-8).
_UNPRINTABLE = re.compile(r"[\u0000\ud800-\udfff]")
#: An integer with more digits than this is described by its length.
_LONG_DIGITS = 24
#: A string value or a key longer than this is shown by its start (and a key by its length
#: too): a 2 MB key is found by its start, not printed whole in the pointer and the message.
_SHOWN_CHARS = 60
#: A key longer than this is shown by its start, its length and its digest (`_whole`):
#: longer than any key written by hand, so a pointer names real keys whole.
_KEY_CHARS = 256


def _printable(text: str) -> str:
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def pointer(path: Iterable[str | int]) -> str:
    """The RFC 6901 pointer of `path` (`["hooks", 2, "run"]` → `/hooks/2/run`); a NUL or a
    lone surrogate in a key is written as its `\\uXXXX` escape, so the pointer can be printed."""
    return "".join("/" + _token(str(p)).replace("~", "~0").replace("/", "~1") for p in path)


def _token(key: str) -> str:
    """A key as its pointer writes it: printable, and when long shortened (`_whole`)."""
    if len(key) <= _KEY_CHARS:
        return _printable(key)
    return f"{_printable(key[: _SHOWN_CHARS - 3])}...({_whole(key)})"


def quote_key(key: str) -> str:
    """A key as a message quotes it: a JSON string (`quote`), shortened as in its pointer."""
    if len(key) <= _KEY_CHARS:
        return quote(key)
    return f"{quote(key[: _SHOWN_CHARS - 3] + '...')} ({_whole(key)})"


def _whole(key: str) -> str:
    """A long key's length and 64 bits of its SHA-256: two keys shown alike made one pointer,
    and their problems, said alike there, were counted as one."""
    whole = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{len(key)} characters, sha256 {whole[:16]}"


def pointer_key(ptr: str) -> tuple[tuple[int, int | str], ...]:
    """Sorts pointers in document order: `/hooks/2` before `/hooks/10`."""
    tokens = ptr.split("/")[1:]
    return tuple((0, int(t)) if t.isascii() and t.isdigit() else (1, t) for t in tokens)


def describe(value: Any) -> str:
    """A found value in words: `the string "echo hi"`, `the integer 0`, `an empty array`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, int):
        if abs(value) >= 10**_LONG_DIGITS:
            return _long_integer(value)
        return f"the integer {value}"
    if isinstance(value, float) and math.isinf(value):  # (1e400: what a reader makes of it)
        return f"a number too large to hold (read as {'-' if value < 0 else ''}infinity)"
    if isinstance(value, float) and math.isnan(value):
        return "not a number (nan)"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        text = value if len(value) <= _SHOWN_CHARS else value[: _SHOWN_CHARS - 3] + "..."
        return f"the string {quote(text)}"
    if isinstance(value, list):
        return "an empty array" if not value else f"an array of {len(value)}"
    if isinstance(value, dict):
        return "an empty object" if not value else "an object"
    import datetime  # (only TOML gives one: `timeoutMs = 1979-05-27`)

    if isinstance(value, datetime.date | datetime.time):
        return f"the TOML {type(value).__name__} {value.isoformat()}"
    return type(value).__name__


def _long_integer(value: int) -> str:
    try:
        return f"an integer of {len(str(abs(value)))} digits"
    except ValueError:  # past sys.get_int_max_str_digits(): only Python code makes these
        return f"an integer of {value.bit_length()} bits"


def quote(text: str) -> str:
    """`text` as a JSON string, printable (see `_printable`)."""
    return _printable(json.dumps(text, ensure_ascii=False))


def _quoted(values: Sequence[Any], sep: str = ", ") -> str:
    return sep.join(json.dumps(v) for v in values)


def problems(validator: jsonschema.Draft202012Validator, instance: Any, file: str) -> list[Problem]:
    """Every schema error in `instance`, translated, once each, in document order."""
    found: dict[tuple[str, str], Problem] = {}
    errors = list(validator.iter_errors(instance))
    # A value of the wrong type is said to be so, once: a number also past a bound (1e400,
    # read as infinity, is neither an integer nor ≤ the maximum) is one problem, not two.
    typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    for error in errors:
        if error.validator in _BOUNDS and tuple(error.absolute_path) in typed:
            continue
        for ptr, message in _translate(error):
            found.setdefault((ptr, message), Problem(file, ptr, message))
    return sorted(found.values(), key=lambda p: pointer_key(p.pointer))


_BOUNDS: Final = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def outranked(schema: list[Problem], rules: list[Problem]) -> list[Problem]:
    """The schema's problems and the rules', but none of the schema's inside a value a rule
    refuses whole: `when.cwd` on the point "call" is refused as a key, and what is wrong with
    its patterns would never matter (one problem, the one that does)."""
    refused = {p.pointer for p in rules}
    kept = [p for p in schema if not _under(p.pointer, refused)]
    return kept + rules


def _under(ptr: str, refused: set[str]) -> bool:
    """Whether `ptr` lies strictly inside one of the `refused` pointers."""
    at = ptr.rfind("/")
    while at > 0:
        if ptr[:at] in refused:
            return True
        at = ptr.rfind("/", 0, at)
    return False


def in_words(error: ValidationError) -> tuple[str, str]:
    """Where `error` is (a JSON pointer, inside the value where a `oneOf` branch says so)
    and what it says, in the words of the config's problems where they have some."""
    said = next(_translate(error), None)
    return said if said is not None else (pointer(list(error.absolute_path)), error.message)


def _translate(error: ValidationError) -> Iterator[tuple[str, str]]:
    path = list(error.absolute_path)
    key = path[-1] if path and isinstance(path[-1], str) else None
    where = pointer(path)
    # jsonschema types these as unions with `Unset`; they are set on every yielded error.
    kind: Any = error.validator
    value: Any = error.validator_value
    found: Any = error.instance
    subschema: Any = error.schema

    if kind == "additionalProperties" and isinstance(found, dict):
        allowed = list(subschema.get("properties", {}))
        for extra in (k for k in found if k not in allowed):
            unknown = f"unknown key {quote_key(extra)}{unknown_key(extra, allowed)}"
            yield pointer([*path, extra]), unknown
    elif kind == "type":
        yield where, _type_message(key, value, found, argv=_is_argv(key, subschema))
    elif kind == "enum":
        yield where, moment(key, found) or _enum_message(key, value, found)
    elif kind == "oneOf" and all("required" in branch for branch in value):
        # The config's one oneOf, the action rule; on a non-object the type error already
        # says what is wrong.
        if isinstance(found, dict):
            actions = [branch["required"][0] for branch in value]
            yield where, _actions_message(actions, found)
    elif kind == "oneOf":  # (a hook's answer: `advise`, `refuse`)
        # The branch of the value's own type says what is wrong inside it (`/refuse/reason`).
        inside = [
            e
            for e in error.context or ()
            if e.validator != "type" or e.absolute_path != error.absolute_path
        ]
        if said := list(_translate(inside[0])) if inside else []:
            yield from said
        else:
            shapes = " or ".join(_shape_words(branch) for branch in value)
            yield where, f"expected {shapes}, found {describe(found)}"
    elif kind == "not" and key == "source":
        yield (
            where,
            (
                "source is only legal as inline source lines under [script]: write"
                " [script].<phase> = [...], not a [[hooks]] entry with source"
            ),
        )
    elif kind == "dependentRequired" and isinstance(found, dict):
        for present, needed in value.items():
            absent = [k for k in needed if k not in found]
            if present in found and absent:
                yield (
                    pointer([*path, present]),
                    (
                        f'expected "{present}" only with {_quoted(needed, " and ")}, found'
                        f' "{present}" without {_quoted(absent, " or ")}'
                    ),
                )
    elif kind == "required" and isinstance(found, dict):
        for name in (k for k in value if k not in found):
            yield where, f'missing the required key "{name}"'
    elif kind in ("minimum", "maximum"):
        unit = " ms" if key is not None and key.endswith("Ms") else ""
        sign = "≥" if kind == "minimum" else "≤"
        number = "a number" if subschema.get("type") == "number" else "an integer"
        yield where, f"expected {number} {sign} {value}{unit}, found {describe(found)}"
    elif kind == "minItems":
        if _is_argv(key, subschema):
            yield (
                where,
                f"expected an argv array with at least the program, found {describe(found)}",
            )
        else:
            yield where, f"expected at least {value} item(s), found {describe(found)}"
    elif kind == "minLength":
        if path[-1:] == [0] and path[-2:-1] in (["run"], ["argv"], ["command"], ["install"]):
            yield (
                where,
                f"expected the program to run (a non-empty string), found {describe(found)}",
            )
        else:
            yield where, f"expected a non-empty string, found {describe(found)}"
    elif kind == "pattern" and list(error.absolute_schema_path)[-2:-1] == ["propertyNames"]:
        # A key refused by name: its pointer is the key's, as for an unknown key.
        yield (
            pointer([*path, found]),
            f"expected {_pattern_words(key, value)}, found {describe(found)}",
        )
    elif kind == "pattern":  # (only a string is held to one)
        hint = egress.item_hint(found) if value == egress.PATTERN else ""
        shown = (value == SECRET_NAME_PATTERN and unshown(found)) or describe(found)
        yield where, f"expected {_pattern_words(key, value, found)}, found {shown}{hint}"
    elif kind == "uniqueItems" and isinstance(found, list):
        seen = [item for n, item in enumerate(found) if item in found[:n]]
        yield where, f"expected no item twice, found {describe(seen[0])} more than once"
    elif kind == "const":
        yield where, f"expected {json.dumps(value)}, found {describe(found)}"
    else:
        yield where, error.message


_ENUM_WORDS = {
    "phase": "a phase",
    "effect": "an effect",
    "max": "an effect",
    "hooks": "an effect",
    "sandbox": "a sandbox profile",
}
_PATTERN_WORDS = {
    "module": "a Python file (ending in .py) or package.module[:function]",
    "plugin": 'an MCP tool named "namespace.tool"',
}
#: The patterns of `spawntext`, said in words: what a process can be given (and a secret's
#: name, one variable's; and a `network` item, never its regular expression).
_SPAWN_PATTERN_WORDS = {
    spawntext.TEXT_PATTERN: "a string without NUL or lone surrogates (a process cannot take them)",
    spawntext.ENV_NAME_PATTERN: "a variable name: not empty, without '=', NUL or lone surrogates",
    egress.PATTERN: egress.ITEM_WORDS,
    SECRET_NAME_PATTERN: "a variable name, not a glob (a secret is one variable, named; passEnv"
    " takes globs): not empty, without '=', '*', '?', '[', NUL or lone surrogates",
}


#: The config's other patterns, said in words rather than as their regular expressions.
_NAMED_PATTERN_WORDS = {
    HISTORY_PATH_PATTERN: "an absolute path, or one under your home as ~/…",
    SERVER_NAME_PATTERN: "a server name: letters, digits, _ or -",
    SEPARATOR_PATTERN: "letters, digits, _, - or .",
    MODEL_NAME_PATTERN: "a model name: a letter or _, then letters, digits, _ or -",
    MODEL_URL_PATTERN: "the endpoint's base URL, http://… or https://… up to /v1 (without"
    " /chat/completions, which is added to it)",
    CWD_GLOB_PATTERN: "a glob of the whole working directory, an absolute path: starting with"
    " / or a wildcard (*/myproject*); one that does not would never match",
}


def _pattern_words(key: str | None, pattern: str, found: Any = None) -> str:
    """What a `pattern` expects, in words: the spawn rule when `found` breaks it (whatever
    else the pattern says), else the key's own words."""
    if pattern in _SPAWN_PATTERN_WORDS:
        return _SPAWN_PATTERN_WORDS[pattern]
    if isinstance(found, str) and spawntext.text_problem(found) is not None:
        return _SPAWN_PATTERN_WORDS[spawntext.TEXT_PATTERN]
    if pattern in _NAMED_PATTERN_WORDS:
        return _NAMED_PATTERN_WORDS[pattern]
    return _PATTERN_WORDS.get(key or "", f"a string matching {pattern}")


def _shape_words(schema: dict[str, Any]) -> str:
    """One `oneOf` branch in words: `a string`, `an array of strings`, `an object with "x"`."""
    kind = schema.get("type")
    words = _TYPE_WORDS.get(kind, "a value") if isinstance(kind, str) else "a value"
    items = schema.get("items")
    if kind == "array" and isinstance(items, dict) and isinstance(items.get("type"), str):
        return f"an array of {items['type']}s"
    if kind == "object" and schema.get("required"):
        return f"{words} with {_quoted(schema['required'], ' and ')}"
    return words


def _is_argv(key: str | None, subschema: Any) -> bool:
    """Whether the key takes an argv (a hook's `run`, a server's `command` and `install`, a
    model's `command`: `schemaparts.argv`, the one array with `prefixItems`)."""
    return key == "run" or (isinstance(subschema, dict) and "prefixItems" in subschema)


def _type_message(key: str | None, expected: str | list[str], found: Any, *, argv: bool) -> str:
    names = [expected] if isinstance(expected, str) else expected
    if key == "run" and names == ["object"]:  # a hook's answer: {"run": {"argv": [...]}}
        return f'expected an object ({{"argv": [...]}}), found {describe(found)}'
    if argv and isinstance(found, str):
        shell = json.dumps(["sh", "-c", found], ensure_ascii=False)
        return (
            f"expected an argv array of strings, found {describe(found)}: {key} takes an argv"
            f" array, never a shell string; to use a shell write {shell}"
        )
    words = (
        "an argv array of strings" if argv else " or ".join(_TYPE_WORDS.get(n, n) for n in names)
    )
    said = key == "secrets" and isinstance(found, str) and unshown(found)  # (a pasted key?)
    message = f"expected {words}, found {said or describe(found)}"
    if key == "hooks" and isinstance(found, dict):
        message += " (in TOML, write each hook as [[hooks]], with double brackets)"
    elif names == ["array"] and isinstance(found, str):  # (`when.tool = "x"`, `passEnv = "X"`)
        message += f"; a list of one is written [{quote('NAME' if said else found)}]"
    return message


def _enum_message(key: str | None, allowed: list[Any], found: Any) -> str:
    hint = did_you_mean(found, [str(a) for a in allowed]) if isinstance(found, str) else ""
    if key == "on" and ANY_KIND in allowed:
        return (
            f"expected an event kind the bus publishes, or a prefix of one ({_quoted(allowed)}):"
            f" this hook observes (its phase is observe, the default when none is given), and"
            f" {describe(found)} would never fire{hint}{_point_hint(found)}"
        )
    if key == "on":
        return (
            f"expected a point that something fires ({_quoted(allowed)}; an observe hook takes"
            f' phase "observe" and an event kind), found {describe(found)}{hint}'
        )
    what = _ENUM_WORDS.get(key or "", "one")
    return f"expected {what} of {_quoted(allowed)}, found {describe(found)}{hint}"


def _point_hint(found: Any) -> str:
    """For a point written without its phase (which makes the hook observe): say so."""
    if not (isinstance(found, str) and found in POINTS):
        return ""
    phases = ", ".join(p.value for p in POINTS[found].phases if p is not DEFAULT_PHASE)
    return f'; a hook on the point "{found}" names its phase ({phases})'


def _actions_message(actions: list[str], found: dict[str, Any]) -> str:
    present = [a for a in actions if a in found]
    choices = ", ".join(a for a in actions if a != "source")
    if not present:
        return f"a hook takes exactly one action ({choices}), found none"
    return (
        f"a hook takes exactly one action ({choices}), found {len(present)}: {', '.join(present)}"
    )
