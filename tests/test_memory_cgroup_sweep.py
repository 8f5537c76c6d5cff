"""A killed supervisor's memory cgroups are removed by the next one, wherever it starts.

A spawner makes its trees' cgroups (`mcpx-<pid>-<n>`) beside itself, in its own memory
cgroup: a supervisor started from a shell job, a session or a service of its own has its own
cgroup. One killed with SIGKILL leaves the cgroups it made ahead of its next children; the
next supervisor, started from another job (a sibling cgroup), removes them, whether that job
still runs something (the shell the killed supervisor was started from) or not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio
from conftest import ROOT

from mcpx_hooks.runners import memcg

#: A supervisor's spawner, opened, its memory report printed; then a strict hook runs
#: (`sleep 300`, memoryMb 64) while stdin is open; closed at end of file on stdin.
SUPERVISOR = """
import json, sys, trio
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.limits import Limits
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookrun import run_hook
HOOK = Hook(
    name="held", on="script", phase=Phase.BEFORE, action=Action.RUN,
    target=("/bin/sleep", "300"), declaring_dir="/", sandbox=Profile.STRICT,
    source=Provenance(SourceKind.COMMAND_LINE), timeout_ms=600_000,
    limits=Limits(memory_mb=64),
)
CTX = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({},))
async def main():
    async with open_spawner() as sp, trio.open_nursery() as nursery:
        print(json.dumps({"pid": sp.pid, "memory": sp.memory}), flush=True)
        nursery.start_soon(run_hook, sp, HOOK, CTX)
        await trio.to_thread.run_sync(sys.stdin.read)
        nursery.cancel_scope.cancel()
trio.run(main)
"""


def start_in(cgroup: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """A supervisor started in memory cgroup `cgroup` (moved there before its exec)."""
    command = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$1" -c "$2"']
    proc = subprocess.Popen(
        [*command, str(cgroup), sys.executable, SUPERVISOR],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    said = json.loads(proc.stdout.readline())
    return proc, said


def hold(cgroup: Path) -> subprocess.Popen[bytes]:
    """A process that stays in `cgroup` until killed (the shell of a job)."""
    return subprocess.Popen(
        ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec sleep 300', str(cgroup)]
    )


def ended(proc: subprocess.Popen[str]) -> int:
    """Waits for `proc` and closes its pipes; its exit status."""
    status = proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()
    return status


def made(cgroup: Path) -> list[str]:
    return sorted(n for n in os.listdir(cgroup) if n.startswith(memcg.PREFIX))


async def hook_running(cgroup: Path) -> None:
    """Waits (bounded) until a hook runs in one of the memory cgroups made in `cgroup`."""
    for _ in range(1000):  # (10 s at most)
        if any((cgroup / name / "tasks").read_text().strip() for name in made(cgroup)):
            return
        await trio.sleep(0.01)
    raise AssertionError(made(cgroup))


def tasks_in(cgroup: Path) -> list[str]:
    """The threads in `cgroup` and in the cgroups made in it (a spawner's thread sits in the
    cgroup of the child it starts next)."""
    where = [cgroup] + [cgroup / name for name in made(cgroup)]
    return [t for c in where if c.exists() for t in (c / "tasks").read_text().split()]


async def emptied(cgroup: Path) -> None:
    """Waits (bounded) until nothing runs in `cgroup` (a killed tree is being reaped: its
    spawner's parent-death signal, then its PID namespace)."""
    for _ in range(1000):  # (10 s at most)
        if not tasks_in(cgroup):
            return
        await trio.sleep(0.01)
    raise AssertionError(tasks_in(cgroup))


async def not_running(pid: object) -> None:
    """Waits (bounded) until process `pid` no longer runs (it may be a zombie)."""
    for _ in range(1000):  # (10 s at most)
        try:
            if psutil.Process(int(str(pid))).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        await trio.sleep(0.01)
    raise AssertionError(pid)


@pytest.fixture
def jobs() -> Iterator[tuple[Path, Path, Path]]:
    """Three sibling memory cgroups made in one of their own below this test's (as three
    shell jobs of a session are), removed afterwards with whatever was left in them. Theirs
    alone: a supervisor another test starts beside this one (a hook's nested `exec`, in a
    cgroup made in the test's) sweeps its own siblings, and would take the killed one's
    cgroups before this test looks for them."""
    if not ROOT:
        pytest.skip("only root makes memory cgroups")
    base, why = memcg._own_v1()
    if base is None:
        pytest.skip(why)
    session = Path(base) / f"walk-{os.getpid()}"
    made_here = [session / n for n in ("a", "b", "c")]
    session.mkdir()
    for cgroup in made_here:
        cgroup.mkdir()
    try:
        yield made_here[0], made_here[1], made_here[2]
    finally:
        for cgroup in made_here:
            for name in made(cgroup):
                os.rmdir(cgroup / name)
            os.rmdir(cgroup)
        os.rmdir(session)


async def test_a_killed_supervisors_cgroups_go_with_the_next_one_started_elsewhere(
    jobs: tuple[Path, Path, Path],
) -> None:
    killed_job, busy_job, next_job = jobs
    killed, said = start_in(killed_job)
    memory = said["memory"]
    assert isinstance(memory, dict)
    if memory.get("by") != "cgroup":
        killed.kill()
        ended(killed)
        pytest.skip(f"no memory cgroup here: {memory.get('why')}")
    assert memory["path"] == str(killed_job)
    # And one in a job that still runs something (a shell that outlived its supervisor).
    held, held_said = start_in(busy_job)
    await hook_running(killed_job)
    await hook_running(busy_job)
    keeper = hold(busy_job)
    try:
        for proc in (killed, held):
            proc.send_signal(signal.SIGKILL)
            ended(proc)
        await emptied(killed_job)
        await not_running(said["pid"])
        await not_running(held_said["pid"])
        left = made(killed_job)
        assert left, "the killed hook's cgroup, and those made ahead of the next"
        kept = made(busy_job)
        assert kept
        after, _ = start_in(next_job)
        assert after.stdin is not None
        after.stdin.close()
        assert ended(after) == 0
        assert made(killed_job) == [], left
        assert made(busy_job) == [], kept
        assert made(next_job) == []
    finally:
        keeper.kill()
        keeper.wait()
        await emptied(busy_job)
