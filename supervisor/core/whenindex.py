"""The `script` hooks of one phase, indexed by what their `when.argv` can match, and the
`call` hooks by their `when.tool` (or `when.server`). Pure.

A run's start asks, phase by phase, which hooks fire (`when.run_mismatch`). Thousands of
hooks (a request's per-call hooks, a large config) each filtering on a command line of its
own would have every pattern tried against every run. The index is built once per config
and phase: a `when.argv` pattern can only match a subject that begins with its literal
part (what comes before its first `*`, `?` or `[`), and a pattern without a wildcard only
the subject equal to it. A run looks its two subjects (the command line and its program's
basename) up in those tables, so the hooks it checks in full are the ones that may match,
and those without `when.argv` (matched on the other keys, or on none).

A tool call is the same: thousands of `call` hooks each for a tool of its own would have
each call check them all. A call looks up `SERVER.TOOL` and `TOOL` among the `when.tool`
patterns, and its server among the `when.server` of hooks without `when.tool`.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from .hooks import Config, Hook
from .points import Phase, When
from .when import command_line

#: What makes a `when` pattern a glob (`fnmatch`): before the first, a pattern is literal.
_WILDCARD: Final = re.compile(r"[*?\[]")


class GlobIndex:
    """Positions (of hooks) by their glob patterns: `found(subjects, into)` adds to `into`
    the positions one of whose patterns may match one of `subjects`."""

    def __init__(self, patterns: Sequence[Sequence[str] | None]) -> None:
        #: Literal patterns, and the positions of each.
        self._exact: dict[str, list[int]] = {}
        #: Globs' literal beginnings (up to the first wildcard), and the positions of each.
        self._begins: dict[str, list[int]] = {}
        for index, these in enumerate(patterns):
            for pattern in dict.fromkeys(these or ()):
                wildcard = _WILDCARD.search(pattern)
                if wildcard is None:
                    self._exact.setdefault(pattern, []).append(index)
                else:
                    self._begins.setdefault(pattern[: wildcard.start()], []).append(index)
        self._lengths = sorted({len(begin) for begin in self._begins})

    def __bool__(self) -> bool:
        """Whether it holds a pattern (else no subject need be made for it)."""
        return bool(self._exact or self._begins)

    def found(self, subjects: Iterable[str], into: set[int]) -> None:
        if not self:
            return
        for subject in subjects:
            into.update(self._exact.get(subject, ()))
            for length in self._lengths:
                if length > len(subject):
                    break
                into.update(self._begins.get(subject[:length], ()))


class ArgvIndex:
    """`hooks` (in declaration order) by their `when.argv` patterns: `candidates(argv)`
    are those that may match a run of `argv`, in declaration order."""

    def __init__(self, hooks: Sequence[Hook]) -> None:
        self.hooks = tuple(hooks)
        patterns = [hook.when.get(When.ARGV) if hook.when else None for hook in self.hooks]
        #: The hooks without `when.argv`: any run may be theirs.
        self._open = [index for index, these in enumerate(patterns) if these is None]
        self._argv = GlobIndex(patterns)

    def candidates(self, argv: Sequence[str]) -> list[Hook]:
        """The hooks whose `when.argv` may match a run of `argv` (none with `when.argv`
        when `argv` is empty), and those without it."""
        found = set(self._open)
        if argv and self._argv:  # (a command line made only for patterns: `shlex`)
            self._argv.found({command_line(argv), os.path.basename(argv[0])}, found)
        return [self.hooks[index] for index in sorted(found)]


class CallIndex:
    """`call` hooks (in declaration order) by their `when.tool` patterns, and those without
    one by their `when.server` patterns: `candidates(server, tool)` are those that may match
    a call of `tool` on `server`, in declaration order (their `when` is then checked in full:
    `when.client` too)."""

    def __init__(self, hooks: Sequence[Hook]) -> None:
        self.hooks = tuple(hooks)
        whens = [hook.when or {} for hook in self.hooks]
        tools = [when.get(When.TOOL) for when in whens]
        servers = [
            when.get(When.SERVER) if tools[i] is None else None for i, when in enumerate(whens)
        ]
        #: The hooks without `when.tool` or `when.server`: any call may be theirs.
        self._open = [i for i in range(len(whens)) if tools[i] is None and servers[i] is None]
        self._tools = GlobIndex(tools)
        self._servers = GlobIndex(servers)

    def candidates(self, server: str, tool: str) -> list[Hook]:
        found = set(self._open)
        self._tools.found({f"{server}.{tool}", tool}, found)
        self._servers.found((server,), found)
        return [self.hooks[index] for index in sorted(found)]


#: Each config's indexes, by the config's identity (a `Record` hashes by value) and point,
#: built at first use; dropped with the config.
_BUILT: Final[dict[tuple[int, str], tuple[weakref.ref[Config], Mapping[Phase, Any]]]] = {}
_I = TypeVar("_I", "ArgvIndex", "CallIndex")


def script_hooks(config: Config) -> Mapping[Phase, ArgvIndex]:
    """The enabled `script` hooks of `config`, by phase, each phase's indexed: built once
    per config (a request's layered config is one of its own: the service builds it as it
    admits the request, off the loop)."""
    return _indexed(config, "script", ArgvIndex)


def call_hooks(config: Config) -> Mapping[Phase, CallIndex]:
    """The enabled `call` hooks of `config`, by phase, each phase's indexed: built once per
    config, at its first tool call (or as the service admits a request)."""
    return _indexed(config, "call", CallIndex)


def _indexed(
    config: Config, point: str, index: Callable[[Sequence[Hook]], _I]
) -> Mapping[Phase, _I]:
    key = (id(config), point)
    entry = _BUILT.get(key)
    if entry is not None and entry[0]() is config:
        return entry[1]
    phases: dict[Phase, list[Hook]] = {}
    for hook in config.hooks:
        if hook.on == point and hook.enabled:
            phases.setdefault(hook.phase, []).append(hook)
    built = {phase: index(hooks) for phase, hooks in phases.items()}
    _BUILT[key] = (weakref.ref(config, lambda _: _BUILT.pop(key, None)), built)
    return built
