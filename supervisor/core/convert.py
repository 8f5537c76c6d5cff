"""The one converter between the domain's attrs shapes and their JSON form: frames, answers,
the run a hook is told of, events, hooks in force, the service's error message to JSON; a
request already checked (`service/execrequest.py`) from it.

Field names are snake_case in the classes and camelCase on the wire, unless a field's `WIRE`
metadata names it otherwise. A field still at its default is left out, so a frame says only
what happened; `KEEP` marks the fields consumers rely on being there even when empty, and
`SHOWN_WITH` the ones that must be there whenever another field is true (a `null` that an
`apply` put in place is still worth showing).

The converter is made, and its hooks registered, at the first `to_json` or `from_json`: the
classes that take this module's metadata (frames, answers, events) are built without cattrs
(~9 ms to import), which `validate` and `hooks list` never need. A run's journal converts its
frames with `frame_json`, which gives the same dicts from a table of each frame class's fields
and asks the converter only for what it cannot pass on as it is (a hook frame, an emitted
value that is not a scalar): a run with no hook loads no cattrs.
"""

from __future__ import annotations

import enum
import functools
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

from .fieldmeta import FROM_WIRE, KEEP_KEY, OMIT_KEY, SHOWN_WITH, TO_WIRE, WIRE

if TYPE_CHECKING:
    import cattrs

_T = TypeVar("_T")


def camel(name: str) -> str:
    """A field's wire name from its Python one: `refused_by` is `refusedBy`."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def wire_name(field: attrs.Attribute[Any]) -> str:
    """What a field is called on the wire."""
    return str(field.metadata.get(WIRE, camel(field.name)))


@functools.cache
def converter() -> cattrs.Converter:
    """The one converter, made (with its hooks) at its first use."""
    import cattrs

    from .hooks import Hook, Provenance, hook_json, provenance_json

    made = cattrs.Converter()
    made.register_unstructure_hook_factory(attrs.has, functools.partial(_unstructure_factory, made))
    made.register_structure_hook_factory(attrs.has, functools.partial(_structure_factory, made))
    # Shaped by hand: a hook's target goes under its action's name.
    made.register_unstructure_hook(Hook, hook_json)
    made.register_unstructure_hook(Provenance, provenance_json)
    return made


def _unstructure_factory(converter: cattrs.Converter, cls: type) -> Callable[[Any], dict[str, Any]]:
    from cattrs.gen import make_dict_unstructure_fn, override

    fields = attrs.fields(cls)
    overrides: dict[str, Any] = {
        a.name: override(
            rename=wire_name(a),
            omit_if_default=a.default is not attrs.NOTHING and not a.metadata.get(KEEP_KEY, False),
            omit=a.metadata.get(OMIT_KEY, False),
            unstruct_hook=a.metadata.get(TO_WIRE),
        )
        for a in fields
    }
    base: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, converter, **overrides)
    shown = tuple(
        (a.name, wire_name(a), a.metadata[SHOWN_WITH]) for a in fields if SHOWN_WITH in a.metadata
    )
    if not shown:
        return base

    def unstructure(obj: Any) -> dict[str, Any]:
        out = base(obj)
        for name, key, trigger in shown:
            if getattr(obj, trigger):
                out.setdefault(key, converter.unstructure(getattr(obj, name)))
        return out

    return unstructure


def _structure_factory(
    converter: cattrs.Converter, cls: type
) -> Callable[[Mapping[str, Any], Any], Any]:
    from cattrs.gen import make_dict_structure_fn, override

    def hook(make: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
        return lambda value, _type: make(value)

    overrides: dict[str, Any] = {
        a.name: override(
            rename=wire_name(a),
            struct_hook=hook(a.metadata[FROM_WIRE]) if FROM_WIRE in a.metadata else None,
        )
        for a in attrs.fields(cls)
    }
    made: Callable[[Mapping[str, Any], Any], Any] = make_dict_structure_fn(
        cls, converter, **overrides
    )
    return made


def to_json(obj: Any) -> dict[str, Any]:
    """The wire form of an attrs shape: a dict of JSON values (enums as their str/int
    subclasses), ready for the one encoding policy (`jsontext`)."""
    out: dict[str, Any] = converter().unstructure(obj)
    return out


def from_json(data: Mapping[str, Any], cls: type[_T]) -> _T:
    """An attrs shape from its wire form, already checked (the caller's table says what is
    wrong with a bad one): the inverse of `to_json` for the fields given."""
    made: _T = converter().structure(data, cls)
    return made


def frame_json(frame: Any) -> dict[str, Any]:
    """`to_json` of a frame: the same dict, keys in the same order, made from a table of the
    class's fields where they allow it (`_plain_form`), so a run's first frames load no
    cattrs (~9 ms to import, and each class's function built at its first use)."""
    cls: type = type(frame)
    form = _plain_form(cls)
    return to_json(frame) if form is None else form(frame)


#: What a frame's fields may be declared as, for `_plain_form`: the types whose value the
#: converter passes on as it is (an enum that is a `str` too), the one it makes a list of, and
#: those of values of any shape: passed on as they are when they are scalars (the converter's
#: way with them too), any other value given to the converter as the declared type.
_AS_IS: Final = (str, int, bool, str | None, int | None, bool | None)
_LISTED: Final = tuple[str, ...]
_DYNAMIC: Final = (Any, dict[str, Any], tuple[dict[str, Any], ...])
#: The same, as written (the modules postpone their annotations; cattrs resolves them in
#: place once it has made the class's function).
_WRITTEN: Final[Mapping[str, Any]] = {
    "str": str,
    "int": int,
    "bool": bool,
    "str | None": str | None,
    "int | None": int | None,
    "bool | None": bool | None,
    "tuple[str, ...]": _LISTED,
    "Any": Any,
    "dict[str, Any]": dict[str, Any],
    "tuple[dict[str, Any], ...]": tuple[dict[str, Any], ...],
}
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})
#: A field in `_plain_form`'s table: its name, its key, what makes its value (None: as it is);
#: one left out at its default also has that default, or the factory that makes it.
_Field = tuple[str, str, Callable[[Any], Any] | None]
_Optional = tuple[str, str, Callable[[Any], Any] | None, Any, Callable[[], Any] | None]


@functools.cache
def _plain_form(cls: type) -> Callable[[Any], dict[str, Any]] | None:
    """The converter's function for `cls` (see `_unstructure_factory`), as a table of its
    fields; None when a field's metadata, converter or type needs the converter itself.

    The converter's order: the fields always there first, then those it leaves out at their
    default, each in the class's order. `tests/test_convert.py` holds the two forms equal
    for every frame class.
    """
    kept: list[_Field] = []
    optional: list[_Optional] = []
    for a in attrs.fields(cls):
        if a.metadata.get(OMIT_KEY, False):
            continue
        if not a.init or a.converter is not None or {SHOWN_WITH, TO_WIRE} & a.metadata.keys():
            return None
        declared = _declared(a.type, vars(sys.modules[cls.__module__]))
        make: Callable[[Any], Any] | None
        if declared in _AS_IS or _is_str_enum(declared):
            make = None
        elif declared == _LISTED:
            make = list
        elif declared in _DYNAMIC:
            make = functools.partial(_dynamic, declared)
        else:
            return None
        default: Any = a.default
        if default is attrs.NOTHING or a.metadata.get(KEEP_KEY, False):
            kept.append((a.name, wire_name(a), make))
        elif not isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            optional.append((a.name, wire_name(a), make, default, None))
        elif not default.takes_self:
            optional.append((a.name, wire_name(a), make, None, default.factory))
        else:
            return None
    return functools.partial(_plainly, tuple(kept), tuple(optional))


def _declared(annotation: Any, names: Mapping[str, Any]) -> Any:
    """A field's type, from its annotation as written or as resolved: an optional enum as the
    enum (None passes as it is either way); a name the class's module does not have, None."""
    if isinstance(annotation, str):
        if annotation in _WRITTEN:
            return _WRITTEN[annotation]
        return names.get(annotation.removesuffix(" | None"))
    if isinstance(annotation, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and _is_str_enum(args[0]):
            return args[0]
    return annotation


def _is_str_enum(declared: object) -> bool:
    return (
        isinstance(declared, type) and issubclass(declared, enum.Enum) and issubclass(declared, str)
    )


def _dynamic(declared: Any, value: Any) -> Any:
    return value if type(value) in _SCALARS else converter().unstructure(value, declared)


def _plainly(kept: tuple[_Field, ...], optional: tuple[_Optional, ...], obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, key, make in kept:
        value = getattr(obj, name)
        out[key] = value if make is None else make(value)
    for name, key, make, default, factory in optional:
        value = getattr(obj, name)
        if value != (default if factory is None else factory()):
            out[key] = value if make is None else make(value)
    return out
