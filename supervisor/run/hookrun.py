"""Running one hook of any kind: the kinds' table, the one place a hook's `action` chooses
how it runs.

Each kind is a module of its own that implements `HookKind` (`runhook.py`, `modulehook.py`,
`prompthook.py`, `pluginhook.py`, `sourcehook.py`) on the shared frame builder and child
code of `hookframe.py`; `KINDS` maps each `Action` to it. A kind never raises for a broken
hook: it comes back as a frame with a failure status. Cancellation (the run being
cancelled) kills what the hook started and propagates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from ..core.answers import Answer
from ..core.frames import HookStatus
from ..core.hooks import Action, Hook, effect_in_force
from ..process.spawner import Spawner
from . import modulehook, pluginhook, prompthook, runhook, sourcehook
from .hookcontext import HookContext
from .hookframe import FrameBuilder, HookReport


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


#: The kinds, by the action that chooses them.
KINDS: Final[Mapping[Action, HookKind]] = {
    Action.SOURCE: sourcehook,
    Action.RUN: runhook,
    Action.MODULE: modulehook,
    Action.PROMPT: prompthook,
    Action.PLUGIN: pluginhook,
}


async def run_hook(spawner: Spawner, hook: Hook, ctx: HookContext) -> HookReport:
    """Runs `hook` once in `ctx` by its kind and describes it. Never raises for a broken hook.

    Cancellation (the run being cancelled) kills the hook's tree and propagates.
    """
    clamped = effect_in_force(hook, ctx.caller_autonomy, ctx.supervisor_max)
    frame = FrameBuilder(hook, clamped, ctx)
    if not hook.enabled:
        return frame.skipped("disabled (enabled = false)")
    return await KINDS[hook.action].run(spawner, hook, ctx, frame)


def cancelled_report(hook: Hook, ctx: HookContext, duration_ms: int) -> HookReport:
    """The report of a hook its run's cancellation cut short: `killed`, and no answer."""
    clamped = effect_in_force(hook, ctx.caller_autonomy, ctx.supervisor_max)
    frame = FrameBuilder(hook, clamped, ctx).frame(
        HookStatus.KILLED,
        duration_ms,
        reason="the run was cancelled while the hook ran; its process tree was killed",
    )
    return HookReport(frame, Answer())
