"""One small exception tree. A refusal is not an exception: it is a field of the hook frame
(`refused`), kept apart from a failure (`status`)."""

from __future__ import annotations

import attrs


class HooksError(Exception):
    """The root of everything mcpx-hooks raises on purpose."""


@attrs.frozen
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
