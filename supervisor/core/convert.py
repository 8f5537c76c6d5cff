"""The one converter from the domain's attrs shapes to their JSON form: frames, answers, the
run a hook is told of, events, hooks in force, the service's error message.

Field names are snake_case in the classes and camelCase on the wire, unless a field's `WIRE`
metadata names it otherwise. A field still at its default is left out, so a frame says only
what happened; `KEEP` marks the fields consumers rely on being there even when empty, and
`SHOWN_WITH` the ones that must be there whenever another field is true (a `null` that an
`apply` put in place is still worth showing).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Final

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from .hooks import Hook, Provenance, hook_json, provenance_json

#: Field metadata: `{WIRE: "name"}` names a field on the wire; `KEEP` keeps it there even at
#: its default; `{SHOWN_WITH: "other"}` keeps it there whenever the field `other` is true;
#: `OMIT` keeps it off the wire (it stays in the process).
WIRE: Final = "wire"
_KEPT: Final = "mcpx.keep"
KEEP: Final = MappingProxyType({_KEPT: True})
SHOWN_WITH: Final = "mcpx.shown_with"
_OMITTED: Final = "mcpx.omit"
OMIT: Final = MappingProxyType({_OMITTED: True})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _wire_name(field: attrs.Attribute[Any]) -> str:
    """What a field is called on the wire."""
    return str(field.metadata.get(WIRE, _camel(field.name)))


converter: Final = cattrs.Converter()


def _unstructure_factory(cls: type) -> Callable[[Any], dict[str, Any]]:
    fields = attrs.fields(cls)
    overrides: dict[str, Any] = {
        a.name: override(
            rename=_wire_name(a),
            omit_if_default=a.default is not attrs.NOTHING and not a.metadata.get(_KEPT, False),
            omit=a.metadata.get(_OMITTED, False),
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


converter.register_unstructure_hook_factory(attrs.has, _unstructure_factory)
# Shaped by hand: a hook's target goes under its action's name.
converter.register_unstructure_hook(Hook, hook_json)
converter.register_unstructure_hook(Provenance, provenance_json)


def to_json(obj: Any) -> dict[str, Any]:
    """The wire form of an attrs shape: a dict of JSON values (enums as their str/int
    subclasses), ready for the one encoding policy (`jsontext`)."""
    out: dict[str, Any] = converter.unstructure(obj)
    return out
