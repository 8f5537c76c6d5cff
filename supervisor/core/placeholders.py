"""`@placeholders`, in a prompt hook's text and a plugin hook's `args`: how they are spelt,
which built-ins each phase has, the checks validation makes of a prompt hook, and how `args`
take their values. Pure.

A placeholder is `@name` or `@name.path.to.key` (the spelling of mcpx recipes and
launchers): a name (a letter or `_`, then letters, digits, `_`, `-`) and, after dots, keys
of the value (a list's items by their index, `@result.value.0`). An `@` right after a letter
or digit (an email address) is not one; `@@` is a literal `@`. In a prompt, a path that
leads nowhere gives `null` (`lookup`); in a plugin hook's `args` it fails the hook, naming
the placeholder (`resolve`), since a tool call must not go out with an argument gone.

Names are the built-ins (`BUILTINS`, which a phase has by `PHASE_BUILTINS`), then the hook's
`vars`; a run's `placeholders` give other values for the names of `vars`, never for a
built-in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from .errors import HooksError
from .points import Phase
from .records import Record

#: `@name(.key)*`, not after a word character or another `@` (`@@` is a literal `@`).
PLACEHOLDER: Final = re.compile(r"@@|(?<![\w@])@([A-Za-z_][\w-]*)((?:\.[\w-]+)*)")

#: The block that carries the hook input when a prompt names no built-in: not a var's name.
RESERVED: Final = "context"
#: Each built-in placeholder and what it holds.
BUILTINS: Final[dict[str, str]] = {
    "input": "the run's input (`before`)",
    "result": "the result, `{value}` (`onSuccess`; `suffix` after a success, else null)",
    "error": "the error, `{message, exitCode, stderrTail, stdoutTail}` (`onError`; `suffix`"
    " after a failure, else null)",
    "run": "the run: `{runId, argv, cwd, startedAt}`",
    "hook": "the hook: `{name, on, phase, action, effect, timeoutMs}`",
    "event": "the event an observe hook follows",
    "artifacts": "the run's artifact frames so far: `[{id, name, mime, size, sha256}]`",
    "source": "the text of a `--python` script (or `-c` code); null for an argv script",
}

#: The built-ins each phase has: naming another is a validation error.
PHASE_BUILTINS: Final[dict[Phase, frozenset[str]]] = {
    Phase.BEFORE: frozenset({"input", "run", "hook", "source"}),
    Phase.ON_SUCCESS: frozenset({"result", "run", "hook", "artifacts", "source"}),
    Phase.ON_ERROR: frozenset({"error", "run", "hook", "artifacts", "source"}),
    Phase.SUFFIX: frozenset({"result", "error", "run", "hook", "artifacts", "source"}),
    Phase.OBSERVE: frozenset({"event", "hook"}),
    Phase.PREFIX: frozenset(),
}


def run_value_problem(name: str) -> str | None:
    """Why a run may not give a value for the placeholder `name` (`exec --placeholder`, a
    request's `placeholders`): a built-in's value (and the `context` block) is the run's own,
    never replaced, and a value given for one would be dropped without a word."""
    if name in BUILTINS or name == RESERVED:
        return (
            f"@{name} is a built-in placeholder: its value is the run's own; a run gives"
            " values only for the names of prompt hooks' vars"
        )
    return None


@attrs.frozen(repr=False, eq=False)
class Placeholder(Record):
    """One placeholder as written: `spelt` is `name.path` without the `@`."""

    name: str
    path: tuple[str, ...]
    start: int
    end: int

    @property
    def spelt(self) -> str:
        return ".".join((self.name, *self.path))


def undeclared_placeholder(given: Iterable[str], declared: Iterable[str]) -> str | None:
    """Why a run's value for a placeholder no prompt hook declares (a name of `given` not in
    `declared`, their `vars` names) is refused: it would reach no prompt, dropped without a
    word (a name misspelt). None when each is declared."""
    known = set(declared)
    for name in given:
        if name not in known:
            theirs = f" (their vars: {', '.join(sorted(known))})" if known else ""
            return f"{name}: no prompt hook here has @{name} in its vars{theirs}"
    return None


def find(prompt: str) -> Iterator[Placeholder]:
    """The placeholders of `prompt`, in order (`@@` is not one)."""
    for m in PLACEHOLDER.finditer(prompt):
        if m.group(0) == "@@":
            continue
        path = tuple(m.group(2).split(".")[1:]) if m.group(2) else ()
        yield Placeholder(m.group(1), path, m.start(), m.end())


def names_in(prompt: str) -> list[str]:
    """The distinct names the prompt uses, in order of first use."""
    return list(dict.fromkeys(p.name for p in find(prompt)))


def check_placeholders(
    prompt: str, phase: Phase, var_names: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """What is wrong with the placeholders of a prompt hook at `phase` with `vars`
    `var_names`: (where, message) pairs, `where` "prompt" or "vars/<name>"."""
    found: list[tuple[str, str]] = []
    have = PHASE_BUILTINS.get(phase, frozenset())
    for name in var_names:
        if name in BUILTINS or name == RESERVED:
            found.append(
                (
                    f"vars/{name}",
                    f'"{name}" is the name of a built-in placeholder or block; a var may not take'
                    " it",
                )
            )
    for name in names_in(prompt):
        if name in BUILTINS and name not in have:
            has = ", ".join(f"@{b}" for b in BUILTINS if b in have) or "none"
            found.append(
                ("prompt", f"@{name} is not available at phase {phase.value} (it has: {has})")
            )
        elif name not in BUILTINS and name not in var_names:
            found.append(
                (
                    "prompt",
                    f"@{name} is not a placeholder: not a built-in"
                    f" ({', '.join('@' + b for b in BUILTINS)}) and not in this hook's vars"
                    " (declare it there; a run's placeholders may then give it another"
                    " value; write @@ for a literal @)",
                )
            )
    return found


def lookup(value: Any, path: tuple[str, ...]) -> Any:
    """`value`'s item at `path` (keys of objects, indexes of lists); null where it leads
    nowhere."""
    for key in path:
        if isinstance(value, Mapping):
            value = value.get(key)
        elif (
            isinstance(value, list | tuple)
            and key.isascii()
            and key.isdigit()
            and int(key) < len(value)
        ):
            value = value[int(key)]
        else:
            return None
    return value


#: The built-in names, whatever a phase has of them.
BUILT_INS: Final = tuple(BUILTINS)


class PlaceholderError(HooksError, ValueError):
    """A placeholder in `args` that names nothing given, or a path into a value that is not
    there."""


def resolve(value: Any, names: Mapping[str, Any]) -> Any:
    """`value` (a plugin hook's `args`, a JSON value) with every placeholder in its strings
    replaced from `names`: a string that is exactly one placeholder takes the value with its
    JSON type; a placeholder inside a longer string becomes its JSON text (a string with its
    quotes); `@@` is a literal `@`. Keys are left as they are; lists and objects are walked to
    any depth. A name not given, or a path that leads nowhere, is a `PlaceholderError`."""
    if isinstance(value, str):
        return _string(value, names)
    if isinstance(value, Mapping):
        return {k: resolve(v, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [resolve(v, names) for v in value]
    return value


def value_names(value: Any) -> set[str]:
    """The placeholder names the strings of a JSON value use (for validation)."""
    if isinstance(value, str):
        return set(names_in(value))
    if isinstance(value, Mapping):
        return set().union(*(value_names(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(value_names(v) for v in value))
    return set()


def _string(text: str, names: Mapping[str, Any]) -> Any:
    whole = PLACEHOLDER.fullmatch(text)
    if whole is not None and whole.group(0) != "@@":
        return _strict_lookup(whole.group(1), whole.group(2), names, text)

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "@@":
            return "@"
        found = _strict_lookup(m.group(1), m.group(2), names, m.group(0))
        return json.dumps(found, ensure_ascii=False, separators=(",", ":"))

    return PLACEHOLDER.sub(one, text)


def _strict_lookup(name: str, path: str, names: Mapping[str, Any], shown: str) -> Any:
    if name not in names:
        given = ", ".join(sorted(names)) or "none"
        raise PlaceholderError(f"{shown}: no placeholder named {name!r} here (given: {given})")
    value = names[name]
    walked = "@" + name
    for key in path.split(".")[1:]:
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isascii() and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise PlaceholderError(f"{shown}: {walked} has no {key!r}")
        walked += "." + key
    return value
