"""A script run with its hooks, end to end in process: every path keeps SPEC §6's order."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.hooks import Config
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.run.runtime import Runtime, open_runtime
from mcpx_hooks.supervisor.run.scriptrun import Run, RunRequest

PY = sys.executable


def config(tmp_path: Path, *hooks: dict[str, Any], **top: Any) -> Config:
    doc = {"defaults": {"sandbox": "none", "timeoutMs": 5000}, "hooks": list(hooks), **top}
    (tmp_path / "c.json").write_text(json.dumps(doc))
    return load_config(["c.json"], cwd=tmp_path, environ={}, discover=False)


def answer(obj: dict[str, Any]) -> list[str]:
    """A run hook printing `obj` as its answer."""
    return ["sh", "-c", f"cat >/dev/null; echo '{json.dumps(obj)}'"]


def hook(name: str, phase: str, run: list[str], **more: Any) -> dict[str, Any]:
    return {"name": name, "on": "script", "phase": phase, "run": run, **more}


@pytest.fixture
def no_leftovers() -> AsyncIterator[None]:
    yield
    assert psutil.Process().children(recursive=True) == []


async def run_to_end(
    cfg: Config, request: RunRequest, *, while_running: Any = None
) -> list[dict[str, Any]]:
    async with open_runtime(cfg) as runtime:
        run = runtime.new_run(request)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.execute, run)
            if while_running is not None:
                await while_running(runtime, run)
        frames = run.journal.frames
    check_order(frames)
    return frames


def of(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind]


def outcome(frames: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [f for f in frames if f["type"] in ("result", "error")]
    return found


def argv_request(tmp_path: Path, *argv: str, **more: Any) -> RunRequest:
    return RunRequest(Script(argv=argv), str(tmp_path), **more)


def python_request(tmp_path: Path, code: str, **more: Any) -> RunRequest:
    (tmp_path / "job.py").write_text(textwrap.dedent(code))
    return RunRequest(Script(python_file="job.py"), str(tmp_path), **more)


async def test_argv_success_streams_output_frames(tmp_path: Path, no_leftovers: None) -> None:
    script = (
        "echo out1; echo err1 >&2; "
        'echo \'{"type": "log", "level": "info", "message": "m", "attrs": {"k": 1}}\' >&3; '
        'echo \'{"type": "emit", "value": [1]}\' >&3; '
        'echo data > "$MCPX_ARTIFACTS_DIR/report.txt"; echo \'{"n": 42}\''
    )
    frames = await run_to_end(config(tmp_path), argv_request(tmp_path, "sh", "-c", script))
    assert [f["text"] for f in of(frames, "stdout")] == ["out1", '{"n": 42}']
    assert [f["text"] for f in of(frames, "stderr")] == ["err1"]
    assert of(frames, "log")[0]["attrs"] == {"k": 1}
    assert of(frames, "emit")[0]["value"] == [1]
    (artifact,) = of(frames, "artifact")
    assert (artifact["name"], artifact["size"], artifact["mime"]) == ("report.txt", 5, "text/plain")
    assert outcome(frames)["type"] == "result"
    assert outcome(frames)["value"] is None  # stdout is two lines: not one JSON value
    assert frames[-1]["exitCode"] == 0


async def test_argv_result_line_and_stdout_json(tmp_path: Path) -> None:
    frames = await run_to_end(config(tmp_path), argv_request(tmp_path, "echo", '{"n": 1}'))
    assert outcome(frames)["value"] == {"n": 1}
    line = 'echo \'{"type": "result", "value": 7}\' >&3; echo \'{"n": 1}\''
    frames = await run_to_end(config(tmp_path), argv_request(tmp_path, "sh", "-c", line))
    assert outcome(frames)["value"] == 7


#: One JSON value on one line of stdout, ~150 KB: longer than a line is kept whole as a frame.
BIG = "import json; print(json.dumps({'k': ['s' * 1000] * 150}))"


async def test_one_big_json_value_on_stdout_is_the_result(tmp_path: Path) -> None:
    frames = await run_to_end(config(tmp_path), argv_request(tmp_path, PY, "-c", BIG))
    assert outcome(frames)["value"] == {"k": ["s" * 1000] * 150}
    assert of(frames, "warning") == []
    # The output frames still cut the line in pieces of 64 KiB; the result is read whole.
    pieces = [f["text"] for f in of(frames, "stdout")]
    assert [len(p) for p in pieces[:-1]] == [64 * 1024] * (len(pieces) - 1)
    assert json.loads("".join(pieces)) == outcome(frames)["value"]


async def test_stdout_over_16_mib_is_not_the_result_and_a_warning_says_why(
    tmp_path: Path,
) -> None:
    over = "import json; print(json.dumps(['x' * 1024] * (17 * 1024)))"  # 17 MiB and a bit
    frames = await run_to_end(config(tmp_path), argv_request(tmp_path, PY, "-c", over))
    ended = outcome(frames)
    assert (ended["type"], ended["value"]) == ("result", None)
    (warning,) = of(frames, "warning")
    assert "stdout is over 16 MiB" in warning["message"]
    assert "its result is null" in warning["message"]


async def test_failure_goes_to_on_error_with_exit_code(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    cfg = config(
        tmp_path,
        hook("see", "onError", ["sh", "-c", f"cat > {seen}"]),
        hook("never", "onSuccess", ["sh", "-c", f"touch {tmp_path}/never"]),
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "sh", "-c", "echo bad >&2; exit 3"))
    error = outcome(frames)
    assert error["type"] == "error" and error["exitCode"] == 3
    assert "status 3" in error["message"]
    assert json.loads(seen.read_text())["error"]["stderrTail"] == "bad\n"
    assert not (tmp_path / "never").exists()


async def test_python_main_result_and_source_phases(tmp_path: Path) -> None:
    code = "def main():\n    print('body')\n    return {'x': 1}\n"
    sources = {
        Phase.BEFORE: ("print('before')",),
        Phase.ON_SUCCESS: ("print('onSuccess', result)",),
        Phase.SUFFIX: ("print('suffix')",),
    }
    frames = await run_to_end(config(tmp_path), python_request(tmp_path, code, sources=sources))
    texts = [f["text"] for f in of(frames, "stdout")]
    assert texts == ["before", "body", "onSuccess {'x': 1}", "suffix"]
    assert outcome(frames)["value"] == {"x": 1}


async def test_python_failure_at_import_still_runs_on_error_and_suffix(tmp_path: Path) -> None:
    sources = {
        Phase.ON_ERROR: ("print('onError', type(error).__name__)",),
        Phase.SUFFIX: ("print('suffix')",),
    }
    request = python_request(tmp_path, "raise ValueError('at import')\n", sources=sources)
    frames = await run_to_end(config(tmp_path), request)
    assert [f["text"] for f in of(frames, "stdout")] == ["onError ValueError", "suffix"]
    error = outcome(frames)
    assert error["type"] == "error"
    assert error["message"] == "ValueError: at import"
    assert error["exitCode"] == 1


async def test_before_refusal_skips_the_script(tmp_path: Path, no_leftovers: None) -> None:
    touched = tmp_path / "ran"
    cfg = config(
        tmp_path,
        hook("gate", "before", answer({"refuse": {"reason": "not today"}}), effect="ask"),
        hook("later", "before", answer({"advise": "never runs"})),
        hook("onerr", "onError", answer({"advise": "saw the refusal"})),
        hook("onerr2", "onError", answer({"advise": "me too"})),
        hook("fin", "suffix", answer({"advise": "suffix ran"})),
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "touch", str(touched)))
    assert not touched.exists()
    assert not of(frames, "stdout") and not of(frames, "stderr")
    error = outcome(frames)
    assert error["refusedBy"] == "gate"
    assert error["message"] == "refused by gate: not today"
    assert [f["name"] for f in of(frames, "hook")] == ["gate", "onerr", "onerr2", "fin"]
    assert error["advice"] == ["saw the refusal", "me too"]


async def test_fail_closed_timeout_refuses(tmp_path: Path, no_leftovers: None) -> None:
    touched = tmp_path / "ran"
    cfg = config(
        tmp_path,
        hook(
            "slow",
            "before",
            ["sleep", "30"],
            effect="ask",
            failure="closed",
            timeoutMs=200,
            killGraceMs=50,
        ),
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "touch", str(touched)))
    assert not touched.exists()
    (slow,) = of(frames, "hook")
    assert slow["status"] == "timeout" and slow["refused"]["failClosed"] is True
    assert outcome(frames)["refusedBy"] == "slow"


async def test_fail_open_timeout_carries_on(tmp_path: Path) -> None:
    cfg = config(tmp_path, hook("slow", "before", ["sleep", "30"], timeoutMs=200))
    frames = await run_to_end(cfg, argv_request(tmp_path, "echo", "1"))
    assert of(frames, "hook")[0]["status"] == "timeout"
    assert outcome(frames) == {**outcome(frames), "type": "result", "value": 1}


async def test_ask_unanswered_takes_its_default(tmp_path: Path) -> None:
    ask_no = answer({"ask": {"question": "go?", "deadlineMs": 50}})
    ask_yes = answer({"ask": {"question": "go?", "default": "yes", "deadlineMs": 50}})
    cfg = config(
        tmp_path,
        hook("yes", "before", ask_yes, effect="ask"),
        hook("no", "before", ask_no, effect="ask"),
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "true"))
    yes, no = of(frames, "hook")
    assert yes["asked"] == {"question": "go?", "answer": "yes", "by": "deadline"}
    assert yes["refused"] is None
    assert no["asked"] == {"question": "go?", "answer": "no", "by": "deadline"}
    assert no["refused"]["reason"] == "go? (unanswered by the deadline, default no)"
    # Each hook's `ask` frame stands right before its hook frame.
    kinds = [(f["type"], f.get("hook") or f.get("name")) for f in frames[1:5]]
    assert kinds == [("ask", "yes"), ("hook", "yes"), ("ask", "no"), ("hook", "no")]
    assert outcome(frames)["refusedBy"] == "no"


async def test_apply_chain_and_proposals_and_advice(tmp_path: Path) -> None:
    double = [
        PY,
        "-I",
        "-S",
        "-c",
        "import json,sys; v=json.load(sys.stdin)['result']['value'];"
        "print(json.dumps({'apply': {'value': v * 2}}))",
    ]
    cfg = config(
        tmp_path,
        hook("in", "before", answer({"apply": {"value": {"n": 5}}}), effect="apply"),
        hook("d1", "onSuccess", double, effect="apply"),
        hook("d2", "onSuccess", double, effect="apply"),
        hook(
            "p",
            "onSuccess",
            answer({"propose": {"value": 0, "note": "zero?"}, "advise": "fine"}),
            effect="propose",
        ),
        hook("late", "suffix", answer({"apply": {"value": -1}}), effect="apply"),
    )
    read_input = "import json, os; print(json.load(open(os.environ['MCPX_INPUT']))['n'])"
    request = argv_request(tmp_path, PY, "-I", "-S", "-c", read_input, input=({"n": 1},))
    frames = await run_to_end(cfg, request)
    hooks = {f["name"]: f for f in of(frames, "hook")}
    assert (hooks["d1"]["original"], hooks["d1"]["value"]) == (5, 10)
    assert (hooks["d2"]["original"], hooks["d2"]["value"]) == (10, 20)
    result = outcome(frames)
    assert result["value"] == 20
    assert result["advice"] == ["fine"]
    assert result["proposals"] == [{"hook": "p", "value": 0, "note": "zero?"}]
    assert hooks["late"]["effect"] == "advise" and hooks["late"]["clampedBy"] == ["phase"]
    assert [d["key"] for d in hooks["late"]["dropped"]] == ["apply"]


async def test_on_error_apply_turns_failure_into_result(tmp_path: Path) -> None:
    cfg = config(
        tmp_path, hook("fix", "onError", answer({"apply": {"value": "fallback"}}), effect="apply")
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "false"))
    assert outcome(frames)["type"] == "result" and outcome(frames)["value"] == "fallback"
    assert of(frames, "hook")[0]["original"]["exitCode"] == 1


async def test_on_error_apply_after_a_refusal_is_dropped_and_its_frame_says_so(
    tmp_path: Path,
) -> None:
    """A refusal is never turned into a result: the `onError` hook's `apply` is dropped,
    named in its frame's `dropped`, and the frame does not say it changed anything."""
    cfg = config(
        tmp_path,
        hook("gate", "before", answer({"refuse": "not today"}), effect="ask"),
        hook("fix", "onError", answer({"apply": {"value": 1}, "advise": "x"}), effect="apply"),
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "true"))
    assert outcome(frames)["type"] == "error" and outcome(frames)["refusedBy"] == "gate"
    fix = of(frames, "hook")[1]
    assert fix["changed"] is False and "original" not in fix and "value" not in fix
    assert fix["advice"] == ["x"]
    assert fix["dropped"] == [
        {
            "key": "apply",
            "reason": "refused by gate: a refusal is never turned into a result",
        }
    ]


async def test_an_on_error_refusal_after_a_refusal_leaves_the_first_said(
    tmp_path: Path,
) -> None:
    """The run's error names the hook that stopped it (a fail-closed `before` gate here):
    an `onError` hook that says no as well does not take its place."""
    cfg = config(
        tmp_path,
        hook("gate", "before", ["false"], effect="ask", failure="closed"),
        hook("late", "onError", answer({"refuse": "and no"}), effect="ask"),
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "true"))
    error = outcome(frames)
    assert error["type"] == "error" and error["refusedBy"] == "gate", error
    assert error["message"].startswith("refused by gate: gate failed (failed)")
    assert of(frames, "hook")[1]["refused"]["reason"] == "and no"  # its own frame says it


async def test_caller_autonomy_clamps_and_is_reported(tmp_path: Path) -> None:
    cfg = config(tmp_path, hook("fix", "onError", answer({"apply": {"value": 1}}), effect="apply"))
    frames = await run_to_end(cfg, argv_request(tmp_path, "false", autonomy=_advise()))
    (fix,) = of(frames, "hook")
    assert fix["effect"] == "advise" and fix["clampedBy"] == ["hooks.autonomy"]
    assert outcome(frames)["type"] == "error"


def _advise() -> Any:
    from mcpx_hooks.supervisor.core.effects import Effect

    return Effect.ADVISE


async def test_cancel_runs_suffix_and_ends(tmp_path: Path, no_leftovers: None) -> None:
    cfg = config(tmp_path, hook("fin", "suffix", answer({"advise": "cleaned up"})))

    async def cancel_when_ready(runtime: Runtime, run: Run) -> None:
        async for batch in run.journal.follow(0):
            if any(f.get("text") == "ready" for f in batch):
                run.cancel()
                return

    request = argv_request(tmp_path, "sh", "-c", "echo ready; sleep 30 & sleep 40")
    frames = await run_to_end(cfg, request, while_running=cancel_when_ready)
    assert outcome(frames)["message"] == "cancelled"
    assert of(frames, "hook")[0]["advice"] == ["cleaned up"]
    assert frames[-1]["type"] == "end"


async def test_script_timeout_is_an_error(tmp_path: Path, no_leftovers: None) -> None:
    frames = await run_to_end(
        config(tmp_path), argv_request(tmp_path, "sleep", "30", timeout_ms=200)
    )
    assert "timed out after 200 ms" in outcome(frames)["message"]


async def test_missing_program_is_an_error_frame(tmp_path: Path) -> None:
    frames = await run_to_end(config(tmp_path), argv_request(tmp_path, "no-such-prog-x"))
    assert "could not start" in outcome(frames)["message"]


async def test_env_and_stdin_reach_the_script(tmp_path: Path) -> None:
    request = argv_request(
        tmp_path, "sh", "-c", 'read line; echo "$line $FOO"', stdin=b"hi\n", env={"FOO": "bar"}
    )
    frames = await run_to_end(config(tmp_path), request)
    assert [f["text"] for f in of(frames, "stdout")] == ["hi bar"]


async def test_run_publishes_events(tmp_path: Path) -> None:
    cfg = config(tmp_path, hook("b", "before", answer({"advise": "x", "bogus": 1})))
    async with open_runtime(cfg) as runtime, runtime.bus.subscribe(since=0) as sub:
        run = runtime.new_run(argv_request(tmp_path, "true"))
        await runtime.execute(run)
        kinds = []
        async for item in sub:
            kinds.append(getattr(item, "kind", "gap"))
            if kinds[-1] == "run.finished":
                break
    assert kinds == [
        "supervisor.started",
        "run.started",
        "hook.started",
        "hook.finished",
        "hook.dropped",
        "run.finished",
    ]


def test_env_var_is_not_leaked_to_the_script(tmp_path: Path) -> None:
    os.environ.setdefault("MCPX_TEST_SECRET", "s3cret")
    frames = trio.run(run_to_end, config(tmp_path), argv_request(tmp_path, "env"))
    assert not [f for f in of(frames, "stdout") if "MCPX_TEST_SECRET" in f["text"]]


EFFECT_ANSWERS: dict[str, dict[str, Any]] = {
    "advise": {"advise": "a"},
    "refuse": {"refuse": "no"},
    "propose": {"propose": {"value": 1}},
    "apply": {"apply": {"value": 2}},
    "run": {"run": {"argv": ["true"]}},
}
KEY_NEEDS = {
    "advise": "advise",
    "refuse": "ask",
    "propose": "propose",
    "apply": "apply",
    "run": "run",
}


@pytest.mark.parametrize("key", sorted(EFFECT_ANSWERS))
@pytest.mark.parametrize("phase", ["before", "onSuccess", "onError", "suffix"])
async def test_each_effect_in_each_phase(tmp_path: Path, phase: str, key: str) -> None:
    """Declared `run`, each answer key is honoured where the phase allows it and dropped
    (named, with the phase as the clamp) where it does not."""
    cfg = config(tmp_path, hook("h", phase, answer(EFFECT_ANSWERS[key]), effect="run"))
    script = "false" if phase == "onError" else "true"
    frames = await run_to_end(cfg, argv_request(tmp_path, script))
    (frame,) = of(frames, "hook")
    allowed = phase != "suffix" or key == "advise"
    assert frame["effect"] == ("advise" if phase == "suffix" else "run")
    assert [d["key"] for d in frame["dropped"]] == ([] if allowed else [key])
    if not allowed:
        assert frame["clampedBy"] == ["phase"]
        return
    result = outcome(frames)
    if key == "refuse":
        assert result["type"] == "error" and result["refusedBy"] == "h"
        # before: the script never ran; after it, the error keeps the script's exit code
        assert result.get("exitCode") == {"before": None, "onSuccess": 0, "onError": 1}[phase]
    elif key == "apply":
        assert frame["changed"] is True
        if phase != "before":
            assert result == {**result, "type": "result", "value": 2}
    elif key == "propose":
        assert result.get("proposals", []) == (
            [{"hook": "h", "value": 1}] if result["type"] == "result" else []
        )
    elif key == "run":
        assert frame["ran"]["status"] == "ok"
    elif key == "advise" and phase != "suffix":
        assert result["advice"] == ["a"]


async def test_a_run_answer_s_command_has_a_timeout_and_a_duration_of_its_own(
    tmp_path: Path, no_leftovers: None
) -> None:
    # The command a `run` answer names gets the hook's timeoutMs again, after the hook's: the
    # frame's durationMs is the hook's own, and `ran` said nothing of how long its command
    # took (a hook of 300 ms took 600 ms, and read as 300).
    run_sleep = answer({"run": {"argv": ["sleep", "100"]}})
    cfg = config(tmp_path, hook("h", "before", run_sleep, effect="run", timeoutMs=300))
    (frame,) = of(await run_to_end(cfg, argv_request(tmp_path, "true")), "hook")
    assert frame["status"] == "ok" and frame["ran"]["status"] == "timeout"
    assert 300 <= frame["ran"]["durationMs"] < 300 + 5000
    assert frame["durationMs"] < 300 + 5000


async def test_a_profile_that_cannot_be_had_is_said_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Landlock hidden from the spawner: strict and workspace cannot be enforced. The run says
    # why once per profile, in a warning; each hook and the script point to it.
    monkeypatch.setenv("MCPX_HOOKS_HIDE", "landlock")
    cfg = config(
        tmp_path,
        hook("a", "before", ["true"], sandbox="strict"),
        hook("b", "before", ["true"], sandbox="strict"),
        script={"sandbox": "workspace"},
    )
    frames = await run_to_end(cfg, argv_request(tmp_path, "true"))
    warnings = [f["message"] for f in of(frames, "warning")]
    assert len(warnings) == 2
    assert warnings[0].startswith('sandbox "workspace" cannot be enforced on this machine: missing')
    assert warnings[1].startswith('sandbox "strict" cannot be enforced on this machine: missing')
    assert all("landlock: hidden by MCPX_HOOKS_HIDE" in w for w in warnings)
    short = "cannot be enforced on this machine (the run's warning says why"
    reasons = [f["reason"] for f in of(frames, "hook")]
    assert len(reasons) == 2 and all(short in r and "missing" not in r for r in reasons)
    assert short in outcome(frames)["message"] and "missing" not in outcome(frames)["message"]
