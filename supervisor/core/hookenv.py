"""The flat `MCPX_HOOK_*` variables a hook receives: one table.

`docs/environment.md` is generated from `VARIABLES`; a test holds the two together. A hook's
values come from `HookFacts`, one field per variable: `MCPX_HOOK_RUN_ID` is `run_id`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

import attrs

from .points import Phase
from .records import Record


class When(enum.StrEnum):
    """Which hooks get a variable."""

    ALWAYS = "always"
    SUFFIX = "suffix only"
    OBSERVE = "observe only"


@attrs.frozen(repr=False, eq=False)
class Variable(Record):
    name: str
    value: str
    when: When = When.ALWAYS


PROTOCOL: Final = 1

VARIABLES: Final[tuple[Variable, ...]] = (
    Variable("MCPX_HOOK_PROTOCOL", f"`{PROTOCOL}`"),
    Variable("MCPX_HOOK_NAME", "the hook's name"),
    Variable("MCPX_HOOK_ON", "the point, or the event kind for observe"),
    Variable("MCPX_HOOK_PHASE", "the phase"),
    Variable("MCPX_HOOK_ACTION", "`run` or `module`"),
    Variable("MCPX_HOOK_EFFECT", "the effect in force, after clamping"),
    Variable("MCPX_HOOK_RUN_ID", "the run id (empty for observe hooks not tied to a run)"),
    Variable("MCPX_HOOK_TIMEOUT_MS", "the hook's timeout"),
    Variable("MCPX_HOOK_OUTCOME", "`success` or `error`", When.SUFFIX),
    Variable("MCPX_HOOK_EVENT_KIND", "the event's kind", When.OBSERVE),
    Variable("MCPX_HOOK_EVENT_SEQ", "the event's seq", When.OBSERVE),
    Variable("MCPX_HOOK_SCRATCH", "a private writable directory, removed afterwards"),
    Variable("MCPX_HOOK_DIR", "the declaring directory"),
)

NAMES: Final = frozenset(v.name for v in VARIABLES)

#: The phase a variable's `when` limits it to.
_WHEN_PHASE: Final[dict[When, Phase]] = {When.SUFFIX: Phase.SUFFIX, When.OBSERVE: Phase.OBSERVE}

#: What a script (not a hook) is given besides the scrubbed environment.
FRAMES_FD_VAR: Final = "MCPX_FRAMES_FD"
ARTIFACTS_DIR_VAR: Final = "MCPX_ARTIFACTS_DIR"
INPUT_VAR: Final = "MCPX_INPUT"
CALLS_FD_VAR: Final = "MCPX_CALLS_FD"
SCRIPT_VARIABLES: Final[tuple[Variable, ...]] = (
    Variable(FRAMES_FD_VAR, "the frames channel's fd number: JSON lines `log`, `emit`, `result`"),
    Variable(ARTIFACTS_DIR_VAR, "a writable directory: files left there become `artifact` frames"),
    Variable(INPUT_VAR, "a file holding the run's `input` as JSON (only when the run has one)"),
    Variable(
        CALLS_FD_VAR, "the fd the script reads its tool calls' answers from, one JSON line each"
    ),
)

#: What a hook inherits besides its declared `env` and the variables above. `HOME` and
#: `TMPDIR` are set to the scratch directory; the others are copied from the supervisor when
#: it has them, with these fallbacks.
BASE_ENV: Final[Mapping[str, str]] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
}


@attrs.frozen(kw_only=True, repr=False, eq=False)
class HookFacts(Record):
    """What one hook is told in its variables, each as the text it is given (`phase` is a
    `Phase`, whose value is that text; the table's `when` reads it). A fact that is None is
    not given (an outcome a suffix hook does not have, an observe hook's missing event)."""

    name: str
    on: str
    phase: Phase
    action: str
    effect: str
    run_id: str
    timeout_ms: str
    scratch: str
    dir: str
    outcome: str | None = None
    event_kind: str | None = None
    event_seq: str | None = None
    protocol: str = str(PROTOCOL)


def fact_of(variable: Variable) -> str:
    """The `HookFacts` field that gives a variable its value."""
    return variable.name.removeprefix("MCPX_HOOK_").lower()


def hook_variables(facts: HookFacts) -> dict[str, str]:
    """The table's variables for one hook, in the table's order: those its phase gets
    (`when`) and that it has a value for."""
    out: dict[str, str] = {}
    for name, fact, limited_to in _FACTS:
        value = getattr(facts, fact)
        if value is not None and limited_to in (None, facts.phase):
            out[name] = str(value)
    return out


#: Each variable's name, `HookFacts` field and the phase it is limited to (None: any), worked
#: out once: this is on every hook's way.
_FACTS: Final = tuple((v.name, fact_of(v), _WHEN_PHASE.get(v.when)) for v in VARIABLES)


def base_environment(parent: Mapping[str, str], scratch: str) -> dict[str, str]:
    """The scrubbed environment every hook starts from; nothing else of `parent` passes."""
    env = {k: parent.get(k, v) for k, v in BASE_ENV.items()}
    env["HOME"] = scratch
    env["TMPDIR"] = scratch
    return env
