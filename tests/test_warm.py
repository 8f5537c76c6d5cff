"""The warm module runner (`runners/warm.py`): a `module` hook runs in a fork of the spawner.

What is proved here: a warm hook sees what a cold one sees (the same process state, compared
field by field against `MCPX_HOOKS_WARM=off`), nothing of one hook reaches the next, the
spawner never holds a hook's environment or input, a hook that crashes its process does not
hurt the runner, and a runner that dies is started again without losing a hook silently.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import conftest
import psutil
import pytest
import trio
import trio.testing
from conftest import HOOK_UID_BASE, Marker, hook_user_processes

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import SPAWN_MODE_ENV, WARM_ENV, Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="warm runs need pidns mode (root)")

CTX = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({"n": 1},))

#: A hook that describes the process it runs in: what a cold and a warm run must agree on.
#: For hooks below: whether an fd is open (/proc and /dev/fd are out of a strict hook's reach).
IS_OPEN = """
def _is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
"""

STATE = (
    """
import json, os, resource, signal, sys
"""
    + IS_OPEN
    + """
def hook(payload):
    limits = {n: resource.getrlimit(getattr(resource, n)) for n in (
        "RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")}
    handlers = {n: str(signal.getsignal(getattr(signal, n))) for n in (
        "SIGINT", "SIGTERM", "SIGPIPE", "SIGXFSZ", "SIGCHLD", "SIGHUP")}
    fds = [fd for fd in range(256) if _is_open(fd)]
    state = {
        "payload": payload["input"],
        "env": dict(os.environ),
        "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        "path": sys.path,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "session_leader": os.getsid(0) == os.getpid(),
        "uid_is_root": os.getuid() == 0,
        "limits": limits,
        "handlers": handlers,
        "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, ())),
        "fds": fds,
        "streams": [(s.encoding, s.errors) for s in (sys.stdin, sys.stdout, sys.stderr)],
        "flags": [sys.flags.isolated, sys.flags.no_site, sys.dont_write_bytecode],
    }
    return {"advise": json.dumps(state)}
"""
)


def write_hook(directory: Path, name: str, code: str) -> str:
    (directory / name).write_text(textwrap.dedent(code))
    (directory / name).chmod(0o644)
    return f"{name}:hook"


def module_hook(directory: Path, target: str, **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": "m",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.MODULE,
        "target": target,
        "declaring_dir": str(directory),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.NONE,
        "timeout_ms": 10_000,
    }
    base.update(fields)
    return Hook(**base)


def advice(report: HookReport) -> Any:
    assert report.frame.status is HookStatus.OK, (report.frame.reason, report.frame.stderr_tail)
    return json.loads(report.frame.advice[0])


@pytest.fixture
async def warm_spawner(no_leaks: None) -> AsyncIterator[Spawner]:
    async with open_spawner() as sp:
        assert (sp.mode, sp.warm) == ("pidns", True)
        yield sp


@pytest.fixture
async def cold_spawner(
    warm_spawner: Spawner, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Spawner]:
    """A spawner that runs module hooks cold; made after `warm_spawner` (fixtures are set
    up concurrently, and both read the environment)."""
    monkeypatch.setenv(WARM_ENV, "off")
    async with open_spawner() as sp:
        assert not sp.warm
        yield sp


def spawner_children(spawner: Spawner) -> list[psutil.Process]:
    return conftest.spawner_children(spawner.pid)


# --------------------------------------------------------------------------- as a cold one


@pytest.mark.parametrize("profile", [Profile.NONE, Profile.STRICT])
async def test_a_warm_hook_sees_what_a_cold_one_sees(
    warm_spawner: Spawner, cold_spawner: Spawner, readable_tmp: Path, profile: Profile
) -> None:
    hook = module_hook(readable_tmp, write_hook(readable_tmp, "state.py", STATE), sandbox=profile)
    warm = advice(await run_hook(warm_spawner, hook, CTX))
    cold = advice(await run_hook(cold_spawner, hook, CTX))
    for state in (warm, cold):  # the scratch dir differs per run, by design
        scratch = state["env"]["MCPX_HOOK_SCRATCH"]
        state["env"] = {k: v.replace(scratch, "<scratch>") for k, v in state["env"].items()}
    assert warm == cold
    # fd 3: the runner's copy of stdout for the answer (close-on-exec; fd 1 is stderr's)
    assert (warm["pid"], warm["session_leader"], warm["fds"]) == (2, True, [0, 1, 2, 3])
    assert warm["uid_is_root"] is (profile is Profile.NONE)


async def test_a_warm_hook_is_a_fork_of_the_spawner(
    warm_spawner: Spawner, readable_tmp: Path
) -> None:
    probe = """
        import sys
        def hook(payload):
            return {"advise": str("runners.module_runner" in sys.modules)}
    """
    hook = module_hook(readable_tmp, write_hook(readable_tmp, "probe.py", probe))
    report = await run_hook(warm_spawner, hook, CTX)
    assert report.frame.advice == ("True",)  # imported by the spawner, not by this hook


async def test_keeper_mode_runs_module_hooks_cold(
    monkeypatch: pytest.MonkeyPatch, readable_tmp: Path, no_leaks: None
) -> None:
    monkeypatch.setenv(SPAWN_MODE_ENV, "keeper")
    async with open_spawner() as sp:
        assert not sp.warm
        hook = module_hook(readable_tmp, write_hook(readable_tmp, "state.py", STATE))
        assert advice(await run_hook(sp, hook, CTX))["payload"] == {"n": 1}


# --------------------------------------------------------------------------- isolation

LEAVE_TRACES = """
import builtins, json, os, signal, sys

COUNT = 0

def hook(payload):
    global COUNT
    COUNT += 1
    os.environ["LEAKED_ENV"] = "1"
    json.LEAKED_ATTRIBUTE = 1
    builtins.LEAKED_BUILTIN = 1
    sys.modules["leaked_module"] = sys
    sys.path.append("/leaked/path")
    os.umask(0o077)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    with open(os.path.join(os.environ["MCPX_HOOK_SCRATCH"], "left-behind"), "w") as f:
        f.write("x")
    os.open("/dev/null", os.O_RDONLY)  # an fd left open
    return {"advise": json.dumps({"count": COUNT})}
"""

LOOK_FOR_TRACES = (
    """
import builtins, json, os, signal, sys
"""
    + IS_OPEN
    + """
def hook(payload):
    found = {
        "env": "LEAKED_ENV" in os.environ,
        "attribute": hasattr(json, "LEAKED_ATTRIBUTE"),
        "builtin": hasattr(builtins, "LEAKED_BUILTIN"),
        "module": "leaked_module" in sys.modules or "traces" in sys.modules,
        "path": "/leaked/path" in sys.path,
        "umask": os.umask(0o022) == 0o077,
        "signal": signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN,
        "fds": len([fd for fd in range(256) if _is_open(fd)]) > 4,  # 0-2, the answer's
        "scratch": os.listdir(os.environ["MCPX_HOOK_SCRATCH"]),
        "spawner_memory": _maps_the_spawners_count(),
    }
    return {"advise": json.dumps(found)}

def _maps_the_spawners_count():
    # Whether the spawner's count of requests taken (memory it shares with the supervisor)
    # is still mapped here; None where /proc/self/maps is not readable (strict's uid).
    try:
        with open("/proc/self/maps") as maps:
            return "mcpx-hooks-taken" in maps.read()
    except PermissionError:
        return None
"""
)


@pytest.mark.parametrize("profile", [Profile.NONE, Profile.STRICT])
async def test_nothing_of_one_hook_reaches_the_next(
    warm_spawner: Spawner, readable_tmp: Path, profile: Profile
) -> None:
    traces = module_hook(
        readable_tmp, write_hook(readable_tmp, "traces.py", LEAVE_TRACES), sandbox=profile
    )
    look = module_hook(
        readable_tmp, write_hook(readable_tmp, "look.py", LOOK_FOR_TRACES), sandbox=profile
    )
    first = advice(await run_hook(warm_spawner, traces, CTX))
    second = advice(await run_hook(warm_spawner, traces, CTX))
    assert (first["count"], second["count"]) == (1, 1)  # module state starts afresh
    found = advice(await run_hook(warm_spawner, look, CTX))
    assert found == {
        "env": False,
        "attribute": False,
        "builtin": False,
        "module": False,
        "path": False,
        "umask": False,
        "signal": False,
        "fds": False,
        "scratch": [],
        "spawner_memory": False if profile is Profile.NONE else None,
    }


def user_namespaces_held(pid: int) -> list[tuple[str, bool]]:
    """The user namespaces `pid` holds an fd of, each with whether that fd is close-on-exec
    (root reads any process's fds)."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            if (link := os.readlink(f"/proc/{pid}/fd/{fd}")).startswith("user:"):
                info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                flags = int(info.split("flags:")[1].split()[0], 8)
                held.append((link, bool(flags & os.O_CLOEXEC)))
    return held


async def test_a_strict_hooks_idmap_namespace_is_kept_by_the_spawner_not_the_hook(
    warm_spawner: Spawner, readable_tmp: Path
) -> None:
    """The user namespace a warm fork makes for an idmapped grant (its hook's folder, root's
    here) goes back to the spawner for the forks after it (close-on-exec there), and no
    hook holds one."""
    hook = module_hook(
        readable_tmp, write_hook(readable_tmp, "state.py", STATE), sandbox=Profile.STRICT
    )
    assert user_namespaces_held(warm_spawner.pid) == []
    seen = [advice(await run_hook(warm_spawner, hook, CTX)) for _ in range(3)]
    assert [state["fds"] for state in seen] == [[0, 1, 2, 3]] * 3  # 3: the answer's
    held = user_namespaces_held(warm_spawner.pid)
    assert len(held) == 1
    assert held[0][1], "its children (a run hook's) must not inherit it"


def process_memory(pid: int) -> bytes:
    """Everything readable and private in `pid`'s memory (root reads any process's)."""
    chunks = []
    with open(f"/proc/{pid}/maps", "rb") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith(b"r") or fields[1][3:4] != b"p":
                continue
            start, end = (int(x, 16) for x in fields[0].split(b"-"))
            try:
                mem.seek(start)
                chunks.append(mem.read(end - start))
            except OSError:  # [vvar] and the like
                continue
    return b"".join(chunks)


async def test_the_spawner_never_holds_a_hooks_environment_or_input(
    warm_spawner: Spawner, readable_tmp: Path
) -> None:
    env_secret, input_secret = (f"s3cr3t-{uuid.uuid4().hex}" for _ in range(2))
    spec_name = f"probe_{uuid.uuid4().hex}"
    hook = module_hook(
        readable_tmp,
        write_hook(readable_tmp, f"{spec_name}.py", STATE),
        env={"API_TOKEN": env_secret},
    )
    ctx = HookContext(run=CTX.run, input=({"token": input_secret},))
    state = advice(await run_hook(warm_spawner, hook, ctx))
    assert (state["env"]["API_TOKEN"], state["payload"]["token"]) == (env_secret, input_secret)
    # Neither the spawner nor a fork waiting for the next module hook (what a later hook
    # would be) holds either secret; the spawner does hold what the request carried.
    memory = process_memory(warm_spawner.pid)
    assert spec_name.encode() in memory
    for pid in (warm_spawner.pid, *(p.pid for p in spawner_children(warm_spawner))):
        memory = process_memory(pid)
        assert env_secret.encode() not in memory
        assert input_secret.encode() not in memory


# --------------------------------------------------------------------------- failures

CRASHES = {
    "abort": "import os\ndef hook(payload):\n    os.abort()\n",
    "segfault": "import ctypes\ndef hook(payload):\n    ctypes.string_at(0)\n",
    "exit": "import os\ndef hook(payload):\n    os._exit(3)\n",
    "raise": "def hook(payload):\n    raise RuntimeError('boom')\n",
    "recursion": "def hook(payload):\n    return hook(payload)\n",
}


@pytest.mark.parametrize("crash", sorted(CRASHES))
async def test_a_hook_that_crashes_its_process_does_not_hurt_the_runner(
    warm_spawner: Spawner, readable_tmp: Path, crash: str
) -> None:
    spawner_pid = warm_spawner.pid
    bad = module_hook(readable_tmp, write_hook(readable_tmp, f"{crash}.py", CRASHES[crash]))
    report = await run_hook(warm_spawner, bad, CTX)
    assert report.frame.status is HookStatus.FAILED, to_json(report.frame)
    good = module_hook(readable_tmp, write_hook(readable_tmp, "state.py", STATE))
    assert advice(await run_hook(warm_spawner, good, CTX))["payload"] == {"n": 1}
    assert (warm_spawner.pid, warm_spawner.restarts) == (spawner_pid, 0)


async def test_a_hook_past_its_timeout_is_killed_with_its_tree(
    warm_spawner: Spawner, readable_tmp: Path, marker: Marker
) -> None:
    code = f"""
        import subprocess, time
        def hook(payload):
            subprocess.Popen(["sleep", "1000", "{marker}"], start_new_session=True)
            time.sleep(1000)
    """
    hook = module_hook(readable_tmp, write_hook(readable_tmp, "slow.py", code), timeout_ms=500)
    report = await run_hook(warm_spawner, hook, CTX)
    assert report.frame.status is HookStatus.TIMEOUT
    assert marker.alive() == []


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
async def test_a_sandboxed_module_hook_is_confined(
    readable_tmp: Path, monkeypatch: pytest.MonkeyPatch, warm: bool, no_leaks: None
) -> None:
    code = """
        import json, os, socket
        def attempt(fn):
            try:
                fn()
                return "allowed"
            except OSError as exc:
                return type(exc).__name__
        def hook(payload):
            scratch = os.environ["MCPX_HOOK_SCRATCH"]
            found = {
                "uid": os.getuid(),
                "write_here": attempt(lambda: open("planted", "w")),
                "read_root": attempt(lambda: os.listdir("/root")),
                "socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
                "scratch": attempt(lambda: open(os.path.join(scratch, "ok"), "w").close()),
            }
            return {"advise": json.dumps(found)}
    """
    hook = module_hook(
        readable_tmp, write_hook(readable_tmp, "jailed.py", code), sandbox=Profile.STRICT
    )
    if not warm:
        monkeypatch.setenv(WARM_ENV, "off")
    async with open_spawner() as sp:
        assert sp.warm is warm
        found = advice(await run_hook(sp, hook, CTX))
    assert hook_user_processes() == []
    assert found.pop("uid") >= HOOK_UID_BASE
    assert found == {
        "write_here": "OSError",  # a read-only file system
        "read_root": "PermissionError",
        "socket": "PermissionError",
        "scratch": "allowed",
    }
    assert not (readable_tmp / "planted").exists()


EXITS = {
    "sys.exit()": (HookStatus.OK, None, None),
    "sys.exit(0)": (HookStatus.OK, None, None),
    "sys.exit(3)": (HookStatus.FAILED, 3, "called sys.exit(3)"),
    "sys.exit('no can do')": (HookStatus.FAILED, 1, "called sys.exit('no can do')"),
}


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
async def test_a_hook_that_calls_sys_exit_is_said_in_a_sentence(
    readable_tmp: Path, monkeypatch: pytest.MonkeyPatch, warm: bool, no_leaks: None
) -> None:
    """`sys.exit(0)` (or no code) ends a module hook as `return None` does: ok, no answer.
    Another code fails it with one line naming the call, and no traceback; a cold start
    (no warm runner) used to print the runner's own NameError traceback for any raise."""
    if not warm:
        monkeypatch.setenv(WARM_ENV, "off")
    async with open_spawner() as sp:
        for n, (call, (status, code, said)) in enumerate(EXITS.items()):
            path = write_hook(readable_tmp, f"ex{n}.py", f"import sys\ndef hook(p):\n    {call}\n")
            frame = (await run_hook(sp, module_hook(readable_tmp, path), CTX)).frame
            assert (frame.status, frame.exit_code if code else None) == (status, code), call
            tail = frame.stderr_tail or ""
            assert "Traceback" not in tail and (said is None or f"py:hook {said}" in tail), tail
        path = write_hook(readable_tmp, "boom.py", CRASHES["raise"])
        frame = (await run_hook(sp, module_hook(readable_tmp, path), CTX)).frame
        tail = frame.stderr_tail or ""
        assert "RuntimeError: boom" in tail and "NameError" not in tail, tail


# --------------------------------------------------------------------------- restarts

SLEEPER = """
import os, time
def hook(payload):
    with open(os.path.join(os.environ["MCPX_HOOK_DIR"], "ready"), "w") as fifo:
        fifo.write("started\\n")
    time.sleep(1000)
"""


async def test_a_runner_that_dies_mid_hook_fails_that_hook_and_restarts(
    warm_spawner: Spawner, readable_tmp: Path
) -> None:
    first = warm_spawner.pid
    sleeper = module_hook(readable_tmp, write_hook(readable_tmp, "sleeper.py", SLEEPER))
    os.mkfifo(readable_tmp / "ready")
    ready = trio.lowlevel.FdStream(os.open(readable_tmp / "ready", os.O_RDONLY | os.O_NONBLOCK))
    reports: list[HookReport] = []

    async def run_sleeper() -> None:
        reports.append(await run_hook(warm_spawner, sleeper, CTX))

    with trio.fail_after(30):
        async with ready, trio.open_nursery() as nursery:
            nursery.start_soon(run_sleeper)
            while not await ready.receive_some():  # end of file until the hook opens it
                await trio.lowlevel.wait_readable(ready.fileno())
            os.kill(first, signal.SIGKILL)
    (report,) = reports
    assert report.frame.status is HookStatus.FAILED
    assert report.frame.reason is not None and "spawner died" in report.frame.reason
    good = module_hook(readable_tmp, write_hook(readable_tmp, "state.py", STATE))
    assert advice(await run_hook(warm_spawner, good, CTX))["payload"] == {"n": 1}
    assert (warm_spawner.restarts, warm_spawner.pid != first) == (1, True)


async def test_a_hook_sent_to_a_dying_runner_is_started_on_the_next(
    warm_spawner: Spawner, readable_tmp: Path
) -> None:
    first = warm_spawner.pid
    hook = module_hook(readable_tmp, write_hook(readable_tmp, "state.py", STATE))
    reports: list[HookReport] = []

    async def run_it() -> None:
        reports.append(await run_hook(warm_spawner, hook, CTX))

    os.kill(first, signal.SIGSTOP)  # the request waits, unread, in its socket
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_it)
            await trio.testing.wait_all_tasks_blocked()
            os.kill(first, signal.SIGKILL)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(first, signal.SIGCONT)
    (report,) = reports
    assert advice(report)["payload"] == {"n": 1}
    assert (warm_spawner.restarts, warm_spawner.pid != first) == (1, True)
