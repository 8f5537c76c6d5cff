"""The spawner's closing bound in virtual time (`autojump_clock`): end of file on its
lifeline, then at most `SPAWNER_EXIT_BOUND` for it to exit, then SIGKILL.

The stand-in for a spawner is a process that ignores end of file on its stdin (a spawner
stuck), so the bound is what ends it: the jumping clock makes the wait take no real time and
puts the kill at the bound exactly. A process that would exit on end of file is no test of
the bound here: under a jumping clock every wait on a real process's I/O ends at its bound
at once, so its own exit would race the kill. The other bounds around a real child (a hook's
SIGTERM grace, the wait for the spawner's reap report) stay in real time in `test_hookrun.py`,
`test_adversarial.py` and `test_spawn.py`: under a jumping clock each would take its fallback
path every time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
import trio
import trio.testing

from mcpx_hooks.supervisor.process.launch import SPAWNER_EXIT_BOUND, close_spawner

STUCK = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"


def stuck_spawner() -> subprocess.Popen[bytes]:
    """A stand-in for a spawner that stays on after end of file on its lifeline."""
    return subprocess.Popen([sys.executable, "-c", STUCK], stdin=subprocess.PIPE)


def dead_spawner() -> subprocess.Popen[bytes]:
    """A stand-in for a spawner that has exited and is not reaped yet."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    return proc


async def test_a_spawner_that_does_not_exit_at_end_of_file_is_killed_at_the_bound_exactly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    proc = stuck_spawner()
    start = trio.current_time()
    await close_spawner(proc)
    assert trio.current_time() - start == pytest.approx(SPAWNER_EXIT_BOUND)
    assert proc.returncode == -signal.SIGKILL  # killed, and reaped by then
    assert psutil.Process().children() == []


async def test_closing_is_shielded_a_cancelled_caller_still_waits_out_the_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    proc = stuck_spawner()
    start = trio.current_time()
    with trio.move_on_after(0.5):
        await close_spawner(proc)
    assert trio.current_time() - start == pytest.approx(SPAWNER_EXIT_BOUND)
    assert proc.returncode == -signal.SIGKILL
    assert psutil.Process().children() == []


async def test_a_spawner_already_dead_is_reaped_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    proc = dead_spawner()
    start = trio.current_time()
    await close_spawner(proc)
    assert trio.current_time() == start and proc.returncode == 0
    assert psutil.Process().children() == []
