"""Small things a person sees: `hooks list` shows the effect a hook's phase leaves it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
ENV = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}


def test_hooks_list_shows_an_observe_hook_s_effect_in_force_as_off(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[[hooks]]\nname = "watch"\non = "run.finished"\nphase = "observe"\nrun = ["true"]\n'
        '[[hooks]]\nname = "last"\non = "script"\nphase = "suffix"\nrun = ["true"]\n'
        'effect = "apply"\n'
        '[[hooks]]\nname = "gate"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        'effect = "ask"\n'
    )
    done = subprocess.run(
        [*CLI, "hooks", "list", "--config", "c.toml"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert "  off (declared advise; phase)  " in rows["watch"]
    assert "  advise (declared apply; phase)  " in rows["last"]
    assert "  ask  " in rows["gate"] and "declared" not in rows["gate"]


def test_a_loading_warning_is_said_once_to_a_person(tmp_path: Path) -> None:
    """The readable view shows it once, in the run; with --json it is a frame of the stream
    (a program's) and a line on stderr (the person's), once each."""
    tmp_path.chmod(0o755)
    (tmp_path / ".mcpx-hooks.toml").write_text(
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MCPX_HOOKS_NO_DISCOVERY",
                                                          "MCPX_HOOKS_TRUST")}  # fmt: skip
    env.update(HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"))
    said = f"skipped {tmp_path / '.mcpx-hooks.toml'}: a project config file"
    for flags in ((), ("--json",)):
        done = subprocess.run(
            [*CLI, "exec", *flags, "--", "true"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert done.stdout.count(said) == 1, done.stdout
        assert done.stderr.count(said) == (1 if flags else 0), done.stderr
