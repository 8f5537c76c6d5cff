"""Every state file (trust store, prompt cache, schema and code caches, tool servers' package
caches, run history, service token) finds the one state directory the same way, with `HOME`
set, unset or not a path: a file trusted by hand is trusted in a CI job run under `env -i`."""

from __future__ import annotations

import grp
import json
import os
import pwd
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.config import schemacache, statefiles
from mcpx_hooks.supervisor.history.faults import HistoryFault
from mcpx_hooks.supervisor.history.store import default_path
from mcpx_hooks.supervisor.models.promptcache import PromptCache
from mcpx_hooks.supervisor.service.access import default_token_path

PASSWD_HOME = "/home/from-passwd"


def fake_passwd(monkeypatch: pytest.MonkeyPatch, home: str | None) -> None:
    real = pwd.getpwuid(os.getuid())

    def getpwuid(uid: int) -> pwd.struct_passwd:
        if home is None:
            raise KeyError(uid)
        return pwd.struct_passwd((*real[:5], home, real[6]))

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)


def every_directory(environ: Mapping[str, str]) -> set[Path | None]:
    """The directory each state file would be kept in."""
    trust = statefiles.state_path(environ)
    prompts = PromptCache.open(environ)
    schema = schemacache.cache_path("config", environ)
    try:
        history: Path | None = default_path(environ).parent
    except HistoryFault:
        history = None
    token = default_token_path(environ).parent
    return {
        None if trust is None else trust.parent,
        None if prompts is None else prompts.directory.parent,
        None if schema is None else schema.parent,
        history,
        None if token == Path("/nonexistent/.local/state/mcpx-hooks") else token,
    }


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/mcpx-hooks"),
        ({"XDG_STATE_HOME": "rel", "HOME": "/h"}, "/h/.local/state/mcpx-hooks"),
        ({"HOME": "/h"}, "/h/.local/state/mcpx-hooks"),
        ({}, f"{PASSWD_HOME}/.local/state/mcpx-hooks"),
        ({"HOME": ""}, f"{PASSWD_HOME}/.local/state/mcpx-hooks"),
        ({"HOME": "."}, f"{PASSWD_HOME}/.local/state/mcpx-hooks"),
    ],
)
def test_every_state_file_finds_one_directory(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expected: str
) -> None:
    fake_passwd(monkeypatch, PASSWD_HOME)
    assert every_directory(environ) == {Path(expected)}


def test_without_a_home_anywhere_there_is_no_state_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_passwd(monkeypatch, None)
    assert every_directory({}) == {None}
    assert every_directory({"HOME": "relative"}) == {None}


#: The command line with the password database's home for this user replaced by argv[1].
UNDER_PASSWD_HOME = """
import os, pwd, sys
real = pwd.getpwuid(os.getuid())
home = sys.argv.pop(1)
pwd.getpwuid = lambda uid: pwd.struct_passwd((*real[:5], home, real[6]))
from mcpx_hooks.supervisor.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

PROJECT = """
[[hooks]]
name = "say"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; echo '{\\"advise\\": \\"project hook ran\\"}'"]
sandbox = "none"
"""


def command_line(*args: str, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`mcpx-hooks ARGS` run in `cwd` with exactly `env`."""
    return subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", *args],
        cwd=cwd, env=dict(env), capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_a_file_trusted_with_home_is_trusted_under_env_i(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text(PROJECT)
    bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def mcpx(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", UNDER_PASSWD_HOME, str(home), *args]
        return subprocess.run(
            argv, cwd=project, env=env, capture_output=True, text=True, check=False, timeout=60
        )

    trusted = mcpx("trust", ".mcpx-hooks.toml", env={**bare, "HOME": str(home)})
    assert trusted.returncode == 0, trusted.stderr
    assert (home / ".local" / "state" / "mcpx-hooks" / "trust.json").is_file()
    listed = mcpx("trust", "--list", env=bare)  # `env -i`: no HOME at all
    assert listed.returncode == 0, listed.stderr
    assert str(project / ".mcpx-hooks.toml") in listed.stdout
    checked = mcpx("validate", env=bare)
    assert checked.returncode == 0, checked.stderr
    assert "not trusted" not in checked.stderr


def test_a_file_where_the_state_directory_belongs_is_said_so(tmp_path: Path) -> None:
    # `trust` said "cannot open the trust state in …: File exists", and a run's history
    # warning the same: what mkdir says of a file already there, not what is wrong.
    state = tmp_path / "state"
    state.mkdir()
    (state / "mcpx-hooks").write_text("mine\n")
    (tmp_path / ".mcpx-hooks.toml").write_text(PROJECT)
    env = {**os.environ, "XDG_STATE_HOME": str(state), "MCPX_HOOKS_NO_DISCOVERY": "1"}

    def mcpx(*args: str) -> subprocess.CompletedProcess[str]:
        return command_line(*args, cwd=tmp_path, env=env)

    trusted = mcpx("trust", ".mcpx-hooks.toml")
    assert trusted.returncode == 1
    assert trusted.stderr == (
        f"mcpx-hooks trust: cannot open the trust state in {state}/mcpx-hooks: it is not a"
        " directory\n"
    )
    ran = mcpx("exec", "--sandbox", "none", "--", "true")
    assert ran.returncode == 0
    assert f"history {state}/mcpx-hooks/history.db: it is not a directory)" in ran.stdout
    served = mcpx("serve", "--port", "0", "--new-token")  # (a token is written before the bind)
    assert served.returncode == 2
    assert served.stderr.endswith("/mcpx-hooks/token: it is not a directory\n")
    assert (state / "mcpx-hooks").read_text() == "mine\n"


USER_CONFIG = """
[[hooks]]
name = "org-gate"
on = "script"
phase = "before"
run = ["true"]
locked = true
"""


def test_the_user_config_applies_under_env_i(tmp_path: Path) -> None:
    # The user's own config.toml (a ceiling, a locked gate) was looked for only under an
    # absolute HOME: in a job run with `env -i` it did not apply, while the state files
    # were found in the password database's home.
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".config" / "mcpx-hooks").mkdir(parents=True)
    (home / ".config" / "mcpx-hooks" / "config.toml").write_text(USER_CONFIG)
    (project / ".config" / "mcpx-hooks").mkdir(parents=True)  # (HOME=. must not name it)
    (project / ".config" / "mcpx-hooks" / "config.toml").write_text("[autonomy]\nmax = 1\n")
    for env in ({}, {"HOME": "."}, {"HOME": str(home)}):
        argv = [sys.executable, "-c", UNDER_PASSWD_HOME, str(home), "hooks", "list", "--json"]
        listed = subprocess.run(
            argv, cwd=project, capture_output=True, text=True, check=False, timeout=60,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        )  # fmt: skip
        assert listed.returncode == 0, (env, listed.stderr)
        assert [h["name"] for h in json.loads(listed.stdout)] == ["org-gate"], env


def test_a_state_directory_inside_the_checkout_trusts_none_of_it_and_runs_no_code_from_it(
    tmp_path: Path,
) -> None:
    # A CI job with `XDG_STATE_HOME=$PWD/.state`, and a repository that ships
    # `.state/mcpx-hooks/trust.json` naming its own hooks (made here by trusting them with
    # another state directory and copying it in): its hook ran, "REPO HOOK RAN".
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    (project / ".git").mkdir()
    (project / ".mcpx-hooks.toml").write_text(PROJECT)
    env = {**os.environ, "XDG_STATE_HOME": str(elsewhere), "MCPX_HOOKS_TRUST": ""}

    def mcpx(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
        return command_line(*args, cwd=project, env={**env, "XDG_STATE_HOME": str(state)})

    assert mcpx("trust", ".mcpx-hooks.toml", state=elsewhere).returncode == 0
    shipped = project / ".state"
    (shipped / "mcpx-hooks").mkdir(parents=True)
    trust = shipped / "mcpx-hooks" / "trust.json"
    trust.write_bytes((elsewhere / "mcpx-hooks" / "trust.json").read_bytes())
    trust.chmod(0o600)
    ran = mcpx("exec", "--", "true", state=shipped)
    assert ran.returncode == 0, ran.stderr
    assert "project hook ran" not in ran.stdout
    assert "lies inside the git checkout" in ran.stdout + ran.stderr
    assert not list((shipped / "mcpx-hooks").glob("*.cache"))  # no code kept there either
    again = mcpx("trust", ".mcpx-hooks.toml", state=shipped)
    assert again.returncode == 1
    assert "lies inside the git checkout" in again.stderr
    assert "then trust the file again" in again.stderr  # (not --trust-project: `trust` said it)
    assert "--trust-project" in ran.stdout + ran.stderr
    # The same state directory outside the checkout is believed.
    assert "project hook ran" in mcpx("exec", "--", "true", state=elsewhere).stdout
    # And from a checkout elsewhere, the state directory of this one holds no trust of its own.
    assert statefiles.checkout_holding(shipped, tmp_path) is None
    assert statefiles.checkout_holding(shipped, project / "sub") == str(project)


def test_serve_keeps_no_token_found_in_the_checkout_it_runs_in(tmp_path: Path) -> None:
    # A token file that came with the checkout is known to whoever read the repository.
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    state = project / ".state" / "mcpx-hooks"
    state.mkdir(parents=True)
    shipped = "shipped-with-the-repository-0123456789"
    (state / "token").write_text(shipped + "\n")
    (state / "token").chmod(0o600)
    env = {**os.environ, "XDG_STATE_HOME": str(project / ".state"), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    argv = [sys.executable, "-m", "mcpx_hooks.supervisor", "serve", "--port", "0"]
    with subprocess.Popen(
        argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as server:
        try:
            assert server.stdout is not None
            for line in server.stdout:  # (ends with the server, should it end first)
                if "listening on" in line:
                    break
            kept = (state / "token").read_text().strip()
        finally:
            server.send_signal(2)
            server.communicate(timeout=30)
    assert kept and kept != shipped


def test_a_state_directory_others_may_write_to_is_not_believed(tmp_path: Path) -> None:
    # Another user who may write to the state directory (or to one above it) could swap
    # `trust.json`, or a kept cache of compiled code, for a symlink to a file of this user's
    # that says what they want (one of a repository cloned from them): nothing there is
    # believed. A sticky directory above (as /tmp, which holds this test's) is no such way.
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text(PROJECT)
    state = home / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state), "MCPX_HOOKS_TRUST": ""}

    def mcpx(*args: str) -> subprocess.CompletedProcess[str]:
        return command_line(*args, cwd=project, env=env)

    assert mcpx("trust", ".mcpx-hooks.toml").returncode == 0
    assert "project hook ran" in mcpx("exec", "--", "true").stdout
    for directory, mode in ((state / "mcpx-hooks", 0o777), (home, 0o777), (home, 0o1777)):
        directory.chmod(mode)
        try:
            ran, again = mcpx("exec", "--", "true"), mcpx("trust", ".mcpx-hooks.toml")
        finally:
            directory.chmod(0o700)
        if directory == home and mode & 0o1000:  # (sticky, above the state directory)
            assert "project hook ran" in ran.stdout
            continue
        assert "project hook ran" not in ran.stdout
        said = f"{directory}, which others may write to (mode {mode:04o}; chmod go-w)"
        assert said in ran.stdout + ran.stderr
        assert again.returncode == 2 and said in again.stderr  # (as a trust file others may write)
        assert statefiles.exposed(state / "mcpx-hooks") is None  # (modes put back)
    assert "project hook ran" in mcpx("exec", "--", "true").stdout


def test_code_is_not_kept_where_it_would_not_be_believed(tmp_path: Path) -> None:
    # The compiled-code cache was written again at every start into a state directory
    # others may write to, where it is never read: time lost, and a write into a directory
    # whose names another user decides. Now nothing is written there; and a symlink
    # planted in the cache's place is neither followed nor replaced.
    state = tmp_path / "state" / "mcpx-hooks"
    env = {**os.environ, "XDG_STATE_HOME": str(state.parent), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    ran = command_line("exec", "--sandbox", "none", "--", "true", cwd=tmp_path, env=env)
    assert ran.returncode == 0, ran.stderr
    cache = state / "attrs-code.cache"
    kept = cache.stat()
    state.chmod(0o777)
    for _ in range(2):
        assert (
            command_line(
                "exec", "--sandbox", "none", "--", "true", cwd=tmp_path, env=env
            ).returncode
            == 0
        )
        assert cache.stat().st_ino == kept.st_ino and cache.stat().st_mtime_ns == kept.st_mtime_ns
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    cache.unlink()
    cache.symlink_to(victim)
    assert (
        command_line("exec", "--sandbox", "none", "--", "true", cwd=tmp_path, env=env).returncode
        == 0
    )
    assert cache.is_symlink() and victim.read_text() == "mine\n"
    assert sorted(p.name for p in state.iterdir()) == ["attrs-code.cache", "history.db"]


def test_a_symlink_another_user_could_have_left_on_the_way_is_not_believed(
    tmp_path: Path,
) -> None:
    # The state directory reached through a symlink `mcpx-hooks` in a directory others may
    # write to: whoever left it there chose where it points, say at a directory of this
    # user's (a clone of their repository) holding a `trust.json` of their own. Where the
    # symlink leads is this user's alone, so the path it resolves to was all that was looked
    # at, and the file was believed. Now every directory on the way, as given, counts.
    project, mine, shared = tmp_path / "project", tmp_path / "mine", tmp_path / "shared"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text(PROJECT)
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "mcpx-hooks").symlink_to(mine / "mcpx-hooks")

    def mcpx(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "XDG_STATE_HOME": str(state), "MCPX_HOOKS_TRUST": ""}
        return command_line(*args, cwd=project, env=env)

    assert mcpx(mine, "trust", ".mcpx-hooks.toml").returncode == 0
    assert "project hook ran" in mcpx(mine, "exec", "--", "true").stdout
    ran = mcpx(shared, "exec", "--", "true")
    assert "project hook ran" not in ran.stdout
    said = f"{shared}, which others may write to (mode 0777; chmod go-w)"
    assert said in ran.stdout + ran.stderr
    again = mcpx(shared, "trust", ".mcpx-hooks.toml")
    assert again.returncode == 2 and said in again.stderr
    # A directory that others may write to but with the sticky bit (as /tmp) holding a
    # symlink of this user's is a careful user's setup: believed.
    shared.chmod(0o1777)
    assert statefiles.exposed(shared / "mcpx-hooks") is None
    assert "project hook ran" in mcpx(shared, "exec", "--", "true").stdout
    # ... but not one another user left there (in /tmp anyone may make a name first).
    if os.getuid() == 0:
        os.chown(shared / "mcpx-hooks", 65534, 65534, follow_symlinks=False)
        assert statefiles.exposed(shared / "mcpx-hooks") == (
            f"{shared / 'mcpx-hooks'}, a symlink of uid 65534"
        )
    # Relative links, `..` and `.` are followed as the kernel follows them.
    (mine / "a").mkdir()
    (mine / "up").symlink_to("a/../a/./")
    assert statefiles.exposed(mine / "up" / ".." / "mcpx-hooks") is None
    (mine / "a").chmod(0o777)
    assert statefiles.exposed(mine / "up") == f"{mine / 'a'}, which others may write to" + (
        " (mode 0777; chmod go-w)"
    )


def test_a_group_of_which_you_are_the_only_member_is_no_one_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `useradd` gives each user a group of their own; under `umask 002` (the default for
    # such users on some systems) a home, `~/.local` and `~/.local/state` are 0775: writable
    # by that group, that is by the user alone. Such a state directory was refused ("which
    # others may write to (mode 0775)"), and `trust` with it (exit 2). A group with another
    # member, or another user's primary group, is still someone else.
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o770)
    gid, me = state.stat().st_gid, pwd.getpwuid(os.getuid())

    def databases(*, primary: list[int], listed: list[str]) -> None:
        group = grp.struct_group(("mine", "x", gid, listed))
        users = [
            pwd.struct_passwd((f"u{uid}", "x", uid, gid, "", "/", "/bin/sh")) for uid in primary
        ]
        monkeypatch.setattr(statefiles.grp, "getgrgid", lambda g: group)
        monkeypatch.setattr(statefiles.pwd, "getpwall", lambda: users)
        statefiles._private_group.cache_clear()

    said = f"{state}, which the group mine may write to (mode 0770; chmod g-w)"
    databases(primary=[me.pw_uid], listed=[])
    assert statefiles.exposed(state) is None
    databases(primary=[], listed=[me.pw_name])
    assert statefiles.exposed(state) is None
    databases(primary=[me.pw_uid, me.pw_uid + 1], listed=[])
    assert statefiles.exposed(state) == said
    databases(primary=[me.pw_uid], listed=[me.pw_name, "someone"])
    assert statefiles.exposed(state) == said
    databases(primary=[], listed=[])  # (no member at all: a group kept for something else)
    assert statefiles.exposed(state) == said
    state.chmod(0o772)
    assert (
        statefiles.exposed(state) == f"{state}, which others may write to (mode 0772; chmod go-w)"
    )
    statefiles._private_group.cache_clear()


def test_trust_opens_no_lock_another_user_could_have_put_in_its_place(tmp_path: Path) -> None:
    # In a state directory others may write to, `trust` refused, but only after it had
    # opened `trust.json.lock` (made if missing, through a symlink): another user's symlink
    # there made an empty file of this user's wherever they chose. Nothing is opened there
    # now, and a symlink in the lock's place (in a directory of this user's) is not followed.
    project = tmp_path / "project"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text(PROJECT)
    state = tmp_path / "state"
    (state / "mcpx-hooks").mkdir(parents=True, mode=0o700)
    chosen = tmp_path / "chosen"
    (state / "mcpx-hooks" / "trust.json.lock").symlink_to(chosen)
    env = {**os.environ, "XDG_STATE_HOME": str(state), "MCPX_HOOKS_TRUST": ""}
    for mode in (0o777, 0o700):
        (state / "mcpx-hooks").chmod(mode)
        done = command_line("trust", ".mcpx-hooks.toml", cwd=project, env=env)
        assert done.returncode in (1, 2), done.stderr
        assert not chosen.exists(), mode
    lock = state / "mcpx-hooks" / "trust.json.lock"
    assert done.stderr == (
        f"mcpx-hooks trust: the trust state's lock {lock} is a symlink, which is never followed:"
        " remove it\n"
    )


def _planted_token(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A token of this user's (in `mine`) reached through a symlink `mcpx-hooks` left in a
    directory others may write to (`shared`), and an environment whose state directory is
    `shared`."""
    mine, shared = tmp_path / "mine" / "mcpx-hooks", tmp_path / "shared"
    mine.mkdir(parents=True, mode=0o700)
    (mine / "token").write_text("known-to-them-0123456789\n")
    (mine / "token").chmod(0o600)
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "mcpx-hooks").symlink_to(mine)
    env = {**os.environ, "XDG_STATE_HOME": str(shared), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    return mine, shared, env


def test_serve_keeps_no_token_another_user_could_have_put_there(tmp_path: Path) -> None:
    # A token file reached through a directory others may write to (here a symlink
    # `mcpx-hooks` left in one, pointing at a directory of this user's that holds a token
    # they know): kept, so whoever put it there could drive the service. Refused now.
    mine, shared, env = _planted_token(tmp_path)
    argv = [sys.executable, "-m", "mcpx_hooks.supervisor", "serve", "--port", "0"]
    with subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as server:
        try:
            assert server.stdout is not None
            listening = any("listening on" in line for line in server.stdout)
        finally:
            if server.poll() is None:
                server.send_signal(2)
            _, err = server.communicate(timeout=30)
    assert not listening
    assert server.returncode == 2
    assert err == (
        f"mcpx-hooks serve: the token file {shared / 'mcpx-hooks' / 'token'} is in {shared},"
        " which others may write to (mode 0777; chmod go-w), so another user could have put"
        " it there or could replace it: keep it in a directory of yours alone (XDG_STATE_HOME,"
        " or --token-file)\n"
    )
    assert (mine / "token").read_text() == "known-to-them-0123456789\n"


def test_a_client_sends_no_token_another_user_could_have_put_there(tmp_path: Path) -> None:
    # `serve` refused the default token file in a state directory others may write to, but a
    # remote command read it there and sent it to the server it named: a token planted
    # through a symlink `mcpx-hooks` left in such a directory went out as `Bearer`. Now the
    # command says so and exits 2 before it connects.
    mine, shared, env = _planted_token(tmp_path)
    env.pop("MCPX_HOOKS_TOKEN", None)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        url = f"ws://127.0.0.1:{listener.getsockname()[1]}"
        listed = command_line("hooks", "list", "--remote", url, cwd=tmp_path, env=env)
        with pytest.raises(BlockingIOError):
            listener.accept()  # (no one came)
    assert listed.returncode == 2
    assert listed.stderr == (
        f"mcpx-hooks hooks list: the token file {shared / 'mcpx-hooks' / 'token'} is in"
        f" {shared}, which others may write to (mode 0777; chmod go-w), so another user could"
        " have put it there: it is not sent; keep the state directory yours alone, or give"
        " --token-file or MCPX_HOOKS_TOKEN\n"
    )
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        env["XDG_STATE_HOME"] = str(mine.parent)  # (the same file, through no one else's)
        url = f"ws://127.0.0.1:{listener.getsockname()[1]}"
        with subprocess.Popen(
            [sys.executable, "-m", "mcpx_hooks.supervisor", "hooks", "list", "--remote", url],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        ) as client:  # fmt: skip
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(30)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
            client.kill()
    assert b"authorization: bearer known-to-them-0123456789\r\n" in head.lower()


def test_a_permission_refused_in_a_state_directory_not_yours_says_whose_and_what_to_do(
    tmp_path: Path,
) -> None:
    # "Permission denied" was all: a state directory left by `sudo mcpx-hooks ...` (sudo
    # keeps the user's HOME on some systems) is root's; one of another user's is theirs.
    state = tmp_path / "mcpx-hooks"
    state.mkdir()
    denied = PermissionError(13, "Permission denied")
    assert statefiles.denied_said(denied, state) == "Permission denied"  # (yours)
    if os.getuid() == 0:
        os.chown(state, 65534, 65534)
        other = pwd.getpwuid(65534).pw_name
        assert statefiles.denied_said(denied, state / "history.db") == (
            f"Permission denied: the state directory {state} is {other}'s: keep yours elsewhere"
            " (XDG_STATE_HOME)"
        )
        # (root's, as sudo leaves it, is said to the user it refuses: test_history_readonly)
    assert statefiles.denied_said(FileNotFoundError(2, "No such file"), state) == "No such file"
    assert statefiles.denied_said(denied, tmp_path / "elsewhere") == "Permission denied"
