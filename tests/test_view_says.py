"""What the readable views must say for a person to see why, without `--json`: a proposal's
note, why a `run` answer's command failed, an observe hook's reason on one bounded line, and
`hook test` of an observe hook given an event its `when.kinds` takes. Real hooks, the
installed command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcpx_hooks.supervisor.cli.printable import LINE_CHARS

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def mcpx(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    done = subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done


def answering(said: object, *, effect: str, phase: str = "before", name: str = "h") -> str:
    """A hook (no sandbox) that prints `said` as its JSON answer."""
    program = f"import sys; sys.stdin.read(); print({json.dumps(json.dumps(said))})"
    hook = {"name": name, "on": "script", "phase": phase, "effect": effect, "sandbox": "none",
            "run": [sys.executable, "-c", program]}  # fmt: skip
    return json.dumps(hook)


def test_a_proposal_s_note_is_shown_with_its_value(tmp_path: Path) -> None:
    # The note (why the hook proposes it) was in --json only: "proposes: 3", no "whole".
    hook = answering(
        {"propose": {"value": 3, "note": "whole"}}, effect="propose", phase="onSuccess"
    )
    done = mcpx(tmp_path, "exec", "--sandbox", "none", "--hook", hook, "--", "true")
    assert "  proposes: 3 (note: whole)" in done.stdout.splitlines(), done.stdout
    assert "  proposed by h: 3 (note: whole)" in done.stdout.splitlines(), done.stdout
    long = answering({"propose": {"value": 1, "note": "n" * 50_000}}, effect="propose")
    shown = mcpx(tmp_path, "hook", "test", "--hook", long).stdout
    assert max(map(len, shown.splitlines())) < LINE_CHARS + 40, shown
    assert "more characters (all of it: --json)" in shown, shown


def test_a_run_answer_that_failed_says_why(tmp_path: Path) -> None:
    # It said only "ran sh -c '…': failed (exit 3)": not what the command printed, so a
    # person could not see why without --json.
    argv = ["sh", "-c", "echo partial; echo 'no such table: users' >&2; exit 3"]
    hook = answering({"run": {"argv": argv}}, effect="run")
    shown = mcpx(tmp_path, "hook", "test", "--hook", hook).stdout.splitlines()
    ran = next(i for i, line in enumerate(shown) if line.startswith("  ran sh -c"))
    assert ": failed (exit 3) in " in shown[ran], shown[ran]
    assert shown[ran + 1 : ran + 5] == [
        "  ran's stdout (first lines):",
        "    | partial",
        "  ran's stderr (last lines):",
        "    | no such table: users",
    ], shown
    # A command that could not start says why (its stderrTail holds the reason).
    hook = answering({"run": {"argv": ["/nonexistent/tool"]}}, effect="run")
    shown = mcpx(tmp_path, "hook", "test", "--hook", hook).stdout
    assert (
        "  ran's stderr (last lines):" in shown
        and "/nonexistent/tool" in shown.split("ran's stderr")[1]
    ), shown
    # A command killed by a signal says which.
    hook = answering({"run": {"argv": ["sh", "-c", "kill -9 $$"]}}, effect="run")
    shown = mcpx(tmp_path, "hook", "test", "--hook", hook).stdout
    assert "(killed by signal 9)" in shown, shown
    # One that went well is its one line, as before.
    hook = answering({"run": {"argv": ["sh", "-c", "echo fine"]}}, effect="run")
    shown = mcpx(tmp_path, "hook", "test", "--hook", hook).stdout
    assert "  ran sh -c 'echo fine': ok in " in shown and "ran's stdout" not in shown, shown


def test_an_observe_hook_s_long_reason_is_cut_on_its_line(tmp_path: Path) -> None:
    # A reason past 400 characters was printed whole on exec's stderr (a spawn error
    # bounds its path at some 900; a model's or a tool server's error is not bounded).
    hook = {"name": "notify", "on": "run.finished", "sandbox": "none",
            "run": ["/nonexistent/" + "d" * 600 + "/tool"]}  # fmt: skip
    done = mcpx(tmp_path, "exec", "--sandbox", "none", "--hook", json.dumps(hook), "--", "true")
    said = [line for line in done.stderr.splitlines() if "observe hook notify" in line]
    assert len(said) == 1, done.stderr
    assert len(said[0]) < LINE_CHARS + 120, len(said[0])
    assert said[0].startswith("mcpx-hooks exec: observe hook notify (on run.finished) failed")
    assert said[0].endswith(" more characters)"), said[0]


def test_hook_test_gives_an_observe_hook_an_event_its_when_kinds_takes(tmp_path: Path) -> None:
    # `on = "*"` with `when.kinds = ["hook.failed"]` was given a `run.finished` event, one
    # the hook never sees in a run.
    seen = tmp_path / "kind"
    program = f"import os; open({str(seen)!r}, 'w').write(os.environ['MCPX_HOOK_EVENT_KIND'])"
    hook = {"name": "calls", "on": "*", "when": {"kinds": ["hook.failed"]}, "sandbox": "none",
            "run": [sys.executable, "-c", program]}  # fmt: skip
    done = mcpx(tmp_path, "hook", "test", "--hook", json.dumps(hook))
    assert done.returncode == 0, done.stdout + done.stderr
    assert seen.read_text() == "hook.failed"
    (tmp_path / "event.json").write_text('{"event": {"kind": "run.finished"}}')
    done = mcpx(tmp_path, "hook", "test", "--event", "event.json", "--hook", json.dumps(hook))
    assert done.returncode == 2, done.stdout
    assert 'when.kinds = ["hook.failed"]' in done.stderr, done.stderr
