"""`@placeholders` in a plugin hook's `args`: `@name` or `@name.path.to.key`. Pure.

A string that is exactly one placeholder takes the value with its JSON type; a placeholder
inside a longer string becomes its JSON text (a string with its quotes). `@@` is a literal
`@`. Keys of objects are left as they are; lists and objects are walked to any depth. A name
that is not given, or a path into a value that has no such key or index, is a
`PlaceholderError` naming the placeholder.

Names (what `plugin_names` in `run/pluginhook.py` gives): the built-ins `input`, `result`,
`error`, `run`, `hook`, `event` and `artifacts` where the phase has them, the hook's `vars`,
the run's per-call placeholders.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

#: The built-in names, whatever the phase has of them.
BUILT_INS: Final = ("input", "result", "error", "run", "hook", "event", "artifacts")

PLACEHOLDER: Final = re.compile(r"@@|@([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_-]+)*)")
_WHOLE: Final = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_-]+)*)")


class PlaceholderError(ValueError):
    """A placeholder that names nothing given, or a path into a value that is not there."""


def resolve(value: Any, names: Mapping[str, Any]) -> Any:
    """`value` (a JSON value) with every placeholder in its strings replaced from `names`."""
    if isinstance(value, str):
        return _string(value, names)
    if isinstance(value, Mapping):
        return {k: resolve(v, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [resolve(v, names) for v in value]
    return value


def names_in(value: Any) -> set[str]:
    """The placeholder names `value` uses (for validation)."""
    if isinstance(value, str):
        return {m.group(1) for m in PLACEHOLDER.finditer(value) if m.group(1)}
    if isinstance(value, Mapping):
        return set().union(*(names_in(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(names_in(v) for v in value))
    return set()


def _string(text: str, names: Mapping[str, Any]) -> Any:
    whole = _WHOLE.fullmatch(text)
    if whole is not None:
        return _lookup(whole.group(1), whole.group(2), names, text)

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "@@":
            return "@"
        found = _lookup(m.group(1), m.group(2), names, m.group(0))
        return json.dumps(found, ensure_ascii=False, separators=(",", ":"))

    return PLACEHOLDER.sub(one, text)


def _lookup(name: str, path: str, names: Mapping[str, Any], shown: str) -> Any:
    if name not in names:
        given = ", ".join(sorted(names)) or "none"
        raise PlaceholderError(f"{shown}: no placeholder named {name!r} here (given: {given})")
    value = names[name]
    walked = "@" + name
    for key in path.split(".")[1:]:
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise PlaceholderError(f"{shown}: {walked} has no {key!r}")
        walked += "." + key
    return value
