"""Prompt hooks in runs: their own timeout, the run's token budget, each model's cap on
requests in flight, the command provider, the cache, the run's placeholders, `@source` and
`@artifacts`, and the API key as a secret."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import cast

import psutil
import pytest
import trio
import trio.testing
from loopmodel import LoopModel, Reply
from prompting import (
    config,
    failing,
    hooks_of,
    of,
    openai_model,
    private_state,
    prompt_hook,
    run_many,
    run_to_end,
    serving,
    succeeding,
    user_message,
)

from mcpx_hooks.supervisor.core.events import Event
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest

model = pytest.fixture(serving)
state = pytest.fixture(autouse=True)(private_state)


def unused_spawner() -> Spawner:
    """The openai provider sends no process anywhere: these hooks never use a spawner."""
    return cast(Spawner, object())


def ctx() -> HookContext:
    run = RunInfo("r1", ("job",), "/", "2026-01-01T00:00:00Z")
    return HookContext(run, error={"message": "boom"})


async def test_the_hook_s_own_timeout_in_virtual_time(
    tmp_path: Path, model: LoopModel, autojump_clock: trio.testing.MockClock
) -> None:
    model.default = Reply('{"advise": "late"}', delay=3600)  # answers when the server closes
    cfg = config(
        tmp_path,
        prompt_hook("slow", "onError", "@error", failure="closed", effect="ask"),
        models={"default": openai_model(model.url)},
        defaults={"timeoutMs": 1000, "sandbox": "none"},
    )
    (hook,) = cfg.hooks
    start = trio.current_time()
    frame = (await run_hook(unused_spawner(), hook, ctx())).frame
    # 30 s by default, its own: not [defaults] timeoutMs (the process hooks'), not the script's.
    assert trio.current_time() - start == pytest.approx(30)
    assert frame.status == "timeout" and "after 30000 ms" in (frame.reason or "")
    assert frame.refused is not None and frame.refused.fail_closed


async def test_the_wait_for_max_concurrent_counts_in_the_timeout(
    tmp_path: Path, model: LoopModel, autojump_clock: trio.testing.MockClock
) -> None:
    model.default = Reply('{"advise": "late"}', delay=3600)
    cfg = config(
        tmp_path,
        prompt_hook("slow", "onError", "@error", timeoutMs=1000),
        models={"default": openai_model(model.url, maxConcurrent=1)},
    )
    (hook,) = cfg.hooks
    frames = []

    async def one() -> None:
        frames.append((await run_hook(unused_spawner(), hook, ctx())).frame)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one)
    assert trio.current_time() - start == pytest.approx(1)
    # All three within the one second, two of them still waiting for the cap: the wait is
    # the hook's time too. (Virtual time jumps while a request is on its real socket, so
    # whether the first reached the server is not the point here.)
    assert [f.status for f in frames] == ["timeout"] * 3
    assert model.most_in_flight <= 1


async def test_a_real_slow_server_times_out_on_its_socket(tmp_path: Path, model: LoopModel) -> None:
    model.default = Reply('{"advise": "late"}', delay=3600)
    cfg = config(
        tmp_path,
        prompt_hook("slow", "onError", "@error", timeoutMs=200),
        models={"default": openai_model(model.url)},
    )
    frames = await run_to_end(cfg, failing(tmp_path))
    frame = hooks_of(frames)["slow"]
    assert frame["status"] == "timeout" and "after 200 ms" in frame["reason"]
    assert of(frames, "error")[0]["cause"] == "script"  # open: the run's own error stands


async def test_past_the_run_budget_the_rest_are_skipped(tmp_path: Path, model: LoopModel) -> None:
    model.default = Reply('{"advise": "x"}', usage=(1500, 400))
    cfg = config(
        tmp_path,
        *(prompt_hook(f"p{i}", "onError", "@error") for i in range(3)),
        models={"runBudgetTokens": 3000, "default": openai_model(model.url)},
    )
    frames = await run_to_end(cfg, failing(tmp_path))
    found = hooks_of(frames)
    assert [found[f"p{i}"]["status"] for i in range(3)] == ["ok", "ok", "skipped"]
    assert found["p2"]["reason"] == "token budget"
    assert len(model.requests) == 2
    # The second may answer with at most what the budget has left after its messages.
    assert model.requests[0]["max_tokens"] == 1024
    assert 0 < model.requests[1]["max_tokens"] < 3000 - 1900
    # Another run has a budget of its own.
    again = hooks_of(await run_to_end(cfg, failing(tmp_path)))
    assert again["p0"]["status"] == "ok"


async def test_a_request_that_alone_would_pass_the_budget_is_not_sent(
    tmp_path: Path, model: LoopModel
) -> None:
    cfg = config(
        tmp_path,
        prompt_hook("p", "onError", "@error"),
        models={"runBudgetTokens": 100, "default": openai_model(model.url)},
    )
    frames = await run_to_end(cfg, failing(tmp_path))
    frame = hooks_of(frames)["p"]
    assert (frame["status"], frame["reason"]) == ("skipped", "token budget")
    assert model.requests == []
    # Nothing was spent: the run says which budget, and what to change.
    (warning,) = of(frames, "warning")
    said = warning["message"]
    assert said.startswith('prompt hook "p" was skipped: past the run\'s token budget')
    assert "runBudgetTokens = 100; 0 spent so far" in said and "raise runBudgetTokens" in said


async def test_a_nearer_file_cannot_raise_the_budget(tmp_path: Path) -> None:
    from mcpx_hooks.supervisor.config.loading import load_config

    (tmp_path / "a.json").write_text(json.dumps({"models": {"runBudgetTokens": 10}}))
    (tmp_path / "b.json").write_text(json.dumps({"models": {"runBudgetTokens": 99}}))
    cfg = load_config(["a.json", "b.json"], cwd=tmp_path, environ={}, discover=False)
    assert cfg.models.run_budget_tokens == 10
    assert any("models.runBudgetTokens" in w for w in cfg.warnings)


async def test_max_concurrent_caps_requests_in_flight_over_runs(
    tmp_path: Path, model: LoopModel
) -> None:
    model.default = Reply('{"advise": "x"}', delay=0.05)
    cfg = config(
        tmp_path,
        prompt_hook("p", "onError", "@error"),
        models={"default": openai_model(model.url, maxConcurrent=1)},
    )
    runs = await run_many(cfg, [failing(tmp_path) for _ in range(4)])
    assert [hooks_of(frames)["p"]["status"] for frames in runs] == ["ok"] * 4
    assert len(model.requests) == 4 and model.most_in_flight == 1


COMMAND_MODEL = textwrap.dedent(
    """
    import json, sys
    body = json.load(sys.stdin)
    user = body["messages"][1]["content"]
    print(json.dumps({"advise": f"{body['model']} read {len(user)} chars"}))
    """
)


async def test_the_command_provider_runs_a_real_process(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(COMMAND_MODEL)
    models = {
        "cli": {
            "provider": "command",
            "command": [sys.executable, "model.py"],
            "sandbox": "none",
        }
    }
    cfg = config(tmp_path, prompt_hook("c", "onError", "@error", model="cli"), models=models)
    frame = hooks_of(await run_to_end(cfg, failing(tmp_path)))["c"]
    assert frame["status"] == "ok" and "read" in frame["advice"][0]
    assert frame["model"] == {"name": "cli", "provider": "command", "model": sys.executable}
    assert frame["tokens"]["prompt"] > 0 and frame["tokens"]["completion"] > 0
    assert psutil.Process().children(recursive=True) == []


async def test_a_command_model_that_fails_or_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the command said last on stderr is on the frame, as a failed process hook's is
    # (its key redacted): "exited with status 4" alone left the operator to guess why.
    monkeypatch.setenv("CLI_MODEL_KEY", "k3y-of-the-cli-model")
    said = 'echo "llm: no model gpt-9 (key $CLI_MODEL_KEY)" >&2; exit 4'
    models = {
        "bad": {
            "provider": "command",
            "command": ["sh", "-c", said],
            "sandbox": "none",
            "apiKeyEnv": "CLI_MODEL_KEY",
        },
        "hang": {"provider": "command", "command": ["sleep", "3600"], "sandbox": "none"},
    }
    cfg = config(
        tmp_path,
        prompt_hook("b", "onError", "@error", model="bad"),
        prompt_hook("h", "onError", "@error", model="hang", timeoutMs=500),
        models=models,
    )
    found = hooks_of(await run_to_end(cfg, failing(tmp_path)))
    assert found["b"]["status"] == "failed" and "exited with status 4" in found["b"]["reason"]
    assert found["b"]["stderrTail"] == "llm: no model gpt-9 (key [secret CLI_MODEL_KEY])\n"
    assert found["h"]["status"] == "timeout"
    assert psutil.Process().children(recursive=True) == []  # its tree killed and reaped


async def test_a_run_answer_is_cached_and_reused(
    tmp_path: Path, model: LoopModel, state: Path
) -> None:
    model.default = Reply(json.dumps({"run": {"argv": ["sh", "-c", "echo ran >> ran.txt"]}}))
    hook = prompt_hook("deps", "before", "install what @input needs", effect="run")
    cfg = config(tmp_path, hook, models={"default": openai_model(model.url)})
    first = hooks_of(await run_to_end(cfg, succeeding(tmp_path, input="requirements.txt")))
    second = hooks_of(await run_to_end(cfg, succeeding(tmp_path, input="requirements.txt")))
    assert first["deps"]["cached"] is False and second["deps"]["cached"] is True
    assert "tokens" not in second["deps"]
    assert len(model.requests) == 1  # the model asked once
    assert (tmp_path / "ran.txt").read_text() == "ran\nran\n"  # the command ran both times
    (entry,) = (state / "mcpx-hooks" / "prompts").glob("*.json")
    stored = json.loads(entry.read_text())
    assert stored["hook"] == "deps" and stored["pointer"] == "/hooks/0"
    assert stored["answer"] == {"run": {"argv": ["sh", "-c", "echo ran >> ran.txt"]}}
    # Other data is another key: the model is asked again.
    await run_to_end(cfg, succeeding(tmp_path, input="other.txt"))
    assert len(model.requests) == 2


async def test_a_state_directory_in_the_checkout_keeps_no_answer_and_the_run_says_why(
    tmp_path: Path, model: LoopModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI job's `XDG_STATE_HOME=$PWD/.state`: its answers could have come with the checkout,
    so none is kept or read there. The model was asked every run and nothing said why; now
    each run says it once (two hooks), with what to do."""
    (tmp_path / ".git").mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / ".state"))
    monkeypatch.chdir(tmp_path)
    model.default = Reply(json.dumps({"run": {"argv": ["true"]}}))
    hooks = [prompt_hook(n, "before", f"check @input ({n})", effect="run") for n in "ab"]
    cfg = config(tmp_path, *hooks, models={"default": openai_model(model.url)})
    for _ in range(2):
        frames = await run_to_end(cfg, succeeding(tmp_path, input="x"))
        assert [hooks_of(frames)[n]["cached"] for n in "ab"] == [False, False]
        (warning,) = [w["message"] for w in of(frames, "warning")]
        assert "prompt answers are not cached in this run" in warning
        assert f"lies inside the git checkout {tmp_path}," in warning
        assert "keep it outside the checkout (XDG_STATE_HOME)" in warning
    assert (
        len(model.requests) == 4 and not (tmp_path / ".state" / "mcpx-hooks" / "prompts").exists()
    )


async def test_advice_is_not_cached(tmp_path: Path, model: LoopModel) -> None:
    model.default = Reply('{"advise": "x"}')
    cfg = config(
        tmp_path, prompt_hook("a", "onError", "@error"), models={"default": openai_model(model.url)}
    )
    for _ in range(2):
        assert hooks_of(await run_to_end(cfg, failing(tmp_path)))["a"]["cached"] is False
    assert len(model.requests) == 2


async def test_run_placeholders_give_vars_their_values(tmp_path: Path, model: LoopModel) -> None:
    cfg = config(
        tmp_path,
        prompt_hook("p", "onError", "tell @team", vars={"team": "ops", "unused": 1}),
        models={"default": openai_model(model.url)},
    )
    await run_to_end(cfg, failing(tmp_path, placeholders={"team": "<b>infra</b>"}))
    user = user_message(model.requests[0])
    assert '"\\u003cb\\u003einfra\\u003c/b\\u003e"' in user and '"ops"' not in user
    await run_to_end(cfg, failing(tmp_path))
    assert '"ops"' in user_message(model.requests[1])


async def test_source_and_artifacts_placeholders(tmp_path: Path, model: LoopModel) -> None:
    (tmp_path / "job.py").write_text(
        "import os\n"
        "def main():\n"
        "    open(os.path.join(os.environ['MCPX_ARTIFACTS_DIR'], 'r.txt'), 'w').write('x')\n"
        "    return 1\n"
    )
    cfg = config(
        tmp_path,
        prompt_hook("p", "onSuccess", "review @source given @artifacts"),
        models={"default": openai_model(model.url)},
    )
    frames = await run_to_end(cfg, RunRequest(Script(python_file="job.py"), str(tmp_path)))
    assert hooks_of(frames)["p"]["status"] == "ok"
    user = user_message(model.requests[0])
    assert "def main():" in user
    assert '"name": "r.txt"' in user and '"sha256"' in user


async def test_the_api_key_is_a_secret(
    tmp_path: Path, model: LoopModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-loop-secret-value-42"
    monkeypatch.setenv("LOOP_KEY", key)
    # A model that echoes the key back, and a script that prints it: both redacted.
    model.default = Reply(json.dumps({"advise": f"your key is {key}"}))
    cfg = config(
        tmp_path,
        prompt_hook("p", "onError", "@error"),
        models={"default": openai_model(model.url, apiKeyEnv="LOOP_KEY")},
    )
    frames = await run_to_end(cfg, failing(tmp_path, f"leaked {key}"))
    assert key not in json.dumps(frames)
    assert hooks_of(frames)["p"]["advice"] == ["your key is [secret LOOP_KEY]"]
    monkeypatch.delenv("LOOP_KEY")
    frame = hooks_of(await run_to_end(cfg, failing(tmp_path)))["p"]
    assert frame["status"] == "failed" and "LOOP_KEY" in frame["reason"]
    monkeypatch.setenv("LOOP_KEY", "abc")  # too short to redact: never sent
    frame = hooks_of(await run_to_end(cfg, failing(tmp_path)))["p"]
    assert frame["status"] == "failed" and "too short to redact" in frame["reason"]
    assert len(model.requests) == 1


async def test_an_observe_prompt_hook_obeys_the_loop_rule_and_asks_no_model(
    tmp_path: Path, model: LoopModel
) -> None:
    model.default = Reply('{"advise": "noted"}')
    observer = prompt_hook("watch", "observe", "what does @event say?")
    observer["on"] = "hook.finished"
    runner = {"name": "r", "on": "script", "phase": "before", "run": ["true"]}
    cfg = config(tmp_path, observer, runner, models={"default": openai_model(model.url)})
    async with open_runtime(cfg) as runtime:
        await runtime.execute(runtime.new_run(succeeding(tmp_path)))
        await runtime.wait_observers()
        async with runtime.bus.subscribe(kinds=("hook.finished",), since=0) as events:
            seen = [await events.__anext__() for _ in range(events.pending)]
    # The run's one hook triggered it once; its own hook.finished never triggers it again.
    (watched,) = [e for e in seen if isinstance(e, Event) and e.data.get("name") == "watch"]
    assert watched.caused_by_observer and watched.data["status"] == "skipped"
    # An observe hook's effect is off: nothing it answered could be used, so no model asked.
    assert watched.data["effect"] == "off" and model.requests == []


async def test_the_command_provider_under_net_by_default(readable_tmp: Path) -> None:
    tmp_path = readable_tmp
    from mcpx_hooks.supervisor.core.hooks import Profile
    from mcpx_hooks.supervisor.process import sandbox
    from mcpx_hooks.supervisor.process.spawner import open_spawner

    async with open_spawner() as spawner:
        try:
            sandbox.require(Profile.NET, spawner)
        except Exception as exc:
            if os.environ.get("CI") == "true":
                raise
            pytest.skip(f"the net profile cannot be enforced here: {exc}")
    models = {
        "cli": {
            "provider": "command",
            "command": ["/bin/sh", "-c", 'cat >/dev/null; echo \'{"advise": "ok"}\''],
        }
    }
    cfg = config(tmp_path, prompt_hook("c", "onError", "@error", model="cli"), models=models)
    frame = hooks_of(await run_to_end(cfg, failing(tmp_path)))["c"]
    assert frame["status"] == "ok" and frame["advice"] == ["ok"], frame.get("reason")


async def test_a_cached_answer_is_used_past_the_budget(tmp_path: Path, model: LoopModel) -> None:
    fix = prompt_hook("fix", "onError", "fix @error.exitCode", effect="run")
    model.replies.append(Reply(json.dumps({"run": {"argv": ["true"]}}), usage=(5, 5)))
    warm = config(tmp_path, fix, models={"default": openai_model(model.url)})
    assert hooks_of(await run_to_end(warm, failing(tmp_path)))["fix"]["cached"] is False
    model.default = Reply('{"advise": "x"}', usage=(40, 20))
    spend = prompt_hook("spend", "onError", "@error")
    budget = {"runBudgetTokens": 50, "default": openai_model(model.url)}
    found = hooks_of(
        await run_to_end(config(tmp_path, spend, fix, models=budget), failing(tmp_path))
    )
    assert found["spend"]["reason"] == "token budget"  # its messages alone would pass it
    assert found["fix"]["status"] == "ok" and found["fix"]["cached"] is True
    assert found["fix"]["ran"]["status"] == "ok" and len(model.requests) == 1
