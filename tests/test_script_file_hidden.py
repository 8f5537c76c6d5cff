"""A run's Python file (`exec --python FILE`) that its sandbox cannot see: refused before the
spawn with the `[sandbox] read` line that would admit it, as a hidden program is, instead of
the launcher's bare "Permission denied" from inside the sandbox. Real CLI, real sandbox (as
root, and as an ordinary user in the unprivileged run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def mcpx(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), MCPX_HOOKS_NO_DISCOVERY="1")
    env["XDG_STATE_HOME"] = str(home / ".local" / "state")
    out = subprocess.run(
        [*CLI, *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in out.stderr, out.stderr
    return out


def test_a_python_file_outside_the_runs_sandbox_is_refused_with_the_grant_that_admits_it(
    tmp_path: Path,
) -> None:
    project, elsewhere, home = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "home"
    for d in (project, elsewhere, home):
        d.mkdir()
    (project / "job.py").write_text("print('beside')\n")
    job = elsewhere / "job.py"
    job.write_text("print('from elsewhere')\n")

    beside = mcpx("exec", "--python", "job.py", cwd=project, home=home)
    assert beside.returncode == 0 and "| beside" in beside.stdout, beside.stdout

    hidden = mcpx("exec", "--python", "../elsewhere/job.py", cwd=project, home=home)
    assert hidden.returncode == 1, hidden.stdout
    said = re.search(r"^ERROR the script could not start: (.*)$", hidden.stdout, re.M)
    assert said is not None, hidden.stdout
    grant = re.escape("/" + "/".join(job.resolve().parts[1:3]))  # (its first two levels)
    assert re.fullmatch(
        f"cannot run the script {re.escape(str(job))}: the workspace sandbox cannot see it"
        r" \(it sees the run's working directory, the system and the grants\); add"
        rf' \[sandbox\] read = \["{grant}"\] to admit it',
        said[1],
    ), said[1]
    assert "Permission denied" not in hidden.stdout

    # The line it names admits it; `none` never asked.
    config = tmp_path / "grant.toml"
    config.write_text(f'[sandbox]\nread = ["{elsewhere}"]\n')
    granted = mcpx(
        "exec", "--config", str(config), "--python", "../elsewhere/job.py", cwd=project, home=home
    )
    assert granted.returncode == 0 and "| from elsewhere" in granted.stdout, granted.stdout
    unconfined = mcpx(
        "exec", "--sandbox", "none", "--python", "../elsewhere/job.py", cwd=project, home=home
    )
    assert unconfined.returncode == 0, unconfined.stdout


def test_a_file_an_interpreter_is_given_is_checked_as_the_script_is(tmp_path: Path) -> None:
    # `exec -- python3 ../elsewhere/job.py` met Python's own "can't open file ...: Permission
    # denied" from inside the sandbox: the file an interpreter's command names is the run's
    # script too.
    project, elsewhere, home = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "home"
    for d in (project, elsewhere, home):
        d.mkdir()
    (elsewhere / "job.py").write_text("print('from elsewhere')\n")
    (elsewhere / "job.sh").write_text("echo from elsewhere\n")
    for argv in (("/usr/bin/python3", "../elsewhere/job.py"), ("sh", "../elsewhere/job.sh")):
        hidden = mcpx("exec", "--", *argv, cwd=project, home=home)
        assert hidden.returncode == 1, hidden.stdout
        said = re.search(r"^ERROR the script could not start: (.*)$", hidden.stdout, re.M)
        assert said is not None, hidden.stdout
        assert said[1].startswith(f"cannot run the script {elsewhere / Path(argv[1]).name}: the")
        assert "Permission denied" not in hidden.stdout
    # An option first (`-c`), or a command that is no interpreter: not a file to check.
    code = mcpx("exec", "--", "/usr/bin/python3", "-c", "print('inline')", cwd=project, home=home)
    assert code.returncode == 0 and "| inline" in code.stdout, code.stdout
