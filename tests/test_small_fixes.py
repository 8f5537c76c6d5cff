"""Small things a person sees: `hooks list` shows the effect a hook's phase leaves it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
ENV = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}


def _hooks_list_rows(cwd: Path) -> dict[str, str]:
    """`hooks list --config c.toml`'s rows, by hook name."""
    done = subprocess.run(
        [*CLI, "hooks", "list", "--config", "c.toml"],
        cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return {line.split()[0]: line for line in done.stdout.splitlines()[1:]}


def test_hooks_list_shows_an_observe_hook_s_effect_in_force_as_off(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[[hooks]]\nname = "watch"\non = "run.finished"\nphase = "observe"\nrun = ["true"]\n'
        '[[hooks]]\nname = "last"\non = "script"\nphase = "suffix"\nrun = ["true"]\n'
        'effect = "apply"\n'
        '[[hooks]]\nname = "gate"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        'effect = "ask"\n'
    )
    rows = _hooks_list_rows(tmp_path)
    assert "  off (declared advise; phase)  " in rows["watch"]
    assert "  advise (declared apply; phase)  " in rows["last"]
    assert "  ask  " in rows["gate"] and "declared" not in rows["gate"]


def test_hooks_list_shows_the_effect_the_config_s_autonomy_leaves(tmp_path: Path) -> None:
    """`[autonomy] max` and `hooks` lower a hook's effect as a run does (`exec --explain`
    says the same): the table does not show the declared effect as the one in force."""
    (tmp_path / "c.toml").write_text(
        '[autonomy]\nmax = "advise"\nhooks = "off"\n'
        '[[hooks]]\nname = "fix"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        'effect = "apply"\n'
        '[[hooks]]\nname = "gate"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        'effect = "ask"\nfailure = "closed"\nlocked = true\n'
        '[[hooks]]\nname = "last"\non = "script"\nphase = "suffix"\nrun = ["true"]\n'
        'effect = "run"\n'
    )
    rows = _hooks_list_rows(tmp_path)
    assert "  off (declared apply; hooks.autonomy)  " in rows["fix"]
    assert "  advise (declared ask; autonomy.max)  " in rows["gate"]  # locked: max still holds
    assert "  off (declared run; phase, hooks.autonomy)  " in rows["last"]


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


def _sections(stdout: str) -> list[str]:
    return [s for s in stdout.split("\n--- ")[1:]]


def test_the_demo_says_each_run_under_its_own_header(tmp_path: Path) -> None:
    import re

    done = subprocess.run(
        [*CLI, "demo"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    sections = _sections(done.stdout)
    assert len(sections) == 3
    for section in sections:
        ids = re.findall(r"^(?:ws> )?run ([0-9a-f]{16}):", section, flags=re.MULTILINE)
        observed = re.findall(r"^observer audit saw run.finished \(event of run (\w+)\)",
                              section, flags=re.MULTILINE)  # fmt: skip
        assert len(ids) == 1 and observed == ids, section
    refused = sections[1]
    assert "no exit code" not in refused
    assert "\nend: refused, exec exits 3, " in refused
    assert refused.count("refused by check-input") == 1  # the ERROR line; not again below it


def test_the_demo_s_model_gets_its_api_key_which_is_never_printed(tmp_path: Path) -> None:
    import json

    import loopmodel

    key = "sk-demo-0123456789abcdef"
    with loopmodel.LoopModel() as model:
        model.default = loopmodel.Reply(json.dumps({"advise": "the job said hello"}))
        env = {**ENV, "MCPX_HOOKS_DEMO_MODEL_URL": model.url, "DEMO_KEY": key,
               "MCPX_HOOKS_DEMO_MODEL_KEY_ENV": "DEMO_KEY"}  # fmt: skip
        done = subprocess.run(
            [*CLI, "demo"], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the job said hello" in done.stdout
        assert model.headers and all(
            h.get("authorization") == f"Bearer {key}" for h in model.headers
        )
    assert key not in done.stdout + done.stderr
