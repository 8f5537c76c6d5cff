"""Keeper mode's keepers kept for one child after another (`runners/keepers.py`): what one
child of a keeper sets (its cwd, its limits) and uses does not reach the next, and keepers
that die, keeping a child or waiting, neither pile up nor leave a request unserved.
`test_spawn.py` runs the rest of the spawn path in this mode too.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
import trio
from conftest import Marker

from mcpx_hooks.runners.keepers import IDLE_KEEPERS
from mcpx_hooks.supervisor.process import child as child_module
from mcpx_hooks.supervisor.process.spawner import (
    SPAWN_MODE_ENV,
    ChildSpec,
    Outcome,
    Spawner,
    open_spawner,
)

PATH = "/usr/local/bin:/usr/bin:/bin"
#: Prints its working directory and its open-files limits.
WHERE = (
    "import json, os, resource; "
    "print(json.dumps([os.getcwd(), resource.getrlimit(resource.RLIMIT_NOFILE)]))"
)
#: Keeps a CPU busy for 0.3 s and holds 64 MB.
HEAVY = "import time; b = bytearray(64 << 20); t = time.process_time()\n" + (
    "while time.process_time() - t < 0.3: pass"
)


@pytest.fixture
async def spawner(monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> AsyncIterator[Spawner]:
    monkeypatch.setenv(SPAWN_MODE_ENV, "keeper")
    async with open_spawner() as sp:
        assert sp.mode == "keeper"
        yield sp


async def run(spawner: Spawner, argv: tuple[str, ...], **kw: object) -> tuple[Outcome, int | None]:
    """Runs a child to its end; its outcome and its keeper's pid (None: not heard of)."""
    fields: dict[str, object] = {"cwd": "/", "env": {"PATH": PATH}, **kw}
    with trio.fail_after(30):
        async with spawner.open_child(ChildSpec(argv, **fields), kill_grace=0.5) as child:  # type: ignore[arg-type]
            return await child.communicate(b"", 1 << 20, 4096), child.keeper


def py(code: str) -> tuple[str, ...]:
    return (sys.executable, "-I", "-S", "-c", code)


def keepers(spawner: Spawner) -> list[int]:
    """The spawner's keepers that are alive (not zombies waiting for it to reap them). A
    keeper is a fork of the spawner (its program); the spawner's other children are what a
    killed keeper left (its child's tree, the spawner's as their subreaper, killed as strays
    when it reaps the keeper: on a loaded machine, perhaps not yet)."""
    parent = psutil.Process(spawner.pid)
    alive = []
    for proc in parent.children():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.cmdline() == parent.cmdline():
                alive.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return alive


async def test_a_keeper_keeps_the_next_child_as_if_it_were_its_first(
    spawner: Spawner, tmp_path: Path
) -> None:
    hard = psutil.Process(spawner.pid).rlimit(psutil.RLIMIT_NOFILE)[1]
    first, keeper = await run(
        spawner, py(WHERE), cwd=str(tmp_path), rlimits=(("RLIMIT_NOFILE", 64, hard),)
    )
    assert json.loads(first.stdout) == [str(tmp_path), [64, hard]]
    heavy, heavy_keeper = await run(spawner, py(HEAVY))
    assert heavy.cpu_ms is not None and heavy.cpu_ms >= 250
    assert heavy.max_rss_kb is not None and heavy.max_rss_kb >= 64 << 10
    assert keeper is not None and heavy_keeper is not None
    served = {keeper, heavy_keeper}
    # The waiting keepers take requests in turn: among the next few, those two come again.
    expected = [os.getcwd(), list(psutil.Process(spawner.pid).rlimit(psutil.RLIMIT_NOFILE))]
    for _ in range(IDLE_KEEPERS + 1):
        after, by = await run(spawner, py(WHERE), cwd=".")
        assert by is not None
        served.add(by)
        # A relative cwd is the spawner's, the limits its own; the usage this child's only.
        assert json.loads(after.stdout) == expected
        assert after.cpu_ms is not None and after.cpu_ms < heavy.cpu_ms / 2
        assert after.max_rss_kb is not None and after.max_rss_kb < heavy.max_rss_kb - (32 << 10)
    # Back to back, no keeper was forked for any of them.
    assert len(served) <= IDLE_KEEPERS


async def test_a_child_that_kills_its_keeper_adds_no_waiting_keeper(spawner: Spawner) -> None:
    for _ in range(IDLE_KEEPERS + 2):
        out, _ = await run(spawner, ("/bin/sh", "-c", "sleep 60 & kill -9 $PPID; sleep 60"))
        assert (out.lost, out.exited) == (True, False)
    done, _ = await run(spawner, ("/bin/echo", "ok"))
    assert bytes(done.stdout) == b"ok\n"
    # (The keeper of that last child may be on its way out, when enough others wait.)
    assert len(keepers(spawner)) <= IDLE_KEEPERS + 1


async def test_waiting_keepers_killed_are_replaced(spawner: Spawner) -> None:
    await run(spawner, ("/bin/true",))
    for _ in range(2):
        waiting = keepers(spawner)
        assert waiting
        for pid in waiting:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:  # (the last child's keeper, on its way out)
                continue
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                with trio.fail_after(10):
                    await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
        out, _ = await run(spawner, ("/bin/echo", "ok"))
        assert bytes(out.stdout) == b"ok\n"
    assert len(keepers(spawner)) <= IDLE_KEEPERS + 1


async def test_a_child_that_stops_its_keeper_at_once_is_killed_with_its_tree(
    spawner: Spawner, monkeypatch: pytest.MonkeyPatch, marker: Marker
) -> None:
    # A child that stopped its keeper (SIGSTOP to its parent, as a hook under `none` may)
    # before the keeper said "started" left the owner with neither its pid nor its keeper's:
    # the owner gave up after its bound, said the tree was killed, and the tree ran on until
    # the spawner exited. "accepted" names the keeper: the owner kills it, and with it the tree.
    monkeypatch.setattr(child_module, "KILL_REPORT_BOUND", 0.5)
    stop = "kill -STOP $PPID; sleep 60; exit 0"  # ($0, the marker, stays in a live argv)
    for _ in range(5):  # (the child wins the race to "started" more often than not)
        spec = ChildSpec(("/bin/sh", "-c", stop, marker), cwd="/", env={"PATH": PATH})
        with trio.fail_after(30), trio.move_on_after(0.3):  # the hook's timeout, as run_hook's
            async with spawner.open_child(spec, kill_grace=0.1) as child:
                await child.communicate(b"", 1 << 20, 4096)
        await gone(marker.alive())  # the spawner kills what its dead keeper left
    out, _ = await run(spawner, ("/bin/echo", "ok"))
    assert bytes(out.stdout) == b"ok\n"


async def gone(procs: list[psutil.Process]) -> None:
    """Waits until each of `procs` has exited (10 s at most)."""
    for proc in procs:
        try:
            pidfd = os.pidfd_open(proc.pid)
        except ProcessLookupError:
            continue
        try:
            with trio.fail_after(10):
                await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
