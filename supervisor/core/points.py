"""The points a supervisor passes through and the phases of a hook: one table each.

Everything else (the config schema's enums, validation, the docs) is derived from these tables,
so a point or phase is declared here and nowhere else.
"""

from __future__ import annotations

import enum

import attrs


class Phase(enum.StrEnum):
    """When a hook runs relative to the script."""

    BEFORE = "before"
    PREFIX = "prefix"
    ON_SUCCESS = "onSuccess"
    ON_ERROR = "onError"
    SUFFIX = "suffix"
    OBSERVE = "observe"


@attrs.frozen
class PhaseInfo:
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


@attrs.frozen
class PointInfo:
    """A point the supervisor fires, the phases it has and the schemas of its hook I/O."""

    name: str
    description: str
    phases: tuple[Phase, ...]
    input_schema: str = "hook-input.schema.json"
    output_schema: str = "hook-output.schema.json"


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
        ),
    )
}
