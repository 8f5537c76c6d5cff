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
(~9 ms to import), which `validate` and `hooks list` never need.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

if TYPE_CHECKING:
    import cattrs

#: Field metadata: `{WIRE: "name"}` names a field on the wire; `KEEP` keeps it there even at
#: its default; `{SHOWN_WITH: "other"}` keeps it there whenever the field `other` is true;
#: `OMIT` keeps it off the wire (it stays in the process).
WIRE: Final = "wire"
_KEPT: Final = "mcpx.keep"
KEEP: Final = MappingProxyType({_KEPT: True})
SHOWN_WITH: Final = "mcpx.shown_with"
_OMITTED: Final = "mcpx.omit"
OMIT: Final = MappingProxyType({_OMITTED: True})
#: Field metadata: `{FROM_WIRE: f}` makes the field's value from its JSON value, `f(value)`
#: (a field the JSON leaves out keeps its default); `{TO_WIRE: g}` its JSON value, `g(value)`.
FROM_WIRE: Final = "mcpx.from_wire"
TO_WIRE: Final = "mcpx.to_wire"

_T = TypeVar("_T")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _wire_name(field: attrs.Attribute[Any]) -> str:
    """What a field is called on the wire."""
    return str(field.metadata.get(WIRE, _camel(field.name)))


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
            rename=_wire_name(a),
            omit_if_default=a.default is not attrs.NOTHING and not a.metadata.get(_KEPT, False),
            omit=a.metadata.get(_OMITTED, False),
            unstruct_hook=a.metadata.get(TO_WIRE),
        )
        for a in fields
    }
    base: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, converter, **overrides)
    shown = tuple(
        (a.name, _wire_name(a), a.metadata[SHOWN_WITH]) for a in fields if SHOWN_WITH in a.metadata
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
            rename=_wire_name(a),
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
