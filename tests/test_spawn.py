"""The one spawn path, with real tiny processes, on both ways of owning a tree (pidns, keeper).

Every test that starts processes uses the `spawner` fixture, which asserts on the way out that
no child process and no fd of this test process is left; tests whose children start
grandchildren give them the `marker` in argv, and no process on the host may carry it after.
No test sleeps to let things settle: children print a readiness line when they are where the
test needs them, and waits for an outside process to die are on its pidfd, bounded.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import hashlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
import trio
from conftest import OPEN_FDS, ROOT, kill_supervisor_and_wait, require_rootless, spawner_children

from mcpx_hooks.runners.treeends import IDLE_REAPERS
from mcpx_hooks.supervisor.core.errors import SpawnError
from mcpx_hooks.supervisor.process import launch
from mcpx_hooks.supervisor.process.launch import HIDE_ENV
from mcpx_hooks.supervisor.process.spawner import (
    SPAWN_MODE_ENV,
    SPAWN_MODES,
    Child,
    ChildSpec,
    Outcome,
    Spawner,
    SpawnerProcess,
    TakenCount,
    open_spawner,
)

if TYPE_CHECKING:
    from conftest import Marker

PY = sys.executable
PATH = "/usr/local/bin:/usr/bin:/bin"
GRACE = 0.5
#: How late after its deadline a tree may be gone, beyond what the test expects: the machine
#: is small and shared.
SLACK = 1.0
CAP = 1 << 20


def py(code: str, *args: str) -> tuple[str, ...]:
    return (PY, "-I", "-S", "-c", textwrap.dedent(code), *args)


def spec(argv: tuple[str, ...], **kw: object) -> ChildSpec:
    fields: dict[str, object] = {"cwd": "/", "env": {"PATH": PATH}, **kw}
    return ChildSpec(argv, **fields)  # type: ignore[arg-type]


#: A grandchild that sleeps; `sys.argv[1]` of the child is the marker, passed down.
SLEEPER = "import time; time.sleep(1000)"
#: Starts a grandchild in its own session, says "ready", then sleeps.
SETSID_TREE = f"""
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-I", "-S", "-c", {SLEEPER!r}, sys.argv[1]],
                     start_new_session=True, stdout=subprocess.DEVNULL)
    print("ready", flush=True)
    time.sleep(1000)
"""
#: Double-forks a grandchild out of its session (it says "gc"), says "ready", then sleeps.
DOUBLE_FORK_TREE = f"""
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-I", "-S", "-c",
                     "print('gc', flush=True); " + {SLEEPER!r}, sys.argv[1]])
        os._exit(0)
    os.wait()
    print("ready", flush=True)
    time.sleep(1000)
"""


#: Each mode, and pidns where no reaper starts (`runners/reapers.py`): each child the init
#: of its namespace, SIGTERM emulated for it (`runners/trees.py`).
NO_REAPER = "pidns-init"


@pytest.fixture(params=[*SPAWN_MODES, NO_REAPER])
def spawn_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    mode: str = request.param
    if mode == NO_REAPER:
        monkeypatch.setenv(HIDE_ENV, "reaper")
    if mode.startswith("pidns"):  # as an ordinary user, in a user namespace of its own
        require_rootless()
    monkeypatch.setenv(SPAWN_MODE_ENV, mode.removesuffix("-init"))
    return mode


@pytest.fixture
async def spawner(spawn_mode: str, no_leaks: None) -> AsyncIterator[Spawner]:
    async with open_spawner() as sp:
        assert sp.mode == spawn_mode.removesuffix("-init")
        yield sp


async def read_line(child: Child) -> bytes:
    """One line of the child's stdout, read without consuming anything after it."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = await child.stdout.receive_some(1)
        assert byte, f"stdout closed before a full line: {bytes(line)!r}"
        line += byte
    return bytes(line)


async def time_out_when_ready(
    spawner: Spawner, argv: tuple[str, ...], *, lines: int = 1, after: float = 0.1
) -> tuple[Outcome, float]:
    """Runs a child under a deadline that starts once it printed `lines` lines (no race with
    its start-up); returns its outcome and how long after the deadline its tree was gone."""
    with trio.move_on_after(60) as scope:
        async with spawner.open_child(spec(argv), kill_grace=GRACE) as child:
            for _ in range(lines):
                await read_line(child)
            scope.deadline = trio.current_time() + after
            await child.communicate(b"", CAP, 4096)
    late = trio.current_time() - scope.deadline
    assert scope.cancelled_caught, "the child ended before its deadline"
    return child.outcome, late


async def run(
    spawner: Spawner,
    argv: tuple[str, ...],
    stdin: bytes = b"",
    *,
    collect: bool = False,
    tail: int = 4096,
    **kw: object,
) -> Outcome:
    """Runs a child to its end; `collect`: the spawner reads its output (pidns mode)."""
    caps = (CAP, tail)
    with trio.fail_after(30):
        async with spawner.open_child(
            spec(argv, **kw), kill_grace=GRACE, collect=caps if collect else None
        ) as child:
            assert child.collected == (collect and spawner.mode == "pidns")
            return await child.communicate(stdin, *caps)


#: Output read here from pipes, or collected by the spawner and sent with the exit report.
BOTH_WAYS = pytest.mark.parametrize("collect", [False, True], ids=["streamed", "collected"])


# --------------------------------------------------------------------------- input and output


@BOTH_WAYS
async def test_stdin_is_written_and_closed(spawner: Spawner, collect: bool) -> None:
    data = os.urandom(3 << 20)
    code = """
        import hashlib, sys
        data = sys.stdin.buffer.read()  # returns only once stdin is closed
        print(len(data), hashlib.sha256(data).hexdigest())
    """
    out = await run(spawner, py(code), data, collect=collect)
    assert out.stdout.decode().split() == [str(len(data)), hashlib.sha256(data).hexdigest()]
    assert (out.exit_code, out.signal, out.exited, out.killed) == (0, None, True, False)


async def test_no_stdin_is_dev_null(spawner: Spawner) -> None:
    code = "import sys; print(len(sys.stdin.buffer.read()))"
    with trio.fail_after(30):
        async with spawner.open_child(spec(py(code)), kill_grace=GRACE, stdin=False) as child:
            assert child.stdin is None
            out = await child.communicate(b"", CAP, 4096)
    assert out.stdout == b"0\n"


async def test_unread_stdin_is_bounded_by_the_timeout(spawner: Spawner) -> None:
    code = "import time; print('ready', flush=True); time.sleep(1000)"
    with trio.move_on_after(60) as scope:
        async with spawner.open_child(spec(py(code)), kill_grace=GRACE) as child:
            await read_line(child)
            scope.deadline = trio.current_time() + 0.2
            await child.communicate(b"x" * (5 << 20), CAP, 4096)  # blocks: nobody reads
    assert scope.cancelled_caught
    assert trio.current_time() - scope.deadline < GRACE + SLACK
    assert child.outcome.killed


@BOTH_WAYS
async def test_stdout_is_kept_whole_up_to_the_cap(spawner: Spawner, collect: bool) -> None:
    data = os.urandom(CAP)  # many pipefuls
    code = "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"
    out = await run(spawner, py(code), data, collect=collect)
    assert bytes(out.stdout) == data
    assert (out.exit_code, out.stdout_overflow, out.killed) == (0, False, False)


@BOTH_WAYS
async def test_stdout_flood_is_killed_at_the_cap(spawner: Spawner, collect: bool) -> None:
    code = """
        import sys, time
        block = b"x" * (1 << 20)
        for _ in range(50):
            sys.stdout.buffer.write(block)
        time.sleep(1000)
    """
    await run(spawner, ("true",))  # code paths and buffers warm before measuring
    rss = psutil.Process().memory_info().rss
    with trio.fail_after(30):
        out = await run(spawner, py(code), collect=collect)
    assert psutil.Process().memory_info().rss - rss < 20 << 20
    assert out.stdout_overflow and out.killed
    assert len(out.stdout) == CAP and set(out.stdout) == {ord("x")}
    assert out.signal == signal.SIGKILL


@BOTH_WAYS
@pytest.mark.parametrize("lines", [100, 400_000])
async def test_stderr_keeps_only_the_tail(spawner: Spawner, collect: bool, lines: int) -> None:
    code = f"""
        import sys
        for i in range({lines}):  # many writes of odd sizes: the tail wraps mid-write
            sys.stderr.buffer.write(b"%07d\\n" % i * (i % 3 + 1))
    """
    out = await run(spawner, py(code), collect=collect, tail=1000)
    expected = b"".join(b"%07d\n" % i * (i % 3 + 1) for i in range(lines))[-1000:]
    assert bytes(out.stderr_tail) == expected
    assert out.exit_code == 0


def pidns_only(spawner: Spawner) -> None:
    if spawner.mode != "pidns":
        pytest.skip("the spawner collects output in pidns mode only")


async def test_collected_short_child_is_heard_of_once_at_its_exit(spawner: Spawner) -> None:
    pidns_only(spawner)
    messages: list[str] = []
    with trio.fail_after(30):
        async with spawner.open_child(spec(("true",)), kill_grace=GRACE, collect=(CAP, 4096)) as c:
            recv = c._link.recv

            async def spy() -> dict[str, object] | None:
                msg = await recv()
                messages.append(str(msg and msg["event"]))
                return msg

            c._link.recv = spy  # type: ignore[method-assign]
            # Held back: the exit report came first, and brought the pid.
            assert c.outcome.exited and c.outcome.pid is not None and c._pidfds == []
            out = await c.communicate(b"", CAP, 4096)
    assert (out.exit_code, out.killed, messages) == (0, False, [])


async def test_collected_child_running_on_is_announced_with_its_pidfd(spawner: Spawner) -> None:
    pidns_only(spawner)
    code = "import time; time.sleep(1.5)"
    with trio.fail_after(30):
        async with spawner.open_child(spec(py(code)), kill_grace=GRACE, collect=(CAP, 4096)) as c:
            assert not c.outcome.exited  # "started" came, after `ANNOUNCE_AFTER_S`
            assert c.outcome.pid is not None and c._pidfds
            out = await c.communicate(b"", CAP, 4096)
    assert (out.exit_code, out.exited) == (0, True)


async def test_collected_child_cut_short_before_it_was_heard_of_keeps_its_tail(
    spawner: Spawner, marker: Marker
) -> None:
    """A timeout while `open_child` still waits (no "started": held back) still kills and
    reaps the tree, and the `outcome` given to it has what the tree wrote."""
    pidns_only(spawner)
    code = SETSID_TREE.replace('"ready"', '"last words", file=sys.stderr')
    outcome = Outcome()
    with trio.move_on_after(0.5) as scope:
        async with spawner.open_child(
            spec(py(code, marker)), kill_grace=GRACE, collect=(CAP, 4096), outcome=outcome
        ):
            raise AssertionError("not reached: the child runs past the deadline")
    assert scope.cancelled_caught
    assert outcome.killed and outcome.exited and outcome.pid is not None
    assert b"last words" in outcome.stderr_tail
    assert marker.alive() == []


async def test_extra_fd_and_nothing_else_is_inherited(spawner: Spawner) -> None:
    code = OPEN_FDS + 'os.write(3, b"frames")\nprint(open_fds())\n'
    with trio.fail_after(30):
        async with spawner.open_child(spec(py(code)), kill_grace=GRACE, extra_fds=(3,)) as child:
            out = await child.communicate(b"", CAP, 4096)
            assert await child.extra[0].receive_some(100) == b"frames"
    assert out.stdout == b"[0, 1, 2, 3]\n"


async def test_concurrent_children_keep_their_own_pipes(spawner: Spawner) -> None:
    code = "import sys; sys.stdout.write(sys.stdin.read() * 2)"
    results: dict[int, bytes] = {}

    async def one(i: int) -> None:
        results[i] = bytes((await run(spawner, py(code), b"%d-" % i)).stdout)

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(one, i)
    assert results == {i: b"%d-%d-" % (i, i) for i in range(8)}


# --------------------------------------------------------------------------- how it ended


async def test_exit_code(spawner: Spawner) -> None:
    out = await run(spawner, ("sh", "-c", "exit 3"))
    assert (out.exit_code, out.signal, out.exited, out.killed) == (3, None, True, False)
    assert out.cpu_ms >= 0 and out.max_rss_kb > 0


async def test_crash_signal(spawner: Spawner) -> None:
    out = await run(spawner, py("import ctypes; ctypes.string_at(0)"))
    assert (out.exit_code, out.signal) == (None, signal.SIGSEGV)


async def test_signal_from_outside(spawner: Spawner, marker: Marker) -> None:
    with trio.fail_after(30):
        async with spawner.open_child(spec(py(SETSID_TREE, marker)), kill_grace=GRACE) as child:
            await read_line(child)
            assert child.outcome.pid is not None
            os.kill(child.outcome.pid, signal.SIGKILL)
            out = await child.communicate(b"", CAP, 4096)
    assert (out.exit_code, out.signal, out.killed) == (None, signal.SIGKILL, False)
    assert marker.alive() == []


async def test_missing_program(spawner: Spawner) -> None:
    with pytest.raises(SpawnError, match="'no-such-program-here': not found on PATH"):
        await run(spawner, ("no-such-program-here",))
    with pytest.raises(SpawnError, match="'/no/such/program': No such file or directory"):
        await run(spawner, ("/no/such/program", "arg"))
    with pytest.raises(SpawnError, match="'/etc/passwd': Permission denied"):
        await run(spawner, ("/etc/passwd",))


async def test_a_lone_surrogate_is_refused_by_name_and_text_of_any_script_passes(
    spawner: Spawner,
) -> None:
    """A request travels as UTF-8 JSON, but one with a lone surrogate (which UTF-8 cannot
    hold) still reaches the spawner, escaped, and is refused saying where."""
    with pytest.raises(SpawnError, match=r"argv\[1\]: holds a lone surrogate"):
        await run(spawner, ("echo", "a\udc80"))
    assert (await run(spawner, ("echo", "é ✓ \u2028 \U0001f600"))).stdout == (
        "é ✓ \u2028 \U0001f600\n".encode()
    )


async def test_bad_cwd(spawner: Spawner, tmp_path: Path) -> None:
    gone = re.escape(str(tmp_path / "gone"))
    with pytest.raises(SpawnError, match=f"cannot use cwd '{gone}': No such file or directory"):
        await run(spawner, ("true",), cwd=str(tmp_path / "gone"))


async def test_cwd_and_relative_program(spawner: Spawner, tmp_path: Path) -> None:
    script = tmp_path / "hook.sh"
    script.write_text("#!/bin/sh\npwd\n")
    script.chmod(0o755)
    out = await run(spawner, ("./hook.sh",), cwd=str(tmp_path))
    assert out.stdout == f"{tmp_path}\n".encode()


async def test_environment_is_exactly_the_given_one(spawner: Spawner) -> None:
    env = {"PATH": PATH, "A": "1", "SPACED": "two words", "EMPTY": ""}
    out = await run(spawner, ("cat", "/proc/self/environ"), env=env)
    assert dict(kv.split("=", 1) for kv in out.stdout.decode().split("\0") if kv) == env
    out = await run(spawner, ("/bin/cat", "/proc/self/environ"), env={})
    assert out.stdout == b""


async def test_child_has_its_own_session(spawner: Spawner) -> None:
    code = "import time; print('ready', flush=True); time.sleep(1000)"
    with trio.fail_after(30):
        async with spawner.open_child(spec(py(code)), kill_grace=GRACE) as child:
            await read_line(child)
            pid = child.outcome.pid
            assert pid is not None
            assert os.getsid(pid) == os.getpgid(pid) == pid
            assert os.getsid(pid) not in (os.getsid(0), os.getsid(spawner.pid))


# --------------------------------------------------------------------------- whole-tree kill


async def test_timeout_kills_child_and_setsid_grandchild(spawner: Spawner, marker: Marker) -> None:
    out, late = await time_out_when_ready(spawner, py(SETSID_TREE, marker))
    assert late < GRACE, "default SIGTERM ends the tree well within the grace"
    assert marker.alive() == []
    assert out.killed and out.exited and out.signal in (signal.SIGTERM, signal.SIGKILL)


async def test_timeout_kills_double_forked_grandchild(spawner: Spawner, marker: Marker) -> None:
    _, late = await time_out_when_ready(spawner, py(DOUBLE_FORK_TREE, marker), lines=2)
    assert late < GRACE
    assert marker.alive() == []


@pytest.mark.parametrize("how", ["ignore", "handler"])
async def test_sigterm_ignored_is_killed_after_the_grace(
    spawner: Spawner, marker: Marker, how: str
) -> None:
    code = f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, {"signal.SIG_IGN" if how == "ignore" else "lambda *a: None"})
        subprocess.Popen([sys.executable, "-I", "-S", "-c", {SLEEPER!r}, sys.argv[1]],
                         start_new_session=True)
        print("ready", flush=True)
        while True:
            time.sleep(1000)
    """
    out, late = await time_out_when_ready(spawner, py(code, marker))
    assert GRACE <= late < GRACE + SLACK
    assert marker.alive() == []
    assert out.signal == signal.SIGKILL and out.killed


TERM_GRANDCHILD = """
import signal, sys, time
def bye(*_):
    sys.stderr.write("grandchild got TERM\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("gc", flush=True)
time.sleep(1000)
"""


async def test_sigterm_reaches_every_process_of_the_tree(spawner: Spawner, marker: Marker) -> None:
    code = f"""
        import signal, subprocess, sys, time
        gc = subprocess.Popen([sys.executable, "-I", "-S", "-c", {TERM_GRANDCHILD!r}, sys.argv[1]],
                              start_new_session=True)
        def bye(*_):
            gc.wait()
            sys.stderr.write("child got TERM\\n")
            sys.exit(7)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        time.sleep(1000)
    """
    out, late = await time_out_when_ready(spawner, py(code, marker), lines=2)
    assert late < GRACE
    assert out.stderr_tail.decode().splitlines() == ["grandchild got TERM", "child got TERM"]
    assert (out.exit_code, out.signal, out.killed) == (7, None, True)


async def test_child_exit_kills_background_grandchild_holding_stdout(
    spawner: Spawner, marker: Marker
) -> None:
    code = f"""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-I", "-S", "-c", {SLEEPER!r}, sys.argv[1]])
        print("done")
    """
    start = trio.current_time()
    out = await run(spawner, py(code, marker))  # would wait 1000 s for the grandchild's EOF
    assert trio.current_time() - start < 10
    assert out.stdout == b"done\n" and out.exit_code == 0 and not out.killed
    assert marker.alive() == []


async def test_cancellation_kills_the_tree(spawner: Spawner, marker: Marker) -> None:
    async def hold(task_status: trio.TaskStatus[Child]) -> None:
        async with spawner.open_child(spec(py(DOUBLE_FORK_TREE, marker)), kill_grace=GRACE) as c:
            await read_line(c)
            await read_line(c)
            task_status.started(c)
            await c.wait()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            child = await nursery.start(hold)
            assert len(marker.alive()) >= 2
            nursery.cancel_scope.cancel()
    assert marker.alive() == []
    assert child.outcome.killed and child.outcome.exited


async def test_cancelled_before_started_still_kills_and_reaps(
    spawner: Spawner, marker: Marker
) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()  # the request goes out; waiting for "started" is cancelled
        async with spawner.open_child(spec(py(SETSID_TREE, marker)), kill_grace=GRACE):
            raise AssertionError("not reached")
    assert marker.alive() == []
    if spawner.mode == "pidns":  # the spawner itself has reaped the child (keepers linger)
        assert spawner_children(spawner.pid) == []


def _standin_process() -> subprocess.Popen[bytes]:
    """A live stand-in for the spawner's process (`Spawner` polls it): it lives until its
    stdin closes."""
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )


async def test_cancelled_before_started_waits_for_the_exit_report(no_leaks: None) -> None:
    """The supervisor side alone, against a fake spawner played by this test."""
    mine, stdlib_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs = trio.socket.from_stdlib_socket(stdlib_theirs)
    standin = _standin_process()
    counter_fd = os.memfd_create("taken", os.MFD_CLOEXEC)
    spawner = Spawner(SpawnerProcess(standin, mine, "fake", {}, TakenCount(counter_fd)))
    os.close(counter_fd)
    events: list[str] = []

    async def fake_spawner() -> None:
        msg, ancdata, _, _ = await theirs.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
        fds = array.array("i", ancdata[0][2]).tolist()
        assert json.loads(msg)["argv"] == ["prog"]
        for fd in fds[1:]:
            os.close(fd)
        ctrl = trio.socket.from_stdlib_socket(socket.socket(fileno=fds[0]))
        with ctrl:
            events.append(json.loads(await ctrl.recv(100))["cmd"])
            await ctrl.send(b'{"event": "started", "pid": 1234, "keeper": null}')
            events.append("exit sent")
            exit_report = {"event": "exit", "code": None, "signal": 15, "cpuMs": 1, "maxRssKb": 2}
            await ctrl.send(json.dumps(exit_report).encode())

    try:
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as scope:
                scope.cancel()
                nursery.start_soon(fake_spawner)
                async with spawner.open_child(spec(("prog",)), kill_grace=GRACE):
                    raise AssertionError("not reached")
            events.append("returned")
    finally:
        spawner._close()
        theirs.close()
        assert standin.stdin is not None
        standin.stdin.close()
        standin.wait()
    assert events == ["term", "exit sent", "returned"]


async def test_kill_and_wait(spawner: Spawner) -> None:
    code = "import time; print('ready', flush=True); time.sleep(1000)"
    with trio.fail_after(30):
        async with spawner.open_child(spec(py(code)), kill_grace=GRACE) as child:
            await read_line(child)
            await child.kill()
            out = await child.wait()
            assert out is child.outcome
    assert (out.signal, out.killed, out.exited) == (signal.SIGKILL, True, True)


async def test_spawner_killed_leaves_no_process_and_is_restarted(
    spawner: Spawner, marker: Marker
) -> None:
    first = spawner.pid
    with trio.fail_after(30):
        async with spawner.open_child(spec(py(DOUBLE_FORK_TREE, marker)), kill_grace=GRACE) as c:
            await read_line(c)
            await read_line(c)
            pidfd = os.pidfd_open(spawner.pid)
            try:
                os.kill(spawner.pid, signal.SIGKILL)
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
            if spawner.mode == "pidns":  # the tree died with the spawner's namespace
                outcome = await c.wait()
                assert marker.alive() == []
                assert (outcome.lost, outcome.exited) == (True, False)
            # (A keeper outlives its spawner; leaving the block kills its tree.)
    # The next child starts on a new spawner.
    assert (await run(spawner, ("true",))).exit_code == 0
    assert (spawner.restarts, spawner.pid != first) == (1, True)
    assert marker.alive() == []


@pytest.mark.parametrize("spawn_mode", ["pidns"], indirect=True)  # keepers keep children
async def test_a_child_whose_spawner_died_after_taking_it_is_lost_not_started_again(
    spawner: Spawner, tmp_path: Path
) -> None:
    # The spawner is killed the moment it has taken the request (it counts it in shared
    # memory before it starts anything): the child may or may not have started, so it must
    # not be started again (it may have done part of its work).
    first, ran = spawner.pid, tmp_path / "ran"
    outcomes: list[Outcome] = []

    async def start_it() -> None:
        outcomes.append(await run(spawner, ("sh", "-c", f"echo >> {ran}; exec sleep 1000")))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(start_it)
            # Shared memory gives no event to wait for: spin, letting the request go out.
            while not (spawner._sent and spawner._taken.reached(spawner._sent)):
                await trio.lowlevel.checkpoint()
            os.kill(first, signal.SIGKILL)
    (out,) = outcomes
    assert (out.lost, out.exited) == (True, False)
    assert (await run(spawner, ("true",))).exit_code == 0  # on a new spawner
    assert (spawner.restarts, spawner.pid != first) == (1, True)
    assert (ran.read_text().count("\n") if ran.exists() else 0) <= 1  # never a second time


SUPERVISOR = """
import sys, trio
from mcpx_hooks.supervisor.process.spawner import ChildSpec, open_spawner

async def main():
    async with open_spawner() as spawner:
        spec = ChildSpec(tuple(sys.argv[1:]), "/", {"PATH": "/usr/bin:/bin"})
        async with spawner.open_child(spec, kill_grace=0.5) as child:
            for _ in range(2):  # "gc" and "ready": the whole tree is up
                while not (await child.stdout.receive_some(1)).endswith(b"\\n"):
                    pass
            print(spawner.pid, flush=True)
            await trio.sleep_forever()

trio.run(main)
"""


async def test_supervisor_killed_leaves_no_process(
    spawn_mode: str, no_leaks: None, marker: Marker
) -> None:
    argv = [PY, "-c", SUPERVISOR, *py(DOUBLE_FORK_TREE, marker)]
    # spawner, child, double-forked grandchild, ...
    await kill_supervisor_and_wait(argv, marker, at_least=4, spawner_tree=True)
    assert marker.alive() == []


# --------------------------------------------------------------------------- owned and reaped


async def test_spawner_is_reaped_when_closed(spawn_mode: str, no_leaks: None) -> None:
    async with open_spawner() as sp:
        # (Rootless, the process started here holds the one that serves, `sp.pid`.)
        assert psutil.Process(sp._proc.pid).ppid() == os.getpid()
        out = await run(sp, ("true",))
        assert out.exit_code == 0
    assert psutil.Process().children(recursive=True) == []


async def test_no_fd_is_left_open_by_many_children(spawner: Spawner) -> None:
    await run(spawner, ("true",))  # the spawner's socket and Trio's own fds are open by now
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(5):
        await run(spawner, ("true",), b"input")
        with pytest.raises(SpawnError):
            await run(spawner, ("no-such-program-here",))
        await time_out_when_ready(
            spawner, py("import time; print('ready', flush=True); time.sleep(99)")
        )
    assert sorted(os.listdir("/proc/self/fd")) == before


# --------------------------------------------------------------------------- limits


def limits_of(names: list[str]) -> tuple[str, ...]:
    return py(
        f"import json, resource; print(json.dumps("
        f"[resource.getrlimit(getattr(resource, n)) for n in {names!r}]))"
    )


_NOFILE_HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
_STACK_HARD = resource.getrlimit(resource.RLIMIT_STACK)[1]


@pytest.mark.parametrize(
    "limits",
    [
        # Soft limits under the spawner's own hard ones: borrowed by the pidns spawner.
        (("RLIMIT_NOFILE", 64, _NOFILE_HARD), ("RLIMIT_FSIZE", 1 << 20, resource.RLIM_INFINITY)),
        # Big enough not to hurt the spawner either.
        (("RLIMIT_AS", 1 << 40, resource.RLIM_INFINITY), ("RLIMIT_STACK", 1 << 22, _STACK_HARD)),
        # Lowered hard limits (without CAP_SYS_RESOURCE), and a CPU limit below the spawner's
        # own CPU time plus a margin: started by fork in pidns mode.
        (("RLIMIT_NOFILE", 64, 64),),
        (("RLIMIT_CPU", 1, 2), ("RLIMIT_FSIZE", 1 << 20, 1 << 21)),
    ],
)
async def test_rlimits_are_set_in_the_child_only(
    spawner: Spawner, limits: tuple[tuple[str, int, int], ...]
) -> None:
    names = [name for name, _, _ in limits]
    out = await run(spawner, limits_of(names), rlimits=limits)
    assert json.loads(out.stdout) == [[soft, hard] for _, soft, hard in limits]
    # None of it stuck to the spawner: the next child has the limits this process has.
    out = await run(spawner, limits_of(names))
    assert json.loads(out.stdout) == [list(resource.getrlimit(getattr(resource, n))) for n in names]


async def test_bad_rlimits_are_refused(spawner: Spawner) -> None:
    with pytest.raises(SpawnError, match="unknown resource limit 'RLIMIT_NOPE'"):
        await run(spawner, ("true",), rlimits=(("RLIMIT_NOPE", 1, 1),))
    with pytest.raises(SpawnError, match="cannot set RLIMIT_NOFILE"):
        await run(spawner, ("true",), rlimits=(("RLIMIT_NOFILE", 100, 10),))
    with pytest.raises(SpawnError, match="cannot set RLIMIT_CPU"):  # the fork path in pidns
        await run(spawner, ("true",), rlimits=(("RLIMIT_CPU", 1, 0),))
    assert (await run(spawner, ("true",))).exit_code == 0


@pytest.mark.parametrize("spawn_mode", ["pidns"], indirect=True)
async def test_pidns_child_is_pid_2_after_its_reaper(spawner: Spawner) -> None:
    """Not its namespace's init (`runners/reapers.py`): a signal it sends itself arrives
    (an init's would be dropped: `kill $$` in a shell went on to say "alive"). A namespace
    that the last unsandboxed child left empty takes the next one (PID 3)."""
    code = "import os; print(os.getpid(), os.getppid())"
    assert (await run(spawner, py(code))).stdout == b"2 0\n"
    out = await run(spawner, py(code), rlimits=(("RLIMIT_CPU", 1, 2),))  # the fork path
    assert out.stdout == b"3 0\n"
    for sig in ("TERM", "KILL"):
        out = await run(spawner, ("/bin/sh", "-c", f"kill -{sig} $$; echo alive"))
        assert (out.signal, out.stdout) == (getattr(signal, f"SIG{sig}"), b"")


@pytest.mark.parametrize("spawn_mode", ["pidns"], indirect=True)
async def test_the_reapers_program_cannot_be_changed(spawner: Spawner) -> None:
    """The spawner's memfd of the reapers' program is sealed: a process that can open it
    through /proc (root; an ordinary user's own processes, rootless) cannot rewrite what the
    next reaper runs."""
    await run(spawner, ("true",))
    fds = f"/proc/{spawner.pid}/fd"
    (program,) = [
        f"{fds}/{fd}"
        for fd in os.listdir(fds)
        if os.readlink(f"{fds}/{fd}").startswith("/memfd:mcpx-hooks-reaper")
    ]
    # (Opened for writing it is refused while a reaper runs it, ETXTBSY; between reapers,
    # only the seals hold.)
    fd = os.open(program, os.O_RDONLY)
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    finally:
        os.close(fd)
    need = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
    assert seals & need == need
    assert (await run(spawner, py("import os; print(os.getpid())"))).stdout == b"3\n"


@pytest.mark.parametrize("spawn_mode", ["pidns"], indirect=True)
@BOTH_WAYS
async def test_a_namespace_is_kept_only_when_its_child_left_nothing(
    spawner: Spawner, marker: Marker, collect: bool
) -> None:
    """A child that leaves a process behind has its namespace ended with it (the process
    gone before its exit is reported); the next child starts in a fresh one (PID 2), and
    the one after that joins it (PID 3), which that child left empty."""
    leaves = f"""
        import os, subprocess, sys
        subprocess.Popen([sys.executable, "-I", "-S", "-c", {SLEEPER!r}, sys.argv[1]],
                         start_new_session=True)
        print(os.getpid())
    """
    pid = "import os; print(os.getpid())"
    assert (await run(spawner, py(pid), collect=collect)).stdout == b"2\n"
    assert (await run(spawner, py(leaves, marker), collect=collect)).stdout == b"3\n"
    assert marker.alive() == []
    assert (await run(spawner, py(pid), collect=collect)).stdout == b"2\n"
    assert (await run(spawner, py(pid), collect=collect)).stdout == b"3\n"
    # A tree timed out from outside (its owner holds the child's pidfd alone) goes whole; the
    # namespace is kept or not as what is left of it ended before the child was reaped.
    out, _ = await time_out_when_ready(spawner, py(SETSID_TREE, marker))
    assert out.killed and marker.alive() == []
    assert (await run(spawner, py(pid), collect=collect)).exit_code == 0


#: Makes a process its sibling (`clone(CLONE_PARENT)`: its parent is the spawner, outside
#: the namespace, not a process there), which sleeps, its output to /dev/null; with "orphan"
#: in `sys.argv[2:]`, also leaves an ordinary orphan that sleeps; with "nested", the sibling
#: is the init of a PID namespace of the child's (inside the child's) where the child may
#: make one; then prints its pid.
SIBLING_TREE = f"""
    import ctypes, os, signal, sys
    libc = ctypes.CDLL(None, use_errno=True)
    clone = {{"x86_64": 56, "aarch64": 220}}[os.uname().machine]
    if "nested" in sys.argv[2:]:  # (refused to a hook without capabilities: then as above)
        libc.unshare(0x20000000)  # CLONE_NEWPID
    for sibling in (True, False)[: 1 + ("orphan" in sys.argv[2:])]:
        pid = libc.syscall(clone, 0x8000 | signal.SIGCHLD, 0, 0, 0, 0) if sibling else os.fork()
        if pid == 0:
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", {SLEEPER!r}, sys.argv[1]])
        assert pid > 0, ctypes.get_errno()
    print(os.getpid(), flush=True)
"""


@pytest.mark.parametrize("spawn_mode", ["pidns"], indirect=True)
@BOTH_WAYS
async def test_a_process_the_child_made_its_sibling_goes_with_its_namespace(
    spawner: Spawner, marker: Marker, collect: bool
) -> None:
    """A child's parent is the spawner, so `clone(CLONE_PARENT)` makes a process in its
    namespace that descends from no process there (not from its reaper): its namespace is
    not kept for the next child (which would have seen it, and outlived its owner), and is
    ended with it, the spawner reaping it (the kernel keeps the reaper until then: the exit
    report never came); also when the tree is timed out, or the spawner closes."""
    pid = "import os; print(os.getpid())"
    assert (await run(spawner, py(pid), collect=collect)).stdout == b"2\n"
    out = await run(spawner, py(SIBLING_TREE, marker), collect=collect)
    assert out.stdout == b"3\n" and marker.alive() == []
    assert (await run(spawner, py(pid), collect=collect)).stdout == b"2\n"
    out = await run(spawner, py(SIBLING_TREE, marker, "nested"), collect=collect)
    assert out.stdout == b"3\n" and marker.alive() == []
    assert (await run(spawner, py(pid), collect=collect)).stdout == b"2\n"
    out = await run(spawner, py(SIBLING_TREE, marker, "orphan"), collect=collect)
    assert out.exit_code == 0 and marker.alive() == []
    tree = py(SIBLING_TREE + "    import time; time.sleep(1000)\n", marker, "orphan")
    out, late = await time_out_when_ready(spawner, tree)
    assert out.killed and late < GRACE + SLACK and marker.alive() == []
    async with spawner.open_child(spec(tree), kill_grace=GRACE) as child:
        await read_line(child)
    assert marker.alive() == []


@pytest.mark.parametrize("spawn_mode", ["pidns"], indirect=True)
async def test_a_sibling_goes_with_a_namespace_ended_among_others(
    spawner: Spawner, marker: Marker
) -> None:
    """Where no more namespaces may be kept (four are), a child's ends with it: the ends of
    a wake-up are searched for processes their children made their siblings together, and
    one found there is gone before the child's exit is reported."""
    waits = 'import sys; print("ready", flush=True); sys.stdin.read()'
    sibling = f"\n    {waits}{SIBLING_TREE}"  # (as indented as the tree)
    async with contextlib.AsyncExitStack() as stack:
        children = []
        for argv in [*(py(waits) for _ in range(IDLE_REAPERS)), py(sibling, marker)]:
            child = spawner.open_child(spec(argv), kill_grace=GRACE)
            children.append(await stack.enter_async_context(child))
            assert await read_line(children[-1]) == b"ready\n"
        for child in children[:-1]:  # (each namespace kept as its child ends: four)
            assert (await child.communicate(b"", CAP, 4096)).exit_code == 0
        out = await children[-1].communicate(b"", CAP, 4096)
        assert out.exit_code == 0 and marker.alive() == []
        assert spawner_children(spawner.pid) == []  # (the sibling reaped before the report)


@pytest.mark.parametrize("spawn_mode", [NO_REAPER], indirect=True)
async def test_without_a_reaper_the_child_is_the_init(spawner: Spawner) -> None:
    code = "import os; print(os.getpid(), os.getppid())"
    assert (await run(spawner, py(code))).stdout == b"1 0\n"
    out = await run(spawner, ("/bin/sh", "-c", "kill -TERM $$; echo alive"))
    assert (out.exit_code, out.stdout) == (0, b"alive\n")


@contextlib.contextmanager
def _no_pid_namespaces() -> Iterator[None]:
    raise launch._NoPidNamespace("unshare(CLONE_NEWPID): Operation not permitted")
    yield


async def test_falls_back_to_keepers_without_pid_namespaces(
    monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    # As root, PID namespaces refused; as another user, user namespaces (hidden here).
    monkeypatch.setattr(launch, "_pid_namespace_for_next_child", _no_pid_namespaces)
    if not ROOT:
        monkeypatch.setenv("MCPX_HOOKS_HIDE", "userns")
    monkeypatch.delenv(SPAWN_MODE_ENV, raising=False)
    async with open_spawner() as sp:
        assert sp.mode == "keeper"
        assert (await run(sp, ("sh", "-c", "exit 4"))).exit_code == 4
    monkeypatch.setenv(SPAWN_MODE_ENV, "pidns")
    why = "unshare" if ROOT else "the spawner runs in keeper mode: hidden by MCPX_HOOKS_HIDE"
    with pytest.raises(SpawnError, match=f"MCPX_HOOKS_SPAWN=pidns, but .*{why}"):
        async with open_spawner():
            pass


async def test_unknown_spawn_mode_is_refused(
    monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    monkeypatch.setenv(SPAWN_MODE_ENV, "vfork")
    with pytest.raises(SpawnError, match="MCPX_HOOKS_SPAWN='vfork'"):
        async with open_spawner():
            pass


async def test_a_request_of_hundreds_of_kilobytes_starts(spawner: Spawner) -> None:
    """A request over the kernel's default socket buffer (208 KiB) and the spawner's old
    256 KiB: its socket's buffer is raised for it, and the spawner takes it whole."""
    env = {"PATH": PATH, **{f"BIG{i}": str(i) * 100_000 for i in range(3)}}
    argv = py(
        "import os, sys; print(len(sys.argv), sum(len(os.environ[f'BIG{i}']) for i in range(3)))"
    )
    out = await run(spawner, (*argv, *["a"] * 10_000), env=env)
    assert out.stdout.split() == [b"10001", b"300000"]
    assert spawner.restarts == 0


async def test_a_request_too_large_to_send_is_refused_saying_what_is_large(
    spawner: Spawner,
) -> None:
    """One past what one datagram can be: refused at once, naming the sizes of argv and the
    environment, never taken for a spawner that has gone; the spawner goes on."""
    argv = ("true", *["x" * 100_000] * 50)
    with pytest.raises(SpawnError) as caught:
        await run(spawner, argv)
    message = str(caught.value)
    assert re.search(
        r"request to the spawner is [\d,]+ bytes \(argv 51 items, 5,000,055 bytes;", message
    ), message
    assert f"over the {spawner.request_max:,} bytes one request can be" in message
    assert "not running" not in message
    assert (await run(spawner, ("echo", "on"))).stdout == b"on\n"
    assert spawner.restarts == 0


async def test_what_execve_finds_too_large_is_named(spawner: Spawner) -> None:
    one = 32 * os.sysconf("SC_PAGESIZE")  # the longest string a program takes
    with pytest.raises(
        SpawnError, match=f"the variable BIG is {one + 5:,} bytes, over the {one:,}"
    ):
        await run(spawner, ("true",), env={"PATH": PATH, "BIG": "x" * one})
    with pytest.raises(SpawnError, match=r"argv \(400,001 items\) and the environment .* take"):
        await run(spawner, ("true", *["ab"] * 400_000))
