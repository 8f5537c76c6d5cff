"""The schema's problems of a config with many hooks, found without walking every hook with
jsonschema.

jsonschema's walk costs about 0.35 ms a hook, so a generated file of 50,000 hooks that are all
wrong the same way (one key missing) took some 20 s to be told so. Here the document is
checked without its hooks, and each hook on its own: the compiled quick check passes the valid
ones (about 25 µs each), and jsonschema is asked about each *shape* of invalid hook once: hooks
that differ only by a valid `name` have the same problems, at their own pointers (and a shape
seen before is not checked again at all). Every
problem is still found, with its file and pointer, and said in the same words as a walk of
the whole document would say it (`tests/test_validate_speed.py` holds the two equal).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..core.errors import Problem
from .problems import pointer_key, problems

if TYPE_CHECKING:
    import jsonschema

#: Below this many hooks the whole document is walked at once (the split saves nothing).
SPLIT_FROM: Final = 64
#: A name every hook's shape is checked under (a valid one: see `_shape`).
_SOME_NAME: Final = "h"


def split_problems(
    doc: dict[str, Any],
    hooks: Sequence[Any],
    file: str,
    *,
    whole: jsonschema.Draft202012Validator,
    one: jsonschema.Draft202012Validator,
    quick_hook: Callable[[Any], bool],
) -> list[Problem]:
    """The problems `whole` (the config's validator) finds in `doc`, whose `hooks` are
    `hooks`: the rest of the document's with `whole`, each hook's with `one` (one hook's
    validator) when `quick_hook` says it is not valid, once per shape."""
    found = problems(whole, {**doc, "hooks": []}, file)
    seen: dict[str, list[Problem]] = {}
    for index, hook in enumerate(hooks):
        if hook is None:  # (`null` splices the farther layers in)
            continue
        shape = _shape(hook)
        said = seen.get(shape) if shape is not None else None
        if said is None:
            said = [] if quick_hook(hook) else problems(one, hook, file)
            if shape is not None:
                seen[shape] = said
        at = f"/hooks/{index}"
        found += [Problem(p.file, at + p.pointer, p.message) for p in said]
    return sorted(found, key=lambda p: pointer_key(p.pointer))


def _shape(hook: Any) -> str | None:
    """What a hook's problems depend on: the hook with a valid `name` set aside (None when
    it is not an object or its name is not valid: checked as it is, not shared)."""
    if not isinstance(hook, dict):
        return None
    if "name" in hook and not _name_valid(hook["name"]):
        return None
    named = {**hook, "name": _SOME_NAME} if "name" in hook else hook
    try:
        return json.dumps(named, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _name_valid(name: Any) -> bool:
    return _name_check()(name)


@functools.cache
def _name_check() -> Callable[[Any], bool]:
    """The quick check of a hook's `name` (its schema is a plain string's: draft 7 as is)."""
    from .configschema import build_config_schema
    from .schemacache import compiled_check

    name = build_config_schema()["$defs"]["hook"]["properties"]["name"]
    return compiled_check("hook-name", json.loads(json.dumps(name)))
