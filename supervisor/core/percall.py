"""A hook in force as a per-call hook declaration (what `exec --remote` sends so the server's
run sees the caller's hooks), and whether a server already has the hook a per-call
declaration gives again (then it is not applied a second time).

Pure: the caller's side (`cli/remotehooks.py`) and the server's (`service/admission.py`) use
the same shape, so the same hook reads the same on both.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .effects import Effect
from .hooks import HOOK_SETTINGS, Action, Failure, Hook, PluginAnswer
from .kinds import declared_actions
from .passenv import PASS_ENV_KEY, SECRETS_KEY


def per_call_hook(hook: Hook) -> dict[str, Any]:
    """A hook in force as the declaration that gives it again on the server: its working
    directory made explicit (relative paths in `run` and `module` keep meaning what they
    meant here); a setting at its built-in default, and a defaulted name, left to the server,
    as the hook left them."""
    target = hook.target
    obj: dict[str, Any] = {
        "on": hook.on,
        "phase": hook.phase.value,
        hook.action: list(target) if isinstance(target, tuple) else target,
    }
    if not re.fullmatch(rf"{re.escape(hook.on)}\.{hook.phase.value}\.\d+", hook.name):
        obj["name"] = hook.name
    for setting in HOOK_SETTINGS:
        value = getattr(hook, setting.attr)
        if value != setting.default:
            obj[setting.key] = _written(value)
    if hook.failure is not Failure.OPEN:
        obj["failure"] = hook.failure.value
    if not hook.enabled:
        obj["enabled"] = False
    obj["cwd"] = hook.workdir
    for key, value in (
        ("env", dict(hook.env)),
        (PASS_ENV_KEY, list(hook.pass_env)),
        (SECRETS_KEY, list(hook.secrets)),
        ("when", dict(hook.when)),
    ):
        if value:
            obj[key] = value
    if hook.args is not None:
        obj["args"] = dict(hook.args)
    if hook.action == Action.PLUGIN and hook.answer is not PluginAnswer.AUTO:
        obj["answer"] = hook.answer.value
    return obj


def already_in_force(declared: Mapping[str, Any], hooks: Iterable[Hook]) -> bool:
    """Whether `declared` (a per-call hook object) gives again a hook of `hooks` (a
    server's own): the same declaration, its working directory compared with symlinks
    resolved. A per-call hook that only shares a name is not: loading it says why."""
    mine = _comparable(declared)
    return any(_comparable(per_call_hook(hook)) == mine for hook in hooks)


def listed(declared: Mapping[str, Any], served: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a server's hooks in force (`hooks list --json`'s shape, as `/v1/hooks` sends
    them) hold `declared`: a hook of the same point, phase, action and working directory
    (and name, when `declared` names it)."""
    action = next((k for k in declared_actions() if k in declared), None)
    if action is None:
        return False
    where = _resolved(str(declared.get("cwd", "")))
    for hook in served:
        if (hook.get("on"), hook.get("phase"), hook.get(action)) != (
            declared.get("on"),
            declared.get("phase"),
            declared[action],
        ):
            continue
        if "name" in declared and hook.get("name") != declared["name"]:
            continue
        if _resolved(str(hook.get("cwd") or hook.get("dir") or "")) == where:
            return True
    return False


def _comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    if isinstance(cwd := out.get("cwd"), str):
        out["cwd"] = _resolved(cwd)
    return out


def _resolved(path: str) -> str:
    """`path` with symlinks resolved; as it is where it can name no file (a NUL, a lone
    surrogate: the hook's own checks refuse it later, saying why)."""
    try:
        return os.path.realpath(path)
    except (ValueError, UnicodeError):
        return path


def _written(value: Any) -> Any:
    if isinstance(value, Effect):
        return value.word
    return value.value if isinstance(value, enum.Enum) else value
