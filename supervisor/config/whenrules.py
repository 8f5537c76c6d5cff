"""The `when` rules the schema cannot say: a key the hook's point (or, observing, the bus)
does not provide, and an observe hook's `when.kinds` entry that no event it follows can
match. A filter that would never be looked at, or never let anything through, is refused
with its file and pointer, never ignored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..core.errors import Problem
from ..core.events import EventKind, kind_matches, kind_prefixes
from ..core.points import DEFAULT_PHASE, Phase, When, when_keys
from .closest import did_you_mean
from .problems import describe, pointer, quote_key

_PHASE_WORDS: Final = frozenset(p.value for p in Phase)


def when_rules(obj: Mapping[str, Any], file: str, ptr: str) -> list[Problem]:
    """What is wrong with hook `obj`'s `when` (declared at `file`:`ptr`) beyond its schema."""
    when = obj.get("when")
    if when is None:
        return []
    on, phase = obj.get("on"), obj.get("phase", DEFAULT_PHASE.value)
    if not (isinstance(when, Mapping) and isinstance(on, str) and isinstance(phase, str)):
        return []
    if phase not in _PHASE_WORDS:
        return []  # the schema says what is wrong with them
    keys = when_keys(on, Phase(str(phase)))
    if keys is None:
        return []  # a point nothing fires: the schema says so
    where = "observe hooks" if phase == Phase.OBSERVE.value else f'the point "{on}"'
    problems = [
        Problem(
            file,
            ptr + pointer(["when", key]),
            f"{quote_key(key)} is not a when key of {where} (its keys: {', '.join(keys)})"
            + did_you_mean(key, keys),
        )
        for key in when
        if key not in keys
    ]
    if not problems and phase == Phase.OBSERVE.value:
        problems += _kinds_rules(when.get(When.KINDS), on, file, ptr)
    return problems


def _kinds_rules(kinds: Any, on: str, file: str, ptr: str) -> list[Problem]:
    """Each `when.kinds` entry that is no kind the bus publishes (nor a prefix of one), or
    that takes no kind the hook's `on` follows: as written it never lets an event through."""
    if not isinstance(kinds, list) or on not in kind_prefixes():
        return []  # (the schema, or the rule on `on`, says what is wrong)
    known = kind_prefixes()
    problems = []
    for index, kind in enumerate(kinds):
        if not isinstance(kind, str):
            continue
        where = ptr + pointer(["when", When.KINDS, index])
        if kind not in known:
            problems.append(
                Problem(
                    file,
                    where,
                    "expected an event kind the bus publishes, or a prefix of one, found"
                    f" {describe(kind)}: as written it never matches" + did_you_mean(kind, known),
                )
            )
        elif not any(kind_matches(k, (on,)) and kind_matches(k, (kind,)) for k in EventKind):
            followed = [k.value for k in EventKind if kind_matches(k, (on,))]
            problems.append(
                Problem(
                    file,
                    where,
                    f'expected a kind the hook follows (on = "{on}": {", ".join(followed)}),'
                    f" found {describe(kind)}: as written it never matches",
                )
            )
    return problems
