"""A cloned repository cannot run hooks or lift limits by itself: real `mcpx-hooks` processes
in a copied directory with a hostile `.mcpx-hooks.toml`, and the service's own discovery."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from test_server_inprocess import UNCONFINED, read

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.service.server import Listening, Service, ServiceOptions

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]

#: The user's own config (a trusted place): a ceiling, and a fail-closed gate locked in force.
USER_CONFIG = """
[autonomy]
max = "advise"

[[hooks]]
name = "org-gate"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; echo '{\\"advise\\": \\"org gate ran\\"}'"]
sandbox = "none"
locked = true
"""

#: What the cloned repository ships: it raises the ceiling, drops the gate (its list has no
#: `inherit`), writes a marker, and would replace the result.
HOSTILE = """
[autonomy]
max = "run"

[[hooks]]
name = "marker"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; touch marker-written"]
sandbox = "none"

[[hooks]]
name = "rewrite"
on = "script"
phase = "onSuccess"
run = ["sh", "-c", "cat >/dev/null; echo '{\\"apply\\": {\\"value\\": 666}}'"]
effect = "apply"
sandbox = "none"
"""


def environment(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MCPX_HOOKS_NO_DISCOVERY", "MCPX_HOOKS_TRUST")
    }
    home = tmp_path / "home"
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
    )
    return env


def mcpx(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def exec_frames(cwd: Path, env: dict[str, str]) -> tuple[list[dict[str, Any]], str]:
    out = mcpx("exec", "--json", "--sandbox", "none", "--", "true", cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    check_order(frames)
    return frames, out.stderr


def hook_frames(frames: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in frames if f["type"] == "hook"}


def test_a_cloned_hostile_project_takes_no_effect_until_trusted(tmp_path: Path) -> None:
    env = environment(tmp_path)
    user = tmp_path / "home" / ".config" / "mcpx-hooks" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(USER_CONFIG)
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / ".mcpx-hooks.toml").write_text(HOSTILE)
    clone = tmp_path / "work" / "clone"
    shutil.copytree(upstream, clone)
    local = clone / ".mcpx-hooks.toml"
    marker = clone / "marker-written"

    # Cloned: nothing of it applies, and every command says why and how to trust it.
    frames, stderr = exec_frames(clone, env)
    assert not marker.exists()
    assert list(hook_frames(frames)) == ["org-gate"]
    assert frames[1]["type"] == "warning"
    said = frames[1]["message"]
    assert said.startswith(f"skipped {local}: a project config file is applied only once trusted")
    assert f"mcpx-hooks trust {local}" in said and "not trusted" in said
    assert f"mcpx-hooks: warning: {said}" in stderr
    listed = mcpx("hooks", "list", "--json", cwd=clone, env=env)
    entries = json.loads(listed.stdout)
    assert [e.get("name") for e in entries] == ["org-gate", None]
    assert entries[1] == {
        "skipped": str(local),
        "reason": "not trusted",
        "trust": f"mcpx-hooks trust {local}",
    }
    readable = mcpx("hooks", "list", cwd=clone, env=env).stdout
    assert f"not applied: {local} (not trusted); to apply it: mcpx-hooks trust {local}" in readable

    # Trusted: its hooks run, but the ceiling stays and the locked gate stays at its place.
    trusted = mcpx("trust", cwd=clone, env=env)
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout.startswith(f"trusted {local} (sha256 ")
    state = tmp_path / "home" / ".local" / "state" / "mcpx-hooks" / "trust.json"
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    frames, stderr = exec_frames(clone, env)
    assert marker.exists()
    hooks = hook_frames(frames)
    assert list(hooks) == ["org-gate", "marker", "rewrite"]
    assert hooks["rewrite"]["requestedEffect"] == "apply"
    assert hooks["rewrite"]["effect"] == "advise"
    assert frames[-2] == {**frames[-2], "type": "result", "value": None}
    assert frames[1]["type"] == "warning"
    raised = frames[1]["message"]
    assert raised == (
        f'{local}: autonomy.max "run" would raise the ceiling "advise" set by {user}; a nearer'
        ' file may only lower it, so "advise" stays in force'
    )
    assert raised in stderr

    # Changed: untrusted again, and said so.
    marker.unlink()
    local.write_text(HOSTILE + "# one more line\n")
    frames, stderr = exec_frames(clone, env)
    assert not marker.exists()
    assert "this one is changed since it was trusted" in frames[1]["message"]
    listed = json.loads(mcpx("trust", "--list", "--json", cwd=clone, env=env).stdout)
    assert [(r["file"], r["status"]) for r in listed] == [(str(local), "changed")]

    # For one command: the flag, or the variable a CI job sets.
    for args, extra in ((["--trust-project"], {}), ([], {"MCPX_HOOKS_TRUST": "all"})):
        out = mcpx(
            "exec",
            "--json",
            *args,
            "--sandbox",
            "none",
            "--",
            "true",
            cwd=clone,
            env={**env, **extra},
        )
        assert out.returncode == 0, out.stderr
        assert marker.exists()
        marker.unlink()

    untrusted = mcpx("untrust", str(local), cwd=clone, env=env)
    assert (untrusted.returncode, untrusted.stdout) == (0, f"untrusted {local}\n")
    again = mcpx("untrust", str(local), cwd=clone, env=env)
    assert again.returncode == 2 and "is not trusted" in again.stderr


def test_redefining_the_locked_gate_is_an_error_naming_the_locking_file(tmp_path: Path) -> None:
    env = environment(tmp_path)
    user = tmp_path / "home" / ".config" / "mcpx-hooks" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(USER_CONFIG)
    project = tmp_path / "p"
    project.mkdir()
    local = project / ".mcpx-hooks.toml"
    local.write_text(
        '[[hooks]]\nname = "org-gate"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        "enabled = false\n"
    )
    out = mcpx("hooks", "list", "--trust-project", cwd=project, env=env)
    assert out.returncode == 2
    assert (
        f'{local}:/hooks/0/enabled: hook "org-gate" is locked by {user}:/hooks/0: a nearer file'
        " may not disable it"
    ) in out.stderr
    assert "Traceback" not in out.stderr


def test_trust_refuses_a_file_that_breaks_the_layers_it_joins(tmp_path: Path) -> None:
    """A project file that is valid alone but disables a hook the user's own config locks:
    `validate` here said so, yet `trust` pinned it ("trusted …") and every command from
    there on exited 2. Now `trust` refuses it with the problem `validate` names, with and
    without FILE, and pins nothing; a file that layers cleanly is still trusted."""
    env = environment(tmp_path)
    user = tmp_path / "home" / ".config" / "mcpx-hooks" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(USER_CONFIG)
    project = tmp_path / "p"
    project.mkdir()
    local = project / ".mcpx-hooks.toml"
    local.write_text(
        '[[hooks]]\nname = "org-gate"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        "enabled = false\n"
    )
    problem = (
        f'{local}:/hooks/0/enabled: hook "org-gate" is locked by {user}:/hooks/0: a nearer file'
        " may not disable it"
    )
    assert problem in mcpx("validate", cwd=project, env=env).stdout
    for args in ((), (str(local),)):
        out = mcpx("trust", *args, cwd=project, env=env)
        assert (out.returncode, out.stdout) == (2, ""), out
        assert problem in out.stderr and "does not validate" in out.stderr
        assert "Traceback" not in out.stderr
    assert mcpx("trust", "--list", cwd=project, env=env).stdout.startswith("no project config")
    local.write_text('[[hooks]]\nname = "mine"\non = "script"\nphase = "before"\nrun = ["true"]\n')
    out = mcpx("trust", cwd=project, env=env)
    assert out.returncode == 0 and out.stdout.startswith(f"trusted {local}"), out


def test_hooks_list_says_a_project_file_not_applied_once(tmp_path: Path) -> None:
    """`hooks list` on a project file not trusted printed its "not applied" line on stdout
    and the same news as a warning on stderr. The listing says it (as `--json` lists it among
    the entries): stderr stays empty, with and without `--json`."""
    env = environment(tmp_path)
    project = tmp_path / "p"
    project.mkdir()
    local = project / ".mcpx-hooks.toml"
    local.write_text('[[hooks]]\nname = "chk"\non = "script"\nphase = "before"\nrun = ["true"]\n')
    out = mcpx("hooks", "list", cwd=project, env=env)
    assert (out.returncode, out.stderr) == (0, ""), out
    assert out.stdout.splitlines() == [
        "no hooks in force",
        f"not applied: {local} (not trusted); to apply it: mcpx-hooks trust {local}",
    ]
    listed = mcpx("hooks", "list", "--json", cwd=project, env=env)
    assert (listed.returncode, listed.stderr) == (0, ""), listed
    assert json.loads(listed.stdout) == [
        {"skipped": str(local), "reason": "not trusted", "trust": f"mcpx-hooks trust {local}"}
    ]


def test_trust_validates_the_bytes_it_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trust read the file to pin it, then read it again to validate it: a file swapped in
    between (a valid one after an invalid one) was pinned invalid, 'trust refuses a file that
    does not validate' notwithstanding. The swap is made right after the first read."""
    from props import run_cli

    from mcpx_hooks.supervisor.cli import trust

    here = tmp_path / "a"
    here.mkdir()
    local = here / ".mcpx-hooks.toml"
    local.write_text('[[hooks]]\non = "script"\nphase = "before"\nrun = "not an argv"\n')
    read = trust._project_bytes

    def swapped(path: Path) -> tuple[bytes | None, str]:
        found = read(path)
        local.write_text('[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\n')
        return found

    monkeypatch.setattr(trust, "_project_bytes", swapped)
    for name, value in environment(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(here)
    code, out, err = run_cli(["trust", str(local)])
    assert code == 2, (out, err)
    assert "/hooks/0/run: expected an argv array of strings" in err
    assert "does not validate" in err and "trusted" not in out


def test_trust_refuses_what_it_cannot_pin(tmp_path: Path) -> None:
    env = environment(tmp_path)
    here = tmp_path / "a"
    here.mkdir()
    (here / "other.toml").write_text("")
    out = mcpx("trust", "other.toml", cwd=here, env=env)
    assert out.returncode == 2 and "expected a project config file" in out.stderr
    (here / ".mcpx-hooks.toml").mkdir()
    out = mcpx("trust", ".mcpx-hooks.toml", cwd=here, env=env)
    assert out.returncode == 2 and "found a directory" in out.stderr
    empty = tmp_path / "b"
    empty.mkdir()
    out = mcpx("trust", cwd=empty, env=env)
    assert out.returncode == 2 and "nothing to trust" in out.stderr
    assert mcpx("trust", "--list", cwd=empty, env=env).stdout.startswith(
        "no project config files are trusted"
    )


def test_a_state_directory_that_cannot_be_made_is_said_in_words(tmp_path: Path) -> None:
    """XDG_STATE_HOME naming a file: trust and untrust said '[Errno 20] Not a directory:
    '<the path again>''; a loop, '[Errno 40] Too many levels of symbolic links: …'."""
    here = tmp_path / "a"
    here.mkdir()
    (here / ".mcpx-hooks.toml").write_text("")
    (tmp_path / "file").write_text("")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for state, said in (("file", "Not a directory"), ("loop", "a symlink loop")):
        env = {**environment(tmp_path), "XDG_STATE_HOME": str(tmp_path / state)}
        where = tmp_path / state / "mcpx-hooks"
        for command in ("trust", "untrust"):
            out = mcpx(command, ".mcpx-hooks.toml", cwd=here, env=env)
            assert out.returncode == 1, out.stderr  # (a state that cannot be written)
            assert out.stderr == (
                f"mcpx-hooks {command}: cannot open the trust state in {where}: {said}\n"
            )


def test_trust_without_a_name_leaves_a_file_another_user_owns(tmp_path: Path) -> None:
    # A project file above the project, in a directory others may write (`/tmp`), put
    # there by someone else: the bulk form trusted it with the rest.
    if os.geteuid() != 0:
        pytest.skip("a file another user owns is made by root")
    env = environment(tmp_path)
    project = tmp_path / "proj"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text("")
    planted = tmp_path / ".mcpx-hooks.toml"
    planted.write_text("")
    os.chown(planted, 65534, 65534)
    out = mcpx("trust", cwd=project, env=env)
    assert out.returncode == 2, out
    assert f"{planted} is not yours (owner uid 65534): not trusted" in out.stderr
    assert f"trusted {project / '.mcpx-hooks.toml'}" in out.stdout
    listed = mcpx("trust", "--list", "--json", cwd=project, env=env).stdout
    assert [entry["file"] for entry in json.loads(listed)] == [str(project / ".mcpx-hooks.toml")]
    named = mcpx("trust", str(planted), cwd=project, env=env)  # named: trusted
    assert named.returncode == 0 and f"trusted {planted}" in named.stdout, named


def test_a_trust_state_and_a_planted_file_under_odd_names_are_named_on_one_line(
    tmp_path: Path,
) -> None:
    """The trust state's path (`XDG_STATE_HOME` with a line break) and a planted project file's
    were printed raw, their line breaks cut into continuation lines, and "name it to trust
    it: mcpx-hooks trust PATH" gave a command a shell would not take back."""
    if os.geteuid() != 0:
        pytest.skip("a file another user owns is made by root")
    env = environment(tmp_path)
    state = tmp_path / "st\nate"
    env["XDG_STATE_HOME"] = str(state)
    (state / "mcpx-hooks").mkdir(parents=True)
    (state / "mcpx-hooks" / "trust.json").write_text("[")
    listed = mcpx("trust", "--list", cwd=tmp_path, env=env)
    shown_state = f"$'{state}/mcpx-hooks/trust.json'".replace("\n", "\\n")
    assert listed.stderr == (
        f"mcpx-hooks trust: the trust state file {shown_state} is not valid (invalid JSON:"
        " Expecting value (at line 1, column 2)): nothing is trusted until it is fixed or"
        " removed\n"
    )
    (state / "mcpx-hooks" / "trust.json").unlink()
    shared = tmp_path / "sh\tared"
    project = shared / "proj"
    project.mkdir(parents=True)
    (project / ".mcpx-hooks.toml").write_text("")
    planted = shared / ".mcpx-hooks.toml"
    planted.write_text("")
    os.chown(planted, 65534, 65534)
    out = mcpx("trust", cwd=project, env=env)
    shown = f"$'{planted}'".replace("\t", "\\t")
    assert out.returncode == 2 and out.stderr == (
        f"mcpx-hooks trust: {shown} is not yours (owner uid 65534): not trusted; name it to"
        f" trust it: mcpx-hooks trust {shown}\n"
    ), out


async def test_the_service_says_what_its_discovery_skipped(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(UNCONFINED)
    local = tmp_path / "w" / ".mcpx-hooks.toml"
    local.parent.mkdir()
    local.write_text(HOSTILE)
    environ = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    config = load_config([str(tmp_path / "c.toml")], cwd=local.parent, environ=environ)
    options = ServiceOptions(port=0, cwd=str(local.parent), environ=environ)
    per_call = {"name": "mine", "on": "script", "phase": "before", "run": ["true"]}
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening: Listening = await nursery.start(service.serve)
        url = listening.url + "/v1/exec"
        for request in ({"argv": ["true"]}, {"argv": ["true"], "hooks": [per_call]}):
            frames, code = await trio.to_thread.run_sync(read, url, request)
            assert code == 1000
            check_order(frames)
            assert frames[1]["type"] == "warning"
            assert frames[1]["message"].startswith(f"skipped {local}: a project config file")
            assert "marker" not in hook_frames(frames)
        service.stop()
    assert not (local.parent / "marker-written").exists()


def test_a_project_whose_directory_name_holds_a_line_break_is_named_on_one_line(
    tmp_path: Path,
) -> None:
    """A project under a directory named with a line break and ESC: every command that names
    its file (the warning that skips it, `hooks list`, `exec --explain`, `trust`, `trust
    --list`, `untrust`) writes the name as bash quotes it, the same everywhere, on one line."""
    env = environment(tmp_path)
    project = tmp_path / "p\nq\x1b[2J"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text(
        '[[hooks]]\nname = "chk"\non = "script"\nphase = "before"\nrun = ["true"]\n'
    )
    shown = f"$'{project}/.mcpx-hooks.toml'".replace("\n", "\\n").replace("\x1b", "\\x1b")
    for args in (["validate"], ["hooks", "list"], ["exec", "--explain", "--", "true"]):
        out = mcpx(*args, cwd=project, env=env)
        assert out.returncode == 0, out.stderr
        text = out.stdout + out.stderr
        assert "\x1b" not in text and "Traceback" not in text, text
        if args != ["hooks", "list"]:  # (which lists it on stdout instead)
            assert f"mcpx-hooks: warning: skipped {shown}: a project config" in out.stderr, text
    assert f"not applied: {shown} (not trusted); to apply it: mcpx-hooks trust {shown}" in (
        mcpx("hooks", "list", cwd=project, env=env).stdout
    )
    explained = mcpx("exec", "--explain", "--", "true", cwd=project, env=env).stdout
    directory = shown.removesuffix("/.mcpx-hooks.toml'") + "'"
    assert f"a run of true in {directory}\n" in explained
    assert f"\n  {shown}: not trusted; trust it with: mcpx-hooks trust {shown}\n" in explained
    trusted = mcpx("trust", ".mcpx-hooks.toml", cwd=project, env=env)
    assert trusted.stdout.startswith(f"trusted {shown} (sha256 "), trusted
    assert f"  {shown}  sha256 " in mcpx("trust", "--list", cwd=project, env=env).stdout
    listed = mcpx("hooks", "list", cwd=project, env=env).stdout.splitlines()
    assert listed[1].endswith(f"  {shown}:/hooks/0"), listed
    assert mcpx("untrust", ".mcpx-hooks.toml", cwd=project, env=env).stdout == (
        f"untrusted {shown}\n"
    )


#: A project's own hook, and (`with_history`) the run history it names.
PROJECT = """
[[hooks]]
name = "lint"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null"]
sandbox = "none"
"""


def test_the_runs_commands_say_nothing_of_a_project_file_they_would_not_run(
    tmp_path: Path,
) -> None:
    """`runs list`, `show`, `search` and `verify` run no hook: a project trusted for one run
    (`exec --trust-project`) made each of them warn that its file was skipped, as not
    trusted. Only a skipped file that sets `[history]` is said, since the history they read
    is not the one it names; `--trust-project` reads that one."""
    env = environment(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    local = project / ".mcpx-hooks.toml"
    local.write_text(PROJECT)
    ran = mcpx("exec", "--json", "--trust-project", "--", "echo", "needle", cwd=project, env=env)
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout.splitlines()[0])["runId"]
    assert "lint" in hook_frames([json.loads(line) for line in ran.stdout.splitlines()])
    for command in (
        ["runs", "list"],
        ["runs", "show", run_id],
        ["runs", "search", "needle"],
        ["runs", "verify", run_id],
    ):
        done = mcpx(*command, cwd=project, env=env)
        assert done.returncode == 0, (command, done.stderr)
        assert run_id in done.stdout or command[1] == "verify", (command, done.stdout)
        assert done.stderr == "", (command, done.stderr)

    # Its `[history]` names another history: not read until it is trusted, and said.
    kept = tmp_path / "project-runs" / "history.db"
    local.write_text(f'{PROJECT}\n[history]\npath = "{kept}"\n')
    ran = mcpx("exec", "--json", "--trust-project", "--", "true", cwd=project, env=env)
    assert ran.returncode == 0, ran.stderr
    there = json.loads(ran.stdout.splitlines()[0])["runId"]
    listed = mcpx("runs", "list", cwd=project, env=env)
    assert listed.returncode == 0, listed.stderr
    assert there not in listed.stdout and run_id in listed.stdout
    default = tmp_path / "home" / ".local" / "state" / "mcpx-hooks" / "history.db"
    assert listed.stderr == (
        f"mcpx-hooks: warning: the [history] table of {local} is not applied (not trusted):"
        f" this reads the run history {default}; to read the one it names, add --trust-project"
        f" (or trust it: mcpx-hooks trust {local})\n"
    )
    trusted = mcpx("runs", "list", "--trust-project", cwd=project, env=env)
    assert trusted.returncode == 0, trusted.stderr
    assert there in trusted.stdout and run_id not in trusted.stdout
    assert trusted.stderr == ""
