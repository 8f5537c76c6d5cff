"""The cyclic collector while a command starts: rare until the command's async part, then
back at the interpreter's thresholds with what start-up made frozen out of its walks; and
every command's async part goes through `run_async`, so none is left with it rare."""

from __future__ import annotations

import ast
import gc
import json
import subprocess
import sys
from pathlib import Path

import trio

from mcpx_hooks.supervisor.cli import common

CLI = Path(common.__file__).parent

PROBE = """\
import gc, json
from mcpx_hooks.supervisor.cli.common import START_THRESHOLD, quiet_start, run_async

before = gc.get_threshold()
quiet_start()
starting = gc.get_threshold()

async def inside():
    return gc.get_threshold(), gc.get_freeze_count()

during, frozen = run_async(inside)
again, frozen_again = run_async(inside)
print(json.dumps([before, starting, during, frozen, again, frozen_again == frozen]))
"""


def test_a_command_starts_with_the_collector_rare_and_runs_with_it_as_it_was() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    before, starting, during, frozen, again, frozen_once = json.loads(out)
    assert starting == [common.START_THRESHOLD, *before[1:]]
    assert during == before == again
    assert frozen > 10_000  # the modules, classes and tables loaded so far
    assert frozen_once  # a second async part (`doctor` has three) freezes nothing more


def test_run_async_in_another_programs_process_leaves_its_collector_alone() -> None:
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()

    async def inside() -> tuple[tuple[int, int, int], int]:
        await trio.lowlevel.checkpoint()
        return gc.get_threshold(), gc.get_freeze_count()

    assert common.run_async(inside) == (thresholds, frozen)


def test_no_command_calls_trio_run_itself() -> None:
    found = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "run"
                and isinstance(node.value, ast.Name)
                and node.value.id == "trio"
                and path.name != "common.py"
            ):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"trio.run outside run_async: {found}"
