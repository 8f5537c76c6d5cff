"""Rootless (SPEC §5, "for every operator, not only root"): a supervisor that is not root
gets the profiles through a user namespace of its own (`runners/userns.py`).

Every test here runs a real supervisor as an ordinary user, in a process of its own: as root,
as `nobody` (`MCPX_HOOKS_UNPRIVILEGED_USER`), through a Python that user can run
(`MCPX_HOOKS_UNPRIVILEGED_PYTHON`, which `make test-unprivileged` sets, or this one where that
user can run it); as an ordinary user
(the second run of `make test-unprivileged`), as that user. "The caller's home" is a 0700
directory of the caller's with a secret in it: the caller could read it, so only the sandbox
stands between it and a hook. Programs print what they saw as JSON; no test sleeps.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import ROOT, kill_supervisor_and_wait, require_rootless

if TYPE_CHECKING:
    from conftest import Marker

#: A Python with this package installed that the caller can run (root runs only), and the
#: caller (default `nobody`).
PYTHON_ENV = "MCPX_HOOKS_UNPRIVILEGED_PYTHON"
USER_ENV = "MCPX_HOOKS_UNPRIVILEGED_USER"
#: How long one program may take (a supervisor, its spawner and a few hooks).
BOUND_S = 120


@functools.cache
def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam(os.environ.get(USER_ENV) or "nobody")
    return entry.pw_uid, entry.pw_gid


def _runs_as_nobody(python: str) -> bool:
    uid, gid = _nobody()
    probe = [*_setpriv(uid, gid), "env", python, "-c", "import mcpx_hooks.supervisor.cli.main"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=60, cwd="/", check=False)
        return done.returncode == 0
    except OSError:
        return False


def _setpriv(uid: int, gid: int) -> list[str]:
    """Becomes `uid`: what follows must be `env` (setpriv itself keeps root's capabilities
    until its exec: the program it runs would be found as root finds it)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


@functools.cache
def _python() -> str | None:
    """The Python the caller runs: this one, as an ordinary user; as root, one `nobody` can."""
    if not ROOT:
        return sys.executable
    for python in (os.environ.get(PYTHON_ENV), sys.executable):
        if python and shutil.which("setpriv") and _runs_as_nobody(python):
            return python
    return None


class Caller:
    """The ordinary user who runs the supervisor, and where it works: `work` (its project,
    the hooks' declaring directory), `home` (0700, holding `secret`)."""

    def __init__(self, world: Path) -> None:
        python = _python()
        if python is None:
            pytest.skip(
                f"as root, this needs a Python with this package that an ordinary user can "
                f"run: set {PYTHON_ENV} (`make test-unprivileged` does)"
            )
        self.python = python
        self.uid, self.gid = _nobody() if ROOT else (os.getuid(), os.getgid())
        self.world = world
        self.work, self.home = world / "work", world / "home"
        for path, mode in ((self.work, 0o755), (self.home, 0o700)):
            path.mkdir(mode=mode)
        (self.home / "secret").write_text("the caller's secret")
        (self.work / "m.py").write_text(MODULE)
        for path in (self.work, self.home, self.home / "secret", self.work / "m.py"):
            os.chown(path, self.uid, self.gid)

    def argv(self, *args: str, extra: dict[str, str] | None = None) -> list[str]:
        """`args` (a Python program and its arguments) run by the caller, with the scrubbed
        environment of a login: its home, a PATH, no discovery of config files (and
        `extra`)."""
        env = {
            "PATH": f"{os.path.dirname(self.python)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "MCPX_HOOKS_NO_DISCOVERY": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **(extra or {}),
        }
        switch = _setpriv(self.uid, self.gid) if ROOT else []
        return [*switch, "env", "-i", *(f"{k}={v}" for k, v in env.items()), self.python, *args]

    def program(self, name: str, text: str) -> str:
        path = self.world / name
        path.write_text(textwrap.dedent(text))
        path.chmod(0o644)
        return str(path)

    def run(
        self, *args: str, wrap: str | None = None, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs `args` as the caller in `work` (with `extra` in its environment); `wrap`:
        through that program first (it execs the rest)."""
        argv = (
            self.argv(wrap, self.python, *args, extra=extra)
            if wrap
            else self.argv(*args, extra=extra)
        )
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=BOUND_S, cwd=self.work, check=False
        )


@pytest.fixture
def caller() -> Iterator[Caller]:
    require_rootless()
    world = Path(tempfile.mkdtemp(prefix="mcpx-rootless-", dir="/tmp"))
    try:
        world.chmod(0o755)  # (as root, for nobody to reach its programs)
        yield Caller(world)
    finally:
        shutil.rmtree(world, ignore_errors=True)


MODULE = """
import ctypes, json, os, struct

def hook(payload):
    libc = ctypes.CDLL(None)
    header = struct.pack("=II", 0x20080522, 0)
    data = ctypes.create_string_buffer(24)
    libc.capget(header, data)
    return {"advise": json.dumps({"uid": os.getuid(), "caps": list(struct.unpack("=6I", data.raw)),
                                  "pid": os.getpid()})}
"""
#: A strict hook that tries what it must not manage; prints what happened.
INSIDE = """
import ctypes, json, os, socket, struct, sys
home, port = sys.argv[1], int(sys.argv[2])
def attempt(fn):
    try:
        fn()
        return "done"
    except OSError as exc:
        return exc.strerror
def write(path):
    with open(path, "w") as f:
        f.write("planted")
libc = ctypes.CDLL(None, use_errno=True)
data = ctypes.create_string_buffer(24)
libc.capget(struct.pack("=II", 0x20080522, 0), data)
scratch = os.environ["MCPX_HOOK_SCRATCH"]
shm = libc.shmget(int(sys.argv[3]), 0, 0)
print(json.dumps({"advise": json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(),
    "caps": list(struct.unpack("=6I", data.raw)), "bounding": libc.prctl(23, 21, 0, 0, 0),
    "secret": attempt(lambda: open(os.path.join(home, "secret")).read()),
    "list_home": attempt(lambda: os.listdir(home)),
    "write_cwd": attempt(lambda: write("planted")),
    "write_home": attempt(lambda: write(os.path.join(home, "planted"))),
    "write_tmp": attempt(lambda: write("/tmp/mcpx-rootless-planted")),
    "write_scratch": attempt(lambda: write(os.path.join(scratch, "mine"))),
    "connect": attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close()),
    "proc": attempt(lambda: open("/proc/self/status").read(1)),
    "host_shm": "found" if shm >= 0 else os.strerror(ctypes.get_errno()),
})}))
"""
SETSID = """
import subprocess, sys
subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(1000)",
                  sys.argv[1]], start_new_session=True)
"""
DOUBLE_FORK = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c",
                 "import time; time.sleep(1000)", sys.argv[1]])
    os._exit(0)
os.wait()
"""
#: Forks `sys.argv[1]` children that sleep, says how many it made, then sleeps.
HOLDER = """
import os, sys, time
made = 0
try:
    while made < int(sys.argv[1]):
        if os.fork() == 0:
            time.sleep(1000)
            os._exit(0)
        made += 1
except OSError as exc:
    print(made, exc.strerror, flush=True)
else:
    print(made, "ok", flush=True)
time.sleep(1000)
"""
#: The caller's supervisor: a spawner, the hooks above, what they saw (as JSON).
PROBES = """
import ctypes, json, os, socket, sys, textwrap, psutil, trio
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.limits import Limits
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.scratch import scratch_dir
from mcpx_hooks.supervisor.process.spawner import ChildSpec, open_spawner

WORK, HOME, MARK, INSIDE, SETSID, DOUBLE_FORK, HOLDER = sys.argv[1:]
PY = sys.executable
CTX = HookContext(run=RunInfo("run-1", ("job",), WORK, "2026-01-01T00:00:00Z"), input=({},))

def hook(target, **fields):
    return Hook(**{
        "name": "h", "on": "script", "phase": Phase.BEFORE, "action": Action.RUN,
        "target": target, "declaring_dir": WORK, "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.STRICT, "timeout_ms": 20_000, "kill_grace_ms": 200, **fields})

async def said(spawner, h):
    frame = (await run_hook(spawner, h, CTX)).frame
    return {"status": str(frame.status), "reason": frame.reason,
            "advice": [json.loads(a) for a in frame.advice]}

async def holding(spawner, n, task_status):
    with scratch_dir("t-") as scratch:
        rlimits, plan = sandbox.plan(Profile.STRICT, spawner, scratch=scratch, dirs=(WORK,),
                                     limits=Limits(processes=16))
        spec = ChildSpec((PY, "-I", "-S", "-c", HOLDER, str(n)), WORK, {}, rlimits, plan)
        async with spawner.open_child(spec, kill_grace=0.2) as child:
            line = b""
            while not line.endswith(b"\\n"):
                line += await child.stdout.receive_some(1)
            task_status.started(line.decode().split())
            await trio.sleep_forever()

async def main():
    out = {}
    # A SysV segment of the caller's: a hook in IPC namespace of its own cannot find it.
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x4D435800 + os.getpid() % 256
    segment = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600
    assert segment >= 0, os.strerror(ctypes.get_errno())
    try:
        await probe(out, str(key))
    finally:
        libc.shmctl(segment, 0, None)  # IPC_RMID
    print(json.dumps(out))

async def probe(out, key):
    with socket.socket() as listener, trio.fail_after(100):
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = str(listener.getsockname()[1])
        async with open_spawner() as spawner:
            out["spawner"] = {"mode": spawner.mode, "userns": spawner.userns}
            inside = (PY, "-I", "-S", "-c", INSIDE, HOME, port, key)
            out["inside"] = await said(spawner, hook(inside))
            out["module"] = await said(spawner, hook("m.py", action=Action.MODULE))
            out["escapes"] = [
                (await said(spawner, hook((PY, "-I", "-S", "-c", code, MARK))))["status"]
                for code in (SETSID, DOUBLE_FORK)
            ]
            out["marked"] = sum(  # (but this program, which has MARK in its argv)
                p.pid != os.getpid() and any(MARK in a for a in p.info["cmdline"] or ())
                for p in psutil.process_iter(["cmdline"])
            )
            # Two trees, 10 processes each, under a processes limit of 16 each: together
            # over it, each under it (each hook counts its own processes, as root's uids do).
            async with trio.open_nursery() as nursery:
                out["holders"] = [await nursery.start(holding, spawner, 10) for _ in "ab"]
                nursery.cancel_scope.cancel()
        try:
            listener.accept()
            out["knocked"] = True
        except BlockingIOError:
            out["knocked"] = False
    out["planted"] = [p for p in (os.path.join(WORK, "planted"), os.path.join(HOME, "planted"),
                                  "/tmp/mcpx-rootless-planted") if os.path.exists(p)]

trio.run(main)
"""


@pytest.mark.parametrize("start", ["chain", "fork"])
def test_strict_hooks_of_an_ordinary_user_are_confined(
    caller: Caller, marker: Marker, start: str
) -> None:
    """Alike whether the spawner starts each child by a chain of system calls (what it does
    on x86_64) or, where it cannot, by a fork of itself (`MCPX_HOOKS_HIDE=chain`)."""
    program = caller.program("probes.py", PROBES)
    codes = [textwrap.dedent(c) for c in (INSIDE, SETSID, DOUBLE_FORK, HOLDER)]
    extra = {"MCPX_HOOKS_HIDE": "chain"} if start == "fork" else None
    done = caller.run(program, str(caller.work), str(caller.home), marker, *codes, extra=extra)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    assert out["spawner"] == {"mode": "pidns", "userns": True}
    inside = out["inside"]
    assert inside["status"] == "ok", inside
    (seen,) = inside["advice"]
    # The caller's own uid and gid (not root's, not a per-child one), PID 2 of its own
    # namespace (after its reaper), no capability at all (its user namespace's included).
    assert (seen["uid"], seen["gid"], seen["pid"]) == (caller.uid, caller.gid, 2)
    assert seen["caps"] == [0] * 6 and seen["bounding"] == 0
    # The caller may read and write all of these; the hook may not.
    assert seen["secret"] == seen["list_home"] == "Permission denied", seen
    assert seen["write_cwd"] == seen["write_home"] == "Read-only file system", seen
    assert seen["write_tmp"] == "Read-only file system", seen
    assert seen["write_scratch"] == "done"
    assert seen["connect"] == "Permission denied" and out["knocked"] is False
    assert seen["proc"] == "Permission denied"
    assert seen["host_shm"] == "No such file or directory"  # an IPC namespace of its own
    assert out["planted"] == []
    module = out["module"]
    assert module["status"] == "ok", module
    assert module["advice"][0]["uid"] == caller.uid and module["advice"][0]["caps"] == [0] * 6
    assert out["escapes"] == ["ok", "ok"] and out["marked"] == 0
    assert out["holders"] == [["10", "ok"], ["10", "ok"]]
    assert marker.alive() == []


#: The caller's supervisor with one strict hook whose tree is up; prints its spawner's pid.
SUPERVISOR = """
import sys, trio
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.process.scratch import scratch_dir
from mcpx_hooks.supervisor.process.spawner import ChildSpec, open_spawner

async def main():
    async with open_spawner() as spawner:
        assert spawner.userns, spawner.mechanisms
        with scratch_dir("t-") as scratch:
            where = sys.argv[1]
            rlimits, plan = sandbox.plan(Profile.STRICT, spawner, scratch=scratch, dirs=(where,))
            spec = ChildSpec((sys.executable, "-I", "-S", "-c", *sys.argv[2:]), where, {},
                             rlimits, plan)
            async with spawner.open_child(spec, kill_grace=0.5) as child:
                for _ in range(2):  # "gc" and "ready": the whole tree is up
                    while not (await child.stdout.receive_some(1)).endswith(b"\\n"):
                        pass
                print(spawner.pid, flush=True)
                await trio.sleep_forever()

trio.run(main)
"""
TREE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c",
                 "print('gc', flush=True); import time; time.sleep(1000)", sys.argv[1]])
    os._exit(0)
os.wait()
print("ready", flush=True)
time.sleep(1000)
"""


async def test_sigkill_of_an_ordinary_users_supervisor_kills_everything(
    caller: Caller, marker: Marker, no_leaks: None
) -> None:
    program = caller.program("supervisor.py", SUPERVISOR)
    argv = caller.argv(program, str(caller.work), textwrap.dedent(TREE), marker)
    # The spawner, everything below it (the process holding its user namespace is its
    # parent), the hook, the double-forked grandchild.
    await kill_supervisor_and_wait(argv, marker, at_least=3, spawner_tree=True)
    assert marker.alive() == []


#: A hook that leaves its scratch as a Go module cache does (read-only directories, one not
#: even searchable), and its scratch itself read-only.
READ_ONLY_SCRATCH = """
import os
scratch = os.environ["MCPX_HOOK_SCRATCH"]
os.makedirs(os.path.join(scratch, "pkg", "mod", "x@v1"))
open(os.path.join(scratch, "pkg", "mod", "x@v1", "go.mod"), "w").close()
for sub, mode in (("pkg/mod/x@v1", 0o555), ("pkg/mod", 0o000), ("pkg", 0o555), ("", 0o500)):
    os.chmod(os.path.join(scratch, sub), mode)
"""


@pytest.mark.parametrize("profile", ["none", "strict"])
def test_a_scratch_its_hook_left_read_only_is_removed(caller: Caller, profile: str) -> None:
    # As an ordinary user (not root, whom no mode stops), rmtree could not empty a directory
    # the hook had made read-only: the scratch of a `none` hook stayed on /dev/shm for good,
    # and the sweep of a later supervisor could not remove it either.
    root = caller.world / "scratch-root"
    root.mkdir()
    os.chown(root, caller.uid, caller.gid)
    program = caller.work / "read_only.py"  # (the declaring directory: strict reads it)
    program.write_text(textwrap.dedent(READ_ONLY_SCRATCH))
    program.chmod(0o644)
    hook = {"run": [caller.python, "-I", "-S", str(program)], "sandbox": profile, "phase": "before"}
    done = caller.run(
        "-m", "mcpx_hooks.supervisor", "hook", "test", "--hook", json.dumps(hook),
        extra={"MCPX_HOOKS_SCRATCH_ROOT": str(root)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert not [name for name in left if "/hook-" in name], left


def test_doctor_says_every_profile_is_enforceable(caller: Caller) -> None:
    done = caller.run("-m", "mcpx_hooks.supervisor", "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert "in a user namespace of its own (rootless)" in text
    assert "allowed  the spawner runs in one of its own" in text
    assert "strict    enforceable" in text and "net       enforceable" in text
    assert "MISSING" not in text and "n/a      uid" in text


def test_exec_and_the_demo_succeed(caller: Caller) -> None:
    done = caller.run("-m", "mcpx_hooks.supervisor", "exec", "--", "echo", "hi")
    assert done.returncode == 0 and "| hi" in done.stdout, done.stdout + done.stderr
    done = caller.run("-m", "mcpx_hooks.supervisor", "demo")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "HELLO, WORLD" in done.stdout


def test_config_files_the_caller_may_not_read_are_said_never_skipped_silently(
    caller: Caller,
) -> None:
    """Permissions, which root does not meet: a user config in a directory the caller may
    not search (it was taken for "no file there": the user's hooks vanished, `validate`
    said "ok"), and a project file the caller may not read (`validate` said "ok: 0 file(s)
    valid"; the warning read "[Errno 13] Permission denied: '…'" and "make it a file")."""
    config_dir = caller.home / ".config" / "mcpx-hooks"
    config_dir.mkdir(parents=True)
    (config_dir / "config.toml").write_text('[autonomy]\nmax = "ask"\n')
    local = caller.work / ".mcpx-hooks.toml"
    local.write_text('[autonomy]\nmax = "ask"\n')
    for path in (caller.home / ".config", config_dir, config_dir / "config.toml", local):
        os.chown(path, caller.uid, caller.gid)
    config_dir.chmod(0o000)
    local.chmod(0o200)
    discover = {"MCPX_HOOKS_NO_DISCOVERY": ""}
    done = caller.run("-m", "mcpx_hooks.supervisor", "validate", extra=discover)
    assert done.returncode == 2, done.stdout + done.stderr
    user_file = config_dir / "config.toml"
    # (the project file not trusted is checked in the same pass: every problem at once)
    assert done.stdout == (
        f"{user_file}:/: cannot tell whether there is a file there: {config_dir} may not be"
        f" searched (Permission denied)\n{local}:/: cannot read the file: Permission denied\n"
    )
    config_dir.chmod(0o700)
    done = caller.run("-m", "mcpx_hooks.supervisor", "validate", extra=discover)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == f"{local}:/: cannot read the file: Permission denied\n"
    assert (
        f"skipped {local}: cannot read the file: Permission denied, so it cannot be trusted;"
        " remove it, or make it a regular file you can read\n"
    ) in done.stderr


def test_config_files_in_a_directory_the_caller_may_not_search_are_not_said_to_be_there(
    caller: Caller,
) -> None:
    """Run from a directory it may not search (as root's `cd` into it, then `nobody`): the
    project files there were each said to be unreadable ("cannot read the file: Permission
    denied … remove it"), as if they were there; whether they are cannot be told."""
    if not ROOT:  # (an ordinary user may not start a process in a directory it may not search)
        pytest.skip("as root only: it starts the caller in root's directory")
    no_discovery = "MCPX_HOOKS_NO_DISCOVERY"
    shut = caller.world / "shut"
    shut.mkdir(mode=0o700)  # root's: the caller may not search it
    argv = caller.argv("-m", "mcpx_hooks.supervisor", "validate", extra={no_discovery: ""})
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=BOUND_S, cwd=shut, check=False
    )
    unknown = f"cannot tell whether there is a file there: {shut} may not be searched"
    names = (".mcpx-hooks.toml", ".mcpx-hooks.json")
    assert done.stdout == "".join(
        f"{shut / name}:/: {unknown} (Permission denied)\n" for name in names
    ), done.stdout + done.stderr
    for name in names:
        assert (
            f"skipped {shut / name}: {unknown} (Permission denied); if there is one, run from a"
            " directory you may search for it to be applied\n"
        ) in done.stderr, done.stderr
    assert "cannot read the file" not in done.stderr and "remove it" not in done.stderr


#: What a tool walking up from the project meets in the caller's home: each name's errno.
WALK_UP = """
import errno, os, sys
for name in ("pyproject.toml", "secret", "setup.cfg"):
    try:
        os.stat(os.path.join(sys.argv[1], name))
        print(name, "there")
    except OSError as exc:
        print(name, errno.errorcode[exc.errno])
"""


@pytest.mark.parametrize("profile", ["workspace", "strict"])
def test_a_test_suite_walking_up_the_callers_home_finds_nothing_beside_the_project(
    caller: Caller, profile: str
) -> None:
    """The caller's project in its home, a `pyproject.toml` in the home itself: the home is
    the caller's, so it was not covered, and its names were there to `stat` but unreadable
    (Landlock): pytest, walking up for its config (the project's has no pytest table), found
    `~/pyproject.toml` and failed with PermissionError, as ruff did. Now they are not there."""
    project = caller.home / "code" / "proj"
    (project / "tests").mkdir(parents=True)
    (caller.home / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-x'\n")
    (project / "pyproject.toml").write_text("[project]\nname = 'proj'\nversion = '0.1'\n")
    (project / "tests" / "test_one.py").write_text("def test_one():\n    assert True\n")
    for path in caller.home.rglob("*"):
        os.chown(path, caller.uid, caller.gid)
    runs = [
        [caller.python, "-I", "-S", "-c", WALK_UP, str(caller.home)],
        [caller.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    ]
    said = []
    for argv in runs:
        command = caller.argv("-m", "mcpx_hooks.supervisor", "exec", "--sandbox", profile, "--")
        done = subprocess.run(
            [*command, *argv], capture_output=True, text=True, timeout=BOUND_S, cwd=project,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        said.append(done.stdout)
    assert "| pyproject.toml ENOENT\n| secret ENOENT\n| setup.cfg ENOENT\n" in said[0], said[0]
    assert "1 passed" in said[1], said[1]


#: Runs the rest of its argv in a user namespace whose `user.max_user_namespaces` is 0: as if
#: the machine refused user namespaces to the caller (the setting a namespace of its own has).
NO_USERNS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
assert libc.unshare(0x10000000) == 0, os.strerror(ctypes.get_errno())
for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                   ("gid_map", f"{gid} {gid} 1")):
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_where_user_namespaces_are_refused_doctor_names_the_setting(caller: Caller) -> None:
    wrap = caller.program("no_userns.py", NO_USERNS)
    doctor = caller.run("-m", "mcpx_hooks.supervisor", "doctor", wrap=wrap)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    text = doctor.stdout
    assert "spawner: keeper mode" in text
    assert "user.max_user_namespaces = 0  (refuses them)" in text
    assert "sysctl -w user.max_user_namespaces=" in text
    assert "strict    CANNOT be enforced: missing pidns" in text
    assert "none      enforceable" in text
    done = caller.run("-m", "mcpx_hooks.supervisor", "exec", "--", "echo", "hi", wrap=wrap)
    assert done.returncode != 0 and "| hi" not in done.stdout
    assert "cannot be enforced on this machine" in done.stdout
    assert "user.max_user_namespaces = 0 refuses them" in done.stdout
    demo = caller.run("-m", "mcpx_hooks.supervisor", "demo", wrap=wrap)
    assert demo.returncode == 1 and "the demo FAILED" in demo.stderr, demo.stderr
