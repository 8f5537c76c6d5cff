"""Scripts' tool calls: the `call` point's hooks around each (refusal, args and answer
rewriting), `call` frames in their place among the output, hostile call lines."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from conftest import Marker

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.run.callpoint import args_sha256
from mcpx_hooks.supervisor.run.calls import MAX_ARGS_BYTES, MAX_PENDING
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest

HERE = Path(__file__).parent
HOSTILE = str(HERE / "mcpservers" / "hostile.py")
PY = sys.executable


def answer(obj: Any) -> list[str]:
    """A hook that prints `obj` as its answer."""
    return [PY, "-c", f"print({json.dumps(json.dumps(obj))})"]


def hook(name: str, phase: str, run: list[str], **fields: Any) -> dict[str, Any]:
    return {"name": name, "on": "call", "phase": phase, "run": run, **fields}


async def run_job(
    tmp_path: Path,
    marker: Marker,
    hooks: Sequence[dict[str, Any]],
    script: Script,
    **server: Any,
) -> list[dict[str, Any]]:
    """Runs `script` in `tmp_path` with server `h` (hostile.py good) and `hooks`; returns
    the run's frames, checked against the frame order."""
    config = {
        "defaults": {"sandbox": "none"},
        "servers": {
            "h": {
                "command": [PY, HOSTILE, "good", str(tmp_path / "log"), marker],
                "sandbox": "none",
                **server,
            }
        },
        "hooks": list(hooks),
    }
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config))
    loaded = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    async with open_runtime(loaded) as runtime:
        run = runtime.new_run(RunRequest(script, str(tmp_path)))
        await runtime.execute(run)
        frames = [f for batch in [run.journal.decoded(0)] for f in batch]
    check_order(frames)
    assert marker.alive() == []
    return frames


def python(tmp_path: Path, body: str) -> Script:
    (tmp_path / "job.py").write_text(textwrap.dedent(body))
    return Script(python_file="job.py")


def of(frames: list[dict[str, Any]], *types: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] in types]


@pytest.fixture
def leak_free(no_leaks: None) -> None:
    return None


async def test_a_before_hook_refuses_a_call_and_the_script_gets_why(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    hooks = [
        hook(
            "no-rm",
            "before",
            answer({"refuse": "rm is not allowed"}),
            effect="ask",
            when={"tool": ["h.rm"]},
        ),
        hook("saw-error", "onError", answer({"advise": "seen"})),
    ]
    script = python(
        tmp_path,
        """
        import mcpx
        def main():
            print("before")
            try:
                mcpx_call("h.rm", {"path": "/"})
            except mcpx.CallError as exc:
                return str(exc)
    """,
    )
    frames = await run_job(tmp_path, marker, hooks, script)
    (call,) = of(frames, "call")
    assert call["ok"] is False and call["refusedBy"] == "no-rm"
    assert call["error"] == "refused by no-rm: rm is not allowed"
    assert of(frames, "result")[0]["value"] == "refused by no-rm: rm is not allowed"
    shown = [(f["type"], f.get("name")) for f in of(frames, "stdout", "hook", "call")]
    assert shown == [("stdout", None), ("hook", "no-rm"), ("call", None), ("hook", "saw-error")]
    assert not (tmp_path / "log").exists()  # the server was never needed, so never started


async def test_before_applies_new_args_and_on_success_replaces_the_answer(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    hooks = [
        hook("rewrite", "before", answer({"apply": {"value": {"path": "/safe"}}}), effect="apply"),
        hook(
            "polish",
            "onSuccess",
            answer({"apply": {"value": {"polished": True}}}),
            effect="apply",
            when={"server": ["h"], "tool": ["echo"]},
        ),
        hook("after", "suffix", answer({"advise": "done"})),
    ]
    script = python(
        tmp_path,
        """
        def main():
            first = mcpx_call("h.echo", {"path": "/etc/passwd"})
            second = mcpx_call("h.rm", {"path": "/x"})
            return [first, second]
    """,
    )
    frames = await run_job(tmp_path, marker, hooks, script)
    assert of(frames, "result")[0]["value"] == [{"polished": True}, {"path": "/safe"}]
    calls = of(frames, "call")
    assert [c["argsSha256"] for c in calls] == [args_sha256({"path": "/safe"})] * 2
    assert calls[1]["destructiveHint"] is True and "destructiveHint" not in calls[0]
    polish = next(f for f in frames if f.get("name") == "polish")
    assert polish["changed"] and polish["original"] == {"path": "/safe"}
    steps = [f.get("name") or f["type"] for f in of(frames, "hook", "call")]
    assert steps == ["rewrite", "call", "polish", "after", "rewrite", "call", "after"]


async def test_on_error_may_turn_a_failed_call_into_a_value(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    hooks = [hook("rescue", "onError", answer({"apply": {"value": "fallback"}}), effect="apply")]
    script = python(tmp_path, 'def main():\n    return mcpx_call("h.fail", {"x": 1})\n')
    frames = await run_job(tmp_path, marker, hooks, script)
    (call,) = of(frames, "call")
    assert call["ok"] is False and call["error"] == '{"x": 1}'
    assert of(frames, "result")[0]["value"] == "fallback"


async def test_on_error_cannot_turn_a_refused_call_into_a_value_and_its_frame_says_so(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    """A refusal stands: the `onError` hook's `apply` is dropped (named in `dropped`), not
    shown as a change the script never got."""
    hooks = [
        hook("no-rm", "before", answer({"refuse": "no"}), effect="ask"),
        hook("rescue", "onError", answer({"apply": {"value": "fallback"}}), effect="apply"),
    ]
    script = python(
        tmp_path,
        """
        import mcpx
        def main():
            try:
                return mcpx_call("h.rm", {"path": "/"})
            except mcpx.CallError as exc:
                return "still refused: " + str(exc)
    """,
    )
    frames = await run_job(tmp_path, marker, hooks, script)
    assert of(frames, "result")[0]["value"] == "still refused: refused by no-rm: no"
    rescue = next(f for f in frames if f.get("name") == "rescue")
    assert rescue["changed"] is False and "value" not in rescue
    assert rescue["dropped"] == [
        {"key": "apply", "reason": "refused by no-rm: a refusal is never turned into a result"}
    ]


async def test_calls_interleave_with_output_and_never_carry_args_or_answers(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    hooks = [hook("look", "before", answer({}))]
    script = python(
        tmp_path,
        """
        import mcpx
        def main():
            for i in range(3):
                print("line", i)
                mcpx.log("logged", i=i)
                mcpx_call("h.echo", {"token": "s3cr3t-value-%d" % i})
            return "ok"
    """,
    )
    frames = await run_job(tmp_path, marker, hooks, script)
    # stdout and the frames channel are two pipes: their frames interleave as they are read
    kinds = sorted(f["type"] for f in frames if f["type"] in ("stdout", "log", "call"))
    assert kinds == ["call"] * 3 + ["log"] * 3 + ["stdout"] * 3
    assert "s3cr3t-value" not in json.dumps([f for f in frames if f["type"] != "hook"])
    assert [c["id"] for c in of(frames, "call")] == [1, 2, 3]


HOSTILE_LINES = f"""
import json, os, sys
out = os.fdopen(3, "w", buffering=1)
answers = os.fdopen(int(os.environ["MCPX_CALLS_FD"]), "r")
big = "x" * {MAX_ARGS_BYTES}
lines = [
    "not json at all",
    json.dumps({{"type": "call", "tool": "h.echo"}}),
    json.dumps({{"type": "call", "id": 1, "tool": "nodot"}}),
    json.dumps({{"type": "call", "id": 2, "tool": "nope.echo"}}),
    json.dumps({{"type": "call", "id": 3, "tool": "h.echo", "args": [1]}}),
    json.dumps({{"type": "call", "id": 4, "tool": "h.echo", "args": {{"a": big}}}}),
    json.dumps({{"type": "call", "id": 5, "tool": "h.nosuch"}}),
    json.dumps({{"type": "call", "id": 6, "tool": "h.echo", "args": {{"fine": True}}}}),
    json.dumps({{"type": "call", "id": 7, "tool": "h." + "x" * 300}}),
]
for line in lines:
    out.write(line + "\\n")
got = [json.loads(answers.readline()) for _ in range(8)]
# A flood: more calls than may wait, none read until all are written.
for n in range(100, 100 + 3 * {MAX_PENDING}):
    out.write(json.dumps({{"type": "call", "id": n, "tool": "h.echo"}}) + "\\n")
flood = [json.loads(answers.readline()) for _ in range(3 * {MAX_PENDING})]
out.write(json.dumps({{"type": "result", "value": [got, flood]}}) + "\\n")
"""


async def test_hostile_call_lines_get_clear_answers_and_crash_nothing(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    frames = await run_job(tmp_path, marker, [], Script(argv=(PY, "-c", HOSTILE_LINES)))
    got, flood = of(frames, "result")[0]["value"]
    by_id = {a["id"]: a for a in got}
    assert by_id[None] == {
        "id": None,
        "ok": False,
        "error": "a call needs an `id` (an integer or a string of at most 256)",
    }
    assert by_id[1]["error"] == '`tool` must be "server.tool", at most 256 characters'
    assert "no tool server named 'nope'" in by_id[2]["error"]
    assert by_id[3]["error"] == "`args` must be an object"
    assert by_id[4]["error"] == f"`args` over {MAX_ARGS_BYTES} bytes"
    assert "lists no tool 'nosuch'" in by_id[5]["error"]
    assert by_id[6] == {"id": 6, "ok": True, "value": {"fine": True}}
    assert by_id[7]["error"] == by_id[1]["error"]
    (bad,) = [f for f in of(frames, "log") if "not json at all" in f["message"]]
    assert bad["level"] == "warning" and bad["message"].startswith("frames channel: ")
    served = [a for a in flood if a["ok"]]
    refused = [a for a in flood if not a["ok"]]
    assert len(served) >= MAX_PENDING and refused
    assert all("calls waiting" in a["error"] for a in refused)
    assert psutil.Process().children(recursive=True) == []


async def test_a_call_where_no_server_is_declared_says_so(tmp_path: Path, no_leaks: None) -> None:
    """A runtime whose config declares no server runs no manager; a call still says which
    server it named and that none is declared, as where others are."""
    script = python(tmp_path, 'result = mcpx_call("words.count", {"text": "a b"})')
    loaded = load_config([], cwd=tmp_path, environ=os.environ, discover=False)
    async with open_runtime(loaded) as runtime:
        assert runtime.servers is None
        run = runtime.new_run(RunRequest(script, str(tmp_path)))
        await runtime.execute(run)
        frames = run.journal.decoded(0)
    check_order(frames)
    (error,) = of(frames, "error")
    why = "no tool server named 'words' is declared ([servers.words]; declared: none)"
    assert why in error["message"]


async def test_a_script_that_ends_with_a_call_in_flight_cancels_it(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    script = Script(
        argv=(
            PY,
            "-c",
            "import os, json; os.write(3, (json.dumps({'type': 'call', 'id': 1,"
            " 'tool': 'h.wait'}) + '\\n').encode())",
        )
    )
    with trio.fail_after(30):
        frames = await run_job(tmp_path, marker, [], script)
    assert of(frames, "call") == [] and of(frames, "result")


async def test_a_server_s_secret_it_echoes_is_redacted_in_frames_and_events(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPX_TEST_TOKEN", "hunter2-is-the-password")
    command = [PY, HOSTILE, "leak", str(tmp_path / "log"), marker]
    script = python(
        tmp_path,
        """
        import mcpx
        def main():
            try:
                mcpx_call("h.echo", {})
            except mcpx.CallError as exc:
                return str(exc)  # the script's own: it may see what its tool said
    """,
    )
    hooks = [hook("saw", "onError", answer({}))]
    frames = await run_job(
        tmp_path, marker, hooks, script, command=command, secrets=["MCPX_TEST_TOKEN"]
    )
    (call,) = of(frames, "call")
    assert call["error"] == "no: [secret MCPX_TEST_TOKEN]"
    outcome = of(frames, "result")[0]
    assert outcome["value"] == "no: [secret MCPX_TEST_TOKEN]"  # redacted in the frame too
    assert "hunter2" not in json.dumps(frames)


async def test_args_applied_that_are_not_an_object_are_not_sent(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    hooks = [hook("odd", "before", answer({"apply": {"value": "not args"}}), effect="apply")]
    script = python(
        tmp_path,
        """
        import mcpx
        def main():
            try:
                mcpx_call("h.echo", {"a": 1})
            except mcpx.CallError as exc:
                return str(exc)
    """,
    )
    frames = await run_job(tmp_path, marker, hooks, script)
    assert of(frames, "result")[0]["value"].startswith("a before hook applied arguments that")
    assert not (tmp_path / "log").exists()


async def test_landing_and_suffix_hooks_are_told_which_call_they_follow(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    # Each hook advises what its stdin said of the call: `result`/`error` carry
    # `server` and `tool` beside the answer.
    tell = [
        PY,
        "-c",
        "import json,sys; d=json.load(sys.stdin); c=d.get('result') or d.get('error');"
        " print(json.dumps({'advise': d['hook']['phase'] + ' ' + c['server'] + '.' + c['tool']}))",
    ]
    hooks = [hook(name, name, tell) for name in ("onSuccess", "onError", "suffix")]
    script = python(
        tmp_path,
        """
        import mcpx
        def main():
            mcpx_call("h.echo", {"x": 1})
            try:
                mcpx_call("h.fail", {"x": 1})
            except mcpx.CallError:
                pass
    """,
    )
    frames = await run_job(tmp_path, marker, hooks, script)
    said = [a for f in of(frames, "hook") for a in f.get("advice", [])]
    assert said == ["onSuccess h.echo", "suffix h.echo", "onError h.fail", "suffix h.fail"]


async def test_a_server_s_pass_env_never_passes_a_model_s_key_or_the_token(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[servers.h] passEnv = ["MCPX_*"]` passed the server a model's `apiKeyEnv` (here
    MCPX_TEST_TOKEN) unredacted; the supervisor's own secrets are never passed by a glob."""
    monkeypatch.setenv("MCPX_TEST_TOKEN", "hunter2-is-the-password")
    monkeypatch.setenv("MCPX_HOOKS_TOKEN", "the-service-token")
    config = {
        "models": {
            "default": {
                "provider": "openai",
                "url": "http://127.0.0.1:9/v1",
                "model": "m",
                "apiKeyEnv": "MCPX_TEST_TOKEN",
            }
        },
        "servers": {
            "h": {
                "command": [PY, HOSTILE, "leak", str(tmp_path / "log"), marker],
                "sandbox": "none",
                "passEnv": ["MCPX_*"],
            }
        },
    }
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config))
    loaded = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    script = python(
        tmp_path,
        """
        import mcpx
        def main():
            try:
                mcpx_call("h.echo", {})
            except mcpx.CallError as exc:
                return str(exc)
    """,
    )
    async with open_runtime(loaded) as runtime:
        run = runtime.new_run(RunRequest(script, str(tmp_path)))
        await runtime.execute(run)
        frames = run.journal.decoded(0)
    assert marker.alive() == []
    (call,) = of(frames, "call")
    assert call["error"] == "no: "  # the server saw no MCPX_TEST_TOKEN
