"""The profiles strict, net and none (SPEC §5): what a confined hook and script see, what a
missing mechanism does, limits from config, doctor, and death with the supervisor."""

from __future__ import annotations

import errno
import json
import os
import platform
import struct
import sys
import tempfile
import textwrap
from pathlib import Path
from textwrap import dedent
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
from conftest import ROOT, hook_user_processes, kill_supervisor_and_wait

from mcpx_hooks.runners import confine, libc, seccomp
from mcpx_hooks.supervisor.cli import doctor
from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.limits import DEFAULT_LIMITS, LIMIT_DOCS, LIMIT_KEYS, Limits
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.process.scratch import scratch_dir
from mcpx_hooks.supervisor.process.spawner import ChildSpec, Spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest

if TYPE_CHECKING:
    from conftest import Marker

PY = sys.executable
CTX = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({},))

INSIDE = """
    import ctypes, json, os, resource
    libc = ctypes.CDLL(None)
    PR_GET_SECCOMP, PR_GET_NO_NEW_PRIVS = 21, 39
    def can_read(p):
        try:
            os.listdir(p) if os.path.isdir(p) else open(p).read(1)
            return True
        except OSError:
            return False
    print(json.dumps({"advise": json.dumps({
        "pid": os.getpid(), "uid": os.getuid(), "cwd": os.getcwd(),
        "nnp": libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
        "seccomp": libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0), "proc": can_read("/proc/self/status"),
        "dir": os.environ["MCPX_HOOK_DIR"], "home": os.environ["HOME"],
        "reads_dir": can_read(os.environ["MCPX_HOOK_DIR"] + "/data.txt"),
        "reads_root": can_read("/root"), "reads_etc": can_read("/etc/hostname"),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    })}))
"""


def hook(where: Path, code: str, **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": "h",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.RUN,
        "target": (PY, "-I", "-S", "-c", textwrap.dedent(code)),
        "declaring_dir": str(where),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.STRICT,
        "timeout_ms": 10_000,
    }
    base.update(fields)
    return Hook(**base)


async def run(spawner: Spawner, h: Hook) -> HookReport:
    with trio.fail_after(30):
        return await run_hook(spawner, h, CTX)


def seen(report: HookReport) -> Any:
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    return json.loads(report.frame.advice[0])


async def test_strict_hook_sees_only_what_it_should(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    (readable_tmp / "data.txt").write_text("hello")
    (readable_tmp / "data.txt").chmod(0o644)
    got = seen(await run(strict_spawner, hook(readable_tmp, INSIDE)))
    # PID 2, after its namespace's reaper; as root, a per-child uid; rootless, this user's
    # own (in a user namespace of its own).
    assert got["pid"] == 2 and (got["uid"] >= 0x50000000 if ROOT else got["uid"] == os.getuid())
    assert got["nnp"] == 1 and got["seccomp"] == 2 and not got["proc"]
    assert got["cwd"] == got["dir"] == str(readable_tmp)
    assert got["reads_dir"] and got["reads_etc"] and not got["reads_root"]
    assert got["nofile"] == [DEFAULT_LIMITS.open_files] * 2


@pytest.mark.parametrize("profile", [Profile.WORKSPACE, Profile.NET])
async def test_every_sandbox_profile_has_the_process_limit_and_a_bounded_scratch(
    strict_spawner: Spawner, readable_tmp: Path, profile: Profile
) -> None:
    """`processes` and `scratchMb` hold under workspace and net as under strict, and their
    words (in `doctor`, the config reference and the schema) say so."""
    code = """
        import json, os, resource
        print(json.dumps({"advise": json.dumps([
            resource.getrlimit(resource.RLIMIT_NPROC),
            os.statvfs(os.environ["MCPX_HOOK_SCRATCH"]).f_blocks
            * os.statvfs(os.environ["MCPX_HOOK_SCRATCH"]).f_frsize,
        ])}))
    """
    limits = Limits(processes=17, scratch_mb=8)
    got = seen(await run(strict_spawner, hook(readable_tmp, code, limits=limits, sandbox=profile)))
    assert got == [[17, 17], 8 << 20]
    for key in ("processes", "scratchMb"):
        assert "every profile but none" in LIMIT_DOCS[key], LIMIT_DOCS[key]


async def test_orphans_are_reaped_as_they_go_not_held_against_the_process_limit(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    """Each shell leaves an orphan behind; 300 of them, past the 128 processes a hook's
    user may have: the namespace's reaper takes each in and reaps it when it exits
    (`runners/reapers.py`). A hook that was its namespace's init held them all as zombies
    and could not fork past the limit."""
    code = """
        import json, subprocess
        for _ in range(300):
            subprocess.run(["/bin/sh", "-c", "/bin/true & exit 0"], check=True)
        print(json.dumps({"advise": json.dumps("all ran")}))
    """
    assert seen(await run(strict_spawner, hook(readable_tmp, code))) == "all ran"


async def test_scratch_is_a_size_limited_tmpfs(strict_spawner: Spawner, readable_tmp: Path) -> None:
    code = """
        import json, os
        path = os.path.join(os.environ["MCPX_HOOK_SCRATCH"], "flood")
        written = 0
        try:
            with open(path, "wb") as f:
                while written < (64 << 20):
                    f.write(b"x" * (1 << 20))
                    f.flush()
                    written += 1 << 20
        except OSError as exc:
            print(json.dumps({"advise": json.dumps([written >> 20, exc.strerror])}))
    """
    got = seen(await run(strict_spawner, hook(readable_tmp, code, limits=Limits(scratch_mb=8))))
    assert got[0] <= 8 and got[1] == "No space left on device"


async def test_module_hook_under_strict(strict_spawner: Spawner, readable_tmp: Path) -> None:
    (readable_tmp / "mods").mkdir(mode=0o755)
    (readable_tmp / "mods" / "m.py").write_text("def hook(p):\n    return {'advise': 'mod'}\n")
    (readable_tmp / "mods" / "m.py").chmod(0o644)
    h = hook(readable_tmp, "", action=Action.MODULE, target="mods/m.py")
    frame = (await run(strict_spawner, h)).frame
    assert frame.status is HookStatus.OK and frame.advice == ("mod",), to_json(frame)


#: What hook authors write: the streams reopened by name, as a shell's `>/dev/stderr` does.
BY_NAME = "echo out >/dev/stdout; echo err >/dev/stderr; echo fd1 >/dev/fd/1; echo fd2 >/dev/fd/2"


@pytest.mark.parametrize("profile", [Profile.STRICT, Profile.WORKSPACE, Profile.NET])
async def test_dev_stderr_dev_stdout_and_dev_fd_are_the_hook_s_own_streams(
    strict_spawner: Spawner, readable_tmp: Path, profile: Profile
) -> None:
    h = hook(readable_tmp, "", target=("sh", "-c", BY_NAME), sandbox=profile)
    frame = (await run(strict_spawner, h)).frame
    assert frame.status is HookStatus.OK, to_json(frame)
    assert (frame.advice, frame.stderr_tail) == (("out\nfd1",), "err\nfd2\n")
    if ROOT:  # the child's pipes became its uid's; a device it was given did not
        assert os.stat("/dev/null").st_uid == 0


async def test_a_module_hook_and_a_script_reopen_their_streams_too(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    (readable_tmp / "m.py").write_text(
        "def hook(p):\n"
        "    with open('/dev/stderr', 'w') as f:\n"
        "        f.write('module err')\n"
        "    return {'advise': 'mod'}\n"
    )
    (readable_tmp / "m.py").chmod(0o644)
    frame = (
        await run(strict_spawner, hook(readable_tmp, "", action=Action.MODULE, target="m.py"))
    ).frame
    assert (frame.status, frame.advice, frame.stderr_tail) == ("ok", ("mod",), "module err")
    (readable_tmp / "c.json").write_text(json.dumps({"script": {"sandbox": "strict"}}))
    cfg = load_config(["c.json"], cwd=readable_tmp, environ={}, discover=False)
    request = RunRequest(Script(argv=("sh", "-c", BY_NAME)), str(readable_tmp))
    with trio.fail_after(60):
        async with open_runtime(cfg) as runtime:
            r = runtime.new_run(request)
            await runtime.execute(r)
            frames = r.journal.frames
    assert [f["sandbox"] for f in frames if f["type"] == "start"] == ["strict"]
    assert [f["text"] for f in frames if f["type"] == "stdout"] == ["out", "fd1"]
    assert [f["text"] for f in frames if f["type"] == "stderr"] == ["err", "fd2"]
    assert frames[-1]["exitCode"] == 0


#: Through `/proc`, only the hook's own fds: no other process's, nothing else of its own.
REOPEN = """
    import errno, json, os, sys
    def opens(path, flags=os.O_RDONLY):
        try:
            os.close(os.open(path, flags))
            return "opened"
        except OSError as exc:
            return errno.errorcode[exc.errno]
    supervisor = int(sys.argv[1])
    print(json.dumps({"advise": json.dumps({
        "own": [opens("/proc/self/fd/2", os.O_WRONLY), opens("/dev/fd/1", os.O_WRONLY)],
        "supervisor": [opens(f"/proc/{supervisor}/fd/{n}") for n in range(3)],
        "init": [opens(f"/proc/1/fd/{n}") for n in range(3)],
        "self": [opens(f"/proc/self/{name}") for name in ("status", "environ", "mem")],
        "list": opens("/proc", os.O_DIRECTORY),
    })}))
"""


async def test_reopening_its_streams_exposes_no_other_process(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    target = (PY, "-I", "-S", "-c", textwrap.dedent(REOPEN), str(os.getpid()))
    got = seen(await run(strict_spawner, hook(readable_tmp, "", target=target)))
    # The supervisor holds the other end of every hook's pipes: its fds are there, refused.
    assert got == {
        "own": ["opened"] * 2,
        "supervisor": ["EACCES"] * 3,
        "init": ["EACCES"] * 3,
        "self": ["EACCES"] * 3,
        "list": "EACCES",
    }


@pytest.mark.skipif(not ROOT, reason="rootless, the hook's user owns the directory")
async def test_unreadable_directory_not_granted_is_a_clear_failure(
    strict_spawner: Spawner, tmp_path: Path
) -> None:
    # A 0700 declaring directory is a grant (tests/test_grants.py); a per-call hook's
    # directory, where the run's cwd is a service client's own, is not.
    tmp_path.chmod(0o700)
    ctx = attrs.evolve(CTX, cwd_granted=False)
    h = hook(tmp_path, "print('{}')", source=Provenance(SourceKind.PER_CALL, None, 0))
    with trio.fail_after(30):
        frame = (await run_hook(strict_spawner, h, ctx)).frame
    assert frame.status is HookStatus.FAILED
    assert "cannot read its working directory" in (frame.reason or ""), frame.reason
    assert "make it readable by others (o+rx)" in (frame.reason or "")


@pytest.mark.parametrize(
    ("hide", "profile", "fails"),
    [
        ("landlock", Profile.STRICT, True),
        ("seccomp", Profile.NET, True),
        ("netns", Profile.STRICT, True),
        ("netns", Profile.NET, False),
        ("landlock,seccomp,netns,mountns", Profile.NONE, False),
    ],
)
async def test_a_hidden_mechanism_fails_the_profile_never_downgrades(
    strict_spawner: Spawner,
    readable_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    hide: str,
    profile: Profile,
    fails: bool,
) -> None:
    monkeypatch.setenv("MCPX_HOOKS_HIDE", hide)
    h = hook(readable_tmp, "", sandbox=profile, target=("true",))
    frame = (await run(strict_spawner, h)).frame
    assert frame.sandbox == profile.value
    if fails:  # refused before the spawner was asked: nothing ran
        assert frame.status is HookStatus.FAILED and frame.exit_code is None
        assert "cannot be enforced" in (frame.reason or "")
        reason = frame.reason or ""
        assert hide.split(",", maxsplit=1)[0] in reason and "to get it" in reason
    else:
        assert frame.status is HookStatus.OK, to_json(frame)


async def test_none_runs_with_soft_limits_only(strict_spawner: Spawner, readable_tmp: Path) -> None:
    rlimits, plan = sandbox.plan(Profile.NONE, strict_spawner, scratch="/x", dirs=())
    assert plan is None
    assert dict((n, s) for n, s, _ in rlimits)["RLIMIT_NOFILE"] == DEFAULT_LIMITS.open_files
    got = seen(await run(strict_spawner, hook(readable_tmp, INSIDE, sandbox=Profile.NONE)))
    assert got["uid"] == os.getuid() and got["seccomp"] == 0
    assert got["reads_root"] is os.access("/root", os.R_OK)  # what this user may, no more


def test_limits_come_from_config(tmp_path: Path) -> None:
    doc = {
        "limits": {"memoryMb": 64, "processes": 8, "scratchMb": 4},
        "hooks": [{"name": "a", "on": "script", "phase": "before", "run": ["true"]}],
    }
    (tmp_path / "c.json").write_text(json.dumps(doc))
    cfg = load_config(["c.json"], cwd=tmp_path, environ={}, discover=False)
    assert cfg.limits == Limits(memory_mb=64, processes=8, scratch_mb=4)
    assert cfg.hooks[0].limits == cfg.limits and cfg.hooks[0].sandbox is Profile.STRICT


async def test_script_run_under_strict_returns_its_artifacts(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    (readable_tmp / "job.py").write_text(
        textwrap.dedent("""
        import os
        def main():
            with open(os.path.join(os.environ["MCPX_ARTIFACTS_DIR"], "out.txt"), "w") as f:
                f.write("artifact")
            return {"uid": os.getuid(), "pid": os.getpid()}
        """)
    )
    (readable_tmp / "job.py").chmod(0o644)
    doc = {"defaults": {"timeoutMs": 5000}}
    (readable_tmp / "c.json").write_text(json.dumps(doc))
    cfg = load_config(["c.json"], cwd=readable_tmp, environ={}, discover=False)
    request = RunRequest(Script(python_file="job.py"), str(readable_tmp), input=({"n": 1},))
    with trio.fail_after(60):
        async with open_runtime(cfg) as runtime:
            r = runtime.new_run(request)
            await runtime.execute(r)
            frames = r.journal.frames
    (start,) = [f for f in frames if f["type"] == "start"]
    (result,) = [f for f in frames if f["type"] == "result"]
    (artifact,) = [f for f in frames if f["type"] == "artifact"]
    assert start["sandbox"] == "workspace"  # the runs' default
    uid = result["value"]["uid"]
    assert result["value"]["pid"] == 2 and (uid >= 0x50000000 if ROOT else uid == os.getuid())
    assert artifact["name"] == "out.txt" and artifact["size"] == len("artifact")


async def test_doctor_reports_every_profile_enforceable(strict_spawner: Spawner) -> None:
    text, every = doctor.report(strict_spawner)
    assert every, text
    for profile in Profile:
        assert f"{profile.value:9} enforceable" in text
    assert "MISSING" not in text
    # Each hook's namespace's first process is ours (`runners/reapers.py`): on x86_64 our
    # own program, started without a fork.
    own = "129 bytes of ours" if platform.machine() == "x86_64" else "cat with SIGCHLD"
    assert f"reaper (each hook's namespace's first process): ok: {own}" in text


async def test_doctor_names_what_is_hidden(
    strict_spawner: Spawner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPX_HOOKS_HIDE", "seccomp,seccom")
    text, every = doctor.report(strict_spawner)
    assert not every
    assert "MISSING  seccomp   hidden by MCPX_HOOKS_HIDE" in text
    # A name that is nothing to hide is said (a typo would otherwise hide nothing, silently).
    assert "MCPX_HOOKS_HIDE names seccom, which hides nothing: it can name pidns," in text
    assert "strict    CANNOT be enforced: missing seccomp" in text
    assert "none      enforceable" in text


SUPERVISOR = """
import sys, trio
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.process.scratch import scratch_dir
from mcpx_hooks.supervisor.process.spawner import ChildSpec, open_spawner

async def main():
    async with open_spawner() as spawner:
        with scratch_dir("t-") as scratch:
            where = sys.argv[1]
            rlimits, plan = sandbox.plan(Profile.STRICT, spawner, scratch=scratch, dirs=(where,))
            spec = ChildSpec(tuple(sys.argv[2:]), where, {}, rlimits, plan)
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


async def test_strict_hooks_die_with_the_supervisor_even_on_sigkill(
    strict_spawner: Spawner, readable_tmp: Path, marker: Marker
) -> None:
    argv = [PY, "-c", SUPERVISOR, str(readable_tmp), PY, "-I", "-S", "-c", dedent(TREE), marker]
    # spawner, supervisor, hook, double-forked grandchild
    await kill_supervisor_and_wait(argv, marker, at_least=4)
    assert marker.alive() == []
    assert hook_user_processes() == []


def test_docs_list_every_limit_with_its_default() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "sandbox.md").read_text()
    for key, attr, _, _ in LIMIT_KEYS:
        assert f"| `{key}` | {getattr(DEFAULT_LIMITS, attr)} |" in text, key
    for mech in sandbox.MECHANISMS:
        assert f"`{mech.name}`" in text, mech.name


LOOK = """
    import json, os
    here, scratch = os.environ["MCPX_HOOK_DIR"], os.environ["MCPX_HOOK_SCRATCH"]
    beside = [n for n in ("a", "b") if os.path.exists(os.path.join(here, "..", n))]
    seen = {"beside": beside, "scratch": os.listdir(scratch)}
    with open(os.path.join(scratch, "mark"), "w") as f:
        f.write("left by an earlier hook")
    print(json.dumps({"advise": json.dumps(seen)}))
"""


async def test_each_hook_gets_a_view_of_its_own(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    # pytest's 0700 directories above `readable_tmp` are covered, holding only the declaring
    # directory: the same covers as the hook before, or not.
    for name in ("a", "b"):
        (readable_tmp / name).mkdir(mode=0o755)
    for name in ("a", "a", "b", "a", "b", "b"):
        got = seen(await run(strict_spawner, hook(readable_tmp / name, LOOK)))
        assert got["scratch"] == [], name
        # Rootless, the hook's user owns those directories: they are not covered, and
        # Landlock keeps what is beside the grants unreadable, not unnamed.
        assert (got["beside"] == [name]) if ROOT else (name in got["beside"]), name


async def test_a_declaring_directory_made_anew_is_the_one_a_hook_reads(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    # The same plan each time, but its directory replaced in between: nothing opened for an
    # earlier hook (its bind source, its Landlock rule) may serve a later one.
    code = """
        import json
        print(json.dumps({"advise": open("data.txt").read()}))
    """
    where = readable_tmp / "hooks"
    for n, text in enumerate(("first", "second", "third")):
        if n:
            where.rename(readable_tmp / f"old{n}")
        where.mkdir(mode=0o755)
        (where / "data.txt").write_text(text)
        (where / "data.txt").chmod(0o644)
        for _ in range(2):  # made anew, then the same again
            frame = (await run(strict_spawner, hook(where, code))).frame
            assert frame.status is HookStatus.OK and frame.advice == (text,), to_json(frame)


async def test_a_read_path_may_be_a_file(strict_spawner: Spawner, readable_tmp: Path) -> None:
    # Beside the working directory, in a directory others can search (no cover hides the
    # file next to the granted one: Landlock alone refuses it).
    with tempfile.TemporaryDirectory(dir="/tmp") as where:
        os.chmod(where, 0o755)
        for name in ("granted", "other"):
            Path(where, name).write_text(name)
            Path(where, name).chmod(0o644)
        Path(where, "work").mkdir(mode=0o755)
        code = """
            import json
            def read(name):
                try:
                    return open(name).read()
                except OSError as exc:
                    return exc.errno
            print(json.dumps([read("../granted"), read("../other")]))
        """
        with scratch_dir("t-") as scratch:
            work = os.path.join(where, "work")
            rlimits, plan = sandbox.plan(
                Profile.STRICT, strict_spawner, scratch=scratch, dirs=(work,)
            )
            assert plan is not None
            plan = attrs.evolve(plan, read=(*plan.read, os.path.join(where, "granted")))
            argv = (PY, "-I", "-S", "-c", textwrap.dedent(code))
            with trio.fail_after(30):
                async with strict_spawner.open_child(
                    ChildSpec(argv, work, {}, rlimits, plan), kill_grace=0.5
                ) as child:
                    outcome = await child.communicate(b"", 1 << 16, 1 << 12)
    assert outcome.exit_code == 0, outcome
    assert json.loads(bytes(outcome.stdout)) == ["granted", errno.EACCES]


@pytest.mark.parametrize("profile", [Profile.STRICT, Profile.WORKSPACE])
async def test_a_cache_of_the_supervisor_s_own_in_its_state_inside_a_granted_project_is_reached(
    strict_spawner: Spawner, readable_tmp: Path, monkeypatch: pytest.MonkeyPatch, profile: Profile
) -> None:
    # The state directory inside the project (`XDG_STATE_HOME=$PWD/.state`, as CI jobs
    # set it): it is never granted, and covered in the view; a tool server's package cache
    # in it, which the supervisor grants itself, is mounted in that cover, not hidden by it
    # (npx's install step failed, "ENOENT: mkdir …/mcpx-hooks/packages"). Under workspace
    # the project is writable: the cache, beneath it, was taken for given by the project's
    # grant and left out of the cover, for an ordinary user (whose grants all have the
    # hook's owner), so an npx server did not find its cache ("ENOTCACHED").
    work = readable_tmp / "work"
    state = work / ".state" / "mcpx-hooks"
    cache = state / "packages" / "npm" / "words-0123"
    cache.mkdir(parents=True)
    (state / "token").write_text("the service's token")
    for d in (work, work / ".state", cache.parent.parent, cache.parent):
        d.chmod(0o755)
    for d in (state, cache):  # (as the supervisor makes them)
        d.chmod(0o700)
    monkeypatch.setenv("XDG_STATE_HOME", str(work / ".state"))
    code = """
        import json, os
        def attempt(step):
            try:
                return step()
            except OSError as exc:
                return errno.errorcode[exc.errno]
        import errno
        made = attempt(lambda: open(os.path.join(CACHE, "made"), "w").write("x"))
        token = attempt(lambda: open(os.path.join(STATE, "token")).read())
        print(json.dumps([made, token, sorted(os.listdir(STATE)), os.listdir(CACHE)]))
    """.replace("CACHE", repr(str(cache))).replace("STATE", repr(str(state)))
    with scratch_dir("t-") as scratch:
        rlimits, plan = sandbox.plan(
            profile, strict_spawner, scratch=scratch, dirs=(str(work),),
            workdir=str(work), own=((str(cache), True),),
        )  # fmt: skip
        argv = (PY, "-I", "-S", "-c", textwrap.dedent(code))
        with trio.fail_after(30):
            async with strict_spawner.open_child(
                ChildSpec(argv, str(work), {}, rlimits, plan), kill_grace=0.5
            ) as child:
                outcome = await child.communicate(b"", 1 << 16, 1 << 12)
    assert outcome.exit_code == 0, outcome
    assert json.loads(bytes(outcome.stdout)) == [1, "ENOENT", ["packages"], ["made"]]
    assert (cache / "made").read_text() == "x"


async def test_sandboxed_spawns_leave_no_fd_in_the_spawner(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    closed = readable_tmp / "closed"
    closed.mkdir(mode=0o700)
    ok = hook(readable_tmp, "", target=("true",))
    mapped = hook(closed, "", target=("true",))  # a grant: its owner mapped onto the hook's
    # Refused once sealed (the hook's user cannot read its directory: not a grant), and
    # while the view is made (its working directory is not there).
    per_call = Provenance(SourceKind.PER_CALL, None, 0)
    refused = [
        (hook(closed, "", target=("true",), source=per_call), attrs.evolve(CTX, cwd_granted=False)),
        (hook(readable_tmp / "gone", "", target=("true",)), CTX),
    ][0 if ROOT else 1 :]  # (rootless, the hook's user owns `closed`: it may read it)
    fds = f"/proc/{strict_spawner.pid}/fd"
    assert (await run(strict_spawner, ok)).frame.status is HookStatus.OK
    assert (await run(strict_spawner, mapped)).frame.status is HookStatus.OK
    before = len(os.listdir(fds))
    for _ in range(30):
        assert (await run(strict_spawner, ok)).frame.status is HookStatus.OK
        assert (await run(strict_spawner, mapped)).frame.status is HookStatus.OK
        for h, ctx in refused:
            with trio.fail_after(30):
                assert (await run_hook(strict_spawner, h, ctx)).frame.status is HookStatus.FAILED
    # The thread that served the last request closes its grants (read paths, devices, a
    # ruleset) after its answer: they may still be open. Not one fd more per spawn (60).
    paths = len(sandbox.SYSTEM_DIRS) + len(sandbox.python_dirs()) + 2 + len(sandbox.DEVICES)
    assert len(os.listdir(fds)) <= before + 2 * (paths + 4)


def _run_filter(prog: bytes, nr: int, arch: int, args: tuple[int, ...]) -> tuple[int, int]:
    """What a seccomp filter returns for one call, and how many instructions it ran: the
    classic BPF the filter uses (loads of `struct seccomp_data`, jumps, returns)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *args)
    ops = [struct.unpack_from("=HBBI", prog, i) for i in range(0, len(prog), 8)]
    pc = acc = steps = 0
    while True:
        code, jt, jf, k = ops[pc]
        steps += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == 0x06:  # ret k
            return k, steps
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def _decision(nr: int, arch: int, args: tuple[int, ...], sockets: str) -> int:
    """The filter as `seccomp.seccomp_program` documents it."""
    table = libc.table()
    assert table is not None
    native, nrs = table
    allow, eperm = 0x7FFF0000, 0x00050000 | errno.EPERM
    if arch != native or (native == 0xC000003E and nr & 0xFFFFFFFF >= 0x40000000):
        return eperm
    if nr in {nrs[name] for name in seccomp.DENIED if name in nrs}:
        return eperm
    if nr == nrs["clone3"]:
        return 0x00050000 | errno.ENOSYS
    if nr == nrs["clone"]:
        return eperm if args[0] & 0xFFFFFFFF & libc.NAMESPACE_FLAGS else allow
    if nr == nrs["prlimit64"]:
        return allow if args[2] == 0 else eperm
    families = {"none": {16}, "egress": {2, 10, 16}}.get(sockets)
    if families is not None and nr == nrs["socket"]:
        return allow if args[0] & 0xFFFFFFFF in families else 0x00050000 | errno.EACCES
    if nr in {nrs[name] for name in seccomp.UNJUDGED}:
        return 0x00050000 | errno.ENOSYS
    setid = 0o6000
    for name, arg in seccomp.MODE_ARGUMENT.items():
        if nrs.get(name) == nr:
            return eperm if args[arg] & setid else allow
    for name, (flags, mode) in seccomp.OPEN_ARGUMENTS.items():
        if nrs.get(name) == nr:
            creates = args[flags] & (0o100 | 0o20000000)
            return eperm if creates and args[mode] & setid else allow
    return allow


@pytest.mark.skipif(libc.table() is None, reason="no system call table for this machine")
@pytest.mark.parametrize("sockets", ["none", "egress", "net"])
def test_the_seccomp_filter_decides_every_call_as_documented(sockets: str) -> None:
    table = libc.table()
    assert table is not None
    prog = seccomp.seccomp_program(sockets)
    argsets = [
        (0,) * 6,
        (libc.CLONE_NEWPID, 0, 0, 0, 0, 0),
        (libc.CLONE_NEWUSER | 17, 0, 0, 0, 0, 0),
        (0x1200011, 0, 0, 0, 0, 0),  # what fork() passes to clone
        (16, 0, 0, 0, 0, 0),
        (2, 1, 0, 0, 0, 0),
        (10, 2, 0, 0, 0, 0),  # IPv6; Unix; vsock; packet
        (1, 1, 0, 0, 0, 0),
        (40, 1, 0, 0, 0, 0),
        (17, 3, 0, 0, 0, 0),
        (0, 7, 1 << 12, 0, 0, 0),
        (0, 7, 1 << 40, 0, 0, 0),
        (1 << 40 | 16, 0, 0, 5, 0, 0),
        # Modes: set-id bits (refused), plain ones, with and without O_CREAT / O_TMPFILE.
        (0, 0o4755, 0o2755, 0o4000, 0, 0),
        (0, 0o755, 0o644, 0o700, 0, 0),
        (0, 0o100, 0o4755, 0o4755, 0, 0),
        (0, 0o20200000, 0o100, 0o2700, 0, 0),
        (0, 1 << 40, 0o100 | 1 << 40, 1 << 40 | 0o600, 0, 0),
        (-100 & (1 << 64) - 1, 0, 0o101, 0o6000, 0, 0),
    ]
    numbers = [*range(1024), *range(0x40000000, 0x40000000 + 600, 7), 0xFFFFFFFF]
    most = 0
    for arch in (table[0], 0x40000003, 0xC00000B7, 0xC000003E):
        for nr in numbers:
            for args in argsets:
                got, steps = _run_filter(prog, nr if nr < 1 << 31 else nr - (1 << 32), arch, args)
                assert got == _decision(nr, arch, args, sockets), (hex(arch), nr, args)
                most = max(most, steps)
    # A search, not a list: the kernel evaluates the filter for every number at each install.
    assert most <= 20


def test_traversable_looks_at_each_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "open" / "deeper").mkdir(parents=True)
    (tmp_path / "shut" / "inside").mkdir(parents=True)
    (tmp_path / "shut").chmod(0o600)  # not even its owner may search it
    (tmp_path / "file").write_text("")
    paths = [
        tmp_path / "open" / "deeper",
        tmp_path / "open",
        tmp_path / "shut" / "inside",
        tmp_path / "shut" / "inside" / "missing",
        tmp_path / "file" / "below",
        tmp_path / "missing" / "below",
    ]
    uid, gid = os.getuid(), os.getgid()  # the owner of tmp_path and its ancestors
    alone = [confine.traversable(str(p), uid, gid) for p in paths]
    looked: list[str] = []
    real_stat = os.stat

    def counting_stat(path: str, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)
    seen: dict[str, bool | None] = {}
    try:
        shared = [confine.traversable(str(p), uid, gid, seen) for p in paths]
    finally:
        (tmp_path / "shut").chmod(0o700)  # for pytest to clean it up
    assert shared == alone
    assert shared[2] == shared[3] == str(tmp_path / "shut")
    assert shared[0] is shared[4] is shared[5] is None
    assert len(looked) == len(set(looked))
