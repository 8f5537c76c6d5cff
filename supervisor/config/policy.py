"""Who may declare what across layers: ceilings only fall, locked hooks stay.

Pure functions over validated layers (`build.Layer`), farthest first; `build.py` builds the
`Config` from what `merge_layers` resolves.

**Ceilings** (`CEILINGS`): `autonomy.max`, every `[limits]` value, and the two sandbox
defaults (`[defaults] sandbox` for hooks, `[script] sandbox` for runs). A nearer layer may
lower one (a smaller level or number, a profile at least as strict, a `[defaults] network`
list every item of which a farther item covers), never raise it: a value
that would raise the one in force is dropped from that layer, with a warning naming both files,
and the lower one stays. A ceiling no farther layer set may be set to anything.

**Locked hooks** (`locked = true`, with a `name`): a nearer layer's `hooks` list that leaves
one out keeps it, at its index in the farther list; a nearer declaration with its name is a
problem naming the locking file and pointer, unless it is the same declaration (the same keys,
from the same directory); `enabled = false` is said as disabling. A locked hook keeps the
`[defaults]` in force where it was declared: a nearer `[defaults]` cannot change its effect,
timeout or sandbox either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..core import egress
from ..core.effects import Effect
from ..core.errors import Problem
from ..core.hooks import Profile, at_least_as_strict
from ..core.limits import LIMIT_KEYS
from ..core.models import BUDGET_KEY
from ..core.places import shown_file
from ..core.records import Record
from . import layering

if TYPE_CHECKING:
    from .build import Decl, Layer


@attrs.frozen(repr=False, eq=False)
class Ceiling(Record):
    """A value that only falls: where it is, and whether a nearer value is at most a farther."""

    path: tuple[str, str]
    at_most: Callable[[Any, Any], bool]
    #: What a nearer value that is not at most would do, and what a nearer file may do.
    verb: str = "raise"
    may: str = "lower it"

    @property
    def key(self) -> str:
        return ".".join(self.path)


def _effect_at_most(nearer: Any, farther: Any) -> bool:
    return Effect.parse(nearer) <= Effect.parse(farther)


def _int_at_most(nearer: Any, farther: Any) -> bool:
    return int(nearer) <= int(farther)


def _profile_at_most(nearer: Any, farther: Any) -> bool:
    return at_least_as_strict(Profile(nearer), Profile(farther))


def _network_at_most(nearer: Any, farther: Any) -> bool:
    return egress.narrows(nearer, farther)


#: The ceilings, by where they are in a document.
CEILINGS: Final = (
    Ceiling(("autonomy", "max"), _effect_at_most),
    *(Ceiling(("limits", key), _int_at_most) for key, _, _, _ in LIMIT_KEYS),
    Ceiling(("defaults", "sandbox"), _profile_at_most, "loosen", "make it stricter"),
    Ceiling(("script", "sandbox"), _profile_at_most, "loosen", "make it stricter"),
    Ceiling(("models", BUDGET_KEY), _int_at_most),
    Ceiling(("defaults", egress.NETWORK_KEY), _network_at_most, "widen", "narrow it"),
)


@attrs.frozen(repr=False, eq=False)
class Merged(Record):
    """The layers resolved (`layering.merge_all`, with the policy applied), and what it said."""

    doc: dict[str, Any]
    warnings: list[str]
    problems: list[Problem]


def merge_layers(layers: Sequence[Layer]) -> Merged:
    """The layers, farthest first, merged under the ceilings and the locks (module docstring)."""
    resolved: dict[str, Any] = {}
    set_by: dict[tuple[str, str], str] = {}
    locked: dict[str, Decl] = {}
    warnings: list[str] = []
    problems: list[Problem] = []
    # Each step costs what its layer holds, not what the layers before it left: a request's
    # per-call hooks are a layer each, and 5,000 of them took 7 s of admission (the GIL
    # held as long) when every step went over every hook in force.
    for layer in layers:
        doc = _hold_ceilings(resolved, dict(layer.doc), layer.file, set_by, warnings)
        farther_hooks: list[Decl] = resolved.get("hooks", [])  # (`merge` makes a new list)
        if "hooks" in doc:
            doc["hooks"] = _check_locked(doc["hooks"], locked, problems)
        resolved = layering.merge(resolved, doc)
        if "hooks" in doc:
            # A list that splices the farther one in (a `None`) keeps every locked hook.
            if locked and None not in doc["hooks"]:
                resolved["hooks"] = _keep_locked(farther_hooks, resolved["hooks"], locked)
            # Only a hook of this layer can be locked and not pinned yet.
            if any(d is not None and d.obj.get("locked") is True for d in doc["hooks"]):
                resolved["hooks"] = [_pin(d, resolved, locked) for d in resolved["hooks"]]
    return Merged(resolved, warnings, problems)


def _pin(decl: Decl, resolved: Mapping[str, Any], locked: dict[str, Decl]) -> Decl:
    """A locked hook first in force: registered, with the `[defaults]` in force now."""
    name = decl.obj.get("name")
    if decl.obj.get("locked") is True and isinstance(name, str) and name not in locked:
        locked[name] = attrs.evolve(decl, defaults=dict(resolved.get("defaults", {})))
        return locked[name]
    return decl


def _hold_ceilings(
    resolved: Mapping[str, Any],
    doc: dict[str, Any],
    file: str,
    set_by: dict[tuple[str, str], str],
    warnings: list[str],
) -> dict[str, Any]:
    """`doc` without the ceilings it would raise (each said in `warnings`)."""
    for ceiling in CEILINGS:
        table, key = ceiling.path
        nearer_table = doc.get(table)
        if not isinstance(nearer_table, Mapping) or key not in nearer_table:
            continue
        nearer = nearer_table[key]
        farther_table = resolved.get(table, {})
        if key in farther_table and not ceiling.at_most(nearer, farther_table[key]):
            farther = farther_table[key]
            warnings.append(
                f"{shown_file(file)}: {ceiling.key} {_shown(nearer)} would {ceiling.verb}"
                f" the ceiling {_shown(farther)} set by {shown_file(set_by[ceiling.path])};"
                f" a nearer file may only {ceiling.may}, so {_shown(farther)} stays in force"
            )
            doc[table] = {k: v for k, v in nearer_table.items() if k != key}
        else:
            set_by[ceiling.path] = file
    return doc


def _check_locked(
    items: Sequence[Decl | None], locked: Mapping[str, Decl], problems: list[Problem]
) -> list[Decl | None]:
    """The layer's hooks, those that would disable or redefine a locked hook taken out (each
    a problem naming the locking file)."""
    kept: list[Decl | None] = []
    for decl in items:
        name = None if decl is None else decl.obj.get("name")
        lock = locked.get(name) if isinstance(name, str) else None
        if decl is None or lock is None:
            kept.append(decl)
            continue
        if decl.obj == lock.obj and decl.declaring_dir == lock.declaring_dir:
            kept.append(lock)  # the same declaration: the locked one, at this place
            continue
        where = f"{shown_file(lock.file)}:{lock.pointer or '/'}"
        if decl.obj.get("enabled") is False and lock.obj.get("enabled") is not False:
            problems.append(
                Problem(
                    decl.file,
                    f"{decl.pointer}/enabled",
                    f'hook "{name}" is locked by {where}: a nearer file may not disable it',
                )
            )
        else:
            same_keys = " (the same keys, from another directory)" if decl.obj == lock.obj else ""
            problems.append(
                Problem(
                    decl.file,
                    decl.pointer,
                    f'hook "{name}" is locked by {where}: a nearer file may not redefine'
                    f"{same_keys} it; leave it out and it stays in force",
                )
            )
    return kept


def _keep_locked(
    farther: Sequence[Decl], merged: Sequence[Decl], locked: Mapping[str, Decl]
) -> list[Decl]:
    """`merged` with each locked hook of `farther` it left out put back at its farther index."""
    out = list(merged)
    present = {decl.obj.get("name") for decl in out}
    for index, decl in enumerate(farther):
        name = decl.obj.get("name")
        if isinstance(name, str) and locked.get(name) is decl and name not in present:
            out.insert(min(index, len(out)), decl)
    return out


def _shown(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)
