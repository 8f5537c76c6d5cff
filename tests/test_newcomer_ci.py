"""The newcomer's CI job (issue 15, "Done means"): a real pytest project gated, advised,
summarised and observed, run as a real `mcpx-hooks exec --json` process with the default
profiles (the script under `workspace`, the hooks under `strict`; no `sandbox` anywhere).

The hooks are written the way people write git hooks: a shell gate that answers with its exit
status, Python files reading their JSON stdin and printing plain text. The Python hooks name
their interpreter by path (this one, which every profile sees as "the Python in use"), as
docs/hooks.md advises: `python3` on a developer's PATH may be a version manager's shim
under a home the strict profile does not show. The project's
`.mcpx-hooks.toml` is trusted for the command by `MCPX_HOOKS_TRUST=all`, as a CI job does.
The run fails first (a bug in the module), then passes once it is fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from mcpx_hooks.supervisor.cli.common import EXEC_EXIT_CODES, EXIT_OK, cause_exit_codes
from mcpx_hooks.supervisor.core.frames import ErrorCause
from mcpx_hooks.supervisor.core.order import check_order

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = """\
from calc import add


def test_add_zero():
    assert add(2, 0) == 2


def test_add():
    assert add(1, 2) == 3
"""

#: onError: the failing tests' names, from the end of pytest's stdout.
FAILED_TESTS = """\
import json, sys

error = json.load(sys.stdin)["error"]
names = [line.split()[1] for line in error["stdoutTail"].splitlines() if line.startswith("FAILED ")]
print("fix " + ", ".join(names) if names else "no test failed; see stderr")
"""

#: suffix: one line on how the run went, from whichever of `result` / `error` it has.
SUMMARY = """\
import json, sys

given = json.load(sys.stdin)
error = given.get("error")
print(f"summary: tests failed (exit {error['exitCode']})" if error else "summary: all green")
"""


def config(marks: Path) -> str:
    observed = json.dumps(str(marks / "observed.json"))
    python = json.dumps(sys.executable)
    return f"""\
[sandbox]
write = [{json.dumps(str(marks))}]

[[hooks]]
name = "python-present"
on = "script"
phase = "before"
effect = "ask"
failure = "closed"
run = ["sh", "-c", "command -v python3 >/dev/null || exit 1"]

[[hooks]]
name = "failed-tests"
on = "script"
phase = "onError"
run = [{python}, "hooks/failed_tests.py"]

[[hooks]]
name = "summary"
on = "script"
phase = "suffix"
run = [{python}, "hooks/summary.py"]

[[hooks]]
name = "notify"
on = "run.finished"
phase = "observe"
run = ["sh", "-c", {json.dumps(f"cat > {observed}")}]
"""


def make_project(root: Path) -> tuple[Path, Path]:
    """The project (buggy), and the directory its observe hook writes its marker in."""
    project, marks = root / "project", root / "marks"
    (project / "hooks").mkdir(parents=True)
    marks.mkdir()
    (project / "calc.py").write_text(BUGGY)
    (project / "test_calc.py").write_text(TESTS)
    (project / "hooks" / "failed_tests.py").write_text(FAILED_TESTS)
    (project / "hooks" / "summary.py").write_text(SUMMARY)
    (project / ".mcpx-hooks.toml").write_text(config(marks))
    return project, marks


def run_ci(project: Path, home: Path) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_STATE_HOME=str(home / "state"),
        MCPX_HOOKS_TRUST="all",
    )
    argv = [*CLI, "exec", "--json", "--", sys.executable, "-m", "pytest", "-q"]
    out = subprocess.run(
        [*argv, "--junitxml=report.xml"],
        check=False,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    check_order(frames)  # the contract's order, gap-free seqs
    assert "Traceback" not in out.stderr
    assert "observe hook" not in out.stderr  # none failed nor was cut short
    return out, frames


def hook_frames(frames: list[Any]) -> dict[str, Any]:
    return {f["name"]: f for f in frames if f["type"] == "hook"}


def assert_gated_and_summarised(frames: list[Any], summary: str) -> None:
    start = frames[0]
    assert start["type"] == "start" and start["sandbox"] == "workspace"
    hooks = hook_frames(frames)
    gate = hooks["python-present"]
    assert (gate["phase"], gate["status"], gate["refused"]) == ("before", "ok", None)
    assert gate["sandbox"] == "strict" and "advice" not in gate  # exit 0 and no text: a pass
    assert frames[1] is gate  # the gate runs before the script
    after = hooks["summary"]
    assert (after["phase"], after["status"], after["sandbox"]) == ("suffix", "ok", "strict")
    assert after["advice"] == [summary]
    assert frames[-2] is after and frames[-1]["type"] == "end"


def assert_observed(marks: Path, run_id: str) -> None:
    event = json.loads((marks / "observed.json").read_text())
    assert event["hook"]["phase"] == "observe"
    assert event["event"]["kind"] == "run.finished"
    assert event["event"]["runId"] == run_id
    (marks / "observed.json").unlink()


def junit(project: Path) -> dict[str, str]:
    """report.xml, as pytest wrote it in the project: each test's name and how it went."""
    suite = ET.parse(project / "report.xml").getroot().find("testsuite")
    assert suite is not None
    return {
        case.attrib["name"]: "failed" if case.find("failure") is not None else "passed"
        for case in suite.iter("testcase")
    }


def test_the_newcomers_ci_job_gated_advised_summarised_and_observed(tmp_path: Path) -> None:
    project, marks = make_project(tmp_path)
    home = tmp_path / "home"

    # The bug: one test fails, and exec exits with pytest's own code.
    out, frames = run_ci(project, home)
    [error] = [f for f in frames if f["type"] == "error"]
    assert ErrorCause.SCRIPT not in cause_exit_codes()  # "the script's own" row of the table
    assert None in [code for code, _ in EXEC_EXIT_CODES]
    assert error["cause"] == ErrorCause.SCRIPT
    assert out.returncode == error["exitCode"] == frames[-1]["exitCode"] == 1, out.stderr
    advice = hook_frames(frames)["failed-tests"]
    assert (advice["phase"], advice["status"], advice["sandbox"]) == ("onError", "ok", "strict")
    assert advice["advice"] == ["fix test_calc.py::test_add"]
    assert error["advice"] == ["fix test_calc.py::test_add"]  # attached to the outcome
    assert_gated_and_summarised(frames, "summary: tests failed (exit 1)")
    assert junit(project) == {"test_add_zero": "passed", "test_add": "failed"}
    assert_observed(marks, frames[0]["runId"])

    # Fixed: the job passes, no advice, the same gate, summary and observer.
    (project / "calc.py").write_text(FIXED)
    (project / "report.xml").unlink()
    out, frames = run_ci(project, home)
    assert out.returncode == frames[-1]["exitCode"] == EXIT_OK, out.stderr
    assert [f["type"] for f in frames if f["type"] in ("result", "error")] == ["result"]
    assert "failed-tests" not in hook_frames(frames)
    assert_gated_and_summarised(frames, "summary: all green")
    assert junit(project) == {"test_add_zero": "passed", "test_add": "passed"}
    assert_observed(marks, frames[0]["runId"])
