"""The spawner survives any request it is sent: one it cannot carry out fails alone.

Hostile requests go straight onto a real spawner's request socket, the way the supervisor
sends them (`Spawner._send_request`: one SOCK_SEQPACKET message, the control socket and the
child's fds attached with SCM_RIGHTS). Each must get an "error" on its control socket saying
what was wrong, or, with no control socket, be dropped; the spawner must have closed every
fd the request brought (the child's fds are pipes here: their read ends see end of file);
then an ordinary child still runs to its exit report on the same spawner process, which holds
no more fds and runs no more processes than before. In both ways of owning a tree (`spawner`
runs each test in pidns and keeper mode) and, with a sandbox plan, on the jailed and warm
paths (`strict_spawner`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import test_spawn
import trio
from conftest import is_init
from test_spawn import CAP, GRACE, PATH, py, run, spec

from mcpx_hooks.runners import idmap
from mcpx_hooks.runners.protocol import MAX_FDS, MAX_MESSAGE
from mcpx_hooks.runners.start import MAX_FD
from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.process.child import SpawnerLink
from mcpx_hooks.supervisor.process.scratch import scratch_dir
from mcpx_hooks.supervisor.process.spawner import SandboxPlan, Spawner, _fd_array
from mcpx_hooks.supervisor.process.spawnspec import sandbox_fields

#: The fixtures of `test_spawn.py`: a spawner in each way of owning a tree (pidns, keeper).
spawn_mode = test_spawn.spawn_mode
spawner = test_spawn.spawner

GOOD: dict[str, Any] = {"argv": ["true"], "cwd": "/", "env": {"PATH": PATH}, "fds": [0, 1, 2]}
PLAN = {"net": False, "read": ["/usr"], "scratch": "/tmp", "scratchBytes": 1 << 20}
HUGE = "x" * 200_000


def req(**changes: Any) -> bytes:
    """The good request with `changes`; a change to `...` removes the key."""
    fields = {**GOOD, **changes}
    return json.dumps({k: v for k, v in fields.items() if v is not ...}).encode()


def raw(text: str) -> bytes:
    """A request written as JSON text, escapes and all (`json.dumps` would add its own)."""
    return text.encode()


def rlimit(soft: str, hard: str = "1") -> bytes:
    return raw(
        '{"argv": ["true"], "cwd": "/", "env": {}, "fds": [0, 1, 2], '
        f'"rlimits": [["RLIMIT_CPU", {soft}, {hard}]]}}'
    )


#: (request, how many fds for the child it brings, what the error says)
HOSTILE = [
    # Not a request at all.
    pytest.param(b"{", 3, "not JSON", id="not-json"),
    pytest.param(b'{"argv": ["\xff"]}', 3, "not JSON", id="not-utf8"),
    pytest.param(b"", 3, "not JSON", id="empty"),
    pytest.param(b"[" * 100_000, 3, "JSON nested too deeply", id="deep"),
    pytest.param(rlimit("1" * 5000), 3, "not JSON", id="5000-digit-integer"),
    pytest.param(b"[]", 3, "not an object but an array", id="array"),
    pytest.param(b"null", 3, "not an object but null", id="null"),
    pytest.param(req(sandbx=PLAN), 3, "unknown key 'sandbx'", id="unknown-key"),
    pytest.param(req(argv=...), 3, "'argv' is missing", id="no-argv"),
    pytest.param(req(fds=...), 3, "'fds' is missing", id="no-fds"),
    # argv
    pytest.param(req(argv="true"), 3, "argv: not an array but a string", id="argv-string"),
    pytest.param(req(argv=[]), 3, "argv: no program", id="argv-empty"),
    pytest.param(req(argv=[""]), 3, "argv[0]: empty", id="argv0-empty"),
    pytest.param(req(argv=["true", 1]), 3, "argv[1]: not a string but an integer", id="argv-int"),
    pytest.param(req(argv=["true", "a\0b"]), 3, "argv[1]: holds a NUL character", id="argv-nul"),
    pytest.param(req(argv=["tr\0ue"]), 3, "argv[0]: holds a NUL character", id="argv0-nul"),
    pytest.param(
        raw('{"argv": ["true", "\\ud800"], "cwd": "/", "env": {}, "fds": [0, 1, 2]}'),
        3,
        "argv[1]: holds a lone surrogate",
        id="argv-surrogate",
    ),
    pytest.param(req(argv=["true", HUGE + "\0"]), 3, "argv[1]: holds a NUL", id="argv-huge"),
    # cwd
    pytest.param(req(cwd="/\0tmp"), 3, "cwd: holds a NUL character", id="cwd-nul"),
    # (U+DC80-U+DCFF in a path stand for bytes that are not UTF-8: taken, `checks.path_string`)
    pytest.param(req(cwd="/\ud800"), 3, "cwd: holds a lone surrogate", id="cwd-surrogate"),
    pytest.param(req(cwd=7), 3, "cwd: not a string but an integer", id="cwd-int"),
    # env
    pytest.param(req(env=["A=1"]), 3, "env: not an object but an array", id="env-array"),
    pytest.param(req(env={"A=B": "x"}), 3, "env: the name 'A=B' holds '='", id="env-name-eq"),
    pytest.param(
        req(env={"A\0B": "x"}), 3, "env: the name 'A\\x00B' holds a NUL", id="env-name-nul"
    ),
    pytest.param(req(env={"": "x"}), 3, "env: a name is empty", id="env-name-empty"),
    pytest.param(req(env={"A\ud800": "x"}), 3, "holds a lone surrogate", id="env-name-surrogate"),
    pytest.param(req(env={"A": "x\0"}), 3, "env['A']: holds a NUL", id="env-value-nul"),
    pytest.param(req(env={"A": "\udfff"}), 3, "env['A']: holds a lone", id="env-value-surrogate"),
    pytest.param(req(env={"A": 1}), 3, "env['A']: not a string but an integer", id="env-value-int"),
    pytest.param(req(env={HUGE + "=": "x"}), 3, "holds '='", id="env-name-huge"),
    # rlimits
    pytest.param(req(rlimits={"RLIMIT_CPU": 1}), 3, "rlimits: not an array", id="rlimits-object"),
    pytest.param(req(rlimits=[["RLIMIT_CPU", 1]]), 3, "not [name, soft, hard]", id="rlimit-short"),
    pytest.param(
        req(rlimits=[["RLIMIT_NOPE", 1, 1]]),
        3,
        "rlimits[0]: unknown resource limit 'RLIMIT_NOPE'",
        id="rlimit-unknown",
    ),
    pytest.param(req(rlimits=[[HUGE, 1, 1]]), 3, "unknown resource limit", id="rlimit-huge-name"),
    pytest.param(rlimit(str(10**30)), 3, "rlimits[0][1]: 1000000", id="rlimit-huge"),
    pytest.param(rlimit("1e999"), 3, "rlimits[0][1]: not an integer but a number", id="rlimit-inf"),
    pytest.param(rlimit("1", "NaN"), 3, "rlimits[0][2]: not an integer", id="rlimit-nan"),
    pytest.param(
        rlimit("true"), 3, "rlimits[0][1]: not an integer but a boolean", id="rlimit-bool"
    ),
    pytest.param(rlimit("-5"), 3, "rlimits[0][1]: -5 is out of range", id="rlimit-negative"),
    pytest.param(rlimit('"5"'), 3, "rlimits[0][1]: not an integer but a string", id="rlimit-str"),
    pytest.param(
        req(rlimits=[["RLIMIT_NOFILE", 10, 5]]),  # pidns: set with prlimit after the spawn
        3,
        "cannot set RLIMIT_NOFILE",
        id="rlimit-soft-above-hard",
    ),
    # fds
    pytest.param(req(fds="012"), 3, "fds: not an array but a string", id="fds-string"),
    pytest.param(req(fds=["0", 1, 2]), 3, "fds[0]: not an integer but a string", id="fd-str"),
    pytest.param(req(fds=[True, 1, 2]), 3, "fds[0]: not an integer but a boolean", id="fd-bool"),
    pytest.param(req(fds=[-1, 1, 2]), 3, "fds[0]: -1 is out of range", id="fd-negative"),
    pytest.param(req(fds=[0, 1, 1 << 40]), 3, "fds[2]: 1099511627776 is out", id="fd-huge"),
    pytest.param(req(fds=[0, 1, 1]), 3, "fds: a number is listed twice", id="fd-twice"),
    pytest.param(req(fds=[0, 1, 2, 3]), 3, "fds: 4 listed, 3 attached", id="fds-too-many"),
    pytest.param(req(fds=[0, 1]), 3, "fds: 2 listed, 3 attached", id="fds-too-few"),
    pytest.param(req(fds=[0]), 0, "fds: 1 listed, 0 attached", id="fds-none-attached"),
    pytest.param(
        req(fds=[0, 1, MAX_FD - 1]),  # past the open-files limit
        3,
        "cannot place the child's fds",
        id="fd-past-the-limit",
    ),
    # sandbox
    pytest.param(req(sandbox="strict"), 3, "sandbox: not an object but a string", id="plan-str"),
    pytest.param(req(sandbox={}), 3, "sandbox: 'net' is missing", id="plan-empty"),
    pytest.param(req(sandbox=False), 3, "sandbox: not an object but a boolean", id="plan-false"),
    pytest.param(
        req(sandbox={**PLAN, "net": "false"}),
        3,
        "sandbox.net: not a boolean but a string",
        id="plan-net-string",
    ),
    pytest.param(
        req(sandbox={**PLAN, "read": "/usr"}),
        3,
        "sandbox.read: not an array but a string",
        id="plan-read-string",
    ),
    pytest.param(
        req(sandbox={**PLAN, "read": ["usr"]}),
        3,
        "sandbox.read[0]: 'usr' is not an absolute path",
        id="plan-read-relative",
    ),
    pytest.param(
        req(sandbox={**PLAN, "devices": ["/dev/\0null"]}),
        3,
        "sandbox.devices[0]: holds a NUL",
        id="plan-device-nul",
    ),
    pytest.param(
        req(sandbox={k: v for k, v in PLAN.items() if k != "scratch"}),
        3,
        "sandbox: 'scratch' is missing",
        id="plan-no-scratch",
    ),
    pytest.param(
        req(sandbox={**PLAN, "scratchBytes": 1.5}),
        3,
        "sandbox.scratchBytes: not an integer but a number",
        id="plan-size-float",
    ),
    pytest.param(
        req(sandbox={**PLAN, "scratchBytes": -1}),
        3,
        "sandbox.scratchBytes: -1 is out of range",
        id="plan-size-negative",
    ),
    pytest.param(
        req(sandbox={**PLAN, "uid": "yes"}),
        3,
        "sandbox.uid: not a boolean but a string",
        id="plan-uid-string",
    ),
    pytest.param(
        req(sandbox={**PLAN, "nett": True}), 3, "sandbox: unknown key 'nett'", id="plan-unknown-key"
    ),
    # module
    pytest.param(req(module="x:y"), 3, "module: not an object but a string", id="module-str"),
    pytest.param(
        req(module={"spec": 1, "envFd": 2}),
        3,
        "module.spec: not a string but an integer",
        id="module-spec-int",
    ),
    pytest.param(
        req(module={"spec": "x:y", "envFd": 9}),
        3,
        "module.envFd: 9 is not one of the child's fds",
        id="module-env-fd-elsewhere",
    ),
    pytest.param(
        req(module={"spec": "x:y", "envFd": "2"}),
        3,
        "module.envFd: not an integer but a string",
        id="module-env-fd-str",
    ),
    pytest.param(
        req(module={"spec": "x:y", "envFd": 2, "path": "/x"}),
        3,
        "module.path: not an array but a string",
        id="module-path-str",
    ),
    pytest.param(
        req(module={"spec": "x:y", "envFd": 2, "args": []}),
        3,
        "module: unknown key 'args'",
        id="module-unknown-key",
    ),
    # collect
    pytest.param(req(collect=[1, 2]), 3, "collect: not an object but an array", id="collect-list"),
    pytest.param(
        req(fds=[0], collect={"stdout": "1", "stderr": 1}),
        1,
        "collect.stdout: not an integer but a string",
        id="collect-stdout-str",
    ),
    pytest.param(
        req(fds=[0], collect={"stdout": 1, "stderr": 0}),
        1,
        "collect.stderr: 0 is out of range",
        id="collect-no-tail",
    ),
    pytest.param(
        req(collect={"stdout": 1, "stderr": 1}),
        3,
        "collect: stdout and stderr are the spawner's to make",
        id="collect-with-stdout",
    ),
]

#: The requests that took the spawner down, and every run in flight with it (issue 11), as the
#: fields they change. (`json.dumps` writes "\ud800" as the JSON escape `\ud800`.)
REPORTED: list[tuple[dict[str, Any], str]] = [
    ({"argv": ["true", "a\0b"]}, "argv[1]: holds a NUL character"),
    ({"env": {"A=B": "x"}}, "env: the name 'A=B' holds '='"),
    ({"env": {"A\0B": "x"}}, "env: the name 'A\\x00B' holds a NUL character"),
    ({"argv": ["true", "\ud800"]}, "argv[1]: holds a lone surrogate (not valid Unicode)"),
    ({"cwd": "/\0"}, "cwd: holds a NUL character"),
]


# --------------------------------------------------------------------------- helpers


class Pipes:
    """`count` pipes, whose write ends (`writes`) go to the spawner with a request."""

    def __init__(self, count: int) -> None:
        self._ends = [os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK) for _ in range(count)]
        self.writes = [w for _, w in self._ends]
        self._ours = True

    def let_go(self) -> None:
        """Closes the write ends here: only the spawner's copies are left."""
        if self._ours:
            self._ours = False
            for w in self.writes:
                os.close(w)

    async def wait_closed(self) -> None:
        """Returns once nobody holds a write end any more (each read end is at end of file):
        the spawner closed every one (bounded: a leak fails the test)."""
        self.let_go()
        with trio.fail_after(10):
            for r, _ in self._ends:
                await trio.lowlevel.wait_readable(r)
                assert os.read(r, 1) == b""

    def close(self) -> None:
        self.let_go()
        for r, _ in self._ends:
            os.close(r)


@contextlib.contextmanager
def pipes(count: int) -> Iterator[Pipes]:
    ends = Pipes(count)
    try:
        yield ends
    finally:
        ends.close()


async def send(spawner: Spawner, msg: bytes, fds: Sequence[int]) -> None:
    """Sends `msg` with `fds` attached, as the supervisor sends a request."""
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_array(fds))] if fds else []
    await spawner._send_request(msg, rights)


async def ask(spawner: Spawner, msg: bytes, *, attach: int = 3, extra: Sequence[int] = ()) -> str:
    """Sends `msg` with a control socket and `attach` fds for the child (and `extra`, which
    stay the caller's); returns the error the spawner answers with, having checked that it
    then let go of the control socket and of every fd for the child."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = SpawnerLink(mine, lambda: True)
    try:
        with pipes(attach) as child:
            try:
                await send(spawner, msg, [theirs.fileno(), *child.writes, *extra])
            finally:
                theirs.close()
            with trio.fail_after(10):
                reply = await link.recv()  # one over what the owner reads would not parse
                if reply is not None and reply["event"] == "accepted":  # keeper mode
                    reply = await link.recv()
                assert await link.recv() is None  # then it closed the control socket
            await child.wait_closed()
    finally:
        link.close()
    assert reply is not None and reply["event"] == "error", reply
    message: str = reply["message"]
    return message


def spawner_fds(spawner: Spawner) -> dict[int, str]:
    """The spawner's fds, but its sockets (a waiting fork's is made again when the spawner is
    idle; a request's control socket, kept, `ask` would see), what it reads of /proc for
    a moment (its memory use, the children of a keeper), the user namespaces of idmapped
    grants it keeps for reuse (`runners/idmap.py`, at most `KEPT`), and memory cgroups."""
    fds = {}
    for fd in os.listdir(f"/proc/{spawner.pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            fds[int(fd)] = os.readlink(f"/proc/{spawner.pid}/fd/{fd}")
    kept = [fd for fd, what in fds.items() if what.startswith("user:")]
    assert len(kept) <= idmap.KEPT
    # And the memory cgroups made ahead for the next child and for a waiting fork (their
    # files and OOM eventfds, `runners/memcg.py`; test_memory_bound.py counts them).
    skip = ("socket:", "/proc/", "user:", "/sys/fs/cgroup/", "anon_inode:[eventfd]")
    # And the reapers made ahead, for the next child and each waiting fork (a pidfd and a
    # PID namespace each, `runners/reapers.py`), made again after each child.
    return {fd: what for fd, what in fds.items() if not what.startswith(skip)
            and not of_a_reaper(spawner.pid, fd, what)}  # fmt: skip


def of_a_reaper(pid: int, fd: int, what: str) -> bool:
    """Whether fd `fd` of process `pid` (its link `what`) is a reaper's pidfd or namespace:
    a reaper is the init of a PID namespace of its own (told by that, not by its command
    line, which may not be there yet just after its `exec`)."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        if what == "anon_inode:[pidfd]":
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
            return is_init(int(next(x for x in info.splitlines() if x.startswith("Pid:"))[4:]))
        if what.startswith("pid:["):
            return any(
                is_init(child.pid) and os.readlink(f"/proc/{child.pid}/ns/pid") == what
                for child in psutil.Process(pid).children()
            )
    return False


def hooks_left(spawner: Spawner) -> list[psutil.Process]:
    """The processes under the spawner that are not forks of it (keepers, waiting forks), nor
    reapers (one waits for the next child, `runners/reapers.py`), nor on their way out (a
    keeper exits just after its report; no cmdline then)."""
    top = psutil.Process(spawner.pid)
    mine = top.cmdline()
    left = []
    for proc in top.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.cmdline() not in ([], mine) and not is_init(proc.pid):
                left.append(proc)
    return left


def holding(spawner: Spawner, name: str) -> list[int]:
    """The processes at or under the spawner that hold an fd whose link names `name`."""
    top = psutil.Process(spawner.pid)
    found = []
    for proc in (top, *top.children(recursive=True)):
        with contextlib.suppress(FileNotFoundError):
            for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                with contextlib.suppress(FileNotFoundError):
                    if name in os.readlink(f"/proc/{proc.pid}/fd/{fd}"):
                        found.append(proc.pid)
    return found


@contextlib.asynccontextmanager
async def serving_on(spawner: Spawner) -> AsyncIterator[None]:
    """The block may send the spawner anything: after it, an ordinary child still runs to its
    exit report on the same spawner process, which holds the fds it held before, with no
    process of a hook left under it."""
    await run(spawner, ("true",))  # what a first spawn opens for good is open by now
    pid, fds = spawner.pid, spawner_fds(spawner)
    yield
    out = await run(spawner, ("sh", "-c", "echo still; exit 3"))
    assert (out.exit_code, bytes(out.stdout)) == (3, b"still\n")
    assert (spawner.pid, spawner.restarts) == (pid, 0)
    assert spawner_fds(spawner) == fds
    assert hooks_left(spawner) == []


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize(("msg", "attach", "expected"), HOSTILE)
async def test_a_hostile_request_fails_alone(
    spawner: Spawner, msg: bytes, attach: int, expected: str
) -> None:
    async with serving_on(spawner):
        message = await ask(spawner, msg, attach=attach)
    assert expected in message
    assert message.startswith(("bad spawn request: ", "cannot set ", "cannot place "))


async def test_the_reported_requests_fail_alone_while_another_run_goes_on(
    spawner: Spawner,
) -> None:
    assert b'"\\ud800"' in req(argv=["\ud800"])  # sent as the JSON escape
    code = "import sys; print(sys.stdin.readline().strip() * 2, flush=True)"
    async with serving_on(spawner):
        with trio.fail_after(30):
            async with spawner.open_child(spec(py(code)), kill_grace=GRACE) as child:
                for changes, expected in REPORTED:
                    assert await ask(spawner, req(**changes)) == f"bad spawn request: {expected}"
                out = await child.communicate(b"ok\n", CAP, 4096)
    assert (out.exit_code, bytes(out.stdout), out.killed) == (0, b"okok\n", False)


# --------------------------------------------------------------------------- the message


async def test_a_message_without_fds_is_dropped(spawner: Spawner) -> None:
    async with serving_on(spawner):
        for _ in range(4):  # more than there are idle keepers
            await send(spawner, req(), [])


async def test_an_empty_message_is_dropped_not_taken_for_end_of_file(spawner: Spawner) -> None:
    async with serving_on(spawner):
        for _ in range(3):
            await send(spawner, b"", [])


async def test_a_control_fd_that_is_no_socket_drops_the_request(spawner: Spawner) -> None:
    async with serving_on(spawner):
        with pipes(1) as ctrl, pipes(3) as child:
            await send(spawner, req(), [*ctrl.writes, *child.writes])
            await ctrl.wait_closed()  # nowhere to say why; closed last
            await child.wait_closed()


async def test_a_control_socket_of_another_kind_is_told_why(spawner: Spawner) -> None:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    said = bytearray()
    async with serving_on(spawner):
        with trio.socket.from_stdlib_socket(mine) as ours, pipes(3) as child:
            try:
                await send(spawner, req(), [theirs.fileno(), *child.writes])
            finally:
                theirs.close()
            with trio.fail_after(10):
                while chunk := await ours.recv(4096):  # to end of file: closed
                    said += chunk
            await child.wait_closed()
    assert json.loads(said) == {
        "event": "error",
        "message": "bad spawn request: its control socket is not a Unix SOCK_SEQPACKET socket",
    }


async def test_more_fds_than_a_request_may_bring(spawner: Spawner) -> None:
    async with serving_on(spawner):
        message = await ask(spawner, req(), attach=MAX_FDS)  # and the control socket
    assert message == f"bad spawn request: more than {MAX_FDS} fds attached"


async def test_a_request_over_the_size(spawner: Spawner) -> None:
    # The supervisor's socket could not even send it with its default buffer.
    spawner._raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * MAX_MESSAGE)
    if spawner._raw.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) - 32 <= MAX_MESSAGE + 1024:
        pytest.skip("net.core.wmem_max keeps a request this large from being sent at all")
    async with serving_on(spawner):
        message = await ask(spawner, req(env={"PAD": "x" * MAX_MESSAGE}))
    assert message == f"bad spawn request: over {MAX_MESSAGE} bytes"


async def test_garbage_on_a_control_socket_is_ignored(spawner: Spawner) -> None:
    code = "import time; print('ready', flush=True); time.sleep(1000)"
    async with serving_on(spawner):
        with trio.fail_after(30):
            async with spawner.open_child(spec(py(code)), kill_grace=GRACE) as child:
                assert await child.stdout.receive_some(6) == b"ready\n"
                for junk in (b"[" * 4000, b"\xff", b"null", b"[]", b'{"cmd": 1}', b"{}"):
                    await child._link.send_raw(junk)
                await child.send_command("nope")
                await child.send_command("kill")  # through the spawner, which still obeys
                out = await child.wait()
    assert (out.signal, out.exited) == (signal.SIGKILL, True)


# --------------------------------------------------------------------------- sandboxed


class Strict:
    """A good request under strict in a directory the hook's user can read: as fields for a
    raw request, and as keywords for `run`."""

    def __init__(self, cwd: str, rlimits: tuple[tuple[str, int, int], ...], plan: SandboxPlan):
        self.run = {"cwd": cwd, "rlimits": rlimits, "sandbox": plan}
        self.fields = {
            "cwd": cwd,
            "rlimits": [list(r) for r in rlimits],
            "sandbox": sandbox_fields(plan),
        }

    def request(self, **changes: Any) -> bytes:
        return req(**{**self.fields, **changes})


@pytest.fixture
def strict(strict_spawner: Spawner, readable_tmp: Path) -> Iterator[Strict]:
    with scratch_dir("t-") as scratch:
        rlimits, plan = sandbox.plan(
            Profile.STRICT, strict_spawner, scratch=scratch, dirs=(str(readable_tmp),)
        )
        assert plan is not None
        yield Strict(str(readable_tmp), rlimits, plan)


async def test_hostile_sandboxed_requests_fail_alone(
    strict_spawner: Spawner, strict: Strict
) -> None:
    sp, plan = strict_spawner, strict.fields["sandbox"]
    cases = [
        *((strict.request(**changes), expected) for changes, expected in REPORTED),
        (strict.request(sandbox={**plan, "uid": 1}), "sandbox.uid: not a boolean"),
        # Past the checks: on the armed jail thread, and on the fork path (the limits then
        # cannot be lent: a lowered hard limit).
        (strict.request(sandbox={**plan, "scratch": "/no/such"}), "sandbox: scratch /no/such"),
        (strict.request(cwd="/no/such"), "cannot use cwd '/no/such'"),
        (strict.request(rlimits=[["RLIMIT_NOFILE", 10, 5]]), "cannot set RLIMIT_NOFILE"),
        (strict.request(rlimits=[["RLIMIT_CPU", 1, 0]]), "cannot set RLIMIT_CPU"),
    ]
    async with serving_on(sp):
        for msg, expected in cases:
            assert expected in await ask(sp, msg)
        assert (await run(sp, ("true",), **strict.run)).exit_code == 0  # the next jail armed


#: What a module hook's environment memfd may hold that is no environment.
BAD_ENVIRONMENTS = [
    pytest.param(b"{", "cannot read the hook's environment", id="not-json"),
    pytest.param(b"[" * 100_000, "cannot read the hook's environment", id="deep"),
    pytest.param(b"[]", "not an object but an array", id="array"),
    pytest.param(b'{"A=B": "x"}', "the name 'A=B' holds '='", id="name-eq"),
    pytest.param(b'{"A": "\\u0000"}', "holds a NUL character", id="value-nul"),
    pytest.param(b'{"A": "\\ud800"}', "holds a lone surrogate", id="value-surrogate"),
]


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "jailed"])
@pytest.mark.parametrize(("env", "expected"), BAD_ENVIRONMENTS)
async def test_a_warm_request_with_a_bad_environment_fails_alone(
    strict_spawner: Spawner, strict: Strict, confined: bool, env: bytes, expected: str
) -> None:
    assert strict_spawner.warm
    name = f"mcpx-test-env-{uuid.uuid4().hex}"
    memfd = os.memfd_create(name, os.MFD_CLOEXEC)
    module = {"spec": "hook.py:hook", "envFd": 3}
    fields = {"env": {}, "fds": [0, 1, 2, 3], "module": module}
    try:
        os.write(memfd, env)
        msg = strict.request(**fields) if confined else req(**fields)
        async with serving_on(strict_spawner):
            message = await ask(strict_spawner, msg, extra=[memfd])
            assert holding(strict_spawner, name) == []  # the waiting fork is gone with it
    finally:
        os.close(memfd)
    assert expected in message
