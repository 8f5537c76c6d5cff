"""`init --from FILE`: a `.pre-commit-config.yaml` or `lefthook.yml` converted to a project
file of `run` hooks (`config/importers.py`), written where `init` writes its starter (never
over a file), checked by the loader, with what was not converted said on stdout."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from ..core.places import shown_file
from .common import EXIT_OK, EXIT_USAGE, say, usage
from .newfile import write_new
from .printable import printable  # (a source's names: one line, in a comment or on the terminal)

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from typing import Any

    from ..config.importers import Converted

#: The formats, by what their file's name holds.
FORMATS = ("pre-commit", "lefthook")
#: The names of git's hooks (githooks(5)): a file so named (in .git/hooks, in .husky) is a
#: script git runs, not a hook manager's config.
GIT_HOOKS = frozenset(
    [
        "applypatch-msg",
        "pre-applypatch",
        "post-applypatch",
        "pre-commit",
        "pre-merge-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
        "pre-rebase",
        "post-checkout",
        "post-merge",
        "pre-push",
        "pre-receive",
        "update",
        "post-receive",
        "post-update",
        "push-to-checkout",
        "pre-auto-gc",
        "post-rewrite",
    ]
)

#: Claude Code's hook events: a settings file whose `hooks` table names one is Claude Code's.
CLAUDE_EVENTS = frozenset(
    [
        "PreToolUse",
        "PostToolUse",
        "Notification",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
        "PreCompact",
        "SessionStart",
        "SessionEnd",
    ]
)


def _claude_events(data: Any) -> list[str]:
    """The Claude Code events a settings document's `hooks` table names, in its order."""
    hooks = data.get("hooks") if isinstance(data, dict) else None
    return [k for k in hooks if k in CLAUDE_EVENTS] if isinstance(hooks, dict) else []


def _format(path: Path, data: Any) -> str:
    """Which format `path` is: by its name, else by its shape (a top-level `repos`)."""
    name = path.name.lower()
    for fmt in FORMATS:
        if fmt in name:
            return fmt
    return "pre-commit" if isinstance(data, dict) and "repos" in data else "lefthook"


def convert(path: Path) -> tuple[str, Converted]:
    """The format of `path` and its hooks converted (`SourceFileError` naming the file)."""
    from ..config.importers import SourceFileError, from_lefthook, from_precommit, read_yaml

    if path.name in GIT_HOOKS:
        shown = shown_file(path)
        raise SourceFileError(
            f"{shown}: a git hook script (as git or Husky runs it), not a pre-commit or"
            f" lefthook config; declare it as a hook: run = {json.dumps(['sh', shown])},"
            ' on = "script", phase = "before", effect = "ask", failure = "closed"'
        )
    data = read_yaml(path)
    fmt = _format(path, data)
    shown = shown_file(path)  # (what its problems name it)
    if events := _claude_events(data):
        raise SourceFileError(
            f"{shown}: Claude Code's hook settings ({', '.join(events)}), not a pre-commit or"
            " lefthook config: nothing to convert; a gate on an MCP tool is a call hook here,"
            ' behind mcpx-hooks mcp: on = "call", phase = "before", when = { tool ='
            ' ["server.tool"] } (docs/coming-from.md)'
        )
    if fmt == "pre-commit":
        return fmt, from_precommit(data, shown)
    return fmt, from_lefthook(data, shown)


def toml_text(source: str, fmt: str, converted: Converted) -> str:
    """The project file: a header, then each hook with its comments."""
    import tomlkit

    def value(v: Any) -> str:
        return str(tomlkit.item(v).as_string())

    lines = [
        f"# mcpx-hooks: converted by `mcpx-hooks init --from {shown_file(source)}` ({fmt}).",
        "#",
        "# Each hook runs before the script, in the project's directory, and a failing one",
        "# refuses the run (effect ask, failure closed), as it stops a commit. A project file",
        "# is code: review it, then trust it (`mcpx-hooks trust .mcpx-hooks.toml`).",
    ]
    if converted.skipped:
        lines += ["#", "# Not converted:"] + [f"#   {printable(s)}" for s in converted.skipped]
    for obj, notes in converted.hooks:
        lines += ["", *(f"# {printable(n)}" for n in notes), "[[hooks]]"]
        for key, v in obj.items():
            if key == "when":
                inner = ", ".join(f"{k} = {value(x)}" for k, x in v.items())
                lines.append(f"when = {{ {inner} }}")
            else:
                lines.append(f"{key} = {value(v)}")
    return "\n".join(lines) + "\n"


def run(source: str) -> int:
    """Converts `source`, writes the project file; exit 2 (writing nothing) when the source
    cannot be read or a project file is here already."""
    from ..config.files import LOCAL_NAMES
    from ..config.importers import SourceFileError
    from ..config.loading import validate_files

    for name in LOCAL_NAMES:
        if os.path.lexists(name):
            return usage("init", f"{name} exists here already; not overwritten")
    try:
        fmt, converted = convert(Path(source))
    except SourceFileError as exc:
        return usage("init", str(exc))
    if not converted.hooks:
        for line in converted.skipped:
            print(f"not converted: {printable(line)}", file=sys.stderr)
        return usage("init", f"{shown_file(source)}: no hook could be converted; nothing written")
    name = LOCAL_NAMES[0]
    try:
        data = toml_text(source, fmt, converted).encode()
    except UnicodeEncodeError:
        return usage("init", f"{shown_file(source)}: a command holds text that is not Unicode"
                     " (a lone surrogate); nothing written")  # fmt: skip
    if (failed := write_new(name, data)) is not None:
        return failed
    problems = validate_files([name])
    for problem in problems:  # a conversion this module got wrong: said, not hidden
        say(f"mcpx-hooks init: {problem}")
    print(f"wrote {name}: {len(converted.hooks)} hook(s) from {shown_file(source)} ({fmt})")
    for obj, notes in converted.hooks:
        files = obj.get("when", {}).get("files")
        when = f" when {', '.join(files)} changed" if files else " on every run"
        print(printable(f"  {obj['name']}: {shlex.join(obj['run'])}{when}"))
        for note in notes[1:]:  # the first says where it came from
            print(f"    {printable(note)}")
    if converted.skipped:
        print(f"not converted ({len(converted.skipped)}):")
        for line in converted.skipped:
            print(f"  {printable(line)}")
    print(f"review it, check it with: mcpx-hooks validate {name}")
    print(f"then apply it here by trusting it: mcpx-hooks trust {name}")
    return EXIT_USAGE if problems else EXIT_OK
