"""The checks a spawn request's JSON goes through: exact types, ranges, and text `execve`
can take. Each failure is a `StartError` saying where (`sandbox.read[2]`) and what is wrong.

Standard library only.
"""

from __future__ import annotations

import json
import re
import resource
from collections.abc import Iterable
from typing import Any

from .start import MAX_FD, StartError

#: The largest number a size or a resource limit can be (`setrlimit` takes a signed 64 bits;
#: `RLIM_INFINITY` is -1 here).
LARGEST = (1 << 63) - 1
#: What `execve` cannot take in an argv item, an environment name or value, or a path: NUL,
#: and lone surrogates, which have no UTF-8 (`posix_spawn` raises `ValueError` and
#: `UnicodeEncodeError`). The rule of the supervisor's `spawntext.py`, where input enters;
#: this is the spawner's own check, which never trusts its caller.
_NOT_TEXT = re.compile("[\0\ud800-\udfff]")
#: What a path cannot hold: NUL, and the lone surrogates Python's `surrogateescape` never
#: makes. A byte of a name that is not UTF-8 travels in the request's JSON as the surrogate
#: U+DC80-U+DCFF Python reads it as (`os.fsdecode`), and goes back to that byte where the
#: path reaches the kernel (`os.fsencode`): a directory or config file with such a name is
#: granted as it is, not refused.
_NOT_PATH = re.compile("[\0\ud800-\udc7f\udd00-\udfff]")
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def bad(why: str) -> StartError:
    return StartError(f"bad spawn request: {why}")


def show(value: object) -> str:
    """`value` for a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:56] + "..."


def _kind(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def parse_json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise bad("JSON nested too deeply") from exc
    except ValueError as exc:  # UnicodeDecodeError too; a number over 4300 digits
        raise bad(f"not JSON: {exc}") from exc


def fields(
    value: object, where: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    """`value`, a JSON object with every key of `required` and none but those and `optional`
    (a misspelt key is refused rather than left out: "sandbx" must not run unconfined)."""
    at = f"{where}: " if where else ""
    if not isinstance(value, dict):
        raise bad(f"{at}not an object but {_kind(value)}")
    unknown = [key for key in value if key not in required and key not in optional]
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise bad(f"{at}unknown key {show(unknown[0])}{more}")
    for key in required:
        if key not in value:
            raise bad(f"{at}{key!r} is missing")
    return value


def string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise bad(f"{where}: not a string but {_kind(value)}")
    if (found := _NOT_TEXT.search(value)) is not None:
        raise bad(f"{where}: {_not_text(found.group())}")
    return value


def _not_text(char: str) -> str:
    if char == "\0":
        return "holds a NUL character"
    return "holds a lone surrogate (not valid Unicode)"


def strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list):
        raise bad(f"{where}: not an array but {_kind(value)}")
    if not _clean(value):  # then say which item and why
        for i, item in enumerate(value):
            string(item, f"{where}[{i}]")
    return value


def _clean(texts: Iterable[object]) -> bool:
    """Whether every one of `texts` is a string `execve` takes: one scan of them all (this
    is on every request's way; an item at a time costs several microseconds more)."""
    try:
        joined = "".join(texts)  # type: ignore[arg-type]
    except TypeError:  # not all strings
        return False
    if joined.isascii():  # known without a scan
        return "\0" not in joined
    return _NOT_TEXT.search(joined) is None


def path_string(value: object, where: str) -> str:
    """`value`, a path: a string without NUL, whose lone surrogates each stand for a byte
    that is not UTF-8 (`_NOT_PATH`)."""
    if not isinstance(value, str):
        raise bad(f"{where}: not a string but {_kind(value)}")
    if (found := _NOT_PATH.search(value)) is not None:
        raise bad(f"{where}: {_not_text(found.group())}")
    return value


def abs_path(value: object, where: str) -> str:
    return _absolute(path_string(value, where), where)


def abs_paths(value: object, where: str) -> list[str]:
    if not isinstance(value, list):
        raise bad(f"{where}: not an array but {_kind(value)}")
    for i, item in enumerate(value):
        _absolute(path_string(item, f"{where}[{i}]"), f"{where}[{i}]")
    return value


def _absolute(path: str, where: str) -> str:
    if not path.startswith("/"):
        raise bad(f"{where}: {show(path)} is not an absolute path")
    return path


def environment(value: object, where: str = "env") -> dict[str, str]:
    """`value`, an environment `execve` takes (names not empty, without "=", NUL or a lone
    surrogate; values without NUL or a lone surrogate); else `StartError` saying which."""
    if not isinstance(value, dict):
        raise bad(f"{where}: not an object but {_kind(value)}")
    if "" not in value and "=" not in "".join(value) and _clean(value) and _clean(value.values()):
        return value
    for name, item in value.items():  # say which and why
        if not name:
            raise bad(f"{where}: a name is empty")
        if "=" in name:
            raise bad(f"{where}: the name {show(name)} holds '='")
        if (found := _NOT_TEXT.search(name)) is not None:
            raise bad(f"{where}: the name {show(name)} {_not_text(found.group())}")
        string(item, f"{where}[{show(name)}]")
    return value


def integer(value: object, where: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad(f"{where}: not an integer but {_kind(value)}")
    if not low <= value <= high:
        raise bad(f"{where}: {show(value)} is out of range ({low} to {high})")
    return value


def boolean(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise bad(f"{where}: not a boolean but {_kind(value)}")
    return value


def fd_targets(value: object) -> list[int]:
    """`"fds"`: the numbers the child's fds get, each once."""
    if not isinstance(value, list):
        raise bad(f"fds: not an array but {_kind(value)}")
    targets = [integer(t, f"fds[{i}]", 0, MAX_FD - 1) for i, t in enumerate(value)]
    if len(set(targets)) != len(targets):
        raise bad("fds: a number is listed twice")
    return targets


#: Every resource limit this platform has, by name (looked up per limit per request).
_LIMIT_NUMBERS = {
    name: int(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")
}


def rlimits(value: object) -> tuple[list[tuple[int, int, int]], dict[int, str]]:
    """`"rlimits"`: `[name, soft, hard]` each; `-1` is `RLIM_INFINITY`. Returns them by
    number, and each number's name."""
    if value is None:
        return [], {}
    if not isinstance(value, list):
        raise bad(f"rlimits: not an array but {_kind(value)}")
    limits: list[tuple[int, int, int]] = []
    names: dict[int, str] = {}
    for i, item in enumerate(value):
        if type(item) is list and len(item) == 3:  # what the supervisor sends: no messages
            name, soft, hard = item
            number = _LIMIT_NUMBERS.get(name) if type(name) is str else None
            if (
                number is not None
                and type(soft) is int  # (not a bool: what `integer` takes)
                and type(hard) is int
                and -1 <= soft <= LARGEST
                and -1 <= hard <= LARGEST
            ):
                limits.append((number, soft, hard))
                names[number] = name
                continue
        where = f"rlimits[{i}]"
        if not (isinstance(item, list) and len(item) == 3):
            raise bad(f"{where}: not [name, soft, hard]")
        name, soft, hard = item
        number = _LIMIT_NUMBERS.get(name) if isinstance(name, str) else None
        if number is None:
            raise bad(f"{where}: unknown resource limit {show(name)}")
        soft = integer(soft, f"{where}[1]", -1, LARGEST)
        hard = integer(hard, f"{where}[2]", -1, LARGEST)
        limits.append((number, soft, hard))
        names[number] = name
    return limits, names
