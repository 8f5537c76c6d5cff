"""docs/getting-started.md, done as a reader would, in a scratch project: each shell command
of the walkthrough run as written (the `mcpx-hooks` of this checkout first on PATH, a home of
the test's own, discovery on), each config as the page shows it, and what the page says the
commands print compared with what they print (run ids and durations aside)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "getting-started.md"


def blocks() -> list[tuple[str, str]]:
    """The page's fenced blocks, in order: (language, text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", DOC.read_text(), flags=re.DOTALL | re.MULTILINE)


def after(found: list[tuple[str, str]], text: str) -> str:
    """The text of the block right after the one holding `text`."""
    at = next(i for i, (_, body) in enumerate(found) if text in body)
    return found[at + 1][1]


def shown(output: str, proj: Path) -> list[str]:
    output = output.replace(str(proj), "/tmp/proj")
    output = re.sub(r"\brun [0-9a-f]{16}\b", "run ID", output)
    output = re.sub(r"\b\d+ ms\b", "N ms", output)
    return output.strip().splitlines()


def test_getting_started_walkthrough_prints_what_the_page_shows(tmp_path: Path) -> None:
    found = blocks()
    tmp_path.chmod(0o755)
    proj = tmp_path / "proj"
    proj.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MCPX_HOOKS_")}  # fmt: skip
    home = tmp_path / "home"
    path = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_STATE_HOME=str(home / ".local" / "state"), PATH=path)  # fmt: skip

    def sh(command: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["sh", "-c", command], cwd=proj, env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in done.stderr
        return done

    # A first run: no hook yet.
    first = next(body for lang, body in found if lang == "sh" and "exec -- echo hello" in body)
    done = sh(first)
    assert done.returncode == 0, done.stderr
    assert shown(done.stdout, proj) == shown(after(found, first), proj)

    # A first hook: init, the gate the page shows is the starter's first hook.
    init = next(body for lang, body in found if lang == "sh" and body.strip() == "mcpx-hooks init")
    assert sh(init).returncode == 0
    starter = (proj / ".mcpx-hooks.toml").read_text()
    gate = tomllib.loads(after(found, init))["hooks"][0]
    assert tomllib.loads(starter)["hooks"][0] == gate
    # "Set enabled = true", in that first hook.
    head, _, rest = starter.partition("enabled = false")
    (proj / ".mcpx-hooks.toml").write_text(head + "enabled = true" + rest)

    # Validate: checked although not trusted yet; exit 0.
    validate = next(b for lang, b in found if lang == "sh" and b.strip() == "mcpx-hooks validate")
    done = sh(validate)
    assert done.returncode == 0, done.stdout + done.stderr
    said = re.search(r"it prints ``(ok: .*?)``", " ".join(DOC.read_text().split()))
    assert said is not None, "the page says what validate prints"
    assert done.stdout == said[1] + "\n"
    assert "warning: skipped" in done.stderr  # (the page says it comes, as for every command)

    # Not trusted: every command says so, as the page shows.
    warning = next(body for lang, body in found if lang == "" and "warning: skipped" in body)
    done = sh(first)
    assert shown(warning, proj)[0] in shown(done.stdout, proj)

    # Trust it, then the run has its hook, as the page shows.
    trust = next(b for lang, b in found if lang == "sh" and b.strip() == "mcpx-hooks trust")
    assert sh(trust).returncode == 0
    again = [body for lang, body in found if lang == "sh" and "exec -- echo hello" in body][1]
    done = sh(again)
    assert done.returncode == 0, done.stderr
    assert shown(done.stdout, proj) == shown(_last_output(found), proj)


def _last_output(found: list[tuple[str, str]]) -> str:
    """The page's last output block (the run with its hook)."""
    return [body for lang, body in found if lang == "" and body.startswith("run ")][-1]


def test_getting_started_validate_and_trust_catch_a_typo(tmp_path: Path) -> None:
    """The page's promise, "validate before trust", holds for a file not trusted yet."""
    tmp_path.chmod(0o755)
    proj = tmp_path / "proj"
    proj.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_")}
    env.update(HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"))
    cli = [sys.executable, "-m", "mcpx_hooks.supervisor"]
    gate = tomllib.loads(after(blocks(), "mcpx-hooks init"))["hooks"][0]
    (proj / ".mcpx-hooks.toml").write_text(
        '[[hooks]]\nname = "needs-python"\non = "script"\nphase = "before"\n'
        f'run = {gate["run"]!r}\neffect = "askk"\n'.replace("'", '"')
    )
    for command in (["validate"], ["trust"]):
        done = subprocess.run([*cli, *command], cwd=proj, env=env, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f"{proj / '.mcpx-hooks.toml'}:/hooks/0/effect" in done.stdout + done.stderr
