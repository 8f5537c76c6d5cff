"""The `run` kind: the hook's argv, started as a child in its sandbox with the hook input on
its stdin, its stdout read as the answer (`hookframe.run_process`)."""

from __future__ import annotations

from ..core.hooks import Hook
from ..process.spawner import Spawner
from .hookcontext import HookContext
from .hookframe import FrameBuilder, HookReport, run_process


async def run(spawner: Spawner, hook: Hook, ctx: HookContext, frame: FrameBuilder) -> HookReport:
    """Runs the hook's argv once; see `hookframe.run_process`."""
    assert isinstance(hook.target, tuple)
    return await run_process(spawner, hook, ctx, frame, argv=hook.target)
