"""The project's attrs classes take their repr, equality and hash from `core/records.py`'s
`Record` (written once) instead of attrs' generated methods (compiled for each class at its
import), and those behave as attrs' own do.

Every class is found by importing every module of `mcpx_hooks.supervisor`, so a class
declared without `repr=False, eq=False` (or not on `Record`) fails here, named.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import Any

import attrs
import pytest

import mcpx_hooks.supervisor
from mcpx_hooks.supervisor.core.frames import EndFrame, ErrorCause, ErrorFrame, blank, stamp
from mcpx_hooks.supervisor.core.records import Record

#: Running it is the CLI's `main` (it exits): its names are `cli/main.py`'s.
_NOT_IMPORTED = {"mcpx_hooks.supervisor.__main__"}


def _attrs_classes() -> list[type]:
    found: list[type] = []
    package = mcpx_hooks.supervisor
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if info.name in _NOT_IMPORTED:
            continue
        module = importlib.import_module(info.name)
        found += [
            value
            for value in vars(module).values()
            if isinstance(value, type) and attrs.has(value) and value.__module__ == module.__name__
        ]
    return found


def _generated(method: Any) -> bool:
    code = getattr(method, "__code__", None)
    return code is not None and code.co_filename.startswith("<attrs generated")


def test_no_class_of_the_project_has_attrs_generate_its_repr_eq_or_hash() -> None:
    assert _generated(Generated.__repr__) and _generated(Generated.__hash__)  # what is looked for
    classes = _attrs_classes()
    rooms = {c.__module__.split(".")[2] for c in classes}
    assert {"cluster", "config", "core", "process", "run", "service", "tools"} <= rooms
    wrong = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not issubclass(c, Record)
        or _generated(c.__repr__)
        or _generated(c.__hash__)
        # A mutable class keeps attrs' `__eq__` (and stays unhashable: `__hash__` is None).
        or (_generated(c.__eq__) and c.__hash__ is not None)
    )
    assert wrong == []


# The same class twice: attrs' generated methods, and Record's.
def _shown_short(value: object) -> str:
    return f"<{len(str(value))} chars>"


def _fields() -> dict[str, Any]:
    return {
        "name": attrs.field(),
        "secret": attrs.field(default="s", repr=False),
        "size": attrs.field(default=0, repr=_shown_short),
        "note": attrs.field(default="", eq=False),
        "env": attrs.field(factory=dict, hash=False),
        "inner": attrs.field(default=None),
    }


Generated = attrs.make_class("Shape", _fields(), frozen=True)
Written = attrs.make_class("Shape", _fields(), bases=(Record,), frozen=True, repr=False, eq=False)
Other = attrs.make_class("Shape", _fields(), bases=(Record,), frozen=True, repr=False, eq=False)
MutableGenerated = attrs.make_class("Box", {"items": attrs.field(factory=list)})
MutableWritten = attrs.make_class(
    "Box", {"items": attrs.field(factory=list)}, bases=(Record,), repr=False
)


def _values() -> list[dict[str, Any]]:
    return [
        {"name": "a"},
        {"name": "a", "secret": "t", "size": 12345, "note": "n", "env": {"K": "v"}},
        {"name": "a", "note": "other note"},
        {"name": "b", "inner": ("x", 1)},
        {"name": float("nan")},
    ]


@pytest.mark.parametrize("given", _values())
def test_a_record_shows_compares_and_hashes_as_attrs_does(given: dict[str, Any]) -> None:
    generated, written = Generated(**given), Written(**given)
    assert repr(written) == repr(generated)
    for other in _values():
        assert (written == Written(**other)) == (generated == Generated(**other)), other
        assert (written != Written(**other)) == (generated != Generated(**other)), other
        if generated == Generated(**other):
            assert hash(written) == hash(Written(**other))
    assert written != Other(**given)  # another class, the same fields
    assert written != generated
    assert (written == 1) is False


def test_a_record_that_holds_itself_is_shown_as_attrs_shows_it() -> None:
    generated, written = MutableGenerated(), MutableWritten()
    generated.items.append(generated)
    written.items.append(written)
    assert repr(written) == repr(generated) == "Box(items=[...])"
    assert written == MutableWritten(items=written.items)  # attrs' `__eq__`, kept
    with pytest.raises(TypeError, match="unhashable"):
        hash(written)


def test_a_record_is_shown_in_each_thread_on_its_own() -> None:
    written = Written(name="a")
    shown: list[str] = []
    thread = threading.Thread(target=lambda: shown.append(repr(written)))
    thread.start()
    thread.join()
    assert shown == [repr(written)] == [repr(Generated(name="a"))]


def test_frames_show_compare_and_hash_by_their_fields() -> None:
    end = stamp(blank(EndFrame, exit_code=0, duration_ms=3), "r", 2)
    assert repr(end) == (
        f"EndFrame(run_id='r', seq=2, at={end.at!r}, exit_code=0, duration_ms=3, "
        "type=<FrameType.END: 'end'>, chain=None)"
    )
    assert end == attrs.evolve(end) and hash(end) == hash(attrs.evolve(end))
    assert end != attrs.evolve(end, seq=3)
    error = blank(ErrorFrame, message="m", cause=ErrorCause.SCRIPT)
    assert {error, attrs.evolve(error)} == {error}
