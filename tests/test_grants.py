"""What a profile grants, and nothing else (issue 12, items 2-5): grants beat mode bits as
root (idmapped mounts), the `workspace` profile, `[sandbox] read` / `write`, and a program
the profile cannot see refused before the spawn.

The tests that run hooks are real: a strict (or workspace) hook or script on a pidns spawner,
as root, against directories of mode 0700 and files of mode 0600 owned by root. Each hook
reports what it could do as JSON, so a test asserts on what happened inside.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.errors import SandboxUnavailable
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import (
    Action,
    Config,
    Hook,
    Profile,
    Provenance,
    SandboxPaths,
    SourceKind,
)
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.process import programs, sandbox
from mcpx_hooks.supervisor.process.spawner import SandboxPlan, Spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest

PY = sys.executable
CTX = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({},))
ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="a per-child uid (and so a mapping) needs root")

#: Reports what the hook could do with each path of argv[1:] as `op:path`: `read` (a file's
#: first byte), `list`, `write` (create a file), `setuid` (chmod 4755 of a file it made),
#: `mkset` (create a file of mode 2755), `owner` (the uid it sees on a path).
PROBE = """
import json, os, sys
def attempt(op, path):
    try:
        if op == "read":
            open(path).read(1)
        elif op == "list":
            os.listdir(path)
        elif op == "write":
            with open(path, "w") as f:
                f.write("written")
        elif op == "setuid":
            with open(path, "w") as f:
                f.write("#!/bin/sh\\n")
            os.chmod(path, 0o4755)
        elif op == "mkset":
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o2755))
        elif op == "owner":
            return os.stat(path).st_uid == os.getuid()
        return True
    except OSError as exc:
        return exc.errno
got = {arg: attempt(*arg.split(":", 1)) for arg in sys.argv[1:]}
print(json.dumps({"advise": json.dumps(got)}))
"""


def private_dir(parent: str | None = None) -> Path:
    """A fresh 0700 directory owned by root, as `mktemp -d` makes (under /tmp by default)."""
    path = Path(tempfile.mkdtemp(prefix="mcpx-grant-", dir=parent))
    path.chmod(0o700)
    return path


@pytest.fixture
def project() -> Iterator[Path]:
    """A 0700 project directory under /tmp holding a 0600 file, and a 0600 file beside it."""
    path = private_dir()
    (path / "data.txt").write_text("secret")
    (path / "data.txt").chmod(0o600)
    sibling = path.with_name(path.name + ".sibling")
    sibling.write_text("not granted")
    sibling.chmod(0o600)
    try:
        yield path
    finally:
        shutil.rmtree(path)
        sibling.unlink()


def sibling_of(path: Path) -> Path:
    return path.with_name(path.name + ".sibling")


def probe_hook(where: Path, *ops: str, **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": "probe",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.RUN,
        "target": (PY, "-I", "-S", "-c", PROBE, *ops),
        "declaring_dir": str(where),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.STRICT,
        "timeout_ms": 10_000,
    }
    base.update(fields)
    return Hook(**base)


async def run(spawner: Spawner, h: Hook, ctx: HookContext = CTX) -> HookReport:
    with trio.fail_after(30):
        return await run_hook(spawner, h, ctx)


def said(report: HookReport) -> dict[str, Any]:
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    found: dict[str, Any] = json.loads(report.frame.advice[0])
    return found


# ---- grants beat mode bits -------------------------------------------------------------------


@as_root
async def test_a_strict_hook_as_root_reads_its_0700_grant_and_nothing_beside_it(
    strict_spawner: Spawner, project: Path
) -> None:
    h = probe_hook(
        project,
        f"read:{project}/data.txt",
        f"list:{project}",
        f"owner:{project}/data.txt",
        f"read:{sibling_of(project)}",
        f"write:{project}/new.txt",
    )
    got = said(await run(strict_spawner, h))
    assert got[f"read:{project}/data.txt"] is True  # 0600, root's: the owner is the hook
    assert got[f"list:{project}"] is True and got[f"owner:{project}/data.txt"] is True
    assert got[f"read:{sibling_of(project)}"] == errno.EACCES  # beside the grant: mode bits
    assert got[f"write:{project}/new.txt"] == errno.EROFS  # strict: read-only
    assert not (project / "new.txt").exists()


@as_root
async def test_a_grant_under_a_0700_home_is_reached_through_a_cover(
    strict_spawner: Spawner,
) -> None:
    # `/root/project`: /root is 0700 and not granted; only the project is there, in a cover.
    home = Path(os.path.realpath(os.path.expanduser("~")))
    if home.stat().st_mode & 0o001:
        pytest.skip("the home directory is searchable by others here")
    project = private_dir(str(home))
    (project / "data.txt").write_text("secret")
    (project / "data.txt").chmod(0o600)
    try:
        others = [p for p in home.iterdir() if p != project][:1]
        h = probe_hook(project, f"read:{project}/data.txt", f"list:{home}")
        got = said(await run(strict_spawner, h))
        assert got[f"read:{project}/data.txt"] is True
        assert got[f"list:{home}"] == errno.EACCES  # the cover: not granted (Landlock)
        listed = probe_hook(project, *(f"owner:{p}" for p in others))
        assert all(v == errno.ENOENT for v in said(await run(strict_spawner, listed)).values())
    finally:
        shutil.rmtree(project)


@as_root
async def test_a_file_of_another_owner_in_a_grant_keeps_its_mode_bits(
    strict_spawner: Spawner, project: Path
) -> None:
    for name, mode in (("theirs-private", 0o600), ("theirs-shared", 0o604)):
        (project / name).write_text("x")
        (project / name).chmod(mode)
        os.chown(project / name, 12345, 12345)
    h = probe_hook(project, f"read:{project}/theirs-private", f"read:{project}/theirs-shared")
    got = said(await run(strict_spawner, h))
    assert got == {
        f"read:{project}/theirs-private": errno.EACCES,
        f"read:{project}/theirs-shared": True,
    }


@as_root
async def test_a_service_clients_cwd_is_not_a_grant(project: Path, no_leaks: None) -> None:
    config = Config()  # runs default to workspace
    request = RunRequest(Script(argv=("true",)), str(project), cwd_granted=False)
    frames = await run_to_end(config, request)
    (error,) = [f for f in frames if f["type"] == "error"]
    assert "cannot read its working directory" in error["message"], error


# ---- workspace -------------------------------------------------------------------------------


async def run_to_end(config: Config, request: RunRequest) -> list[dict[str, Any]]:
    with trio.fail_after(60):
        async with open_runtime(config) as runtime:
            r = runtime.new_run(request)
            await runtime.execute(r)
            return list(r.journal.frames)


@as_root
async def test_a_script_run_writes_its_0700_cwd_under_workspace(
    project: Path, no_leaks: None
) -> None:
    code = textwrap.dedent("""
        import os
        os.makedirs(".pytest_cache/v", exist_ok=True)
        with open("report.xml", "w") as f:
            f.write("<testsuite/>")
        print(open("data.txt").read())
    """)
    frames = await run_to_end(Config(), RunRequest(Script(argv=(PY, "-c", code)), str(project)))
    (start,) = [f for f in frames if f["type"] == "start"]
    assert start["sandbox"] == "workspace"
    assert [f for f in frames if f["type"] == "result"], frames
    assert [f["text"] for f in frames if f["type"] == "stdout"] == ["secret"]
    report = project / "report.xml"
    assert report.read_text() == "<testsuite/>"
    # Written as the hook's user, through the mapping: on disk, the directory's owner's.
    assert (report.stat().st_uid, report.stat().st_gid) == (0, 0)
    assert (project / ".pytest_cache" / "v").is_dir()


#: What a test suite's walk up for its config meets in the home above the project, and the
#: suite itself: pytest reads the first `pyproject.toml` it finds (it stops at one with a
#: `[tool.pytest.ini_options]`; the project's has none, as many have).
WALK_UP = """
import errno, os, sys
home = sys.argv[1]
for name in ("pyproject.toml", "secret", "setup.cfg"):
    try:
        os.stat(os.path.join(home, name))
        print(name, "there")
    except OSError as exc:
        print(name, errno.errorcode[exc.errno])
try:
    os.listdir(home)
except OSError as exc:
    print("list", errno.errorcode[exc.errno])
"""


def home_with_a_project(home: Path, owner: tuple[int, int] = (0, 0)) -> Path:
    """`home` (0755, as many are) holding a `pyproject.toml` and a secret; returns its
    project, `code/proj`, with a `pyproject.toml` of its own and a test."""
    project = home / "code" / "proj"
    (project / "tests").mkdir(parents=True)
    (home / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-x'\n")
    (home / "secret").write_text("the home's secret")
    (project / "pyproject.toml").write_text("[project]\nname = 'proj'\nversion = '0.1'\n")
    (project / "tests" / "test_one.py").write_text("def test_one():\n    assert True\n")
    for path in (home, *home.rglob("*")):
        os.chown(path, *owner)
    home.chmod(0o755)
    return project


@as_root
async def test_a_test_suite_walking_up_a_home_finds_nothing_beside_the_project(
    monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    # A home searchable by others: the rest of it was there to `stat` but unreadable
    # (Landlock), so pytest found `~/pyproject.toml`, could not read it, and failed with
    # PermissionError. The home is covered now: only the project is there.
    home = private_dir()
    try:
        project = home_with_a_project(home)
        monkeypatch.setenv("HOME", str(home))
        probe = Script(argv=(PY, "-I", "-S", "-c", WALK_UP, str(home)))
        frames = await run_to_end(Config(), RunRequest(probe, str(project)))
        seen = [f["text"] for f in frames if f["type"] == "stdout"]
        assert seen == ["pyproject.toml ENOENT", "secret ENOENT", "setup.cfg ENOENT", "list EACCES"]
        suite = Script(argv=(PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"))
        frames = await run_to_end(Config(), RunRequest(suite, str(project)))
        text = "\n".join(f.get("text", "") for f in frames)
        assert [f for f in frames if f["type"] == "result"], text
        assert "1 passed" in text, text
    finally:
        shutil.rmtree(home)


@as_root
async def test_workspace_refuses_setuid_and_setgid_bits(
    strict_spawner: Spawner, project: Path
) -> None:
    h = probe_hook(
        project,
        f"setuid:{project}/tool",
        f"mkset:{project}/tool2",
        f"write:{project}/plain",
        sandbox=Profile.WORKSPACE,
    )
    got = said(await run(strict_spawner, h))
    assert got[f"setuid:{project}/tool"] == errno.EPERM
    assert got[f"mkset:{project}/tool2"] == errno.EPERM
    assert got[f"write:{project}/plain"] is True
    assert not (project / "tool").stat().st_mode & 0o6000
    assert not (project / "tool2").exists()


@as_root
async def test_a_workspace_hook_writes_its_own_cwd_not_its_declaring_dir(
    strict_spawner: Spawner, project: Path
) -> None:
    (project / "build").mkdir(mode=0o700)
    h = probe_hook(
        project,
        f"write:{project}/build/out",
        f"write:{project}/top",
        f"read:{project}/data.txt",
        sandbox=Profile.WORKSPACE,
        cwd=str(project / "build"),
    )
    got = said(await run(strict_spawner, h))
    assert got[f"write:{project}/build/out"] is True
    assert got[f"write:{project}/top"] == errno.EROFS
    assert got[f"read:{project}/data.txt"] is True


# ---- [sandbox] read and write ----------------------------------------------------------------


@as_root
async def test_sandbox_read_and_write_paths_are_grants(
    strict_spawner: Spawner, project: Path
) -> None:
    tools, out = private_dir(), private_dir()
    try:
        (tools / "lib.txt").write_text("lib")
        (tools / "lib.txt").chmod(0o600)
        paths = SandboxPaths(read=(str(tools),), write=(str(out),))
        h = probe_hook(
            project,
            f"read:{tools}/lib.txt",
            f"write:{tools}/x",
            f"write:{out}/result",
            f"write:{project}/x",
            paths=paths,
        )
        got = said(await run(strict_spawner, h))
        assert got == {
            f"read:{tools}/lib.txt": True,
            f"write:{tools}/x": errno.EROFS,
            f"write:{out}/result": True,
            f"write:{project}/x": errno.EROFS,
        }
        assert (out / "result").read_text() == "written"
    finally:
        shutil.rmtree(tools)
        shutil.rmtree(out)


@as_root
async def test_a_write_grant_below_a_0700_directory_in_a_bound_read_path_is_reached(
    strict_spawner: Spawner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read path that is bound, not attached (it holds the state directory: never mapped),
    # under a 0700 ancestor (`/tmp/pytest-of-root`), and a write grant below a 0700 directory
    # in it. The cover on the first ancestor held the bound path, whose own 0700 directory
    # on the way was then the host's, closed to the hook: EACCES. So was a tool server's
    # install step, its cache in a state directory inside its project, made 0700.
    outer = private_dir()
    try:
        tools = outer / "tools"
        (tools / "inner" / "out").mkdir(parents=True)
        tools.chmod(0o755)
        (tools / "inner").chmod(0o700)
        monkeypatch.setenv("XDG_STATE_HOME", str(tools / ".state"))
        paths = SandboxPaths(read=(str(tools),), write=(str(tools / "inner" / "out"),))
        h = probe_hook(tools, f"write:{tools}/inner/out/result", f"list:{outer}", paths=paths)
        got = said(await run(strict_spawner, h))
        assert got == {f"write:{tools}/inner/out/result": True, f"list:{outer}": errno.EACCES}
        assert (tools / "inner" / "out" / "result").read_text() == "written"
    finally:
        shutil.rmtree(outer)


# ---- the plan --------------------------------------------------------------------------------


@attrs.frozen
class _Mechanisms:
    mechanisms: dict[str, bool | str] = attrs.field(
        factory=lambda: dict.fromkeys(
            ("pidns", "mountns", "netns", "landlock", "seccomp", "uid"), True
        )
    )
    #: What bounds memory (`Spawner.memory`): here, no cgroup.
    memory: dict[str, object] = attrs.field(factory=lambda: {"by": "rlimit", "why": "a test"})


def plan(profile: Profile, **kw: Any) -> SandboxPlan:
    _, made = sandbox.plan(profile, _Mechanisms(), scratch="/dev/shm/x", **kw)  # type: ignore[arg-type]
    assert made is not None
    return made


def test_workspace_plans_the_working_directory_writable(tmp_path: Path) -> None:
    cwd = str(tmp_path.resolve())
    strict, workspace = (
        plan(p, dirs=(cwd,), workdir=cwd) for p in (Profile.STRICT, Profile.WORKSPACE)
    )
    assert cwd in strict.read and strict.write == ()
    assert workspace.write == (cwd,) and cwd not in workspace.read
    assert plan(Profile.NET, dirs=(cwd,), workdir=cwd).write == ()


@as_root
def test_the_plan_maps_grants_only(tmp_path: Path) -> None:
    cwd, extra, out = (str((tmp_path / n).resolve()) for n in ("cwd", "extra", "out"))
    paths = SandboxPaths(read=(extra, "/etc/ssl"), write=(out,))
    made = plan(Profile.STRICT, dirs=(cwd,), workdir=cwd, paths=paths)
    assert set(made.mapped) == {cwd, extra, out}  # not the system, the Python, /etc/ssl
    assert {extra, "/etc/ssl"} <= set(made.read) and made.write == (out,)
    # A directory the operator did not grant (a service client's cwd) is read, not mapped.
    assert set(plan(Profile.STRICT, dirs=(cwd,), granted=()).mapped) == set()


def test_what_is_never_mapped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert sandbox.mappable("/") is not None
    for path in ("/etc", "/usr/local/lib", "/var", "/run/user/0", "/proc/1"):
        assert sandbox.mappable(path) is not None, path
    assert "home" in (sandbox.mappable(str(home)) or "")
    assert "home" in (sandbox.mappable(str(tmp_path)) or "")  # it holds the home
    assert "state" in (sandbox.mappable(str(tmp_path / "state")) or "")
    assert sandbox.mappable(str(home / "project")) is None
    assert sandbox.mappable("/var/lib/project") is None
    assert sandbox.mappable("/opt/tools") is None


@as_root
async def test_a_writable_root_beside_a_mapped_grant_starts(
    strict_spawner: Spawner, project: Path
) -> None:
    """`[sandbox] write = ["/"]` with a 0700 project (its owner mapped onto the hook's):
    the mapping's user namespace is made before `/` is attached over the view's root (after
    it the kernel refuses one, EPERM), so the hook starts, rather than failing with
    "cannot prepare the filesystem view: [Errno 0] user namespace for an idmapped mount"."""
    h = probe_hook(
        project,
        f"read:{project}/data.txt",
        f"write:{project}/x",
        paths=SandboxPaths(write=("/",)),
    )
    got = said(await run(strict_spawner, h))
    assert got == {f"read:{project}/data.txt": True, f"write:{project}/x": errno.EROFS}


# ---- programs the profile cannot see ---------------------------------------------------------


def executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def seen_plan(*read: Path) -> SandboxPlan:
    return SandboxPlan(
        read=(*sandbox.SYSTEM_DIRS, *(str(p) for p in read)), scratch="/x", scratch_bytes=1
    )


def refusal(argv0: str, cwd: Path, path: str, visible: SandboxPlan) -> str:
    with pytest.raises(programs.ProgramHidden) as caught:
        programs.check_program(
            argv0, cwd=str(cwd), env={"PATH": path}, plan=visible, profile=Profile.STRICT
        )
    assert isinstance(caught.value, SandboxUnavailable)  # refused before the spawn
    return str(caught.value)


def test_a_program_found_on_path_outside_the_profile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    tool = executable(tmp_path / ".pyenv" / "versions" / "3.11.7" / "bin" / "pytest")
    message = refusal("pytest", tmp_path, f"{tool.parent}:/usr/bin", seen_plan())
    assert message == (
        f'cannot run "pytest": it resolves to {tool}, which the strict sandbox cannot see;'
        f' add [sandbox] read = ["{tmp_path}/.pyenv"] to admit it'
    )


def test_a_program_in_a_denied_directory_is_not_offered_a_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook script kept in the user's mcpx-hooks config directory: no `[sandbox] read`
    admits it (the directory is never granted), so the refusal says that instead of naming
    a grant that, once added, would only turn it into "No such file or directory"."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    own = tmp_path / ".config" / "mcpx-hooks"
    tool = executable(own / "check.sh")
    expected = (
        f'cannot run "./check.sh": it resolves to {tool}, in {own}, which no sandbox but'
        " none reaches, whatever [sandbox] read says; keep it beside the project or in a"
        " directory of its own"
    )
    assert refusal("./check.sh", own, "/usr/bin", seen_plan()) == expected
    granted = attrs.evolve(seen_plan(tmp_path / ".config"), deny=(str(own),))
    assert refusal("./check.sh", own, "/usr/bin", granted) == expected


def test_a_symlink_is_followed_to_the_file_it_names(tmp_path: Path) -> None:
    real = executable(tmp_path / "hidden" / "opt" / "tool")
    shown = tmp_path / "shown" / "bin"
    shown.mkdir(parents=True)
    (shown / "tool").symlink_to(real)
    message = refusal("tool", tmp_path, str(shown), seen_plan(shown))
    assert f"it resolves to {real}, which" in message


def test_a_scripts_interpreter_must_be_visible_too(tmp_path: Path) -> None:
    python = executable(tmp_path / "hidden" / "python3")
    shim = executable(tmp_path / "bin" / "pytest", f"#!{python} -u\nimport pytest\n")
    message = refusal("pytest", tmp_path, str(shim.parent), seen_plan(shim.parent))
    assert f"it resolves to {shim}, a script run by {python}, which the strict" in message
    # `#!/usr/bin/env NAME`: NAME as PATH finds it.
    env_shim = executable(tmp_path / "bin" / "tool", "#!/usr/bin/env -S python3 -u\n")
    hidden_path = f"{env_shim.parent}:{python.parent}:/usr/bin"
    assert f"a script run by {python}," in refusal(
        "tool", tmp_path, hidden_path, seen_plan(env_shim.parent)
    )


def test_a_visible_program_or_none_found_passes(tmp_path: Path) -> None:
    shown = executable(tmp_path / "bin" / "tool", "#!/bin/sh\necho\n")
    visible = seen_plan(shown.parent)
    for argv0, path in (("tool", str(shown.parent)), ("sh", "/usr/bin:/bin"), ("nothere", "")):
        programs.check_program(
            argv0, cwd=str(tmp_path), env={"PATH": path}, plan=visible, profile=Profile.STRICT
        )
    programs.check_program(  # `none`: no plan, nothing to check
        "anything", cwd="/", env={}, plan=None, profile=Profile.NONE
    )


def test_a_program_s_head_is_read_once_per_version_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hook's check read the `#!` line (and an ELF's loader) of its program anew: 500
    hooks running `./check.sh` opened it 500 times. Read once per version of the file (its
    device, inode, size, mtime); a file rewritten since is read again."""
    import builtins

    shown = executable(tmp_path / "bin" / "check.sh", "#!/bin/sh\necho\n")
    opened: list[str] = []
    real_open = builtins.open

    def counting(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    denying = attrs.evolve(seen_plan(shown.parent), denied_by=(("/nowhere", "/nowhere", ""),))
    for _ in range(3):
        programs.check_program(
            "./bin/check.sh", cwd=str(tmp_path), env={}, plan=denying, profile=Profile.STRICT
        )
    assert opened.count(str(shown)) == 1
    shown.write_text("#!/bin/sh\necho changed, and longer\n")
    programs.check_program(
        "./bin/check.sh", cwd=str(tmp_path), env={}, plan=denying, profile=Profile.STRICT
    )
    assert opened.count(str(shown)) == 2


def test_admitting_names_a_folder_of_the_home_or_two_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert programs.admitting(f"{tmp_path}/.cargo/bin/rg") == f"{tmp_path}/.cargo"
    assert programs.admitting("/opt/tools/bin/x") == "/opt/tools"
    assert programs.admitting("/srv/x") == "/srv"


async def test_a_hidden_program_fails_the_hook_before_the_spawn(
    strict_spawner: Spawner, project: Path, tmp_path: Path
) -> None:
    tool = executable(tmp_path / "bin" / "tool", "#!/bin/sh\necho '{}'\n")
    h = probe_hook(project, target=("tool",), env={"PATH": f"{tool.parent}:/usr/bin:/bin"})
    frame = (await run(strict_spawner, h)).frame
    assert frame.status is HookStatus.FAILED and frame.exit_code is None, to_json(frame)
    assert f'cannot run "tool": it resolves to {tool}' in (frame.reason or "")
    assert "[sandbox] read = [" in (frame.reason or "")


async def test_a_hook_run_in_a_directory_no_sandbox_reaches_fails_saying_so(
    strict_spawner: Spawner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook declared in the user's own config file (~/.config/mcpx-hooks/config.toml)
    with no `cwd` runs in that directory, which is never granted: it failed with "cannot
    use cwd '...': No such file or directory", of a directory that is there. Now it fails
    before the spawn, naming the directory and what to do."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    own = tmp_path / ".config" / "mcpx-hooks"
    own.mkdir(parents=True)
    frame = (await run(strict_spawner, probe_hook(own))).frame
    assert frame.status is HookStatus.FAILED and frame.exit_code is None, to_json(frame)
    assert frame.reason == (
        f'cannot run "{PY}" in {own}: the working directory lies in {own}, which no sandbox'
        " but none reaches; choose another one (a hook's is its cwd, else the directory of"
        " the file that declares it)"
    )


# ---- who grants what -------------------------------------------------------------------------


def test_per_call_hooks_are_granted_only_within_a_granted_run_cwd(tmp_path: Path) -> None:
    from mcpx_hooks.supervisor.run.hookframe import granted

    run_cwd = str(tmp_path.resolve())
    ctx = attrs.evolve(CTX, run=RunInfo("r", ("job",), run_cwd, "2026-01-01T00:00:00Z"))
    per_call = Provenance(SourceKind.PER_CALL, None, 0)
    inside = probe_hook(tmp_path, source=per_call, cwd=f"{run_cwd}/sub")
    outside = probe_hook(tmp_path, source=per_call, cwd="/root/.ssh")
    assert granted(inside, ctx) == (run_cwd, f"{run_cwd}/sub")
    assert granted(outside, ctx) == (run_cwd,)  # a cwd of its own elsewhere is not
    assert granted(inside, attrs.evolve(ctx, cwd_granted=False)) == ()
    from_a_file = probe_hook(tmp_path, cwd="/elsewhere")  # the operator's: all granted
    assert granted(from_a_file, attrs.evolve(ctx, cwd_granted=False)) == (
        str(tmp_path),
        "/elsewhere",
    )


def test_real_path_is_realpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's resolution asks the kernel where a path exists; it must say what
    `os.path.realpath` says, for links, relative paths, `..` after a link, and paths that
    are not there (where it is `os.path.realpath` itself)."""
    (tmp_path / "real" / "deep").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real" / "deep")
    (tmp_path / "chain").symlink_to("link")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    monkeypatch.chdir(tmp_path)
    for path in (
        str(tmp_path / "real"), str(tmp_path / "file"), str(tmp_path / "link"),
        str(tmp_path / "chain"), str(tmp_path / "chain" / ".."), "chain/../deep/..", "file",
        str(tmp_path / "dangling"), str(tmp_path / "missing" / "below"), "/", "/bin/true",
    ):  # fmt: skip
        assert sandbox.real_path(path) == os.path.realpath(path), path
