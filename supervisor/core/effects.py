"""The autonomy dial: effect levels, the clamp that bounds a hook's effect, the least effect
each key of a hook's answer needs (`KEY_EFFECT`), and what settles an `ask` (`YES`, `NO`,
`AnsweredBy`).

Pure: no I/O, no trio.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from .points import Phase
from .records import Record


class Effect(enum.IntEnum):
    """Least to most; each level permits everything below it."""

    OFF = 0
    ADVISE = 1
    ASK = 2
    PROPOSE = 3
    APPLY = 4
    RUN = 5

    def __bool__(self) -> bool:
        # `off` is a level like the others: no level reads as "none given" in a test of
        # truth (an IntEnum would make `OFF`, which is 0, falsy).
        return True

    @property
    def word(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, word: str) -> Effect:
        return cls[word.upper()]


#: What a hook's output may do at each level (used by the docs).
EFFECT_MEANING: Final[dict[Effect, str]] = {
    Effect.OFF: "nothing",
    Effect.ADVISE: "attach text to the result or the error",
    Effect.ASK: "stop the run: a question with a deadline, or `refuse` with a reason",
    Effect.PROPOSE: "return a replacement beside the original, unapplied",
    Effect.APPLY: "replace the value the caller receives, the original kept visible",
    Effect.RUN: "execute a command the caller did not send, inside the same sandbox and limits",
}

DEFAULT_MAX: Final = Effect.RUN

#: The most an effect may be in a phase; phases not named here allow `run`.
PHASE_CEILING: Final[dict[Phase, Effect]] = {
    Phase.SUFFIX: Effect.ADVISE,
    Phase.OBSERVE: Effect.OFF,
}

#: The most an effect may be at a phase of a point that takes less than a run does: a tool
#: server's start can be refused (`before`, `onSuccess`), never given another command or
#: another tool list, nor made to run a command of the hook's, and its `onError` can only be
#: told about. An answer above it is dropped and named, never shown as done.
POINT_CEILING: Final[dict[tuple[str, Phase], Effect]] = {
    ("server.start", Phase.BEFORE): Effect.ASK,
    ("server.start", Phase.ON_SUCCESS): Effect.ASK,
    ("server.start", Phase.ON_ERROR): Effect.ADVISE,
}


def phase_ceiling(on: str, phase: Phase) -> Effect:
    """The most an effect may be at `phase` of the point `on` (`PHASE_CEILING`, lowered by
    `POINT_CEILING`)."""
    return min(PHASE_CEILING.get(phase, Effect.RUN), POINT_CEILING.get((on, phase), Effect.RUN))


#: The lowest effect that may refuse a run; `failure = "closed"` needs it.
REFUSING: Final = Effect.ASK
#: The most a `parallel = true` hook's effect in force may be: text beside the outcome, which
#: hooks running at once cannot fight over (no refusal, no question, no replacement).
PARALLEL_MAX: Final = Effect.ADVISE


class ClampSource(enum.StrEnum):
    """Who lowered an effect, as reported in a hook frame's `clampedBy`."""

    PHASE = "phase"
    CALLER = "hooks.autonomy"
    SUPERVISOR = "autonomy.max"


@attrs.frozen(repr=False, eq=False)
class Clamp(Record):
    requested: Effect
    effect: Effect
    clamped_by: tuple[ClampSource, ...]
    #: The floor held: the hook is locked, and the caller's level would have lowered it.
    caller_ignored: bool = False


def clamp(
    requested: Effect,
    phase: Phase,
    caller: Effect,
    supervisor: Effect,
    *,
    floor: bool = False,
    on: str = "script",
) -> Clamp:
    """The effect in force: the request lowered by phase (of the point `on`), caller and
    supervisor, in that order.

    Clamping lowers, never refuses; every ceiling that lowered it is named. With `floor` (a
    locked hook of the operator's config) the caller's level is no ceiling: only the phase and
    the supervisor lower it, and `caller_ignored` says when that made a difference (the
    effect in force is above the caller's level).
    """
    effect = requested
    by: list[ClampSource] = []
    for source, ceiling in (
        (ClampSource.PHASE, phase_ceiling(on, phase)),
        (ClampSource.CALLER, caller),
        (ClampSource.SUPERVISOR, supervisor),
    ):
        if floor and source is ClampSource.CALLER:
            continue
        if effect > ceiling:
            effect = ceiling
            by.append(source)
    return Clamp(requested, effect, tuple(by), caller_ignored=floor and effect > caller)


#: Each key a hook may answer with, and the least effect that honours it.
KEY_EFFECT: Final[dict[str, Effect]] = {
    "advise": Effect.ADVISE,
    "refuse": Effect.ASK,
    "ask": Effect.ASK,
    "propose": Effect.PROPOSE,
    "apply": Effect.APPLY,
    "run": Effect.RUN,
}


#: The answers an ask takes: "yes" lets the run go on, "no" refuses it.
YES: Final = "yes"
NO: Final = "no"
ANSWERS: Final = (YES, NO)
#: How long an ask waits for its answer when the hook gives no `deadlineMs`: time for a
#: person at the terminal, or a client, to read the question and answer it.
DEFAULT_DEADLINE_MS: Final = 30_000


class AnsweredBy(enum.StrEnum):
    """Who settled an ask (`asked.by` on the hook frame)."""

    CLIENT = "client"  # a client of the run's WebSocket sent `{"type": "answer"}`
    TERMINAL = "terminal"  # `exec` asked the person at the terminal
    FLAG = "flag"  # `exec --yes` / `--no`
    DEADLINE = "deadline"  # nobody answered in time: the ask's default
