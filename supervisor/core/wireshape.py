"""Whether a JSON object has the shape of an attrs class's wire form (`convert.to_json`): each
field without a default there, and each field that is there of its declared type. Checked,
not converted: what a client reads from a server it does not control (`service/remote.py`),
and what a cluster gateway reads from the frames stream (`cluster/names.py`), is held to the
classes the server would have written it from, so that what reads it after reads only what
it can take, and a frame that is not one is said, not read.

The declared types a field may have are the ones the wire classes use: `str`, `int`, `bool`,
`float`, `Any`, a `StrEnum` (one of its values), an attrs class (an object, checked in
turn), `tuple[T, ...]` (an array), `dict[str, T]` (an object), and `T | None`; an `int` or
`float` field holds an integer of 64 bits at most. Keys the class does not name are let
through: the set of fields may grow.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from .convert import wire_name
from .fieldmeta import OMIT, TO_WIRE

#: A check: None when the value has the shape, else where (the keys and indexes down to it)
#: and what is wrong.
Problem = tuple[tuple[str, ...], str]
Check = Callable[[Any], Problem | None]
#: How deep the checks of nested classes go (a class holding itself would go on).
MAX_DEPTH: Final = 8


def shape_problem(cls: type, value: Any, *, partial: bool = False) -> str | None:
    """None when `value` has the shape of `cls`'s wire form, else what is wrong, naming where
    (`refused.reason: missing`, `argv[2]: not a string (a number)`). `partial`: a field of
    `cls` itself may be missing (what is there is checked all the same)."""
    problem = _class_check(cls, 0, partial)(value)
    if problem is None:
        return None
    path, what = problem
    where = "".join(path).removeprefix(".")
    return f"{where}: {what}" if where else what


@functools.cache
def _class_check(cls: type, depth: int, partial: bool = False) -> Check:
    hints = typing.get_type_hints(cls)
    fields = [
        (
            wire_name(a),
            a.default is attrs.NOTHING and not partial,
            # (a field written in a form of its own is not checked against its class's type)
            _anything if TO_WIRE in a.metadata else _type_check(hints[a.name], depth + 1),
        )
        for a in attrs.fields(cls)
        if not any(a.metadata.get(key) for key in OMIT)
    ]

    def check(value: Any) -> Problem | None:
        if not isinstance(value, dict):
            return (), f"not an object ({_kind(value)})"
        for key, required, each in fields:
            if key not in value:
                if required:
                    return (f".{key}",), "missing"
                continue
            if (wrong := each(value[key])) is not None:
                return (f".{key}", *wrong[0]), wrong[1]
        return None

    return check


def _type_check(declared: Any, depth: int) -> Check:
    if depth > MAX_DEPTH or declared is Any:
        return _anything
    origin, args = typing.get_origin(declared), typing.get_args(declared)
    if origin in (types.UnionType, typing.Union):
        return _either([_type_check(a, depth) for a in args if a is not type(None)])
    if origin is tuple:
        return _array(_type_check(args[0], depth))
    if origin in (dict, Mapping):
        return _object(_type_check(args[1], depth))
    if isinstance(declared, type) and issubclass(declared, enum.Enum):
        return _one_of(frozenset(m.value for m in declared))
    if attrs.has(declared):
        return _class_check(declared, depth)
    if declared in (str, bool):
        return _instance(declared)
    if declared is int:
        return _integer
    if declared is float:
        return _number
    raise TypeError(f"no wire shape for {declared!r}")


def _anything(value: Any) -> Problem | None:
    return None


#: The integers a field declared `int` or `float` may hold: 64 bits', signed or not (a value
#: of `Any` may be wider; no field of a wire class is).
_WIDEST: Final = range(-(2**63), 2**64)


def _integer(value: Any) -> Problem | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return (), f"not an integer ({_kind(value)})"
    return None if value in _WIDEST else ((), "an integer past 64 bits")


def _number(value: Any) -> Problem | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return _integer(value)
    return None if isinstance(value, float) else ((), f"not a number ({_kind(value)})")


def _instance(kind: type) -> Check:
    word = {str: "a string", bool: "a boolean"}[kind]
    return lambda value: None if isinstance(value, kind) else ((), f"not {word} ({_kind(value)})")


def _one_of(values: frozenset[Any]) -> Check:
    said = f"not one of {', '.join(sorted(map(str, values)))}"
    return lambda value: None if _hashable(value) and value in values else ((), said)


def _hashable(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _either(checks: list[Check]) -> Check:
    """`T | None` (null, or what `T` takes); a union of more: any of them."""

    def check(value: Any) -> Problem | None:
        if value is None:
            return None
        said = [each(value) for each in checks]
        return None if None in said else said[0]

    return check


def _array(each: Check) -> Check:
    def check(value: Any) -> Problem | None:
        if not isinstance(value, list):
            return (), f"not an array ({_kind(value)})"
        for i, item in enumerate(value):
            if (wrong := each(item)) is not None:
                return (f"[{i}]", *wrong[0]), wrong[1]
        return None

    return check


def _object(each: Check) -> Check:
    def check(value: Any) -> Problem | None:
        if not isinstance(value, dict):
            return (), f"not an object ({_kind(value)})"
        for key, item in value.items():
            if (wrong := each(item)) is not None:
                return (f".{key}", *wrong[0]), wrong[1]
        return None

    return check


def _kind(value: Any) -> str:
    kinds: Mapping[type, str] = {dict: "an object", list: "an array", str: "a string"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return kinds.get(type(value), "a number")
