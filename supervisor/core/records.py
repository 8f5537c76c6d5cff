"""The base of the project's attrs classes: their `__repr__`, `__eq__` and `__hash__`, written
once instead of generated for each class.

attrs writes, for each class as it is built, the source of the methods it gives it and
compiles it: about 0.2 ms a class for `__repr__`, `__eq__` and `__hash__` together, paid at
import whether a run ever prints, compares or hashes one (`exec -- /bin/true` builds 76 of the
project's classes). A class declared `@attrs.frozen(repr=False, eq=False)` (mutable ones,
`@attrs.define(repr=False)`: attrs makes their `__eq__` and leaves them unhashable) on
`Record` gets these instead, which behave as attrs' do: the same text (fields marked
`repr=False` left out, a field's own `repr` callable used, `...` for an object already being
shown), equality of two objects of the very same class field by field (those marked
`eq=False` left out), a hash of the class and its fields (those marked `hash=False`, or with
`eq=False` and no `hash`, left out). Each class's fields are read at its first call.

`tests/test_records.py` holds every attrs class of the project to these, and the methods to
attrs' own.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import attrs

#: The objects being shown, per thread: a class that holds itself is shown as `...` inside.
_showing = threading.local()


@functools.cache
def _shown(cls: type) -> tuple[tuple[str, Callable[[Any], str]], ...]:
    return tuple((a.name, repr if a.repr is True else a.repr) for a in attrs.fields(cls) if a.repr)


@functools.cache
def _compared(cls: type) -> tuple[str, ...]:
    return tuple(a.name for a in attrs.fields(cls) if a.eq)


@functools.cache
def _hashed(cls: type) -> tuple[str, ...]:
    return tuple(a.name for a in attrs.fields(cls) if (a.eq if a.hash is None else a.hash))


class Record:
    """What an attrs class of the project derives from, for its repr, equality and hash."""

    __slots__ = ()

    def __repr__(self) -> str:
        showing: set[int] | None = getattr(_showing, "ids", None)
        if showing is None:
            showing = _showing.ids = set()
        if id(self) in showing:
            return "..."
        showing.add(id(self))
        try:
            cls: type = type(self)
            fields = ", ".join(f"{name}={show(getattr(self, name))}" for name, show in _shown(cls))
            return f"{cls.__qualname__.rsplit('>.', 1)[-1]}({fields})"
        finally:
            showing.discard(id(self))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        cls: type = self.__class__
        return all(getattr(self, name) == getattr(other, name) for name in _compared(cls))

    def __hash__(self) -> int:
        cls: type = type(self)
        return hash((cls, *[getattr(self, name) for name in _hashed(cls)]))
