"""`when`: whether a hook fires where its point is, and if not, why not. Pure.

Each key of a hook's `when` is a list of patterns, any one of which may match; every key
given must match. A script's command line is matched as one string (`shlex.join(argv)`) and
by the basename of its program, so `argv = ["pytest"]` matches `/usr/bin/pytest -q` and
`argv = ["make test*"]` matches `make test -j4`. Matching is `fnmatch.fnmatchcase`: case
counts and `*` crosses `/`; `when.files` has its own rule (`changes.py`). The keys a point
provides are `points.WHEN_KEYS`' rows; the loader refuses any other, so nothing here meets a
key it does not know.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .changes import ChangedFiles, files_mismatch
from .events import kind_matches
from .points import When
from .records import Record


@attrs.frozen(repr=False, eq=False)
class RunFacts(Record):
    """What a script run gives `when`: its command line as the `start` frame shows it, its
    working directory, and the files it counts as changed (None: not looked for, as no hook
    of the run has `when.files`)."""

    argv: tuple[str, ...]
    cwd: str
    changed: ChangedFiles | None = None


def command_line(argv: Sequence[str]) -> str:
    """The command line `argv` and `runArgv` patterns are matched against."""
    import shlex  # here: a run whose hooks filter on no command line never needs it

    return shlex.join(argv)


def _globs(patterns: Iterable[str], *subjects: str) -> bool:
    return any(fnmatch.fnmatchcase(s, p) for p in patterns for s in subjects)


def argv_matches(patterns: Iterable[str], argv: Sequence[str]) -> bool:
    """Whether one of `patterns` matches the command line or its program's basename."""
    if not argv:
        return False
    return _globs(patterns, command_line(argv), os.path.basename(argv[0]))


def _shown(patterns: Any) -> str:
    return ", ".join(f'"{p}"' for p in patterns)


def run_mismatch(when: Mapping[str, Any], facts: RunFacts) -> str | None:
    """None when a `script` hook's `when` matches the run; else why it does not, in words
    (`exec --explain` says it)."""
    argv = when.get(When.ARGV)
    if argv is not None and not argv_matches(argv, facts.argv):
        program = os.path.basename(facts.argv[0]) if facts.argv else ""
        return (
            f"when.argv [{_shown(argv)}] matches neither the command line"
            f' "{command_line(facts.argv)}" nor its program "{program}"'
        )
    cwd = when.get(When.CWD)
    if cwd is not None and not _globs(cwd, facts.cwd):
        return f'when.cwd [{_shown(cwd)}] does not match the working directory "{facts.cwd}"'
    files = when.get(When.FILES)
    if files is not None:
        return files_mismatch(files, facts.changed)
    return None


def event_mismatch(
    when: Mapping[str, Any], kind: str, run_argv: Sequence[str] | None
) -> str | None:
    """None when an observe hook's `when` matches an event of `kind`, of a run whose command
    line is `run_argv` (None: of no run, or of one whose start is unknown); else why not."""
    kinds = when.get(When.KINDS)
    if kinds is not None and not kind_matches(kind, kinds):
        return f'when.kinds [{_shown(kinds)}] does not take the kind "{kind}"'
    patterns = when.get(When.RUN_ARGV)
    if patterns is None:
        return None
    if run_argv is None:
        return f'when.runArgv [{_shown(patterns)}]: the event "{kind}" is of no known run'
    if not argv_matches(patterns, run_argv):
        return (
            f"when.runArgv [{_shown(patterns)}] does not match the run's command line"
            f' "{command_line(run_argv)}"'
        )
    return None


def tool_mismatch(
    when: Mapping[str, Any], server: str, tool: str | None, client: str | None = None
) -> str | None:
    """None when a `call` or `server.start` hook's `when` matches the server (and the tool,
    `server.tool` or its own name, and the MCP client making the call: `client` is None for a
    script's call, which `when.client` never matches); else why not."""
    servers = when.get(When.SERVER)
    if servers is not None and not _globs(servers, server):
        return f'when.server [{_shown(servers)}] does not match the server "{server}"'
    tools = when.get(When.TOOL)
    if tools is not None and tool is not None and not _globs(tools, f"{server}.{tool}", tool):
        return f'when.tool [{_shown(tools)}] does not match the tool "{server}.{tool}"'
    clients = when.get(When.CLIENT)
    if clients is not None and client is None:
        return f"when.client [{_shown(clients)}]: a script's call has no MCP client"
    if clients is not None and client is not None and not _globs(clients, client):
        return f'when.client [{_shown(clients)}] does not match the client "{client}"'
    return None
