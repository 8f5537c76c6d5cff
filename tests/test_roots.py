"""Grants by the operator's word only: a service request's `cwd` must lie inside the
server's roots, and what is never granted stays out of every sandbox.

Each test runs a real `mcpx-hooks serve` (tests/service_client.py) with a home of its own
(`HOME` a temporary directory holding the operator's config and credentials), as root and,
under `.ci/unprivileged`, as `nobody`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import require_rootless
from service_client import Server, Stream, arun, run_remote, start_server

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.errors import ConfigError
from mcpx_hooks.supervisor.service import roots
from mcpx_hooks.supervisor.service.wire import WireError

BAD_REQUEST = 4400


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The operator's home: their mcpx-hooks config (a hook of their own) and an SSH key."""
    home = tmp_path / "home"
    config = home / ".config" / "mcpx-hooks"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[service]\nsandboxes = ["strict", "workspace"]\n')
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "id_rsa").write_text("PRIVATE KEY\n")
    (ssh / "id_rsa").chmod(0o600)
    return home


def _env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        # The operator's own config is read, as a real `serve` reads it.
        "MCPX_HOOKS_NO_DISCOVERY": "0",
    }


@pytest.fixture
def serve_in(tmp_path: Path, home: Path) -> Iterator[Any]:
    """Starts `serve` in a directory (`/`, the home, a project) with `home` as its HOME; every
    server started is stopped (and its processes gone) after the test."""
    started: list[Server] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(where: Path, *args: str) -> Server:
        server = start_server(logs, *args, env=_env(home), run_in=where)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            assert server.stop() == 0, server.log()


def _refused(stream: Stream) -> str:
    """The refusal's message, once it is a 4400 with no run started."""
    assert stream.code == BAD_REQUEST, (stream.code, stream.objects)
    assert stream.frames == [], stream.frames
    return " ".join(e["message"] for e in stream.errors)


def _output(stream: Stream) -> str:
    """The run's stdout, one line per frame."""
    return "\n".join(f["text"] for f in stream.frames if f["type"] == "stdout")


# ---- the roots -------------------------------------------------------------------------------


def test_a_cwd_in_the_operators_config_dir_is_refused_naming_the_roots(
    tmp_path: Path, home: Path, serve_in: Any
) -> None:
    """The repro: `serve` in a project of the home; a workspace run asking for
    `cwd = ~/.config/mcpx-hooks` to rewrite the operator's config is refused (4400), the
    message naming the roots and how to add one, and nothing is written."""
    project = home / "project"
    project.mkdir()
    server = serve_in(project)
    config = home / ".config" / "mcpx-hooks"
    before = (config / "config.toml").read_text()
    plant = 'printf \'[[hooks]]\\non="script"\\nsandbox="none"\\n\' >> config.toml'
    for cwd in (config, home / ".ssh", home, tmp_path):
        stream = arun(run_remote(server, {"argv": ["sh", "-c", plant], "cwd": str(cwd)}))
        message = _refused(stream)
        assert f"{cwd} is not inside a root of this server ({project})" in message, message
        assert "[service] roots" in message, message
    assert (config / "config.toml").read_text() == before
    assert not (home / ".ssh" / "config.toml").exists()


def test_a_cwd_reached_through_a_symlink_is_judged_where_it_leads(
    home: Path, serve_in: Any
) -> None:
    project = home / "project"
    project.mkdir()
    (project / "keys").symlink_to(home / ".ssh")
    server = serve_in(project)
    stream = arun(run_remote(server, {"argv": ["true"], "cwd": str(project / "keys")}))
    assert f"({home / '.ssh'}) is not inside a root" in _refused(stream)


@pytest.mark.parametrize("where", ["root", "home"])
def test_served_from_the_root_or_the_home_there_is_no_default_root(
    home: Path, serve_in: Any, where: str
) -> None:
    """Started in `/` or in the home with no roots configured: a request naming no `cwd`
    runs in an empty directory of its own (removed afterwards), one naming a `cwd` is
    refused, even the directory `serve` runs in."""
    require_rootless()
    started_in = Path("/") if where == "root" else home
    server = serve_in(started_in)
    script = "pwd; ls -A; echo made > here.txt; cat here.txt"
    stream = arun(run_remote(server, {"argv": ["sh", "-c", script]}))
    assert stream.code == 1000, stream.objects
    assert stream.frames[-2]["type"] == "result", stream.frames
    cwd, *rest = _output(stream).splitlines()
    assert rest == ["made"], rest  # empty before the run wrote its file
    assert cwd not in (str(started_in), str(home)), cwd
    again = arun(run_remote(server, {"argv": ["pwd"]}))
    assert _output(again).strip() != cwd  # one of its own per run
    for cwd_asked in (started_in, home / "project-not-there", home / ".ssh"):
        refused = arun(run_remote(server, {"argv": ["true"], "cwd": str(cwd_asked)}))
        message = _refused(refused)
        if cwd_asked.is_dir():
            assert "it has none ([service] roots is not set" in message, message
            assert "[service] roots = [" in message, message
        else:
            assert "no such directory" in message, message
    assert server.stop() == 0
    assert not Path(cwd).exists(), "the run's own directory outlived it"


def test_configured_roots_admit_a_cwd_inside_them(
    tmp_path: Path, home: Path, serve_in: Any
) -> None:
    """`[service] roots` (a `~` path, resolved): a cwd inside one runs there; a request
    without cwd runs in the first; the default (where serve started) is then no root."""
    require_rootless()
    (home / "work" / "sub").mkdir(parents=True)
    (home / "other").mkdir()
    user_config = home / ".config" / "mcpx-hooks" / "config.toml"
    user_config.write_text('[service]\nroots = ["~/work", "~/other"]\n')
    server = serve_in(home)
    inside = arun(run_remote(server, {"argv": ["pwd"], "cwd": str(home / "work" / "sub")}))
    assert _output(inside).strip() == str((home / "work" / "sub").resolve()), inside.objects
    default = arun(run_remote(server, {"argv": ["pwd"]}))
    assert _output(default).strip() == str((home / "work").resolve()), default.objects
    outside = arun(run_remote(server, {"argv": ["pwd"], "cwd": str(tmp_path)}))
    shown = f"{(home / 'work').resolve()}, {(home / 'other').resolve()}"
    assert f"not inside a root of this server ({shown})" in _refused(outside)


# ---- the pure parts --------------------------------------------------------------------------


def test_the_default_root_is_never_the_root_the_home_or_its_ancestors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "a" / "home"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for where in ("/", str(home), str(home.parent), str(tmp_path)):
        assert roots.default_roots(where) == (), where
    assert roots.default_roots(str(home / "project")) == (str(home / "project"),)
    elsewhere = tmp_path / "b"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(home)
    assert roots.default_roots(str(elsewhere)) == (str(elsewhere),)
    assert roots.default_roots(str(tmp_path / "link")) == ()  # symlinks resolved


def test_a_cwd_is_admitted_only_inside_a_root(tmp_path: Path) -> None:
    (tmp_path / "root" / "sub").mkdir(parents=True)
    (tmp_path / "root-other").mkdir()
    root = str(tmp_path / "root")
    assert roots.admit_cwd(f"{root}/sub", (root,)) == (f"{root}/sub", False)
    assert roots.admit_cwd(None, (root,)) == (root, False)
    for outside in (str(tmp_path), str(tmp_path / "root-other"), f"{root}/sub/.."):
        if os.path.realpath(outside) == root:
            continue
        with pytest.raises(WireError) as refused:
            roots.admit_cwd(outside, (root,))
        assert refused.value.code == BAD_REQUEST
    made, is_made = roots.admit_cwd(None, ())
    try:
        assert is_made and os.listdir(made) == []
    finally:
        trio.run(roots.remove_made, made)


def test_a_made_cwd_a_killed_server_left_is_removed_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server killed outright (SIGKILL, the OOM killer) during a run without a cwd left the
    # directory made for it in the temporary directory, with what the run wrote there, for
    # good: nothing removed it, a restarted server neither.
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    code = (
        "import sys, time\n"
        "from mcpx_hooks.supervisor.service import roots\n"
        "made, _ = roots.admit_cwd(None, ())\n"
        "open(made + '/written', 'w').close()\n"
        "print(made, flush=True)\n"
        "time.sleep(300)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    lives = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert killed.stdout is not None and lives.stdout is not None
        left = killed.stdout.readline().decode().strip()
        held = lives.stdout.readline().decode().strip()
        killed.kill()
        killed.wait()
        assert os.path.exists(f"{left}/written")
        made, _ = roots.admit_cwd(None, ())
        assert not os.path.exists(left), "the killed server's directory is still there"
        assert os.path.exists(f"{held}/written"), "a living server's directory was removed"
        trio.run(roots.remove_made, made)
    finally:
        for process in (killed, lives):
            process.kill()
            process.wait()
            assert process.stdout is not None
            process.stdout.close()
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(held), f".{os.path.basename(held)}.lock"]
    )


def test_roots_are_validated_with_file_and_pointer(tmp_path: Path) -> None:
    (tmp_path / "there").mkdir()
    config = tmp_path / "c.toml"
    config.write_text('[service]\nroots = ["there", "missing"]\n')
    with pytest.raises(ConfigError) as bad:
        load_config([config], cwd=tmp_path, environ=os.environ, discover=False)
    shown = [str(p) for p in bad.value.problems]
    assert any(str(config) in p and "/service/roots/1" in p for p in shown), shown
    config.write_text('[service]\nroots = ["there"]\n')
    loaded = load_config([config], cwd=tmp_path, environ=os.environ, discover=False)
    assert loaded.service_roots == (str(tmp_path / "there"),)
    assert json.dumps(loaded.service_roots)


# ---- what is never granted -------------------------------------------------------------------

#: A script that tries each path: a line per read or write that got through.
PROBE = r"""
for p in "$@"; do
  if [ -d "$p" ]; then
    [ -n "$(ls -A "$p" 2>/dev/null)" ] && echo "LISTED $p"
    (echo planted > "$p/planted") 2>/dev/null && echo "WROTE $p/planted"
  else
    cat "$p" 2>/dev/null | grep -q . && echo "READ $p"
    (echo planted >> "$p") 2>/dev/null && echo "WROTE $p"
  fi
  (mv "$p" "$p.moved") 2>/dev/null && echo "MOVED $p"
done
echo done
"""


def _open_up(home: Path) -> None:
    """Mode bits that let anyone in: what keeps a run out is the sandbox, not them."""
    for path in (home, *home.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o777 if path.is_dir() else 0o666)


@pytest.fixture
def denied_home(home: Path) -> dict[str, Path]:
    """A home with the operator's files a run must not reach, and a project (a git
    repository with its own config) in it; every mode bit open."""
    state = home / ".local" / "state" / "mcpx-hooks"
    state.mkdir(parents=True)
    (state / "token").write_text("TOKEN\n")
    (state / "trust.json").write_text("{}\n")
    (home / ".netrc").write_text("machine x password SECRET\n")
    (home / "secrets").mkdir()
    (home / "secrets" / "key").write_text("SECRET\n")
    project = home / "project"
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n")
    (project / ".mcpx-hooks.toml").write_text("")
    (project / "keys").symlink_to(home / ".ssh")  # a way round by a link
    config = home / ".config" / "mcpx-hooks" / "config.toml"
    config.write_text('[service]\nroots = ["~"]\n[sandbox]\ndeny = ["~/secrets"]\n')
    _open_up(home)
    return {"home": home, "project": project, "state": state, "config": config}


def _denied_paths(home: Path) -> list[str]:
    return [
        str(home / ".ssh" / "id_rsa"),
        str(home / ".ssh"),
        str(home / ".netrc"),
        str(home / "secrets" / "key"),
        str(home / ".config" / "mcpx-hooks" / "config.toml"),
        str(home / ".config" / "mcpx-hooks"),
        str(home / ".local" / "state" / "mcpx-hooks" / "token"),
        str(home / ".local" / "state" / "mcpx-hooks" / "history.db"),
        str(home / ".local" / "state" / "mcpx-hooks"),
        str(home / "project" / "keys" / "id_rsa"),  # through a link
        str(home / "project" / ".." / ".ssh" / "id_rsa"),  # another way there
    ]


def _contents(home: Path) -> dict[str, bytes]:
    """Every file of the home but the project's, and but the run history, which the
    supervisor itself writes as the runs go (that a run cannot reach it is `PROBE`'s)."""
    return {
        str(p): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file()
        and not p.is_symlink()
        and "project" not in p.parts
        and not p.name.startswith("history.db")
    }


def test_inside_a_root_a_run_reaches_nothing_never_granted(
    denied_home: dict[str, Path], serve_in: Any
) -> None:
    """The home is a root (the operator said so); a workspace run in it, and one in the
    project, still cannot read or write the credential stores, `[sandbox] deny`, the
    supervisor's config and state (its token), directly or through a link."""
    require_rootless()
    home = denied_home["home"]
    # The supervisor's own start keeps the config's compiled schema check in its state
    # directory (`config/schemacache.py`): made here first, so it is in the snapshot too.
    subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", "validate", str(denied_home["config"])],
        env={**os.environ, **_env(home)},
        check=True,
        capture_output=True,
    )
    before = _contents(home)
    server = serve_in(home)
    for cwd in (home, denied_home["project"]):
        request = {"argv": ["sh", "-c", PROBE, "probe", *_denied_paths(home)], "cwd": str(cwd)}
        stream = arun(run_remote(server, request))
        assert stream.code == 1000, stream.objects
        assert _output(stream).splitlines() == ["done"], (cwd, _output(stream))
    assert _contents(home) == before
    assert not list(home.rglob("planted"))


def test_a_strict_hook_reaches_nothing_never_granted(
    denied_home: dict[str, Path], serve_in: Any
) -> None:
    """A per-call strict hook declaring in the home (a root) cannot read what is never
    granted either: it exits 0 only if nothing got through."""
    require_rootless()
    home = denied_home["home"]
    server = serve_in(home)
    probe = PROBE.replace("echo done", "") + " exit 0"
    hook = {
        "on": "script",
        "phase": "before",
        "sandbox": "strict",
        "run": ["sh", "-c", f'out=$( ( {probe} ) ); [ -z "$out" ] || exit 3', "probe",
                *_denied_paths(home)],
    }  # fmt: skip
    stream = arun(run_remote(server, {"argv": ["true"], "cwd": str(home), "hooks": [hook]}))
    hooks = [f for f in stream.frames if f["type"] == "hook"]
    assert [(f["status"], f.get("exitCode")) for f in hooks] == [("ok", 0)], hooks
    # The same hook where nothing is denied reads (the probe can fail).
    open_file = home / "open.txt"
    open_file.write_text("readable\n")
    hook["run"] = [*hook["run"][:3], "probe", str(open_file)]
    seen = arun(run_remote(server, {"argv": ["true"], "cwd": str(home), "hooks": [hook]}))
    hooks = [f for f in seen.frames if f["type"] == "hook"]
    assert [f.get("exitCode") for f in hooks] == [3], hooks


def test_in_a_writable_project_its_git_hooks_and_config_stay_read_only(
    denied_home: dict[str, Path], serve_in: Any
) -> None:
    """A workspace run writes its project, but not `.git/hooks`, `.git/config` or the
    project's `.mcpx-hooks.toml`: nothing a person or the supervisor runs later."""
    require_rootless()
    project = denied_home["project"]
    server = serve_in(denied_home["home"])
    script = (
        "echo built > out.txt && echo WROTE-OUT;"
        " (echo 'rm -rf ~' > .git/hooks/pre-commit) 2>/dev/null && echo WROTE-HOOK;"
        " (printf '[core]\\nhooksPath=/tmp\\n' >> .git/config) 2>/dev/null && echo WROTE-CONFIG;"
        " (echo '[[hooks]]' >> .mcpx-hooks.toml) 2>/dev/null && echo WROTE-PROJECT;"
        " (mv .git/hooks .git/old-hooks) 2>/dev/null && echo MOVED-HOOKS;"
        " (rm -f .mcpx-hooks.toml) 2>/dev/null && echo REMOVED-PROJECT;"
        # A new `.git` in place of the old one, with a config of its own (what the next
        # `git status` there would run): the old one cannot be moved away.
        " (mv .git .git-old) 2>/dev/null && echo MOVED-GIT;"
        " echo done"
    )
    stream = arun(run_remote(server, {"argv": ["sh", "-c", script], "cwd": str(project)}))
    assert _output(stream).splitlines() == ["WROTE-OUT", "done"], _output(stream)
    assert (project / "out.txt").read_text() == "built\n"
    assert list((project / ".git" / "hooks").iterdir()) == []
    assert (project / ".git" / "config").read_text() == "[core]\n"
    assert (project / ".mcpx-hooks.toml").read_text() == ""
    assert not (project / ".git-old").exists()


def test_doctor_shows_the_roots_and_what_is_never_granted(tmp_path: Path, home: Path) -> None:
    import subprocess
    import sys

    (home / "work").mkdir()
    user_config = home / ".config" / "mcpx-hooks" / "config.toml"
    user_config.write_text('[service]\nroots = ["~/work"]\n[sandbox]\ndeny = ["~/vault"]\n')
    env = {**os.environ, **_env(home)}
    doctor = subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", "doctor"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    lines = doctor.stdout.splitlines()
    at = lines.index("service roots (a request's cwd must lie in one; [service] roots):")
    assert lines[at + 1 : at + 3] == [f"  {(home / 'work').resolve()}", "  ([service] roots)"]
    assert f"  {home / '.ssh'}" in lines, doctor.stdout
    assert f"  {home / 'vault'}  (not here)" in lines, doctor.stdout
    assert f"  {home / '.config' / 'mcpx-hooks'}" in lines, doctor.stdout
    assert "Traceback" not in doctor.stderr


def test_doctor_reads_the_config_it_is_given(tmp_path: Path, home: Path) -> None:
    """`doctor --config F` and `--trust-project` show the roots and denied paths of the
    config a `serve` given the same flags would have, not of the discovered files only; a
    warning about the project file is said once."""
    import subprocess
    import sys

    (home / "work").mkdir()
    given = tmp_path / "given.toml"
    given.write_text('[service]\nroots = ["~/work"]\n[sandbox]\ndeny = ["~/vault"]\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text('[sandbox]\ndeny = ["~/project-vault"]\n')
    env = {**os.environ, **_env(home)}

    def doctor(*flags: str) -> tuple[list[str], str]:
        done = subprocess.run(
            [sys.executable, "-m", "mcpx_hooks.supervisor", "doctor", *flags],
            cwd=project, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in done.stderr
        return done.stdout.splitlines(), done.stderr

    lines, said = doctor("--config", str(given))
    at = lines.index("service roots (a request's cwd must lie in one; [service] roots):")
    assert lines[at + 1 : at + 3] == [f"  {(home / 'work').resolve()}", "  ([service] roots)"]
    assert f"  {home / 'vault'}  (not here)" in lines, lines
    assert f"  {home / 'project-vault'}  (not here)" not in lines, lines
    assert said.count("skipped") == 1, said
    lines, _ = doctor("--trust-project")
    assert f"  {home / 'project-vault'}  (not here)" in lines, lines


def test_doctor_names_a_grant_that_lies_in_a_never_granted_path(tmp_path: Path, home: Path) -> None:
    """A grant under `~/.ssh` is given to no sandbox: a run says nothing of it, doctor does."""
    import subprocess
    import sys

    (home / ".ssh" / "sub").mkdir(parents=True)
    given = tmp_path / "given.toml"
    given.write_text('[sandbox]\nwrite = ["~/.ssh/sub"]\nread = ["~/work"]\n')
    (home / "work").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", "doctor", "--config", str(given)],
        cwd=tmp_path, env={**os.environ, **_env(home)}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    at = lines.index("grants never given (each lies in a path above, which no grant opens):")
    assert lines[at + 1 :] == [f"  [sandbox] write {home / '.ssh' / 'sub'}: inside {home / '.ssh'}"]


def test_a_local_exec_run_reaches_nothing_never_granted(denied_home: dict[str, Path]) -> None:
    """Not only the service: `exec` in the project (its cwd granted and writable) cannot
    read the home's credentials or the supervisor's state, nor write the project's git
    hooks; a hook given with `--hook` (strict, declaring in the project) cannot either."""
    import subprocess
    import sys

    require_rootless()
    home, project = denied_home["home"], denied_home["project"]
    env = {**os.environ, **_env(home)}
    probe = [
        *_denied_paths(home),
        str(project / ".git" / "hooks"),
        str(project / ".git" / "config"),
    ]
    hook = json.dumps({
        "on": "script", "phase": "before", "sandbox": "strict",
        "run": ["sh", "-c", f'out=$( ( {PROBE} ) ); [ "$out" = done ] || exit 3', "probe",
                *_denied_paths(home)],
    })  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--hook", hook,
         "--sandbox", "workspace", "--", "sh", "-c", PROBE, "probe", *probe],
        cwd=project, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    said = [f["text"] for f in frames if f["type"] == "stdout"]
    readable = f"READ {project / '.git' / 'config'}"  # read-only, not hidden
    assert [line for line in said if line != readable] == ["done"], (said, done.stderr)
    hooks = [(f["status"], f.get("exitCode")) for f in frames if f["type"] == "hook"]
    assert hooks == [("ok", 0)], frames
    assert not list(home.rglob("planted"))


def test_the_servers_config_file_and_token_file_in_a_root_stay_out_of_reach(
    tmp_path: Path, home: Path
) -> None:
    """A `--config` file and a `--token-file` that lie in the server's own root: a run can
    read the config file but not change it (the server loads it again for per-call hooks),
    and cannot read the token at all."""
    require_rootless()
    project = tmp_path / "project"
    project.mkdir()
    (project / "server.toml").write_text('[service]\nsandboxes = ["strict", "workspace"]\n')
    _open_up(project)
    server = start_server(project, "--config", "server.toml", env=_env(home))
    try:
        token = project / "token"
        script = (
            f"cat {token} 2>/dev/null | grep -q . && echo READ-TOKEN;"
            " (echo '[[hooks]]' >> server.toml) 2>/dev/null && echo WROTE-CONFIG;"
            " grep -q sandboxes server.toml && echo READ-CONFIG; echo done"
        )
        stream = arun(run_remote(server, {"argv": ["sh", "-c", script]}))
        assert _output(stream).splitlines() == ["READ-CONFIG", "done"], stream.objects
    finally:
        assert server.stop() == 0
    assert "[[hooks]]" not in (project / "server.toml").read_text()


def test_the_plan_drops_grants_inside_a_denied_path_and_protects_what_runs_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpx_hooks.supervisor.process import denied

    home = tmp_path / "home"
    (home / ".ssh" / "sub").mkdir(parents=True)
    (home / "vault").mkdir()
    work = home / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text("")
    (work / ".mcpx-hooks.json").write_text("{}")
    worktree = home / "worktree"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: ../work/.git\n")  # a file: all of it read-only
    served = work / "server.toml"
    served.write_text("")
    monkeypatch.setenv("HOME", str(home))
    read = [str(home), str(home / ".ssh" / "sub")]
    write = [str(work), str(worktree), str(home / "vault")]
    with denied.own_files([str(served)]):
        kept_read, kept_write, cover, read_only = denied.deny_and_protect(
            read, write, [str(home / "vault")]
        )
    assert kept_read == [str(home)]  # a grant inside ~/.ssh is dropped
    assert kept_write == [str(work), str(worktree)]  # and one that is denied
    assert str(home / ".ssh") in cover and str(home / "vault") in cover  # beneath ~, read
    assert str(home / ".gnupg") not in cover  # not there: nothing to cover
    assert read_only == (
        str(work / ".git" / "hooks"),
        str(work / ".git" / "config"),
        str(work / ".mcpx-hooks.json"),
        str(worktree / ".git"),
        str(served),
    )
    # Outside `own_files`, the config file is the project's like any other file.
    assert str(served) not in denied.deny_and_protect(read, write, [])[3]


def test_a_link_to_nothing_where_a_read_only_file_belongs_is_no_file_to_bind(
    tmp_path: Path,
) -> None:
    """A loop or a link to nothing named `.mcpx-hooks.toml` is no file to bind read-only
    (binding the loop failed every run there); a `.git/hooks` that is one makes all of
    `.git` read-only, so the script cannot put a directory in the link's place."""
    from mcpx_hooks.supervisor.process import denied

    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "config").write_text("")
    (work / ".git" / "hooks").symlink_to("hooks")  # a loop
    (work / ".mcpx-hooks.toml").symlink_to(".mcpx-hooks.toml")
    (work / ".mcpx-hooks.json").symlink_to("missing.json")
    _, _, _, read_only = denied.deny_and_protect([], [str(work)], [])
    assert read_only == (str(work / ".git"),)


def test_a_git_link_to_a_path_a_script_could_make_refuses_the_sandbox(tmp_path: Path) -> None:
    """`.git/hooks` linked to a directory of the writable grant that does not exist: there
    is nothing to bind, and a script could make it and fill it with hooks git runs later."""
    from mcpx_hooks.supervisor.core.errors import SandboxUnavailable
    from mcpx_hooks.supervisor.process import denied

    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "config").write_text("")
    (work / ".git" / "hooks").symlink_to("../githooks")
    with pytest.raises(SandboxUnavailable, match=r"\.git/hooks is a link to .*githooks"):
        denied.deny_and_protect([], [str(work)], [])
    assert denied.deny_and_protect([str(work)], [], [])[3] == ()  # read only: nothing to make
    (work / "githooks").mkdir()  # made: bound read-only as any hooks directory
    assert str(work / "githooks") in denied.deny_and_protect([], [str(work)], [])[3]


def test_a_per_call_hooks_cwd_outside_the_roots_is_refused(
    tmp_path: Path, home: Path, serve_in: Any
) -> None:
    """A per-call hook's own `cwd` is read (and under workspace written) like the run's:
    outside the roots and the run's cwd it is refused, naming the hook, before anything runs."""
    project = home / "project"
    (project / "sub").mkdir(parents=True)
    (home / "private").mkdir()
    server = serve_in(project)

    def hook(cwd: str) -> dict[str, Any]:
        return {"on": "script", "phase": "before", "run": ["true"], "cwd": cwd}

    bad = hook(str(home / "private"))
    stream = arun(run_remote(server, {"argv": ["true"], "hooks": [hook("sub"), bad]}))
    message = _refused(stream)
    assert f"hooks[1] (script.before.1): cwd {home / 'private'} is not inside" in message
    assert "hooks[0]" not in message, message


def test_a_made_cwd_its_run_left_read_only_is_removed(tmp_path: Path) -> None:
    # As an ordinary user, rmtree could not empty a directory the run had made read-only or
    # unsearchable (a Go module cache is made so): the cwd made for a request stayed behind
    # for good. (Root, whom no mode stops, never saw it.)
    made = tmp_path / "made"
    (made / "pkg" / "mod").mkdir(parents=True)
    (made / "pkg" / "mod" / "go.mod").write_text("module x\n")
    for directory, mode in ((made / "pkg" / "mod", 0o555), (made / "pkg", 0o000), (made, 0o500)):
        directory.chmod(mode)
    trio.run(roots.remove_made, str(made))
    assert not made.exists()
