"""The autonomy dial from every way in, and the floor of locked hooks (issue 25, cases 3, 4).

`off` is a level like the others: the config's `[autonomy] hooks`, `exec --autonomy`, a
request's `"autonomy"` and a hook's own `effect` each may say it, and the hook frame shows the
effect in force (`effect`, `requestedEffect`, `clampedBy`) and the hook's answer does no more
than that effect permits. A locked hook of the operator's config is not lowered by the
caller's level (config, flag or request), only by its phase and `autonomy.max`, and its frame
says `callerAutonomyIgnored` when that kept it above the caller's level.

The property drives the real ways in: `exec` (`cli.main`, in process) for the flag, and a
service on a socket (`live_service.py`) for the request; the hooks are tiny real processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_service import LiveService, StrictUnavailable, run

from mcpx_hooks.supervisor.cli import main as cli

#: The levels, least to most, as a person writes them (the oracle below does not use `Effect`).
LEVELS = ("off", "advise", "ask", "propose", "apply", "run")
#: What a phase allows at most (`suffix` only advice); the others allow everything.
PHASE_MOST = {"suffix": "advise"}
#: The hook's answer: a key for advice, and a command that only `run` executes.
ANSWER = {"advise": "seen", "run": {"argv": ["true"]}}
HOOK_ARGV = ["sh", "-c", f"cat >/dev/null; echo '{json.dumps(ANSWER)}'"]


def rank(level: str) -> int:
    return LEVELS.index(level)


def expected(
    *,
    effect: str | None,
    phase: str,
    config_hooks: str | None,
    config_max: str | None,
    caller: str | None,
    floor: bool,
) -> dict[str, Any]:
    """The effect in force, by the contract's words: the declared effect (default `advise`)
    lowered by the phase, by the caller's level (the config's `hooks`, lowered by the flag
    or the request; not for a hook the floor keeps) and by `autonomy.max`."""
    requested = effect or "advise"
    callers = [level for level in (config_hooks, caller) if level is not None]
    caller_level = min(callers, key=rank) if callers else "run"
    now, by = requested, list[str]()
    for source, most in (
        ("phase", PHASE_MOST.get(phase, "run")),
        ("hooks.autonomy", None if floor else caller_level),
        ("autonomy.max", config_max or "run"),
    ):
        if most is not None and rank(now) > rank(most):
            now, by = most, [*by, source]
    return {
        "effect": now,
        "requestedEffect": requested,
        "clampedBy": by,
        "callerAutonomyIgnored": floor and rank(now) > rank(caller_level),
    }


def hook_object(phase: str, effect: str | None, locked: bool, sandbox: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "name": "dial",
        "on": "script",
        "phase": phase,
        "run": HOOK_ARGV,
        "sandbox": sandbox,
    }
    if effect is not None:
        obj["effect"] = effect
    if locked:
        obj["locked"] = True
    return obj


def config_toml(hooks: str | None, most: str | None, hook: dict[str, Any] | None) -> str:
    lines = ["[autonomy]"]
    lines += [f'hooks = "{hooks}"'] if hooks is not None else []
    lines += [f'max = "{most}"'] if most is not None else []
    if hook is not None:
        lines.append("[[hooks]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in hook.items()]
    return "\n".join(lines) + "\n"


def run_exec(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: Any = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue()


def the_hook_frame(frames: list[dict[str, Any]]) -> dict[str, Any]:
    (frame,) = [f for f in frames if f.get("type") == "hook" and f.get("name") == "dial"]
    return frame


def check_frame(frame: dict[str, Any], want: dict[str, Any]) -> None:
    """The frame says the effect in force, and the answer did no more than it permits."""
    got = {
        "effect": frame["effect"],
        "requestedEffect": frame["requestedEffect"],
        "clampedBy": frame["clampedBy"],
        "callerAutonomyIgnored": frame.get("callerAutonomyIgnored", False),
    }
    assert got == want, frame
    assert frame["status"] == "ok", frame
    level = rank(want["effect"])
    assert frame.get("advice", []) == (["seen"] if level >= rank("advise") else []), frame
    if level >= rank("run"):
        assert frame["ran"]["status"] == "ok", frame
    else:
        assert "ran" not in frame, frame
        assert "run" in [d["key"] for d in frame["dropped"]], frame


@pytest.fixture
def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory, no discovery, empty user config and state directories."""
    home = tmp_path / "person"
    home.mkdir()
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    monkeypatch.delenv("MCPX_HOOKS_TRUST", raising=False)
    monkeypatch.chdir(home)
    return home


level = st.none() | st.sampled_from(LEVELS)


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)
# Issue 25, case 3 (the flag and the request each saying `off` to a `run` hook), and case 4
# (a locked fail-closed `ask` gate lowered to advice by the request).
@example(way="flag", declared="per-call", effect="run", phase="before", locked=False,
         config_hooks=None, config_max=None, caller="off")  # fmt: skip
@example(way="request", declared="per-call", effect="run", phase="before", locked=False,
         config_hooks=None, config_max=None, caller="off")  # fmt: skip
@example(way="request", declared="config", effect="ask", phase="before", locked=True,
         config_hooks=None, config_max=None, caller="advise")  # fmt: skip
@example(way="flag", declared="config", effect="run", phase="onSuccess", locked=True,
         config_hooks="off", config_max="apply", caller="off")  # fmt: skip
@given(
    way=st.sampled_from(["flag", "request"]),
    declared=st.sampled_from(["config", "per-call"]),
    effect=level,
    phase=st.sampled_from(["before", "onSuccess", "onError", "suffix"]),
    locked=st.booleans(),
    config_hooks=level,
    config_max=level,
    caller=level,
)
def test_every_level_from_every_way_in(
    person: Path,
    way: str,
    declared: str,
    effect: str | None,
    phase: str,
    locked: bool,
    config_hooks: str | None,
    config_max: str | None,
    caller: str | None,
) -> None:
    # A per-call hook is the caller's own: the floor is for the operator's config only.
    want = expected(
        effect=effect,
        phase=phase,
        config_hooks=config_hooks,
        config_max=config_max,
        caller=caller,
        floor=locked and declared == "config",
    )
    script = ["false"] if phase == "onError" else ["true"]
    if way == "flag":
        hook = hook_object(phase, effect, locked, "none")
        in_file = hook if declared == "config" else None
        (person / "c.toml").write_text(config_toml(config_hooks, config_max, in_file))
        argv = ["exec", "--json", "--config", "c.toml"]
        argv += ["--autonomy", caller] if caller is not None else []
        argv += ["--hook", json.dumps(hook)] if declared == "per-call" else []
        code, out, err = run_exec([*argv, "--", *script])
        assert code == (1 if phase == "onError" else 0), (code, err)
        frames = [json.loads(line) for line in out.splitlines()]
    else:
        # The server's own hooks run as it says (`none`); a request may name `strict`.
        hook = hook_object(phase, effect, locked, "none" if declared == "config" else "strict")
        in_file = hook if declared == "config" else None
        live = LiveService(person, config_toml(config_hooks, config_max, in_file))
        try:
            live.start()
        except StrictUnavailable as exc:
            pytest.skip(f"the service's sandbox cannot be had here: {exc}")
        try:
            request: dict[str, Any] = {"argv": script}
            request |= {"autonomy": caller} if caller is not None else {}
            request |= {"hooks": [hook]} if declared == "per-call" else {}
            seen = run(live.url, request)
        finally:
            live.stop()
        assert seen.code == 1000 and not seen.errors, str(seen)
        frames = seen.frames
    check_frame(the_hook_frame(frames), want)


# ---- the repros as written, through the real command and a real server --------------------


def write_answering_script(directory: Path, marker: Path) -> None:
    """`ans.sh`: answers a `run` that writes `marker`."""
    answer = {"run": {"argv": ["sh", "-c", f"echo RAN >{marker}"]}}
    script = directory / "ans.sh"
    script.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{json.dumps(answer)}'\n")
    script.chmod(0o755)


CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def test_exec_autonomy_off_switches_off_a_run_hook(tmp_path: Path) -> None:
    """Case 3 as filed: `exec --autonomy off` with a `run` hook whose answer writes a file."""
    marker = tmp_path / "m"
    write_answering_script(tmp_path, marker)
    hook = {
        "on": "script",
        "phase": "before",
        "effect": "run",
        "sandbox": "none",
        "run": ["./ans.sh"],
    }
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_CONFIG_HOME": str(tmp_path / "x")}
    done = subprocess.run(
        [*CLI, "exec", "--autonomy", "off", "--hook", json.dumps(hook), "--", "true"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "effect off (requested run; lowered by hooks.autonomy)" in done.stdout
    assert not marker.exists()


#: The operator's gate: locked, fail-closed, `ask`; `exit 1` fails it, `ask` asks (default no).
GATE_TOML = """
[[hooks]]
name = "gate"
on = "script"
phase = "before"
effect = "ask"
failure = "closed"
locked = true
sandbox = "none"
run = {run}
"""
FAILING = ["sh", "-c", "cat >/dev/null; exit 1"]
ASK = {"ask": {"question": "go?", "default": "no", "deadlineMs": 0}}  # nobody answers a request
ASKING = ["sh", "-c", f"cat >/dev/null; echo '{json.dumps(ASK)}'"]
SCRIPT = ["sh", "-c", "echo SCRIPT-RAN"]


def check_gate_held(frames: list[dict[str, Any]]) -> None:
    (gate,) = [f for f in frames if f.get("type") == "hook" and f["name"] == "gate"]
    assert (gate["effect"], gate["clampedBy"]) == ("ask", []), gate
    assert gate["callerAutonomyIgnored"] is True, gate
    assert gate["refused"] is not None, gate
    (error,) = [f for f in frames if f["type"] == "error"]
    assert error["refusedBy"] == "gate", error
    assert not any("SCRIPT-RAN" in f.get("text", "") for f in frames), frames


@pytest.mark.parametrize("gate", [FAILING, ASKING], ids=["fails", "asks"])
def test_a_request_cannot_lower_a_locked_gate(person: Path, gate: list[str]) -> None:
    """Case 4 as filed: the server's locked fail-closed `ask` gate, a request asking
    `"autonomy": "advise"` (and one asking `off`): the gate holds, the script never runs."""
    live = LiveService(person, GATE_TOML.format(run=json.dumps(gate)))
    try:
        live.start()
    except StrictUnavailable as exc:
        pytest.skip(f"the service's sandbox cannot be had here: {exc}")
    try:
        for level in ("advise", "off"):
            seen = run(live.url, {"argv": SCRIPT, "autonomy": level})
            assert seen.code == 1000, str(seen)
            check_gate_held(seen.frames)
    finally:
        live.stop()


@pytest.mark.parametrize("source", ["flag", "config"])
def test_exec_cannot_lower_a_locked_gate(person: Path, source: str) -> None:
    """The same through `exec`: `--autonomy advise`, or a nearer file's `[autonomy] hooks`."""
    (person / "gate.toml").write_text(GATE_TOML.format(run=json.dumps(ASKING)))
    (person / "near.toml").write_text('[autonomy]\nhooks = "off"\n')
    argv = ["exec", "--json", "--no", "--config", "gate.toml"]
    argv += ["--autonomy", "advise"] if source == "flag" else ["--config", "near.toml"]
    code, out, err = run_exec([*argv, "--", *SCRIPT])
    assert code != 0, (out, err)
    check_gate_held([json.loads(line) for line in out.splitlines()])


def test_a_gate_that_is_not_locked_is_lowered_and_says_nothing_of_a_floor(person: Path) -> None:
    unlocked = GATE_TOML.format(run=json.dumps(ASKING)).replace("locked = true\n", "")
    (person / "gate.toml").write_text(unlocked)
    argv = ["exec", "--json", "--no", "--config", "gate.toml", "--autonomy", "advise"]
    code, out, err = run_exec([*argv, "--", *SCRIPT])
    assert code == 0, (out, err)
    frames = [json.loads(line) for line in out.splitlines()]
    (gate,) = [f for f in frames if f.get("type") == "hook"]
    assert (gate["effect"], gate["clampedBy"]) == ("advise", ["hooks.autonomy"])
    assert "callerAutonomyIgnored" not in gate
    assert any("SCRIPT-RAN" in f.get("text", "") for f in frames)


def test_exec_explain_says_the_floor(person: Path) -> None:
    """`exec --explain` shows the effect in force as a run would have it, the floor included."""
    (person / "gate.toml").write_text(GATE_TOML.format(run=json.dumps(ASKING)))
    argv = ["exec", "--explain", "--json", "--config", "gate.toml", "--autonomy", "off"]
    code, out, err = run_exec([*argv, "--", "true"])
    assert code == 0, err
    (gate,) = json.loads(out)["hooks"]
    assert (gate["effect"], gate["callerAutonomyIgnored"]) == ("ask", True), gate


def test_exec_remote_autonomy_off_reaches_the_server(person: Path) -> None:
    """`exec --remote --autonomy off`: the request says `off`, and the server's run keeps it."""
    from service_client import start_server

    server = start_server(person)
    try:
        hook = hook_object("before", "run", False, "strict")
        argv = ["exec", "--json", "--remote", server.url, "--autonomy", "off"]
        argv += ["--token-file", str(person / "token"), "--hook", json.dumps(hook), "--", "true"]
        done = subprocess.run(
            [*CLI, *argv], cwd=person, capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        assert server.stop() == 0
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    check_frame(
        the_hook_frame(frames),
        {
            "effect": "off",
            "requestedEffect": "run",
            "clampedBy": ["hooks.autonomy"],
            "callerAutonomyIgnored": False,
        },
    )
