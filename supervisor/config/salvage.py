"""What `validate` still layers of a document with problems, so that the rules that need
every hook and every layer (a hook's name unique, `failure = "closed"` with an effect that may
refuse, a locked hook kept, a plugin hook's server declared, `parallel` only with an advising
effect) are checked in the same pass as the schema, over what is sound, and none of them says
what only follows from a problem already said:

* a hook with a problem stays, without the keys a problem is under (`Salvaged.hooks` names
  them, "" for a problem about the hook as a whole): its name still counts among the names,
  and each rule that reads only its sound keys is checked (`build.py`); one whose `on`, `phase`
  or action is unsound is never built into a hook. A hook that is not an object is left out;
* a table with a problem stays without the entry a problem is under (`[defaults] effect`,
  `[servers.fs]`); that entry is *unknown* (`Salvaged.unknown`): a rule that would read it (a
  hook's effect taken from `[defaults]`, a plugin hook's server) is not checked. A problem
  about a table as a whole makes the table unknown;
* a problem about the whole document leaves nothing to layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from ..core.errors import Problem
from ..core.records import Record

#: Where a problem about a hook as a whole is said to be (not a key of it).
WHOLE: Final = ""


@attrs.frozen(repr=False, eq=False)
class Salvaged(Record):
    """A document's sound parts: `doc` (its hooks without their unsound keys), the unsound
    keys of each hook by index, the hooks left out, and the table entries unknown."""

    doc: dict[str, Any]
    hooks: Mapping[int, frozenset[str]]
    dropped: frozenset[int]
    unknown: frozenset[tuple[str, ...]]


def salvaged(doc: Any, problems: Sequence[Problem]) -> Salvaged | None:
    """What `validate` still layers of `doc`, whose problems are `problems` (the module
    docstring); None when a problem is about the whole document."""
    if not isinstance(doc, dict):
        return None
    hooks_in = doc.get("hooks")
    hook_list = hooks_in if isinstance(hooks_in, list) else []
    tables: dict[str, set[str] | None] = {}
    hooks: dict[int, set[str]] = {}
    for problem in problems:
        tokens = [_unescaped(t) for t in problem.pointer.split("/")[1:]]
        if not tokens:
            return None
        head, rest = tokens[0], tokens[1:]
        if head == "hooks" and rest and isinstance(hooks_in, list):
            index = int(rest[0]) if rest[0].isascii() and rest[0].isdigit() else -1
            hook = hook_list[index] if 0 <= index < len(hook_list) else None
            if hook is None:
                tables["hooks"] = None  # (a pointer past the list: not one of its hooks)
                continue
            key = rest[1] if len(rest) > 1 and isinstance(hook, dict) else WHOLE
            hooks.setdefault(index, set()).add(
                key if isinstance(hook, dict) and key in hook else WHOLE
            )
        elif rest and isinstance(doc.get(head), dict) and rest[0] in doc[head]:
            entries = tables.setdefault(head, set())
            if entries is not None:
                entries.add(rest[0])
        else:
            tables[head] = None
    out: dict[str, Any] = {}
    unknown: set[tuple[str, ...]] = set()
    for key, value in doc.items():
        if key in tables and (entries := tables[key]) is None:
            unknown.add((key,))
        elif key in tables and isinstance(value, dict):
            out[key] = {k: v for k, v in value.items() if k not in (entries or ())}
            unknown.update((key, k) for k in entries or ())
        else:
            out[key] = value
    dropped = frozenset(i for i in hooks if not isinstance(hook_list[i], dict))
    bad = {i: frozenset(keys) for i, keys in hooks.items() if i not in dropped}
    if "hooks" in out:
        out["hooks"] = [
            {k: v for k, v in obj.items() if k not in bad[i]} if i in bad else obj
            for i, obj in enumerate(hook_list)
        ]
    return Salvaged(out, bad, dropped, frozenset(unknown))


def without(doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != key}


@attrs.frozen(repr=False, eq=False)
class Unknown(Record):
    """The table entries in force whose values are not known (a problem took them out)."""

    paths: frozenset[tuple[str, ...]] = frozenset()

    def __call__(self, table: str, key: str) -> bool:
        """Whether `[table] key` in force is not known."""
        return bool(self.paths) and ((table,) in self.paths or (table, key) in self.paths)

    def table(self, table: str) -> bool:
        """Whether some entry of `[table]` in force may be missing."""
        return any(path[0] == table for path in self.paths)


def unknown_in_force(
    layers: Iterable[tuple[Mapping[str, Any], frozenset[tuple[str, ...]]]],
) -> Unknown:
    """The entries unknown in force, of the layers (each its document and its entries
    unknown), farthest first: an entry a nearer layer gives soundly is known again."""
    unknown: set[tuple[str, ...]] = set()
    for doc, own in layers:
        if unknown:
            for key, table in doc.items():
                if key != "hooks" and isinstance(table, Mapping):
                    unknown.difference_update((key, k) for k in table)
        unknown |= own
    return Unknown(frozenset(unknown))


def _unescaped(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")
