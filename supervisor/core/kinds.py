"""The hook kinds: the one table of what a hook's action may be, and the only place a kind
is chosen.

A row says what a kind needs (the value a `[[hooks]]` entry gives it under the kind's word,
as the config schema checks it), whether it runs as a child process with the hook input on
its stdin, and which module runs it: a module of the supervisor implementing
`run/hookrun.py`'s `HookKind`, imported the first time a hook of the kind runs (so a run
without a prompt hook never loads the model client). The config schema, its validation, the
build of a `Hook` and the tables' docs read the rows when they are used: a kind added to
`HOOK_KINDS` before a config is loaded is a kind like the others.

`Action` names the kinds the supervisor's own code speaks of (`Action.PROMPT`); a hook's
`action` is the word of its row, whichever.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from .hooks import Action
from .records import Record

#: A `module` action: a Python file, or `package.module` with an optional `:function`. It
#: becomes an argv item of the module runner, so the file's name holds no NUL and no lone
#: surrogate (`\w` matches neither).
MODULE_PATTERN: Final = (
    r"^([^\n\u0000\ud800-\udfff]+\.py(:[A-Za-z_]\w*)?"  # a file
    r"|[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?)$"  # package.module
)
#: What a process's answer is read from, as a frame's words name it (`Kind.answer`).
PROCESS_ANSWER: Final = "stdout"
#: A `plugin` action: `namespace.tool`.
PLUGIN_PATTERN: Final = r"^[^.\s]+\.\S+$"


@attrs.frozen(repr=False, eq=False)
class Target(Record):
    """The value a `[[hooks]]` entry gives a kind, under the kind's word.

    `shape`: `argv` (a program, then arguments, each one a string a process can take),
    `string`, or `refused` (the word is not declared in `[[hooks]]`: `source` is declared in
    `[script]`)."""

    description: str
    shape: Literal["argv", "string", "refused"] = "string"
    pattern: str | None = None
    min_length: int | None = None


@attrs.frozen(repr=False, eq=False)
class Kind(Record):
    """One kind of hook: its word, what it needs, and the module that runs it."""

    word: str = attrs.field(converter=str)
    target: Target
    #: The module (dotted) whose `run(spawner, hook, ctx, frame)` runs a hook of this kind.
    runner: str
    #: It runs as a child process with the hook input on its stdin (its sandbox profile is
    #: checked before the run; the hook-input schema names it).
    process: bool = False
    #: What its answer is read from, as its frame's words name it (a reason, the head of
    #: an answer that is none): a process's stdout, a function's return value, a model's.
    answer: str = PROCESS_ANSWER


_RUN: Final = "mcpx_hooks.supervisor.run."

#: The kinds, by their word. A new kind is one row here and the module it names.
HOOK_KINDS: Final[dict[str, Kind]] = {
    kind.word: kind
    for kind in (
        Kind(
            Action.SOURCE,
            Target("Not legal here: inline source is declared as `script.<phase>`.", "refused"),
            _RUN + "sourcehook",
        ),
        Kind(
            Action.RUN,
            Target('An argv array, never a shell string (a shell is ["sh", "-c", "…"]).', "argv"),
            _RUN + "runhook",
            process=True,
        ),
        Kind(
            Action.MODULE,
            Target(
                "A Python file (`*.py`) or `package.module[:function]`, run by the module runner.",
                pattern=MODULE_PATTERN,
            ),
            _RUN + "modulehook",
            process=True,
            answer="the function's return value",
        ),
        Kind(
            Action.PROMPT,
            Target("Text with `@placeholders` sent to a configured model.", min_length=1),
            _RUN + "prompthook",
            answer="the model's answer",
        ),
        Kind(
            Action.PLUGIN,
            Target("An MCP tool, `namespace.tool`.", pattern=PLUGIN_PATTERN),
            _RUN + "pluginhook",
            answer="the tool's answer",
        ),
    )
}


def declared_actions() -> tuple[str, ...]:
    """The words a `[[hooks]]` entry may carry, in the table's order."""
    return tuple(word for word, kind in HOOK_KINDS.items() if kind.target.shape != "refused")


def process_actions() -> tuple[str, ...]:
    """The words of the kinds that run as a child process with the hook input on stdin."""
    return tuple(word for word, kind in HOOK_KINDS.items() if kind.process)
