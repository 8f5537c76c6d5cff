"""The `source` kind: a script's inline source phases run inside the Python launcher
(`runners/launcher.py`), in the script's own process, never as a hook process; a `source`
hook reaching the hook runner is reported as skipped."""

from __future__ import annotations

from typing import Final

from ..core.hooks import Hook
from ..process.spawner import Spawner
from .hookcontext import HookContext
from .hookframe import FrameBuilder, HookReport

IN_LAUNCHER: Final = "source hooks run inside the Python launcher, not as a process"


async def run(spawner: Spawner, hook: Hook, ctx: HookContext, frame: FrameBuilder) -> HookReport:
    """The skipped report: the launcher, not this, runs the source."""
    return frame.skipped(IN_LAUNCHER)
