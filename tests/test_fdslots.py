"""A child started from a spawner that holds many fds leaves its fd table behind
(`runners/fdslots.py`): it gets exactly its own fds, every output still ends, and no pipe end
stays in the spawner. Real processes; no sleeps."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path

import pytest
import trio
from conftest import OPEN_FDS, require_rootless

from mcpx_hooks.runners import chain, fdslots
from mcpx_hooks.runners.spawnreq import Request
from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import SPAWN_MODE_ENV, ChildSpec, Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookrun import run_hook

PY = sys.executable
GRACE = 0.5
CAP = 1 << 20
#: A child that lists the fds open in it (of the first 1,024) on its stdout.
LIST_FDS = OPEN_FDS + "import sys; sys.stdout.write(repr(open_fds()))\n"

needs_chain = pytest.mark.skipif(not chain.available(), reason="no chain on this machine")


@pytest.fixture
def crowd() -> Iterator[list[int]]:
    """200 pipe fds open in this process, close-on-exec, as a busy spawner holds."""
    fds: list[int] = []
    for _ in range(100):
        fds.extend(os.pipe())
    yield fds
    for fd in fds:
        os.close(fd)


def inheritable(fds: Iterable[int]) -> set[int]:
    """Those of `fds` open in this process and not close-on-exec."""
    found = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.get_inheritable(fd):
                found.add(fd)
    return found


def listed_by(start: Callable[[int], int]) -> set[int]:
    """The fds open in a LIST_FDS child that `start` starts with the given stdout."""
    read_end, write_end = os.pipe()
    try:
        pid = start(write_end)
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as out:
        listed = out.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return set(json.loads(listed))


@needs_chain
def test_a_child_from_the_slots_has_its_fds_and_no_other_and_the_slots_are_emptied(
    crowd: list[int],
) -> None:
    slots = fdslots.made()
    assert len(slots.fds) == fdslots.COUNT and min(slots.fds) >= fdslots.FIRST
    argv = [PY, "-I", "-S", "-c", LIST_FDS]
    raw = json.dumps({"argv": argv, "cwd": "/", "env": {}, "fds": [1]}).encode()

    def from_slots(stdout: int) -> int:
        req = Request(raw, [os.dup(stdout)])
        try:
            pid = slots.start(req, PY, range(fdslots.LARGE + 1))
            assert pid is not None, "a crowded spawner starts from the slots"
            return pid
        finally:
            req.close()

    try:
        # Its stdout, and what any spawn gives a child: this process's inheritable fds.
        assert listed_by(from_slots) == {1} | inheritable(range(slots.bound))
        assert all(os.readlink(f"/proc/self/fd/{fd}") == os.devnull for fd in slots.fds)
    finally:
        for fd in slots.fds:
            os.close(fd)


def test_a_quiet_spawner_or_a_request_with_far_fds_spawns_as_before() -> None:
    slots = fdslots.made()
    raw = json.dumps({"argv": ["true"], "cwd": "/", "env": {}, "fds": [fdslots.FIRST]})
    read_end, write_end = os.pipe()
    req = Request(raw.encode(), [write_end])
    try:
        assert slots.start(req, "/bin/true", range(fdslots.LARGE)) is None
        assert slots.start(req, "/bin/true", range(fdslots.LARGE + 1)) is None
    finally:
        req.close()
        os.close(read_end)
        for fd in slots.fds:
            os.close(fd)


@pytest.fixture
async def spawner(monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> AsyncIterator[Spawner]:
    require_rootless()
    monkeypatch.setenv(SPAWN_MODE_ENV, "pidns")
    async with open_spawner() as sp:
        yield sp


def spec(argv: tuple[str, ...]) -> ChildSpec:
    return ChildSpec(argv, cwd="/", env={"PATH": "/usr/bin:/bin"})


def slots_of(pid: int) -> dict[int, str]:
    """The spawner's slots (its fds at their numbers), and what each is."""
    return {
        int(name): os.readlink(f"/proc/{pid}/fd/{name}")
        for name in os.listdir(f"/proc/{pid}/fd")
        if fdslots.FIRST <= int(name) < fdslots.FIRST + fdslots.COUNT
    }


@contextlib.asynccontextmanager
async def crowded(spawner: Spawner) -> AsyncIterator[None]:
    """More children of `spawner` than `fdslots.LARGE`, each waiting on its stdin, for the
    block; they end after it."""
    sleeper = (PY, "-I", "-S", "-c", "import sys; sys.stdin.read()")
    done = trio.Event()

    async def wait_on_stdin(task_status: trio.TaskStatus[None]) -> None:
        async with spawner.open_child(spec(sleeper), kill_grace=GRACE) as child:
            task_status.started()
            await done.wait()
            await child.communicate(b"", CAP, 4096)

    async with trio.open_nursery() as nursery:
        for _ in range(fdslots.LARGE):
            await nursery.start(wait_on_stdin)
        try:
            yield
        finally:
            done.set()


@needs_chain
@pytest.mark.parametrize("collect", [False, True], ids=["streamed", "collected"])
async def test_children_of_a_crowded_spawner_get_their_own_pipes_and_end(
    spawner: Spawner, collect: bool
) -> None:
    """With more running children than `fdslots.LARGE` trees, each new child gets its stdin,
    stdout and stderr and nothing else, its output ends when it does, and the spawner's slots
    hold /dev/null again."""
    double = (PY, "-I", "-S", "-c", "import sys; d = sys.stdin.read(); print(d * 2, end='')")
    results: dict[int, bytes] = {}
    listed: list[bytes] = []
    caps = (CAP, 4096) if collect else None

    async def one(i: int) -> None:
        async with spawner.open_child(spec(double), kill_grace=GRACE, collect=caps) as c:
            results[i] = bytes((await c.communicate(b"%d-" % i, CAP, 4096)).stdout)

    with trio.fail_after(60):
        async with crowded(spawner):
            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(one, i)
            lister = spec((PY, "-I", "-S", "-c", LIST_FDS))
            async with spawner.open_child(lister, kill_grace=GRACE, collect=caps) as c:
                listed.append(bytes((await c.communicate(b"", CAP, 4096)).stdout))
    assert results == {i: b"%d-%d-" % (i, i) for i in range(8)}
    assert listed == [b"[0, 1, 2]"]
    assert set(slots_of(spawner.pid).values()) == {os.devnull}


#: A strict hook's report of its fds and its seal, as its advice.
SEALED = OPEN_FDS + textwrap.dedent(
    """
    import ctypes, json
    libc = ctypes.CDLL(None)
    seal = [libc.prctl(39, 0, 0, 0, 0), libc.prctl(21, 0, 0, 0, 0)]  # nnp, seccomp
    print(json.dumps({"advise": json.dumps({"fds": open_fds(), "seal": seal})}))
    """
)


@needs_chain
async def test_a_strict_hook_of_a_crowded_spawner_is_sealed_and_has_only_its_fds(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    hook = Hook(
        name="h",
        on="script",
        phase=Phase.BEFORE,
        action=Action.RUN,
        target=(PY, "-I", "-S", "-c", SEALED),
        declaring_dir=str(readable_tmp),
        source=Provenance(SourceKind.COMMAND_LINE),
        sandbox=Profile.STRICT,
        timeout_ms=30_000,
    )
    with trio.fail_after(60):
        async with crowded(strict_spawner):
            reports = [await run_hook(strict_spawner, hook, HookContext(run=None)) for _ in "ab"]
    for report in reports:
        assert report.frame.status is HookStatus.OK, to_json(report.frame)
        assert json.loads(report.frame.advice[0]) == {"fds": [0, 1, 2], "seal": [1, 2]}
    assert set(slots_of(strict_spawner.pid).values()) == {os.devnull}
