"""`memoryMb` bounds all the memory a hook's tree can pin (issue 25, case 2).

Each bomb is a real strict `run` hook that pins 1.5x its `memoryMb` of one kind of memory
that `RLIMIT_DATA` alone never counted: a shared anonymous mapping, a memfd filled with
`write()`, a file in its scratch tmpfs, SysV shared memory. It must fail with the reason
"over memoryMb N", and while it runs the host's MemAvailable (/proc/meminfo, sampled from
here) must not drop by more than memoryMb + 64 MiB. A bomb that gets what it asks for holds
it a while, so that an unbounded one shows in the samples; one refused holds what it got.

Private memory too (a heap that grows): there a per-process limit at the bound stops the
bomb before the tree's cgroup is full (`RLIMIT_DATA` beside a cgroup, `RLIMIT_AS` without
one), and the reason must say so all the same.

Both ways the spawner bounds memory are run where they can be had: a memory cgroup per tree
(root, here cgroup v1) and the fallback (`MCPX_HOOKS_HIDE=memcg` as root; what an ordinary
user gets): `RLIMIT_AS`, a scratch no larger than the bound, shm limits, no memfd.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import ROOT, hook_user_processes, require_rootless
from test_sandbox import _decision, _run_filter

from mcpx_hooks.runners import libc, seccomp
from mcpx_hooks.supervisor.cli import doctor
from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.limits import Limits
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.process.launch import HIDE_ENV
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest

PY = sys.executable
CTX = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({},))
MEMORY_MB = 128
BOMB_MB = MEMORY_MB * 3 // 2
#: How far the host's available memory may drop while a bomb runs.
ALLOWED_DROP_MB = MEMORY_MB + 64
MB = 1 << 20

#: Every bomb: pins BOMB_MB of one kind, 8 MiB at a time, each page touched; holds what it
#: got for HOLD_S (all of it: the bound did not hold; part: it was refused the rest), then
#: exits 0 if it got it all, else re-raises what refused it.
_PRELUDE = """
import os, sys, time
SIZE, STEP, HOLD_S = int(sys.argv[1]) << 20, 8 << 20, 0.4
def held(error):
    time.sleep(HOLD_S)
    if error is not None:
        raise error
    print('{"advise": "got it all"}')
"""
BOMBS = {
    "private_heap": """
        error = None
        kept = []
        try:
            for _ in range(SIZE // STEP):
                kept.append(b"x" * STEP)
        except BaseException as exc:
            error = exc
        held(error)
    """,
    "shared_anonymous": """
        import mmap
        error = None
        try:
            m = mmap.mmap(-1, SIZE, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
            for at in range(0, SIZE, 4096):
                m[at] = 1
        except BaseException as exc:
            error = exc
        held(error)
    """,
    "memfd": """
        error = None
        try:
            fds = []
            chunk = b"x" * STEP
            for n in range(SIZE // STEP):
                if n % 4 == 0:  # (several memfds, as a bomb spreading them would)
                    fds.append(os.memfd_create("bomb"))
                os.write(fds[-1], chunk)
        except BaseException as exc:
            error = exc
        held(error)
    """,
    "scratch_tmpfs": """
        error = None
        try:
            chunk = b"x" * STEP
            for n in range(SIZE // STEP):  # (32 MiB files: fileSizeMb is not what stops it)
                with open(os.path.join(os.environ["MCPX_HOOK_SCRATCH"], f"f{n // 4}"), "ab") as f:
                    f.write(chunk)
        except BaseException as exc:
            error = exc
        held(error)
    """,
    "sysv_shm": """
        import ctypes, ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        error = None
        try:
            for _ in range(SIZE // STEP):  # each segment touched, detached, left behind
                seg = libc.shmget(0, STEP, 0o1600)
                if seg < 0:
                    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
                at = libc.shmat(seg, None, 0)
                if at in (None, ctypes.c_void_p(-1).value):
                    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
                ctypes.memset(at, 1, STEP)
                libc.shmdt(ctypes.c_void_p(at))
        except BaseException as exc:
            error = exc
        held(error)
    """,
}


def bomb_hook(where: Path, body: str, size_mb: int = BOMB_MB, **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": "bomb",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.RUN,
        "target": (PY, "-I", "-S", "-c", _PRELUDE + textwrap.dedent(body), str(size_mb)),
        "declaring_dir": str(where),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.STRICT,
        "timeout_ms": 30_000,
        "kill_grace_ms": 200,
        "limits": Limits(memory_mb=MEMORY_MB, scratch_mb=2 * BOMB_MB),
    }
    base.update(fields)
    return Hook(**base)


def available_mb() -> float:
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


async def run_sampled(spawner: Spawner, hook: Hook) -> tuple[HookReport, float]:
    """Runs `hook`; returns its report and how far MemAvailable dropped (MiB) below where it
    was before, sampled every 5 ms while it ran."""
    before = available_mb()
    lowest = before
    report: list[HookReport] = []

    async def run() -> None:
        report.append(await run_hook(spawner, hook, CTX))
        nursery.cancel_scope.cancel()

    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            while True:
                lowest = min(lowest, available_mb())
                await trio.sleep(0.005)
    return report[0], before - lowest


def our_cgroups(spawner: Spawner) -> list[str]:
    """The memory cgroups the spawner `spawner` made that are still there."""
    base = spawner.memory.get("path")
    if not isinstance(base, str):
        return []
    return [n for n in os.listdir(base) if n.startswith(f"mcpx-{spawner.pid}-")]


@pytest.fixture(params=["cgroup", "fallback"])
async def bounded_spawner(
    request: pytest.FixtureRequest, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Spawner]:
    """A spawner bounding memory each way: with a cgroup per tree (where it can make one),
    and with the fallback (as root: cgroups hidden). Afterwards no process of a hook and no
    cgroup of the spawner is left."""
    require_rootless()
    if request.param == "fallback":
        monkeypatch.setenv(HIDE_ENV, "memcg")
    async with open_spawner() as sp:
        by = sp.memory.get("by")
        if request.param == "cgroup" and by != "cgroup":
            pytest.skip(f"no memory cgroup here: {sp.memory.get('why')}")
        assert by == ("cgroup" if request.param == "cgroup" else "rlimit"), sp.memory
        yield sp
    assert hook_user_processes() == []
    assert our_cgroups(sp) == []


@pytest.mark.parametrize("kind", sorted(BOMBS))
async def test_a_bomb_over_memory_mb_fails_and_the_host_keeps_its_memory(
    bounded_spawner: Spawner, readable_tmp: Path, kind: str
) -> None:
    hook = bomb_hook(readable_tmp, BOMBS[kind])
    report, drop_mb = await run_sampled(bounded_spawner, hook)
    frame = report.frame
    print(f"{kind} {bounded_spawner.memory.get('by')}: bomb {BOMB_MB} MiB, drop {drop_mb:.0f} MiB")
    assert frame.status is HookStatus.FAILED, to_json(frame)
    assert frame.reason == f"over memoryMb {MEMORY_MB}", to_json(frame)
    assert drop_mb < ALLOWED_DROP_MB, (kind, drop_mb)


async def test_a_hook_well_under_its_bound_runs(
    bounded_spawner: Spawner, readable_tmp: Path
) -> None:
    body = """
        import mmap
        m = mmap.mmap(-1, 32 << 20, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        for at in range(0, 32 << 20, 4096):
            m[at] = 1
        with open(os.path.join(os.environ["MCPX_HOOK_SCRATCH"], "some"), "wb") as f:
            f.write(b"x" * (16 << 20))
        print('{"advise": "fine"}')
    """
    report, drop_mb = await run_sampled(bounded_spawner, bomb_hook(readable_tmp, body))
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    assert report.frame.advice == ("fine",)
    assert drop_mb < ALLOWED_DROP_MB


async def test_the_bomb_holds_unbounded(readable_tmp: Path, no_leaks: None) -> None:
    """The measure can fail: under `none` (resource limits only, no sandbox) a shared mapping
    is not bounded, and the samples see a bomb of six times the allowed drop go over it. (Of
    twice, the samples saw 181 MiB of 384 under other jobs' load, `MemAvailable` being the
    whole machine's: the margin is for what other processes free meanwhile.)"""
    require_rootless()
    async with open_spawner() as sp:
        hook = bomb_hook(
            readable_tmp, BOMBS["shared_anonymous"], 6 * ALLOWED_DROP_MB, sandbox=Profile.NONE
        )
        report, drop_mb = await run_sampled(sp, hook)
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    assert drop_mb > ALLOWED_DROP_MB, drop_mb


async def test_the_spawner_and_doctor_say_what_bounds_memory(no_leaks: None) -> None:
    async with open_spawner() as sp:
        found = sp.memory
        text, _ = doctor.report(sp)
    (line,) = [line for line in text.splitlines() if line.startswith("memory (memoryMb")]
    if found.get("by") == "cgroup":
        assert ROOT and os.path.isdir(str(found["path"]))
        assert f"cgroup v1 at {found['path']}" in line
    else:
        assert found.get("by") == "rlimit" and found.get("why"), found
        assert f"no cgroup ({found['why']})" in line and "RLIMIT_AS" in line


async def test_a_warm_module_hook_is_bounded_too(
    bounded_spawner: Spawner, readable_tmp: Path
) -> None:
    """A `module` hook runs in a fork of the spawner (root: warm), in its own cgroup too."""
    (readable_tmp / "bomb.py").write_text(
        textwrap.dedent(f"""
            import mmap
            def hook(event):
                size = {BOMB_MB} << 20
                m = mmap.mmap(-1, size, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
                for at in range(0, size, 4096):
                    m[at] = 1
                return {{"advise": "got it all"}}
        """)
    )
    (readable_tmp / "bomb.py").chmod(0o644)
    hook = bomb_hook(readable_tmp, "", action=Action.MODULE, target="bomb.py:hook")
    report, drop_mb = await run_sampled(bounded_spawner, hook)
    assert report.frame.status is HookStatus.FAILED, to_json(report.frame)
    assert report.frame.reason == f"over memoryMb {MEMORY_MB}", to_json(report.frame)
    assert drop_mb < ALLOWED_DROP_MB


async def test_the_spawner_keeps_no_cgroup_of_a_finished_tree(
    bounded_spawner: Spawner, readable_tmp: Path
) -> None:
    """Hooks one after another, bombs and not: what the spawner holds of cgroups stays that
    of the next child and of a waiting fork (a finished tree's cgroup goes once it is idle)."""
    bomb = bomb_hook(readable_tmp, BOMBS["memfd"])
    fine = bomb_hook(readable_tmp, 'print(\'{"advise": "fine"}\')')
    for hook in (bomb, fine) * 3:
        await run_hook(bounded_spawner, hook, CTX)
    wanted = range(1, 3) if bounded_spawner.memory.get("by") == "cgroup" else range(0, 1)
    # The spawner sweeps a finished tree's cgroup once it is idle, a moment after the last
    # hook's report: looked at until it has (bounded), each look taking what is open then.
    for _ in range(1000):  # (10 s at most)
        if len(by_cgroup := _cgroups_held(bounded_spawner.pid)) in wanted:
            break
        await trio.sleep(0.01)
    assert len(by_cgroup) in wanted, by_cgroup  # the next child's (and a waiting fork's)


def _cgroups_held(pid: int) -> set[str]:
    """The cgroups whose files process `pid` holds open (an fd closed while it is looked at
    is not held)."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            held.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            continue
    return {f.rsplit("/", 1)[0] for f in held if "/mcpx-" in f}


async def test_a_script_over_its_bound_fails_saying_so(
    readable_tmp: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    """A script run (workspace, the runs' default) with `[limits] memoryMb`: its error says
    it went over."""
    require_rootless()
    doc = {"limits": {"memoryMb": MEMORY_MB, "scratchMb": 2 * BOMB_MB}, "hooks": []}
    (readable_tmp / "c.json").write_text(json.dumps(doc))
    cfg = load_config(["c.json"], cwd=readable_tmp, environ={}, discover=False)
    code = _PRELUDE + textwrap.dedent(BOMBS["shared_anonymous"])
    request = RunRequest(Script(argv=(PY, "-I", "-S", "-c", code, str(BOMB_MB))), str(readable_tmp))
    with trio.fail_after(90):
        async with open_runtime(cfg) as runtime:
            run = runtime.new_run(request)
            await runtime.execute(run)
            frames = run.journal.frames
    (error,) = [f for f in frames if f["type"] in ("result", "error")]
    assert error["type"] == "error", error
    assert error["message"].startswith(f"over memoryMb {MEMORY_MB}"), error


@pytest.mark.skipif(libc.table() is None, reason="no system call table for this machine")
@pytest.mark.parametrize("no_shm", [False, True])
@pytest.mark.parametrize("sockets", ["none", "egress", "net"])
def test_the_fallback_filter_refuses_memfds_and_shm_and_nothing_else(
    sockets: str, no_shm: bool
) -> None:
    """Without a cgroup, `memfd_create` fails with ENOMEM (and rootless, `shmget` creating
    a segment with ENOSPC); every other call is decided as without them."""
    table = libc.table()
    assert table is not None
    arch, nrs = table
    prog = seccomp.seccomp_program(sockets, True, no_shm)
    ipc_creat = 0o1000
    for args in ((0,) * 6, (0, 4096, ipc_creat | 0o600, 0, 0, 0), (5, 0, 0o600, 0, 0, 0)):
        for nr in range(512):
            got, _ = _run_filter(prog, nr, arch, args)
            if nr == nrs["memfd_create"]:
                assert got == 0x00050000 | errno.ENOMEM
            elif no_shm and nr == nrs["shmget"] and args[2] & ipc_creat:
                assert got == 0x00050000 | errno.ENOSPC  # creating; finding one is allowed
            else:
                assert got == _decision(nr, arch, args, sockets), (nr, args)
