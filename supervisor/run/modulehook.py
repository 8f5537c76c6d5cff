"""The `module` kind: a Python module or file (`package.module[:function]`, `file.py`) run by
the module runner (`runners/module_runner.py`) cold, or warm by the spawner's warm process
(`runners/warm.py`), the hook input on its stdin and its stdout read as the answer, as a
`run` hook's is (`hookframe.run_process`)."""

from __future__ import annotations

import functools
import site
import sys

from ..core.hooks import Hook
from ..process.launch import RUNNER_FLAGS
from ..process.runnerside import runner_path
from ..process.spawner import Spawner
from ..process.spawnspec import ModuleCall
from .hookcontext import HookContext
from .hookframe import FrameBuilder, HookReport, run_process


async def run(spawner: Spawner, hook: Hook, ctx: HookContext, frame: FrameBuilder) -> HookReport:
    """Runs the hook's module once; see `hookframe.run_process`."""
    argv, module = module_argv(hook), module_call(hook)
    return await run_process(spawner, hook, ctx, frame, argv=argv, module=module)


def module_argv(hook: Hook) -> tuple[str, ...]:
    """What a cold start runs: the module runner, given this interpreter's site-packages."""
    assert isinstance(hook.target, str)
    return (
        sys.executable,
        *RUNNER_FLAGS,
        runner_path("module_runner.py"),
        *(arg for d in _site_paths() for arg in ("--path", d)),
        hook.target,
    )


def module_call(hook: Hook) -> ModuleCall:
    """What a warm start runs (`runners/warm.py`)."""
    assert isinstance(hook.target, str)
    return ModuleCall(hook.target, _site_paths())


@functools.cache
def _site_paths() -> tuple[str, ...]:
    """This interpreter's site-packages dirs: the module runner starts without `site`
    (fast), and a hook may still import what is installed."""
    return tuple(site.getsitepackages())
