"""Leak checks for process tests: no child process, no open fd, no marked process left behind;
and the fixtures of the sandbox tests."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import psutil
import pytest
import trio

from mcpx_hooks.runners import userns
from mcpx_hooks.supervisor.process.scratch import owner_dir
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner

# The run history (and the token) of every supervisor the tests start lives under a state
# directory of the tests' own, never the user's: one for the session, for the environments
# a test module copies at import, and one per test (`_own_state`) for everything else.
_SESSION_STATE = tempfile.mkdtemp(prefix="mcpx-tests-state-")
atexit.register(shutil.rmtree, _SESSION_STATE, True)
os.environ["XDG_STATE_HOME"] = _SESSION_STATE


# This process's scratch directories go in a directory of its own, locked for as long as the
# process lives (`process/scratch.py`): made now, its fd open before any test counts fds.
owner_dir()


@pytest.fixture(autouse=True)
def _own_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's supervisors keep their history (and token) in a directory of its own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


class Marker(str):
    """A string to put in the argv of a test's processes, to find them from the outside."""

    def alive(self) -> list[psutil.Process]:
        """Every live process on the host whose argv mentions this marker (zombies have none)."""
        return [
            p
            for p in psutil.process_iter(["cmdline"])
            if any(self in arg for arg in p.info["cmdline"] or ())
        ]


def _open_fds() -> dict[int, str]:
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the directory fd listdir itself used, closed by now
            continue
    return fds


@pytest.fixture
def marker() -> Iterator[Marker]:
    """A marker unique to this test, for the argv of its grandchildren: none may outlive it."""
    mark = Marker(f"mcpx-test-{uuid.uuid4().hex}")
    yield mark
    assert mark.alive() == []


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """The test (its Trio run included) leaves no child process and no open fd behind.
    Under pytest-xdist (`make test`) each worker is a process of its own, beside the others
    (not below them): its children and fds are its own tests' only."""
    before = _open_fds()
    yield
    assert psutil.Process().children(recursive=True) == []
    after = _open_fds()
    assert after == before, {"leaked": after.keys() - before.keys()}


def spawner_children(pid: int) -> list[psutil.Process]:
    """The children of pidns spawner `pid`, but the reapers it made ahead for its next child
    and its waiting forks (`runners/reapers.py`)."""
    return [child for child in psutil.Process(pid).children() if not is_init(child.pid)]


def is_init(pid: int) -> bool:
    """Whether process `pid` is PID 1 of its PID namespace (a pidns spawner's children that
    are: its reapers; told so, not by a command line, which may not be there yet just after
    an `exec`)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return next(x for x in status.splitlines() if x.startswith("NSpid:")).split()[-1] == "1"


#: Where the pidns spawner puts the uids of sandboxed children (`runners/pidns.py`).
HOOK_UID_BASE = 0x50000000


def hook_user_processes() -> list[psutil.Process]:
    """Live processes running as a per-child sandbox uid that are ours: below this test
    process, or orphaned to init (where an escape would land). Another suite's hooks, running
    under its own supervisor at the same time, are neither; nor are another pytest-xdist
    worker's (`make test`), unless orphaned to init as an escape would be (a tree a test kills
    is waited for until it is gone: `kill_supervisor_and_wait`)."""
    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    found = []
    for p in psutil.process_iter(["uids", "ppid"]):
        uids = p.info["uids"]
        if uids is None or uids.real < HOOK_UID_BASE:
            continue
        if p.pid in ours or p.info["ppid"] in (0, 1):
            found.append(p)
    return found


@pytest.fixture
def readable_tmp(tmp_path: Path) -> Path:
    """`tmp_path` opened to others (o+rx), as a declaring directory must be for a sandboxed
    hook's own user; its 0700 ancestors (pytest's) are covered by the sandbox."""
    tmp_path.chmod(0o755)
    return tmp_path


#: Whether this suite runs as root (hooks then get per-child uids) or as an ordinary user
#: (rootless: the spawner in a user namespace of its own, hooks as this user).
ROOT = os.geteuid() == 0
#: Python source of `open_fds()`: the fds open in the process that runs it, of the first 1,024
#: (for a child to say what it was given).
OPEN_FDS = """
import os
def open_fds():
    found = []
    for fd in range(1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    return found
"""
#: Why an ordinary user gets no rootless sandbox here (user namespaces refused), or None.
ROOTLESS_REFUSED = None if ROOT else userns.probe()
#: Set by `make test-unprivileged`: as an ordinary user where user namespaces are refused,
#: the tests that need them fail instead of skipping.
REQUIRE_ROOTLESS_ENV = "MCPX_HOOKS_TEST_REQUIRE_ROOTLESS"


def require_rootless() -> None:
    """Skips (or, under `REQUIRE_ROOTLESS_ENV`, fails) a test that needs the pidns spawner,
    as an ordinary user where user namespaces are refused, saying why."""
    if ROOTLESS_REFUSED is None:
        return
    why = f"no rootless sandbox here: {ROOTLESS_REFUSED}"
    if os.environ.get(REQUIRE_ROOTLESS_ENV):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
async def strict_spawner(no_leaks: None) -> AsyncIterator[Spawner]:
    """A spawner on which strict can be enforced: every mechanism (as an ordinary user all
    but the per-child uid, which only root has to give); after the test no process of a hook
    user is left on the host."""
    require_rootless()
    async with open_spawner() as sp:
        wanted = {n: v for n, v in sp.mechanisms.items() if ROOT or n != "uid"}
        assert all(v is True for v in wanted.values()), sp.mechanisms
        yield sp
    assert hook_user_processes() == []


async def kill_supervisor_and_wait(
    argv: list[str], marker: Marker, *, at_least: int, spawner_tree: bool = False
) -> None:
    """Starts a supervisor process (`argv`) that prints its spawner's pid once its tree is up,
    SIGKILLs it, and waits (bounded, on pidfds) for the spawner and every marked process (and,
    with `spawner_tree`, every descendant of the spawner) to die."""
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            spawner_pid = int(await proc.stdout.receive_some(100))
            doomed = {spawner_pid, *(p.pid for p in marker.alive())}
            if spawner_tree:
                doomed |= {p.pid for p in psutil.Process(spawner_pid).children(recursive=True)}
            assert len(doomed) >= at_least
            pidfds = [os.pidfd_open(pid) for pid in doomed]
        finally:
            proc.kill()
            await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.aclose()
        try:
            for pidfd in pidfds:  # each dies: a condition waited for, with a deadline
                with trio.fail_after(5):
                    await trio.lowlevel.wait_readable(pidfd)
        finally:
            for pidfd in pidfds:
                os.close(pidfd)


# ---- Hypothesis profiles (the property suite, tests/test_properties_*.py) ----------------------
# The default, for `make test` and CI: 40 examples per property (about a minute for the whole
# suite here), derandomized: the same examples on every machine and every run (chosen from each
# test's own source), so a failure in CI is the one a developer sees locally, and no example
# database, which a fresh clone would not have anyway. One failure per property is shrunk and
# reported. Examples run real processes and sockets: no deadline. `--hypothesis-profile=long`:
# 400 examples at random, every distinct failure, remembered (under the user's cache, not in
# the work tree) and replayed first next time.
from hypothesis import settings as _hypothesis_settings  # noqa: E402
from hypothesis.database import DirectoryBasedExampleDatabase  # noqa: E402

_hypothesis_settings.register_profile(
    "default",
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    report_multiple_bugs=False,
)
_hypothesis_settings.register_profile(
    "long",
    max_examples=400,
    deadline=None,
    derandomize=False,
    database=DirectoryBasedExampleDatabase(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "mcpx-hooks"
        / "hypothesis"
    ),
    print_blob=True,
)
# Loaded here, before the plugin reads `--hypothesis-profile` (which then wins); explicitly,
# so that CI (where Hypothesis would load its own "ci" profile) runs what `make test` runs.
_hypothesis_settings.load_profile("default")


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty state directory of the test's own (`XDG_STATE_HOME`: the package caches' home,
    empty, apart from the declaring one's), with an empty `project` directory beside it."""
    where = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(where))
    (tmp_path / "project").mkdir()
    return where


@pytest.fixture(scope="session")
def npm_registry() -> None:
    """Skips, saying why, where `npx` or the npm registry is missing (the tests that fetch a
    published package with `npx -y`)."""
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed")
    try:
        done = subprocess.run(
            ["npm", "ping"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"the npm registry is unreachable from here (npm: {exc})")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the npm registry is unreachable from here ({why})")


async def cut_once_waiting(log: Path, call: Callable[[], Awaitable[object]]) -> None:
    """Start `call` (of the test server `hostile.py`'s tool `wait`, logging to `log`), and
    cancel it once the server has it: a call cut at a fixed time may not have reached the
    server yet on a loaded machine. The server says so through the FIFO `LOG.waiting`."""
    fifo = Path(f"{log}.waiting")
    os.mkfifo(fifo)
    said = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        async with trio.open_nursery() as nursery:

            async def calling() -> None:
                await call()
                raise AssertionError("the call of `wait` was answered")

            nursery.start_soon(calling)
            with trio.fail_after(60):
                await trio.lowlevel.wait_readable(said)
            nursery.cancel_scope.cancel()
    finally:
        os.close(said)
