"""The `script` hooks of one phase, indexed by what their `when.argv` can match. Pure.

A run's start asks, phase by phase, which hooks fire (`when.run_mismatch`). Thousands of
hooks (a request's per-call hooks, a large config) each filtering on a command line of its
own would have every pattern tried against every run. The index is built once per config
and phase: a `when.argv` pattern can only match a subject that begins with its literal
part (what comes before its first `*`, `?` or `[`), and a pattern without a wildcard only
the subject equal to it. A run looks its two subjects (the command line and its program's
basename) up in those tables, so the hooks it checks in full are the ones that may match,
and those without `when.argv` (matched on the other keys, or on none).
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Mapping, Sequence
from typing import Final

from .hooks import Config, Hook
from .points import Phase, When
from .when import command_line

#: What makes a `when` pattern a glob (`fnmatch`): before the first, a pattern is literal.
_WILDCARD: Final = re.compile(r"[*?\[]")


class ArgvIndex:
    """`hooks` (in declaration order) by their `when.argv` patterns: `candidates(argv)`
    are those that may match a run of `argv`, in declaration order."""

    def __init__(self, hooks: Sequence[Hook]) -> None:
        self.hooks = tuple(hooks)
        #: The hooks without `when.argv`: any run may be theirs.
        self._open: list[int] = []
        #: Literal patterns, and the hooks of each.
        self._exact: dict[str, list[int]] = {}
        #: Globs' literal beginnings (up to the first wildcard), and the hooks of each.
        self._begins: dict[str, list[int]] = {}
        for index, hook in enumerate(self.hooks):
            patterns = hook.when.get(When.ARGV) if hook.when else None
            if patterns is None:
                self._open.append(index)
                continue
            for pattern in dict.fromkeys(patterns):
                wildcard = _WILDCARD.search(pattern)
                if wildcard is None:
                    self._exact.setdefault(pattern, []).append(index)
                else:
                    self._begins.setdefault(pattern[: wildcard.start()], []).append(index)
        self._lengths = sorted({len(begin) for begin in self._begins})

    def candidates(self, argv: Sequence[str]) -> list[Hook]:
        """The hooks whose `when.argv` may match a run of `argv` (none with `when.argv`
        when `argv` is empty), and those without it."""
        found = set(self._open)
        if argv and (self._exact or self._begins):
            for subject in {command_line(argv), os.path.basename(argv[0])}:
                found.update(self._exact.get(subject, ()))
                for length in self._lengths:
                    if length > len(subject):
                        break
                    found.update(self._begins.get(subject[:length], ()))
        return [self.hooks[index] for index in sorted(found)]


#: Each config's index, built at its first run (`script_hooks`), by the config's identity (a
#: `Record` hashes by value); dropped with the config.
_BUILT: Final[dict[int, tuple[weakref.ref[Config], dict[Phase, ArgvIndex]]]] = {}


def script_hooks(config: Config) -> Mapping[Phase, ArgvIndex]:
    """The enabled `script` hooks of `config`, by phase, each phase's indexed: built once
    per config (a request's layered config is one of its own: the service builds it as it
    admits the request, off the loop)."""
    key = id(config)
    entry = _BUILT.get(key)
    if entry is not None and entry[0]() is config:
        return entry[1]
    phases: dict[Phase, list[Hook]] = {}
    for hook in config.hooks:
        if hook.on == "script" and hook.enabled:
            phases.setdefault(hook.phase, []).append(hook)
    built = {phase: ArgvIndex(hooks) for phase, hooks in phases.items()}
    _BUILT[key] = (weakref.ref(config, lambda _: _BUILT.pop(key, None)), built)
    return built
