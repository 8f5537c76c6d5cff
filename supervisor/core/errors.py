"""One small exception tree: every exception class the supervisor defines derives from
`HooksError` (tests/test_errors.py imports every module to hold it so), keeping a standard
base too where callers catch it by that (`class JsonError(HooksError, ValueError)`). A refusal
is not an exception: it is a field of the hook frame (`refused`), kept apart from a failure
(`status`).

`runners/` has exceptions of its own, outside the tree: it is standard library only and never
imports the supervisor, and what it raises never leaves the hook or script process it runs in
(it becomes an exit status or a report the supervisor reads)."""

from __future__ import annotations

import dataclasses


class HooksError(Exception):
    """The root of everything mcpx-hooks raises on purpose."""


# A standard library data class, not attrs: the CLI's `--version` and `--help` load this
# module (`cli/common.py`'s `Usage` is in the tree) and none of the heavier packages.
@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with an input: where (file, JSON pointer), what was expected, found."""

    file: str
    pointer: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.pointer or '/'}"
        return f"{where}: {self.message}"


class ConfigError(HooksError):
    """A config (or a per-call hook) is invalid. Carries every problem, not the first only."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class SpawnError(HooksError):
    """A child process could not be started (missing program, no spawner, bad cwd)."""


class SandboxUnavailable(SpawnError):
    """The sandbox profile asked for cannot be enforced here; never silently downgraded."""


class ProfileUnavailable(SandboxUnavailable):
    """A profile this machine cannot enforce at all (a mechanism is missing): `profile`,
    and `short`, the line to give once the run has said the whole message in a warning."""

    def __init__(self, profile: str, message: str) -> None:
        super().__init__(message)
        self.profile = profile
        self.short = (
            f'sandbox "{profile}" cannot be enforced on this machine (the run\'s warning says'
            " why; `mcpx-hooks doctor` says more)"
        )


#: Set to anything but "" or "0": the service logs a bug's traceback too (at DEBUG).
DEBUG_ENV = "MCPX_HOOKS_DEBUG"


def bug_summary(error: BaseException) -> str:
    """One line for a bug caught at a boundary: the innermost exceptions, type and message.
    Its traceback goes to the debug log only: no traceback reaches a person by default."""
    leaves: list[BaseException] = []
    todo = [error]
    while todo:
        item = todo.pop()
        if isinstance(item, BaseExceptionGroup):
            todo.extend(reversed(item.exceptions))
        else:
            leaves.append(item)
    text = "; ".join(f"{type(e).__name__}: {e}" for e in leaves[:3])
    more = f" (and {len(leaves) - 3} more)" if len(leaves) > 3 else ""
    return f"{text}{more} (a bug: {DEBUG_ENV}=1 logs its traceback)"
