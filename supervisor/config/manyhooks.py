"""The schema's problems of a config with many hooks, found without walking every hook with
jsonschema.

jsonschema's walk of a hook costs about 0.3 ms, so a generated file of 50,000 hooks each
wrong in its own way took some 20 s to be told so. Here the document is checked without its
hooks, and each hook on its own: the compiled quick check passes the valid ones, and of an
invalid one jsonschema walks only what is wrong with it, each thing once:

* a hook's *frame*: the hook schema's rules on the hook as a whole (one action, `on` known,
  `args` only with `plugin`, its `on` for its `phase`) depend on its keys, its `on` and its
  `phase`, and on which of its other values are valid, never on what those values are. The
  frame's problems (at the hook, at `on` and at `phase`) are found once per frame;
* a value that its key's schema refuses (`run = "true"`): walked on its own, once per key and
  value, its problems at the key's pointer;
* a key the schema does not know: said once per set of unknown keys.

Which values are valid is asked of a compiled check of the hook's properties, a value at a
time. Every problem is still found, with its file and pointer, in the same words as a walk
of the whole document says it (`tests/test_validate_speed.py` holds the two equal).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..core.errors import Problem
from .problems import pointer_key, problems

if TYPE_CHECKING:
    import jsonschema

#: Below this many hooks the whole document is walked at once (the split saves nothing).
SPLIT_FROM: Final = 64
#: The keys whose values the frame's rules read (`if` phase is "observe", `then`/`else` on).
_FRAME_KEYS: Final = ("on", "phase")


def split_problems(
    doc: dict[str, Any],
    hooks: Sequence[Any],
    file: str,
    *,
    whole: jsonschema.Draft202012Validator,
    one: jsonschema.Draft202012Validator,
    keys: jsonschema.Draft202012Validator,
    quick_hook: Callable[[Any], bool],
    quick_value: Callable[[Any], bool],
) -> list[Problem]:
    """The problems `whole` (the config's validator) finds in `doc`, whose `hooks` are
    `hooks`: the rest of the document's with `whole`; of each hook that `quick_hook` does not
    pass, its frame's with `one` (one hook's validator) once per frame, and with `keys` (the
    hook's properties, no other key allowed) each value `quick_value` refuses (given as
    `{key: value}`) once per key and value and its unknown keys once per set of them."""
    found = problems(whole, {**doc, "hooks": []}, file)
    split = _Split(file, one, keys, quick_value)
    for index, hook in enumerate(hooks):
        if hook is None or quick_hook(hook):  # (`null` splices the farther layers in)
            continue
        at = f"/hooks/{index}"
        found += [Problem(p.file, at + p.pointer, p.message) for p in split.problems(hook)]
    return sorted(found, key=lambda p: pointer_key(p.pointer))


class _Split:
    """The problems of invalid hooks, each part found once (the module docstring)."""

    def __init__(
        self,
        file: str,
        one: jsonschema.Draft202012Validator,
        keys: jsonschema.Draft202012Validator,
        quick_value: Callable[[Any], bool],
    ) -> None:
        self.file, self.one, self.keys, self.quick_value = file, one, keys, quick_value
        schema: Any = keys.schema
        self.known: frozenset[str] = frozenset(schema["properties"])
        #: Each frame's own problems (None: a frame walked whole every time).
        self.frames: dict[str, list[Problem] | None] = {}
        self.values: dict[tuple[str, str], list[Problem]] = {}
        self.unknown: dict[tuple[str, ...], list[Problem]] = {}

    def problems(self, hook: Any) -> list[Problem]:
        """What `one` finds wrong with `hook`, sorted by pointer."""
        if not isinstance(hook, dict):
            return problems(self.one, hook, self.file)
        own = [k for k in hook if k in self.known and k not in _FRAME_KEYS]
        bad = [k for k in own if not self.quick_value({k: hook[k]})]
        unknown = tuple(k for k in hook if k not in self.known)
        frame = _frame(hook, bad, unknown)
        if frame is None or self.frames.get(frame, []) is None:
            return problems(self.one, hook, self.file)
        # In the order the hook schema says them at one pointer: unknown keys
        # (`additionalProperties`), values (`properties`), then the frame's rules.
        parts = [*self._unknown(unknown)]
        for key in bad:
            parts += self._value(key, hook[key])
        if frame not in self.frames:
            said = problems(self.one, hook, self.file)
            taken = {(p.pointer, p.message) for p in parts}
            # The parts are the whole walk's by construction; were one not among them, this
            # frame is walked whole every time (never a problem lost or made up).
            shared = taken <= {(p.pointer, p.message) for p in said}
            self.frames[frame] = (
                [p for p in said if (p.pointer, p.message) not in taken] if shared else None
            )
            return said
        frame_said = self.frames[frame] or []
        return sorted([*parts, *frame_said], key=lambda p: pointer_key(p.pointer))

    def _value(self, key: str, value: Any) -> list[Problem]:
        """The problems of a value its key's schema refuses, once per key and value."""
        dumped = _dumped(value)
        if dumped is None:
            return problems(self.keys, {key: value}, self.file)
        if (key, dumped) not in self.values:
            self.values[key, dumped] = problems(self.keys, {key: value}, self.file)
        return self.values[key, dumped]

    def _unknown(self, unknown: tuple[str, ...]) -> list[Problem]:
        """The problems of keys the schema does not know, once per set of them."""
        if not unknown:
            return []
        if unknown not in self.unknown:
            self.unknown[unknown] = problems(self.keys, dict.fromkeys(unknown), self.file)
        return self.unknown[unknown]


def _frame(hook: dict[str, Any], bad: list[str], unknown: tuple[str, ...]) -> str | None:
    """What a hook's frame's problems depend on: its known keys in order, which of them hold
    a refused value, and its `on` and `phase` (None when they are not JSON: not shared)."""
    known = [k for k in hook if k not in unknown]
    frame = [known, bad, [[k in hook, hook.get(k)] for k in _FRAME_KEYS]]
    return _dumped(frame)


def _dumped(value: Any) -> str | None:
    """`value` as a key to share its problems by: its JSON, or for a value that has none (a
    TOML date or time) its `repr`, which tells every type TOML gives apart (a date
    from a string that reads like one); `None` for what neither says whole."""
    try:
        return "j" + json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        pass
    try:
        return "r" + repr(value) if _toml_only(value) else None
    except RecursionError:  # (a document deeper than `jsontext.MAX_DEPTH` is never walked)
        return None


def _toml_only(value: Any) -> bool:
    """Whether `value` holds nothing but what a TOML or JSON reader gives (dates, times and
    floats among them), each of which `repr` says whole and apart from the others."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _toml_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_toml_only(item) for item in value)
    return value is None or isinstance(value, _SCALARS)


_SCALARS: Final = (str, bool, int, float, datetime.date, datetime.time)
