"""A path the operator's own `[sandbox] deny` names, met by a hook or a run: the working
directory, the program, or the loader its binary needs. Each is refused before anything
starts, naming the denied path and the config line that denies it (not a bare "Permission
denied" from inside the sandbox), as root and as an ordinary user, through the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_rootless

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
#: `true` outside the system's directories, its loader (`PT_INTERP`) still in /usr.
TRUE = shutil.which("true") or "/bin/true"


def exec_cli(config: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "exec", "--config", str(config), "--", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def denying(tmp: Path, denied: str, hooks: str = "") -> Path:
    config = tmp / "c.toml"
    config.write_text(f'[sandbox]\ndeny = ["/nowhere-here", "{denied}"]\n{hooks}')
    return config


def line(config: Path) -> str:
    """How the refusal names the line: the second item (the first names no path here)."""
    return f"[sandbox] deny names it at {config}:/sandbox/deny/1"


@pytest.fixture
def tmp(readable_tmp: Path) -> Path:
    require_rootless()
    return readable_tmp


def test_a_run_whose_working_directory_is_denied_says_the_deny_line(tmp: Path) -> None:
    secret = tmp / "secret"
    secret.mkdir(mode=0o755)
    config = denying(tmp, str(secret))
    done = exec_cli(config, secret, TRUE)
    assert done.returncode == 1, done
    assert (
        f'cannot run "{TRUE}" in {secret}: the working directory lies in {secret}, which no'
        f" sandbox but none reaches: {line(config)}; take it out of that list, or choose"
        " another working directory"
    ) in done.stdout


def test_a_hook_whose_cwd_is_denied_says_the_deny_line(tmp: Path) -> None:
    secret = tmp / "secret"
    secret.mkdir(mode=0o755)
    hook = f'[[hooks]]\non = "script"\nphase = "before"\nrun = ["{TRUE}"]\ncwd = "{secret}"\n'
    config = denying(tmp, str(secret), hook)
    done = exec_cli(config, tmp, TRUE)
    assert done.returncode == 0, done  # (its failure is open: the run carries on)
    assert f"the working directory lies in {secret}, which no sandbox but none reaches:" in (
        done.stdout
    )
    assert line(config) in done.stdout


def test_a_program_in_a_denied_system_directory_says_the_deny_line(tmp: Path) -> None:
    """`/bin/true` is `/usr/bin/true` on a merged /usr: a system directory every profile
    reads, but for the operator's deny."""
    real = os.path.realpath(TRUE)
    top = "/" + real.strip("/").split("/")[0]
    config = denying(tmp, top)
    done = exec_cli(config, tmp, TRUE)
    assert done.returncode == 1, done
    assert (
        f'cannot run "{TRUE}": it resolves to {real}, in {top}, which no sandbox but none'
        f" reaches: {line(config)}; take it out of that list to run this program"
    ) in done.stdout


def test_a_binary_whose_loader_is_denied_says_the_loader_and_the_deny_line(tmp: Path) -> None:
    """A binary outside the denied directory (here, the working directory) whose loader,
    which `execve` opens too, lies in it."""
    program = tmp / "true"
    shutil.copy(os.path.realpath(TRUE), program)
    program.chmod(0o755)
    config = denying(tmp, "/usr")
    done = exec_cli(config, tmp, "./true")
    assert done.returncode == 1, done
    said = done.stdout
    assert f'cannot run "./true": it resolves to {program}, a program loaded by /usr/' in said
    assert f", in /usr, which no sandbox but none reaches: {line(config)};" in said


def test_a_program_denied_by_its_own_path_is_not_said_to_lie_in_itself(tmp: Path) -> None:
    """`deny = ["/usr/bin/jq"]`, one program rather than its directory: the refusal named it
    twice, "it resolves to /usr/bin/jq, in /usr/bin/jq, which …"."""
    real = os.path.realpath(TRUE)
    config = denying(tmp, real)
    done = exec_cli(config, tmp, TRUE)
    assert done.returncode == 1, done
    assert (
        f'cannot run "{TRUE}": it resolves to {real}, which no sandbox but none reaches:'
        f" {line(config)}; take it out of that list to run this program"
    ) in done.stdout


def test_a_script_file_denied_by_its_own_path_is_not_said_to_lie_in_itself(tmp: Path) -> None:
    """`deny = ["deploy.py"]`, then `exec --python deploy.py`: "it lies in …/deploy.py"."""
    script = tmp / "deploy.py"
    script.write_text("def main():\n    return 1\n")
    config = denying(tmp, str(script))
    done = subprocess.run(
        [*CLI, "exec", "--config", str(config), "--python", "deploy.py"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    assert (
        f"cannot run the script {script}, which no sandbox but none reaches: {line(config)}"
    ) in done.stdout
