"""The rules of one hook object a schema cannot say well: a phase its point lacks, a source
phase written as a hook, a `when` key its point does not provide, a prompt hook's keys, a
locked hook without a name, an `env` value that looks like `${NAME}`, a per-call hook off the
script point, a TOML date or time in `vars` or `args` (which take any JSON value, and are
passed on as JSON, where a date has no form). Checked for every hook of a file, beside the
schema (`loading.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..core.errors import Problem
from ..core.hooks import SourceKind
from ..core.passenv import reference_problem
from ..core.points import DEFAULT_PHASE, PHASES, POINTS, Phase
from .modelschema import prompt_rules
from .problems import describe, pointer
from .whenrules import when_rules

#: Each phase's row by its word (looked up once a hook: calling the enum costs more).
_PHASE_INFO: Final = {p.value: PHASES[p] for p in Phase}
_OBSERVE: Final = Phase.OBSERVE.value
_DEFAULT_PHASE: Final = DEFAULT_PHASE.value


def hook_rules(obj: Mapping[str, Any], file: str, ptr: str, kind: SourceKind) -> list[Problem]:
    """The rules a schema cannot say well: a phase the point lacks, `prefix` hooks, a
    `when` key the point does not provide, an `env` value that looks like `${NAME}`."""
    problems: list[Problem] = []
    on, phase = obj.get("on"), obj.get("phase", _DEFAULT_PHASE)
    info = _PHASE_INFO.get(phase) if isinstance(phase, str) else None
    if info is not None and info.source_only and "source" not in obj:
        problems.append(
            Problem(
                file,
                f"{ptr}/phase",
                f'expected an inline source phase: phase "{phase}" takes source lines only;'
                f" write them as [script].{phase} = [...]",
            )
        )
    elif (
        isinstance(on, str)
        and on in POINTS
        and info is not None
        and phase != _OBSERVE
        and info.phase not in POINTS[on].phases
    ):
        phases = [p.value for p in POINTS[on].phases]
        problems.append(
            Problem(
                file,
                f"{ptr}/phase",
                f'expected a phase of the point "{on}" ({", ".join(phases)}), found "{phase}"',
            )
        )
    problems += when_rules(obj, file, ptr)
    problems += prompt_rules(obj, file, ptr)
    if obj.get("locked") is True and "name" not in obj:
        problems.append(
            Problem(
                file,
                f"{ptr}/locked",
                "expected a name beside locked = true: nearer files name a locked hook to"
                " keep it, and may not redefine that name",
            )
        )
    env = obj.get("env")
    for name, value in env.items() if isinstance(env, Mapping) else ():
        why = reference_problem(value) if isinstance(value, str) else None
        if why is not None:
            problems.append(Problem(file, ptr + pointer(["env", name]), why))
    for key in _FREE_KEYS:
        if key in obj:
            problems += _not_json(obj[key], file, [key], ptr)
    if kind is SourceKind.PER_CALL and on != "script":
        problems.append(
            Problem(
                file,
                f"{ptr}/on",
                f'expected "script": per-call hooks attach to the script run only, found'
                f" {describe(on)}",
            )
        )
    return problems


#: The hook keys whose values the schema leaves free (any JSON): passed on as JSON.
_FREE_KEYS: Final = ("vars", "args")


def _not_json(value: Any, file: str, path: list[str | int], ptr: str) -> list[Problem]:
    """A problem for each value under `value` that JSON has no form for: a TOML date or
    time (`vars = { day = 1979-05-01 }`), which `hooks list --json`, a prompt and a tool call
    could not write."""
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    elif value is None or isinstance(value, str | int | float):  # (bool is an int)
        return []
    else:
        text = value.isoformat() if hasattr(value, "isoformat") else str(value)
        return [
            Problem(
                file,
                ptr + pointer(path),
                f"expected a JSON value (a string, a number, a boolean, an array or a table),"
                f" found {describe(value)}: {path[0]} are passed on as JSON, which has no"
                f' dates or times; write it as a string ("{text}")',
            )
        ]
    return [p for k, v in items for p in _not_json(v, file, [*path, k], ptr)]
