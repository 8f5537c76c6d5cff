"""The file an interpreter is given in a hook's `run`, a `command` model's argv or a tool
server's `command` (`["/usr/bin/python3", "/elsewhere/x.py"]`), outside what its sandbox sees:
said before the spawn with the `[sandbox] read` line that admits it, as a run's script is,
rather than the interpreter's bare "Permission denied" from inside the sandbox. Real CLI,
real sandbox, the loopback model's absence irrelevant (a command model is a process)."""

from __future__ import annotations

import json
from pathlib import Path

from test_script_file_hidden import mcpx

HIDDEN = "cannot run the script {}: the {} sandbox cannot see it (it sees {}); add [sandbox]"


def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    project, elsewhere, home = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "home"
    for d in (project, elsewhere, home):
        d.mkdir()
    (elsewhere / "x.py").write_text('import json\nprint(json.dumps({"advise": "it ran"}))\n')
    return project, elsewhere, home


def hook_frame(stdout: str) -> dict[str, object]:
    frames = [json.loads(line) for line in stdout.splitlines()]
    (hook,) = [f for f in frames if f["type"] == "hook"]
    return hook


def test_a_run_hooks_file_outside_its_sandbox_is_said_with_the_grant(tmp_path: Path) -> None:
    project, elsewhere, home = places(tmp_path)
    script = elsewhere / "x.py"
    hook = {
        "name": "h",
        "on": "script",
        "phase": "before",
        "run": ["/usr/bin/python3", str(script)],
    }
    done = mcpx("exec", "--json", "--hook", json.dumps(hook), "--", "true", cwd=project, home=home)
    frame = hook_frame(done.stdout)
    sees = "the hook's directory and working directory, the system and the grants"
    assert frame["status"] == "failed" and HIDDEN.format(script, "strict", sees) in str(
        frame["reason"]
    )
    assert "Permission denied" not in done.stdout
    (tmp_path / "grant.toml").write_text(f'[sandbox]\nread = ["{elsewhere}"]\n')
    granted = mcpx(
        "exec",
        "--json",
        "--config",
        str(tmp_path / "grant.toml"),
        "--hook",
        json.dumps(hook),
        "--",
        "true",
        cwd=project,
        home=home,
    )
    assert hook_frame(granted.stdout)["advice"] == ["it ran"], granted.stdout


def test_a_command_models_file_outside_its_sandbox_is_said(tmp_path: Path) -> None:
    project, elsewhere, home = places(tmp_path)
    script = elsewhere / "x.py"
    (project / "c.toml").write_text(
        f"""
[models.default]
provider = "command"
command = ["/usr/bin/python3", "{script}"]
[[hooks]]
name = "p"
on = "script"
phase = "before"
prompt = "Is this run safe?"
"""
    )
    done = mcpx("exec", "--json", "--config", "c.toml", "--", "true", cwd=project, home=home)
    frame = hook_frame(done.stdout)
    sees = "the prompt hook's directory and working directory, the system and the grants"
    assert frame["status"] == "failed" and HIDDEN.format(script, "net", sees) in str(
        frame["reason"]
    )
    assert "Permission denied" not in done.stdout


def test_a_tool_servers_file_outside_its_sandbox_is_said(tmp_path: Path) -> None:
    project, elsewhere, home = places(tmp_path)
    script = elsewhere / "x.py"
    (project / "tools.toml").write_text(
        f'[servers.words]\ncommand = ["/usr/bin/python3", "{script}"]\n'
    )
    done = mcpx("servers", "list", "--config", "tools.toml", cwd=project, home=home)
    sees = "the server's directory, the system and the grants"
    assert HIDDEN.format(script, "strict", sees) in done.stdout + done.stderr, (
        done.stdout + done.stderr
    )
