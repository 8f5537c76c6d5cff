"""One small exception tree: every exception class the supervisor defines derives from
`HooksError` (tests/test_errors.py imports every module to hold it so), keeping a standard
base too where callers catch it by that (`class JsonError(HooksError, ValueError)`). A refusal
is not an exception: it is a field of the hook frame (`refused`), kept apart from a failure
(`status`).

`runners/` has exceptions of its own, outside the tree: it is standard library only and never
imports the supervisor, and what it raises never leaves the hook or script process it runs in
(it becomes an exit status or a report the supervisor reads)."""

from __future__ import annotations

import errno

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .hooks import SkippedFile


#: What `accept(2)` says when the process or the system has no descriptor (or buffer) left:
#: a server waits, or makes room, and tries again (`service/accepting.py`, the egress proxy).
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: What `accept(2)` may say of one connection that leaves the others to take (trio's list).
ROUTINE_ACCEPT_ERRNOS = frozenset(
    {errno.ECONNABORTED, errno.EPROTO, errno.ENETDOWN, errno.ENOPROTOOPT, errno.EHOSTDOWN}
    | {errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH, errno.EINTR}
)


class HooksError(Exception):
    """The root of everything mcpx-hooks raises on purpose."""


class Problem:
    """One thing wrong with an input: where (file, JSON pointer), what was expected, found.

    Immutable, compared and hashed by its three fields. Written out rather than a data class
    (attrs' or the standard library's): the CLI's `--version` and `--help` load this module
    (`cli/common.py`'s `Usage` is in the tree), and `dataclasses` alone (through `inspect`)
    costs them about a fifth of their start."""

    __slots__ = ("file", "message", "pointer")
    file: str
    pointer: str
    message: str

    def __init__(self, file: str, pointer: str, message: str) -> None:
        object.__setattr__(self, "file", file)
        object.__setattr__(self, "pointer", pointer)
        object.__setattr__(self, "message", message)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Problem is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Problem is immutable: cannot delete {name!r}")

    def _fields(self) -> tuple[str, str, str]:
        return (self.file, self.pointer, self.message)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Problem):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"Problem(file={self.file!r}, pointer={self.pointer!r}, message={self.message!r})"

    def __str__(self) -> str:
        """`FILE:POINTER: MESSAGE` on one line before the message: the file's name as
        `places.shown_file` shows it (in bash's `$'…'` quoting when it holds a character
        that is not printable), and such a character of the pointer (a key's) as its JSON
        escape, as the message quotes the key (`/a\\nb: unknown key "a\\nb"`)."""
        file, where = self.file, self.pointer or "/"
        if not file.isprintable():
            from .places import shown_file

            file = shown_file(file)
        if not where.isprintable():
            import json

            where = "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in where)
        return f"{file}:{where}: {self.message}"


class ConfigError(HooksError):
    """A config (or a per-call hook) is invalid. Carries every problem, not the first only,
    and what the load that found them would have warned of and the files it did not apply
    (`validate` says them too)."""

    def __init__(
        self,
        problems: list[Problem],
        *,
        warnings: Sequence[str] = (),
        skipped: Sequence[SkippedFile] = (),
    ) -> None:
        self.problems = problems
        self.warnings = tuple(warnings)
        self.skipped = tuple(skipped)
        super().__init__("\n".join(str(p) for p in problems))


class SpawnError(HooksError):
    """A child process could not be started (missing program, no spawner, bad cwd)."""


class SpawnModeError(SpawnError):
    """`MCPX_HOOKS_SPAWN` names no mode the spawner has: a usage error (exit 2), not a
    failure, and said in one line."""


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
