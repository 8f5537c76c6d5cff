"""Config layering: tables merge key by key, lists follow the null-splice rule.

Pure functions over plain data; `build.py` feeds them validated documents, farthest first.

The null-splice rule: a nearer list replaces the farther one unless it holds `null`; each `null`
is replaced by the farther layers' resolved list (so `[null, x]` appends, `[x, null]` prepends,
`[null, x, null]` puts the farther list on both sides). A `null` in the farthest layer splices
in nothing. Items other than `null` are kept as they are (objects included), so callers can
wrap list items to carry where they came from.

Some lists append instead (`APPEND`: `[sandbox] read`, `write` and `deny`): a nearer layer adds its
items after the farther layers', and cannot take any away. A path a farther (for example a
system-wide) layer lets every sandbox see stays, whatever a project's file says; an item
already there is not added twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

T = TypeVar("T")

#: The lists that append across layers, by their keys from the document's root.
APPEND: Final = frozenset({("sandbox", "read"), ("sandbox", "write"), ("sandbox", "deny")})


def splice(farther: Sequence[T], nearer: Sequence[T | None]) -> list[T]:
    """`nearer` with each `None` replaced by the items of `farther`."""
    out: list[T] = []
    for item in nearer:
        if item is None:
            out.extend(farther)
        else:
            out.append(item)
    return out


def append(farther: Sequence[T], nearer: Sequence[T]) -> list[T]:
    """`farther`, then the items of `nearer` it does not hold yet."""
    out = list(farther)
    out.extend(item for item in nearer if item not in out)
    return out


def merge(
    farther: Mapping[str, Any], nearer: Mapping[str, Any], at: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`nearer` layered over `farther`: mappings merge key by key (nearer wins), lists splice
    (or, at the keys in `APPEND`, append), anything else is replaced. `farther` must already
    be resolved (no `None` in its lists). `at`: where these mappings are in the document."""
    out = dict(farther)
    for key, value in nearer.items():
        old = out.get(key)
        where = (*at, key)
        if isinstance(value, Mapping):
            out[key] = merge(old if isinstance(old, Mapping) else {}, value, where)
        elif isinstance(value, list):
            old_list = old if isinstance(old, list) else []
            out[key] = append(old_list, value) if where in APPEND else splice(old_list, value)
        else:
            out[key] = value
    return out


def merge_all(layers: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The layers, farthest first, resolved into one mapping with no `None` left in lists."""
    resolved: dict[str, Any] = {}
    for layer in layers:
        resolved = merge(resolved, layer)
    return resolved
