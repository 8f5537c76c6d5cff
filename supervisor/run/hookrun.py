"""Running one hook of any kind: the `HookKind` protocol every kind implements, and the hook
run that chooses the kind by the kinds' table (`core/kinds.py`'s `HOOK_KINDS`, the one place
an action is mapped to what runs it).

Each kind is a module of its own (`runhook.py`, `modulehook.py`, `prompthook.py`,
`pluginhook.py`, `sourcehook.py`) on the shared frame builder and child code of
`hookframe.py`, imported the first time a hook of it runs. A kind never raises for a broken
hook: it comes back as a frame with a failure status. Cancellation (the run being
cancelled) kills what the hook started and propagates.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Protocol, cast, runtime_checkable

from ..core.hooks import Hook, effect_in_force
from ..core.kinds import HOOK_KINDS
from ..process.spawner import Spawner
from .hookcontext import HookContext
from .hookframe import FrameBuilder, HookReport


@runtime_checkable
class HookKind(Protocol):
    """One kind of hook: how a hook of its `action` runs once.

    It is given the spawner (for a kind that starts processes), the hook, what its point
    gives it (`HookContext`: the run, the phase's input, the tool servers and the prompt run)
    and the frame builder, the effect in force already clamped. It returns the report: the
    one hook frame and the answer bounded by that effect. It never raises for a broken
    hook, and kills and reaps what it started before cancellation propagates.
    """

    async def run(
        self, spawner: Spawner, hook: Hook, ctx: HookContext, frame: FrameBuilder
    ) -> HookReport: ...


@functools.cache
def kind_of(action: str) -> HookKind:
    """The module that runs hooks of `action` (its row's `runner`), imported on first use
    (and then remembered: looking a module up again costs more than a dict's lookup)."""
    return _checked(importlib.import_module(HOOK_KINDS[action].runner))


@functools.cache
def _checked(runner: ModuleType) -> HookKind:
    """`runner` as a hook kind, checked once per module (the protocol check costs more than
    the rest of choosing a kind; a module does not change which functions it has)."""
    if not isinstance(runner, HookKind):
        raise TypeError(f"{runner.__name__} runs no hook kind: it has no run()")
    return cast(HookKind, runner)


def frame_builder(hook: Hook, ctx: HookContext) -> FrameBuilder:
    """The builder of `hook`'s one frame in `ctx`, its effect in force clamped."""
    return FrameBuilder(hook, effect_in_force(hook, ctx.caller_autonomy, ctx.supervisor_max), ctx)


async def run_hook(
    spawner: Spawner, hook: Hook, ctx: HookContext, frame: FrameBuilder | None = None
) -> HookReport:
    """Runs `hook` once in `ctx` by its kind and describes it. Never raises for a broken hook.

    Cancellation (the run being cancelled) kills the hook's tree and propagates; `frame`
    (given) then holds what the hook said, for `FrameBuilder.cut_short`.
    """
    frame = frame or frame_builder(hook, ctx)
    if not hook.enabled:
        return frame.skipped("disabled (enabled = false)")
    return await kind_of(hook.action).run(spawner, hook, ctx, frame)
