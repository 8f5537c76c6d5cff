"""Docs that name what the code does: the `skipped` reasons in docs/hooks.md, the tests the
README says run again as an ordinary user."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_hooks_md_gives_the_reasons_a_hook_is_skipped() -> None:
    from mcpx_hooks.supervisor.run.prompthook import NO_MODEL, TOKEN_BUDGET

    row = next(
        line for line in (ROOT / "docs" / "hooks.md").read_text().splitlines()
        if line.startswith("| `skipped` |")
    )  # fmt: skip
    assert "no runner" not in row and "yet" not in row
    for reason in ("enabled = false", NO_MODEL, TOKEN_BUDGET, "source"):
        assert reason in row, reason


def test_the_readme_names_only_tests_that_run_again_unprivileged() -> None:
    script = (ROOT / ".ci" / "unprivileged").read_text()
    listed = set(re.findall(r"tests/(test_\w+\.py)", script.split("PYTEST=")[0]))
    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("`make test` runs") : readme.index("## Using it")]
    named = set(re.findall(r"(test_\w+\.py)", paragraph))
    assert named - {"test_rootless.py"} <= listed, named - listed
    assert {"test_mcp_face.py", "test_plugin_hooks.py"} <= listed  # what it says, in words
    for words in ("tool servers", "MCP face", "property suite", "cluster"):
        assert words in paragraph, words


def _block_after(doc: str, marker: str) -> str:
    """The first fenced code block after `marker` in `doc`."""
    text = (ROOT / "docs" / doc).read_text()
    rest = text[text.index(marker) :]
    start = rest.index("```python\n") + len("```python\n")
    return rest[start : rest.index("```", start)]


def test_ci_md_summary_hook_says_how_the_run_went_after_a_timeout_a_failure_or_a_success(
    tmp_path: Path,
) -> None:
    """docs/ci.md's `summary.py`, run by a real `exec` as the suffix hook it is there: after a
    timeout (no exitCode), a failure (an exitCode) and a success."""
    import json
    import os
    import subprocess
    import sys

    tmp_path.chmod(0o755)
    (tmp_path / "summary.py").write_text(_block_after("ci.md", "`hooks/summary.py` (a"))
    (tmp_path / "c.toml").write_text(
        '[[hooks]]\nname = "summary"\non = "script"\nphase = "suffix"\n'
        f'run = ["{sys.executable}", "summary.py"]\n'
    )
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}

    def advice(*argv: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--config",
             "c.toml", *argv],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        frames = [json.loads(line) for line in done.stdout.splitlines()]
        hook = next(f for f in frames if f["type"] == "hook" and f["name"] == "summary")
        assert hook["status"] == "ok", hook
        return list(hook.get("advice", []))

    timed_out = advice("--timeout", "0.3", "--", "sleep", "30")
    assert len(timed_out) == 1 and timed_out[0].startswith("summary: the run failed: "), timed_out
    assert advice("--", "sh", "-c", "exit 4") == ["summary: tests failed (exit 4)"]
    assert advice("--", "true") == ["summary: all green"]


def _blocks(doc: str) -> list[tuple[str, str]]:
    """The fenced code blocks of `doc`, each as (its language, its text)."""
    text = (ROOT / "docs" / doc).read_text()
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def _shown(output: str) -> list[str]:
    """Output as a doc shows it: run ids and durations are the run's own."""
    output = re.sub(r"\brun [0-9a-f]{16}\b", "run ID", output)
    output = re.sub(r"\b\d+ ms\b", "N ms", output)
    return output.strip().splitlines()


def test_transforming_md_commands_print_what_the_doc_shows(tmp_path: Path) -> None:
    """Every `mcpx-hooks exec` block of docs/transforming.md, run as written (a config the
    page gives beside it written first), and the output block after it, if any, compared."""
    import os
    import subprocess

    blocks = _blocks("transforming.md")
    tmp_path.chmod(0o755)
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    env["PATH"] = f"{Path(sys_executable()).parent}:{env['PATH']}"
    ran = 0
    for at, (lang, command) in enumerate(blocks):
        if lang != "sh" or not command.startswith("mcpx-hooks exec"):
            continue
        if "--config clamp.toml" in command:
            assert blocks[at - 1][0] == "toml"
            (tmp_path / "clamp.toml").write_text(blocks[at - 1][1])
        done = subprocess.run(
            ["sh", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stderr)
        ran += 1
        if at + 1 < len(blocks) and blocks[at + 1][1].startswith("run "):
            assert _shown(done.stdout) == _shown(blocks[at + 1][1]), command
    assert ran == 3


def sys_executable() -> str:
    import sys

    return sys.executable


#: A hook's or server's argv in an example (TOML `run = [` / `command = [`, JSON `"run": [`)
#: whose program is a bare Python: where `python3` on the PATH is a version manager's shim in
#: the home (pyenv), the strict sandbox cannot see it, and the example fails as written.
_BARE_PYTHON = re.compile(r'(?:\b(?:run|command) =|"(?:run|command)":) \["python[0-9.]*"')


def test_no_example_runs_a_bare_python() -> None:
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        lines = page.read_text().splitlines()
        for n, line in enumerate(lines):
            # (what `init --from pre-commit` wrote, shown as it writes it: a transcript)
            imported = any(x.startswith("# from repos[") for x in lines[max(0, n - 12) : n])
            if _BARE_PYTHON.search(line) and not imported:
                found.append(f"{page.relative_to(ROOT)}:{n + 1}: {line.strip()}")
    assert not found, "name the interpreter by its path (/usr/bin/python3):\n" + "\n".join(found)
