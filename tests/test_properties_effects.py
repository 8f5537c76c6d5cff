"""Properties (Hypothesis) of the clamp (`core/effects.py`): for every point, phase, requested
effect, caller's level, supervisor's level and floor, the effect in force is at most each
ceiling that applies (the phase's at that point, the caller's unless the hook is locked, the
supervisor's), never above the request, as high as those allow, and `clampedBy` names exactly
the ceilings that lowered it, in order. Pure.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mcpx_hooks.supervisor.core.effects import (
    PHASE_CEILING,
    POINT_CEILING,
    ClampSource,
    Effect,
    clamp,
    phase_ceiling,
)
from mcpx_hooks.supervisor.core.points import POINTS, Phase

effects = st.sampled_from(list(Effect))
points = st.sampled_from([*sorted(POINTS), "no.such.point"])
phases = st.sampled_from(list(Phase))


def test_each_point_ceiling_is_of_a_phase_its_point_has() -> None:
    for on, phase in POINT_CEILING:
        assert phase in POINTS[on].phases, (on, phase)


@given(on=points, phase=phases)
def test_a_point_only_lowers_its_phase_ceiling(on: str, phase: Phase) -> None:
    ceiling = phase_ceiling(on, phase)
    of_phase = PHASE_CEILING.get(phase, Effect.RUN)
    of_point = POINT_CEILING.get((on, phase), Effect.RUN)
    assert ceiling == min(of_phase, of_point)


@given(
    requested=effects,
    on=points,
    phase=phases,
    caller=effects,
    supervisor=effects,
    floor=st.booleans(),
)
def test_the_effect_in_force_is_bounded_by_each_ceiling_that_applies(
    requested: Effect, on: str, phase: Phase, caller: Effect, supervisor: Effect, floor: bool
) -> None:
    got = clamp(requested, phase, caller, supervisor, floor=floor, on=on)
    ceilings = [(ClampSource.PHASE, phase_ceiling(on, phase))]
    ceilings += [] if floor else [(ClampSource.CALLER, caller)]
    ceilings += [(ClampSource.SUPERVISOR, supervisor)]
    assert got.requested is requested
    assert got.effect <= requested
    assert all(got.effect <= ceiling for _, ceiling in ceilings), (got, ceilings)
    assert got.effect == min([requested, *(ceiling for _, ceiling in ceilings)])
    # Named: each ceiling below the effect as the ones before it left it, in order.
    named, effect = [], requested
    for source, ceiling in ceilings:
        if ceiling < effect:
            named.append(source)
            effect = ceiling
    assert list(got.clamped_by) == named, (got, ceilings)
    assert bool(got.clamped_by) == (got.effect < requested)
    assert got.caller_ignored == (floor and got.effect > caller)
