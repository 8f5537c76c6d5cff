"""Hostile hooks under the strict profile: one tiny program per attack (issue 4).

Each test runs the attack as a real `run` hook through `run_hook`, asserts that the attack
failed, then that the supervisor still serves (a normal strict hook runs `ok` on the same
spawner), and, through the `strict_spawner` fixture, that no child, fd or hook-user process is
left anywhere on the host. Programs print what they managed as JSON, so a test asserts on
what happened inside rather than on an exit code alone.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.limits import Limits
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook

if TYPE_CHECKING:
    from conftest import Marker

PY = sys.executable
CTX = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({},))


def hostile(where: Path, code: str, *args: str, **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": "hostile",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.RUN,
        "target": (PY, "-I", "-S", "-c", textwrap.dedent(code), *args),
        "declaring_dir": str(where),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.STRICT,
        "timeout_ms": 10_000,
        "kill_grace_ms": 200,
    }
    base.update(fields)
    return Hook(**base)


async def attack(spawner: Spawner, hook: Hook, ctx: HookContext = CTX) -> HookReport:
    with trio.fail_after(60):
        return await run_hook(spawner, hook, ctx)


def said(report: HookReport) -> Any:
    """What the program reported: the `advise` text of its answer, as JSON."""
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    return json.loads(report.frame.advice[0])


async def still_serving(spawner: Spawner, where: Path) -> None:
    ok = hostile(where, 'print(\'{"advise": "fine"}\')')
    frame = (await attack(spawner, ok)).frame
    assert frame.status is HookStatus.OK and frame.advice == ("fine",), to_json(frame)
    assert frame.sandbox == "strict"


#: Prints `{"advise": json.dumps(result)}` where `result` is what the attack body set.
def reporting(body: str) -> str:
    return (
        textwrap.dedent(body) + "\nimport json\nprint(json.dumps({'advise': json.dumps(result)}))\n"
    )


async def test_fork_bomb_is_held_at_the_process_limit(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    code = reporting("""
        import os, signal
        forked = 0
        try:
            while forked < 10_000:
                if os.fork() == 0:
                    signal.pause()
                forked += 1
        except OSError as exc:
            result = {"forked": forked, "error": exc.errno}
    """)
    report = await attack(strict_spawner, hostile(readable_tmp, code, limits=Limits(processes=32)))
    got = said(report)
    assert got["forked"] < 32 and got["error"] == 11  # EAGAIN
    await still_serving(strict_spawner, readable_tmp)


async def test_memory_bomb_is_refused(strict_spawner: Spawner, readable_tmp: Path) -> None:
    code = reporting("""
        hoard = []
        try:
            while len(hoard) < 1024:
                hoard.append(bytearray(16 << 20))
        except MemoryError:
            pass
        result = {"mb": len(hoard) * 16}
    """)
    report = await attack(strict_spawner, hostile(readable_tmp, code, limits=Limits(memory_mb=256)))
    assert said(report)["mb"] <= 256
    await still_serving(strict_spawner, readable_tmp)


async def test_cpu_spin_is_killed_at_its_cpu_limit(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    hook = hostile(readable_tmp, "while True: pass", limits=Limits(cpu_seconds=2))
    frame = (await attack(strict_spawner, hook)).frame
    assert frame.status is HookStatus.FAILED and frame.signal == 9, to_json(frame)
    assert frame.duration_ms < 8_000  # the CPU limit, not the 10 s timeout
    await still_serving(strict_spawner, readable_tmp)


async def test_a_gigabyte_of_stdout_is_cut_off(strict_spawner: Spawner, readable_tmp: Path) -> None:
    code = """
        import sys
        chunk = b"x" * (1 << 20)
        for _ in range(1024):
            sys.stdout.buffer.write(chunk)
    """
    frame = (await attack(strict_spawner, hostile(readable_tmp, code))).frame
    assert frame.status is HookStatus.KILLED and "maxOutputBytes" in (frame.reason or "")
    await still_serving(strict_spawner, readable_tmp)


async def test_never_reading_stdin_costs_only_its_timeout(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    ctx = HookContext(run=CTX.run, input=("x" * (8 << 20),))  # far beyond a pipe's buffer
    hook = hostile(readable_tmp, "import time; time.sleep(1000)", timeout_ms=500)
    frame = (await attack(strict_spawner, hook, ctx)).frame
    assert frame.status is HookStatus.TIMEOUT
    assert frame.duration_ms < 3_000
    await still_serving(strict_spawner, readable_tmp)


async def test_sigterm_ignoring_is_killed_after_the_grace(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"
    frame = (await attack(strict_spawner, hostile(readable_tmp, code, timeout_ms=500))).frame
    assert frame.status is HookStatus.TIMEOUT
    assert frame.duration_ms < 3_000
    await still_serving(strict_spawner, readable_tmp)


SETSID = """
    import subprocess, sys
    subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(1000)",
                      sys.argv[1]], start_new_session=True)
"""
DOUBLE_FORK = """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-I", "-S", "-c",
                     "import time; time.sleep(1000)", sys.argv[1]])
        os._exit(0)
    os.wait()
"""


@pytest.mark.parametrize("escape", [SETSID, DOUBLE_FORK], ids=["setsid", "double-fork"])
async def test_escaped_grandchildren_die_with_the_hook(
    strict_spawner: Spawner, readable_tmp: Path, marker: Marker, escape: str
) -> None:
    frame = (await attack(strict_spawner, hostile(readable_tmp, escape, marker))).frame
    assert frame.status is HookStatus.OK, to_json(frame)
    assert marker.alive() == []  # the hook exited: its namespace, escapees included, is gone
    await still_serving(strict_spawner, readable_tmp)


CONNECT = """
    import socket, sys
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
        result = "connected"
    except OSError as exc:
        result = f"{type(exc).__name__}: {exc}"
"""


@pytest.mark.parametrize(("profile", "reaches"), [(Profile.STRICT, False), (Profile.NET, True)])
async def test_tcp_connect_to_a_host_port(
    strict_spawner: Spawner, readable_tmp: Path, profile: Profile, reaches: bool
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = str(listener.getsockname()[1])
        hook = hostile(readable_tmp, reporting(CONNECT), port, sandbox=profile)
        outcome = said(await attack(strict_spawner, hook))
        assert (outcome == "connected") is reaches, outcome
        if not reaches:
            with pytest.raises(BlockingIOError):  # nothing ever knocked
                listener.accept()
    await still_serving(strict_spawner, readable_tmp)


async def test_writing_outside_scratch_fails(strict_spawner: Spawner, readable_tmp: Path) -> None:
    code = reporting("""
        import os
        result = {}
        for where in (os.getcwd(), "/tmp", "/dev/shm", os.environ["HOME"]):
            try:
                with open(os.path.join(where, "planted"), "w") as f:
                    f.write("x")
                result[where] = "written"
            except OSError as exc:
                result[where] = exc.strerror
    """)
    got = said(await attack(strict_spawner, hostile(readable_tmp, code)))
    scratch = [k for k in got if k not in (str(readable_tmp), "/tmp", "/dev/shm")]
    assert got[scratch[0]] == "written"  # its own scratch directory
    assert all(v != "written" for k, v in got.items() if k != scratch[0]), got
    assert not (readable_tmp / "planted").exists()
    assert not Path("/tmp/planted").exists() and not Path("/dev/shm/planted").exists()
    await still_serving(strict_spawner, readable_tmp)


async def test_reading_the_token_file_fails(
    strict_spawner: Spawner, readable_tmp: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = tmp_path_factory.mktemp("state") / "mcpx-hooks"
    state.mkdir(mode=0o700)
    token = state / "token"
    token.write_text("s3cret-token")
    token.chmod(0o600)
    code = reporting("""
        import sys
        try:
            result = open(sys.argv[1]).read()
        except OSError as exc:
            result = exc.strerror
    """)
    got = said(await attack(strict_spawner, hostile(readable_tmp, code, str(token))))
    assert "s3cret" not in got and got in ("Permission denied", "No such file or directory")
    await still_serving(strict_spawner, readable_tmp)


async def test_the_supervisors_environment_is_out_of_reach(
    strict_spawner: Spawner, readable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPX_TEST_SECRET", "hunter2")
    code = reporting("""
        import os, sys
        result = {"env": "hunter2" in repr(dict(os.environ))}
        for pid in (sys.argv[1], "1"):
            try:
                result[pid] = "hunter2" in open(f"/proc/{pid}/environ").read()
            except OSError as exc:
                result[pid] = exc.strerror
    """)
    hook = hostile(readable_tmp, code, str(os.getpid()))
    got = said(await attack(strict_spawner, hook))
    assert got["env"] is False
    assert got[str(os.getpid())] is not True and got["1"] is not True, got
    await still_serving(strict_spawner, readable_tmp)


async def test_ptrace_of_the_supervisor_fails(strict_spawner: Spawner, readable_tmp: Path) -> None:
    code = reporting("""
        import ctypes, sys
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_ATTACH = 16
        done = libc.ptrace(PTRACE_ATTACH, int(sys.argv[1]), None, None)
        result = {"ptrace": done, "errno": ctypes.get_errno()}
    """)
    got = said(await attack(strict_spawner, hostile(readable_tmp, code, str(os.getpid()))))
    assert got == {"ptrace": -1, "errno": 1}  # EPERM
    assert "TracerPid:\t0\n" in Path(f"/proc/{os.getpid()}/status").read_text()
    await still_serving(strict_spawner, readable_tmp)


async def test_raising_its_own_limits_fails(strict_spawner: Spawner, readable_tmp: Path) -> None:
    code = reporting("""
        import resource
        result = {"before": resource.getrlimit(resource.RLIMIT_NOFILE)}
        for limit in ((1 << 20, 1 << 20), (result["before"][1], result["before"][1])):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, limit)
                result[str(limit)] = "raised"
            except (OSError, ValueError) as exc:
                result[str(limit)] = type(exc).__name__
        result["after"] = resource.getrlimit(resource.RLIMIT_NOFILE)
    """)
    hook = hostile(readable_tmp, code, limits=Limits(open_files=64))
    got = said(await attack(strict_spawner, hook))
    assert got["before"] == got["after"] == [64, 64]
    assert "raised" not in got.values(), got
    await still_serving(strict_spawner, readable_tmp)


# ---- issue 25, case 6: NATS is no way around the token --------------------------------------


def _anonymous_nats(port: int) -> str:
    """What a NATS server answers a client that gives no credentials (the protocol by hand:
    its INFO, then CONNECT without any and a PING)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        reader = conn.makefile("rb")
        assert reader.readline().startswith(b"INFO ")
        conn.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        return reader.readline().decode().strip()


def test_a_nats_publisher_can_neither_run_a_script_nor_read_the_streams(tmp_path: Path) -> None:
    """As found: with nats-py, `{"runId", "request"}` published to `mcpx.requests` ran a
    script on a worker, and every stored frame and queued request was readable. Against the
    nats-server docs/cluster.md deploys, a client without credentials is refused, and a
    request from an account that may publish (a gateway's) but without the cluster key's
    signature is never run: its run gets an `error` saying its signature did not check."""
    import uuid

    from clusterparts import forged, frames_until_end, need_nats, open_cluster, publish_request
    from service_client import arun

    need_nats()
    parts = open_cluster(tmp_path, gateways=1, workers=1)
    try:
        assert "Authorization Violation" in _anonymous_nats(parts.nats.port)
        run_id = uuid.uuid4().hex
        marker = tmp_path / "ran"
        url = parts.nats.client_url("gateway")
        arun(publish_request(url, forged(run_id, marker)))
        frames = arun(frames_until_end(url, run_id))
        assert [f["type"] for f in frames] == ["start", "error", "end"]
        assert frames[1]["message"].startswith("the worker could not check this request's")
        assert not marker.exists()
    finally:
        parts.stop()
