"""The words of the hook systems people come from (Claude Code's hooks, git hooks and the
managers that run them: pre-commit, lefthook, Husky), written in a hook where ours belong:
a problem says what each is here, as docs/coming-from.md maps them, rather than listing every
word the place takes. Anything else gets the "did you mean" of `closest`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .closest import did_you_mean

_BEFORE_TOOL: Final = (
    'Claude Code\'s word: here a hook before each tool call is on = "call", phase = "before"'
)
_AFTER_TOOL: Final = (
    "Claude Code's word: here a hook after each tool call is"
    ' on = "call", phase = "onSuccess" (or "onError", "suffix")'
)
_GIT: Final = 'a git hook\'s name: here a hook before the script is on = "script", phase = "before"'

#: A value of a hook's `on` or `phase` that another system uses for a moment: what it is here.
#: Looked up by its lower case, `-` and `_` left out (`PreToolUse`, `pre_commit`).
_MOMENTS: Final = {
    "pretooluse": _BEFORE_TOOL,
    "posttooluse": _AFTER_TOOL,
    "precommit": _GIT,
    "prepush": _GIT,
}

_PROGRAM: Final = (
    'a hook\'s program is run here, an argv: run = ["prog", "arg"] (a shell only as'
    ' ["sh", "-c", "…"])'
)
_FILES: Final = 'the files a hook runs for are when = { files = ["*.py"] } here, globs'

#: A key of a hook in another system (Claude Code's `matcher` and `command`, pre-commit's
#: `entry` and `files`, lefthook's `glob`): what it is here.
_KEYS: Final = {
    "matcher": 'a Claude Code matcher is when = { tool = ["server.tool"] } here (globs: "fs.*")',
    "command": _PROGRAM,
    "entry": _PROGRAM,
    "files": _FILES,
    "glob": _FILES,
}

#: The keys only a hook takes: an unknown key beside them is a hook's.
_HOOK_KEYS: Final = frozenset({"run", "when", "phase", "effect"})


def moment(key: str | None, found: Any) -> str:
    """For a hook's `on` or `phase` given another system's moment, what it is here
    (`"PreToolUse" is Claude Code's word: …`); else nothing."""
    if key not in ("on", "phase") or not isinstance(found, str):
        return ""
    said = _MOMENTS.get(found.lower().replace("-", "").replace("_", ""))
    return f'the string "{found}" is {said}' if said else ""


def unknown_key(key: str, allowed: Sequence[str]) -> str:
    """What follows `unknown key "k"`: another system's key of a hook said as ours, else
    the closest key, else every key the place takes."""
    if key in _KEYS and set(allowed) >= _HOOK_KEYS:
        return f"; {_KEYS[key]}"
    return did_you_mean(key, allowed) or f"; expected one of: {', '.join(allowed)}"
