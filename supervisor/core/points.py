"""The points a supervisor passes through and the phases of a hook: one table each.

Everything else (the config schema's enums, validation, the docs) is derived from these tables,
so a point or phase is declared here and nowhere else.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from .records import Record


class Phase(enum.StrEnum):
    """When a hook runs relative to the script."""

    BEFORE = "before"
    PREFIX = "prefix"
    ON_SUCCESS = "onSuccess"
    ON_ERROR = "onError"
    SUFFIX = "suffix"
    OBSERVE = "observe"


@attrs.frozen(repr=False, eq=False)
class PhaseInfo(Record):
    phase: Phase
    when: str
    holds_run: bool
    #: Actions allowed in this phase; `prefix` takes inline source only.
    source_only: bool = False


PHASES: dict[Phase, PhaseInfo] = {
    p.phase: p
    for p in (
        PhaseInfo(Phase.BEFORE, "before the script starts", holds_run=True),
        PhaseInfo(
            Phase.PREFIX,
            "inside a Python script, after the launcher's surface, before the body",
            holds_run=False,
            source_only=True,
        ),
        PhaseInfo(Phase.ON_SUCCESS, "the script succeeded, before `result` is sent", True),
        PhaseInfo(Phase.ON_ERROR, "the script failed, before `error` is sent", True),
        PhaseInfo(Phase.SUFFIX, "after `result`/`error`, on both paths, like `finally`", True),
        PhaseInfo(Phase.OBSERVE, "after the fact, asynchronously, from the event bus", False),
    )
}


@attrs.frozen(repr=False, eq=False)
class PointInfo(Record):
    """A point the supervisor fires, the phases it has and the schemas of its hook I/O."""

    name: str
    description: str
    phases: tuple[Phase, ...]
    #: The `when` keys it provides (`WHEN_KEYS`); any other is refused, never ignored.
    when: tuple[When, ...] = ()
    input_schema: str = "hook-input.schema.json"
    output_schema: str = "hook-output.schema.json"
    #: What one firing is, in a sentence's words ("a tool call"): a prompt hook's model is
    #: told it is run at a phase of it.
    noun: str = ""


class When(enum.StrEnum):
    """The `when` keys some point provides."""

    ARGV = "argv"
    CWD = "cwd"
    KINDS = "kinds"
    RUN_ARGV = "runArgv"
    SERVER = "server"
    TOOL = "tool"
    CLIENT = "client"
    FILES = "files"


@attrs.frozen(repr=False, eq=False)
class WhenKey(Record):
    """A `when` key: a list of patterns, any one of which may match `against` (each pattern
    matching `pattern`, a regular expression, when one is given: one that cannot would never
    match)."""

    key: When
    against: str
    pattern: str | None = None


#: A `when.cwd` glob is matched against the whole working directory, which is absolute: one
#: that starts with neither `/` nor a wildcard can never match.
CWD_GLOB_PATTERN: Final = r"^[/*?\[]"


#: Every `when` key some point provides. Each takes a non-empty list of patterns.
WHEN_KEYS: dict[When, WhenKey] = {
    k.key: k
    for k in (
        WhenKey(
            When.ARGV,
            "glob patterns (`fnmatch`) matched against the script's command line as one string"
            " (`shlex.join(argv)`; for `--python FILE`, `python FILE ARGS…`) and against the"
            " basename of `argv[0]`",
        ),
        WhenKey(
            When.CWD,
            "glob patterns matched against the run's whole working directory (an absolute"
            " path: a pattern starts with `/` or a wildcard, `*/myproject*`)",
            CWD_GLOB_PATTERN,
        ),
        WhenKey(
            When.FILES,
            "globs matched against the files changed in the run's git checkout (against"
            " `[when] base`, plus staged, unstaged and untracked files) or listed by `exec"
            " --files-from`: a pattern without `/` matches a file's name at any depth, one"
            " with `/` the path from the top; `*` stays within a part, `**` spans parts;"
            " outside a git checkout the hook runs",
        ),
        WhenKey(
            When.KINDS,
            "event kinds or kind prefixes (on dot boundaries), narrowing what `on` follows; an"
            " entry that takes no kind `on` follows is refused",
        ),
        WhenKey(
            When.RUN_ARGV,
            "glob patterns matched, as `argv` is, against the command line of the run an event"
            " belongs to; an event of no run does not match",
        ),
        WhenKey(When.SERVER, "glob patterns matched against the tool server's name"),
        WhenKey(
            When.TOOL,
            "glob patterns matched against the tool as `server.tool` and against the tool's"
            " own name",
        ),
        WhenKey(
            When.CLIENT,
            "glob patterns matched against the name an MCP client gives itself (`clientInfo.name`)"
            " for a call it makes through `mcpx-hooks mcp`; a script's own call has no client"
            " and does not match",
        ),
    )
}

#: The `when` keys of an observe hook (whose `on` is an event kind, not a point).
OBSERVE_WHEN: tuple[When, ...] = (When.KINDS, When.RUN_ARGV)


#: Points that something fires. A point nothing fires is not declared.
POINTS: dict[str, PointInfo] = {
    p.name: p
    for p in (
        PointInfo(
            "script",
            "one script run",
            (
                Phase.BEFORE,
                Phase.PREFIX,
                Phase.ON_SUCCESS,
                Phase.ON_ERROR,
                Phase.SUFFIX,
            ),
            when=(When.ARGV, When.CWD, When.FILES),
            noun="a script run",
        ),
        PointInfo(
            "call",
            "one tool call a script or an MCP client makes (its hooks see `{server, tool, args}`,"
            " then the answer)",
            (Phase.BEFORE, Phase.ON_SUCCESS, Phase.ON_ERROR, Phase.SUFFIX),
            when=(When.SERVER, When.TOOL, When.CLIENT),
            noun="a tool call",
        ),
        PointInfo(
            "server.start",
            "the supervisor starting a tool server (onSuccess/onError see MCP `initialize`)",
            (Phase.BEFORE, Phase.ON_SUCCESS, Phase.ON_ERROR),
            when=(When.SERVER,),
            noun="the start of a tool server",
        ),
    )
}


#: The phase of a hook declared without one: observing is the one phase that can neither
#: slow nor change anything.
DEFAULT_PHASE: Final = Phase.OBSERVE


def when_keys(on: str, phase: Phase) -> tuple[When, ...] | None:
    """The `when` keys a hook `on` a point (or, observing, an event kind) may use; None for
    a point nothing fires."""
    if phase is Phase.OBSERVE:
        return OBSERVE_WHEN
    info = POINTS.get(on)
    return None if info is None else info.when
