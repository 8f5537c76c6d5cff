"""The clamp of SPEC §1: lowered by phase, caller and supervisor; never refused; reported."""

import pytest

from mcpx_hooks.supervisor.core.effects import ClampSource, Effect, clamp
from mcpx_hooks.supervisor.core.points import Phase


def test_order_of_levels() -> None:
    words = [e.word for e in sorted(Effect)]
    assert words == ["off", "advise", "ask", "propose", "apply", "run"]


def test_nothing_lowers_a_permitted_effect() -> None:
    c = clamp(Effect.APPLY, Phase.BEFORE, Effect.RUN, Effect.RUN)
    assert (c.effect, c.clamped_by) == (Effect.APPLY, ())


@pytest.mark.parametrize(
    ("phase", "expected"),
    [(Phase.SUFFIX, Effect.ADVISE), (Phase.OBSERVE, Effect.OFF), (Phase.ON_ERROR, Effect.RUN)],
)
def test_phase_ceiling(phase: Phase, expected: Effect) -> None:
    c = clamp(Effect.RUN, phase, Effect.RUN, Effect.RUN)
    assert c.effect == expected
    assert c.clamped_by == (() if expected == Effect.RUN else (ClampSource.PHASE,))


def test_caller_then_supervisor_each_named_once_they_lower() -> None:
    c = clamp(Effect.RUN, Phase.BEFORE, Effect.APPLY, Effect.ASK)
    assert c.effect == Effect.ASK
    assert c.clamped_by == (ClampSource.CALLER, ClampSource.SUPERVISOR)
    assert c.requested == Effect.RUN


def test_supervisor_max_alone_is_named_as_the_supervisor() -> None:
    c = clamp(Effect.RUN, Phase.BEFORE, Effect.RUN, Effect.APPLY)
    assert (c.effect, c.clamped_by) == (Effect.APPLY, (ClampSource.SUPERVISOR,))


def test_a_caller_above_max_does_not_raise_anything() -> None:
    c = clamp(Effect.ADVISE, Phase.BEFORE, Effect.RUN, Effect.OFF)
    assert (c.effect, c.clamped_by) == (Effect.OFF, (ClampSource.SUPERVISOR,))


def test_off_is_a_level_never_a_missing_one() -> None:
    assert all(bool(e) for e in Effect)
    c = clamp(Effect.RUN, Phase.BEFORE, Effect.OFF, Effect.RUN)
    assert (c.effect, c.clamped_by) == (Effect.OFF, (ClampSource.CALLER,))


def test_the_floor_skips_the_caller_only() -> None:
    c = clamp(Effect.RUN, Phase.BEFORE, Effect.OFF, Effect.APPLY, floor=True)
    assert (c.effect, c.clamped_by, c.caller_ignored) == (
        Effect.APPLY,
        (ClampSource.SUPERVISOR,),
        True,
    )
    suffix = clamp(Effect.ASK, Phase.SUFFIX, Effect.OFF, Effect.RUN, floor=True)
    assert (suffix.effect, suffix.clamped_by) == (Effect.ADVISE, (ClampSource.PHASE,))


@pytest.mark.parametrize(
    ("caller", "supervisor", "ignored"),
    [
        (Effect.RUN, Effect.RUN, False),  # the caller would not have lowered it
        (Effect.ASK, Effect.RUN, False),  # nor here: equal to the effect
        (Effect.ADVISE, Effect.RUN, True),
        (Effect.ADVISE, Effect.ADVISE, False),  # max lowered it as far as the caller would
    ],
)
def test_caller_ignored_only_where_the_floor_made_a_difference(
    caller: Effect, supervisor: Effect, ignored: bool
) -> None:
    c = clamp(Effect.ASK, Phase.BEFORE, caller, supervisor, floor=True)
    assert c.caller_ignored is ignored
