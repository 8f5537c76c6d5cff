"""Prompt hooks at the command line, as a user runs it (a real `python -m mcpx_hooks.supervisor`
process) against the loopback model: `exec --placeholder`, `hook test --show-request` (the
request printed, the key never, nothing sent), the warnings of `validate` and `hooks list`,
the wire's `placeholders`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopmodel import LoopModel, Reply

from mcpx_hooks.supervisor.service.execrequest import parse_exec
from mcpx_hooks.supervisor.service.wire import WireError

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
KEY = "sk-cli-secret-0123456789"


@pytest.fixture
def model() -> Iterator[LoopModel]:
    with LoopModel() as server:
        yield server


def mcpx(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "MCPX_HOOKS_NO_DISCOVERY": "1",
        "XDG_STATE_HOME": str(cwd / "state"),
        "LOOP_KEY": KEY,
    }
    return subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_config(tmp_path: Path, url: str, model_name: str = "default") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        f"""
[defaults]
sandbox = "none"
[script]
sandbox = "none"

[models.default]
provider = "openai"
url = "{url}"
model = "loop-1"
apiKeyEnv = "LOOP_KEY"

[[hooks]]
name = "explain"
on = "script"
phase = "onError"
prompt = "The job failed: @error. What should @team check first?"
model = "{model_name}"
vars = {{ team = "the platform team" }}
"""
    )
    return path


def test_exec_placeholder_reaches_the_model_as_data(tmp_path: Path, model: LoopModel) -> None:
    model.default = Reply('{"advise": "check the lockfile"}')
    write_config(tmp_path, model.url)
    done = mcpx(
        "exec", "--config", "c.toml", "--json", "--placeholder", "team=infra",
        "--", sys.executable, "-c", "raise SystemExit(3)",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    (hook,) = [f for f in frames if f["type"] == "hook"]
    assert hook["advice"] == ["check the lockfile"] and hook["tokens"]["prompt"] == 10
    assert '"infra"' in model.requests[0]["messages"][1]["content"]
    assert KEY not in done.stdout + done.stderr


def test_the_readable_view_shows_the_model(tmp_path: Path, model: LoopModel) -> None:
    model.default = Reply('{"advise": "check the lockfile"}', usage=(12, 3))
    write_config(tmp_path, model.url)
    done = mcpx("hook", "test", "explain", "--config", "c.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "model default (openai loop-1): 12+3 tokens" in done.stdout
    assert "advice: check the lockfile" in done.stdout


def test_a_bad_placeholder_flag_is_a_usage_error(tmp_path: Path, model: LoopModel) -> None:
    write_config(tmp_path, model.url)
    done = mcpx(
        "exec", "--config", "c.toml", "--placeholder", "no value", "--", "true", cwd=tmp_path
    )
    assert done.returncode == 2 and "--placeholder: expected NAME=VALUE" in done.stderr
    assert "Traceback" not in done.stderr and model.requests == []


def test_show_request_prints_it_and_sends_nothing(tmp_path: Path, model: LoopModel) -> None:
    write_config(tmp_path, model.url)
    done = mcpx("hook", "test", "explain", "--config", "c.toml", "--show-request", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["url"] == f"{model.url}/chat/completions"
    assert shown["headers"] == {"authorization": "Bearer [secret LOOP_KEY]"}
    body = shown["body"]
    assert body["model"] == "loop-1" and body["response_format"]["json_schema"]["strict"] is False
    user = body["messages"][1]["content"]
    assert user.startswith("The job failed: [data: error]. What should [data: team] check first?")
    assert KEY not in done.stdout + done.stderr
    assert model.requests == []  # nothing was sent


def test_show_request_of_a_hook_that_is_not_a_prompt(tmp_path: Path) -> None:
    hook = json.dumps({"phase": "before", "run": ["true"]})
    done = mcpx("hook", "test", "--hook", hook, "--show-request", cwd=tmp_path)
    assert done.returncode == 2 and "only a prompt hook sends a request" in done.stderr


def test_validate_and_hooks_list_warn_of_a_model_not_configured(
    tmp_path: Path, model: LoopModel
) -> None:
    write_config(tmp_path, model.url, model_name="elsewhere")
    said = 'prompt hook "explain" names model "elsewhere", which no [models.elsewhere]'
    done = mcpx("validate", "c.toml", cwd=tmp_path)
    assert done.returncode == 0 and said in done.stderr
    done = mcpx("hooks", "list", "--config", "c.toml", "--json", cwd=tmp_path)
    assert done.returncode == 0 and said in done.stderr
    (listed,) = json.loads(done.stdout)
    assert listed["model"] == "elsewhere" and listed["modelConfigured"] is False
    assert listed["vars"] == {"team": "the platform team"}
    write_config(tmp_path, model.url)
    assert said not in mcpx("validate", "c.toml", cwd=tmp_path).stderr


def test_validate_and_hooks_list_warn_of_a_prompt_hook_whose_answer_is_never_used(
    tmp_path: Path,
) -> None:
    """A prompt hook that names no phase observes, where every effect is off: its model is
    never asked (nothing it answered could be used), and `validate` and `hooks list` say so
    and what to do, in place of the warning about its model (which need not exist)."""
    (tmp_path / "c.toml").write_text(
        """
[[hooks]]
name = "watch"
on = "run.finished"
prompt = "What does @event say?"

[[hooks]]
name = "mute"
on = "script"
phase = "onError"
effect = "off"
prompt = "Explain @error"
"""
    )
    observes = 'prompt hook "watch" observes (phase "observe", which a hook that names no phase'
    give = "give it the phase whose answer you want (before, onSuccess, onError or suffix)"
    off = 'prompt hook "mute" has effect "off": nothing a model answered could be used, so'
    for done in (
        mcpx("validate", "c.toml", cwd=tmp_path),
        mcpx("hooks", "list", "--config", "c.toml", cwd=tmp_path),
    ):
        assert done.returncode == 0, done.stderr
        assert observes in done.stderr and give in done.stderr and off in done.stderr
        assert "its model is never asked" in done.stderr
        assert "which no [models.default]" not in done.stderr
    done = mcpx("hook", "test", "watch", "--config", "c.toml", "--show-request", cwd=tmp_path)
    shown = json.loads(done.stdout)
    assert shown["effect"] == "off" and "this request is never sent" in shown["note"]
    system = shown["messages"][0]["content"]
    assert system.startswith('You are a hook of mcpx-hooks, run as an observe hook, after a "run.')


def test_a_placeholder_problem_names_file_and_pointer(tmp_path: Path, model: LoopModel) -> None:
    path = write_config(tmp_path, model.url)
    path.write_text(path.read_text().replace("@team", "@result"))
    done = mcpx("validate", "c.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert "c.toml:/hooks/0/prompt: @result is not available at phase onError" in done.stdout


def test_the_wire_takes_placeholders() -> None:
    request = parse_exec(json.dumps({"argv": ["true"], "placeholders": {"team": {"a": 1}}}))
    assert request.placeholders == {"team": {"a": 1}}
    with pytest.raises(WireError, match="placeholders: expected an object"):
        parse_exec(json.dumps({"argv": ["true"], "placeholders": {"a b": 1}}))
    # A built-in's value is the run's own: one given for it was dropped without a word.
    with pytest.raises(WireError, match=r"placeholders: expected .* not a built-in's"):
        parse_exec(json.dumps({"argv": ["true"], "placeholders": {"error": "x"}}))


@pytest.mark.parametrize("name", ["error", "result", "run", "context"])
def test_a_placeholder_flag_for_a_built_in_is_a_usage_error(
    tmp_path: Path, model: LoopModel, name: str
) -> None:
    # `exec --placeholder error=…` was taken, and the value dropped without a word: the
    # prompt still saw the run's own error.
    write_config(tmp_path, model.url)
    done = mcpx(
        "exec", "--config", "c.toml", "--placeholder", f"{name}=the db is down",
        "--", sys.executable, "-c", "raise SystemExit(3)",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip().endswith(
        f"--placeholder {name}: @{name} is a built-in placeholder: its value is the run's own;"
        " a run gives values only for the names of prompt hooks' vars"
    )
    assert "Traceback" not in done.stderr and model.requests == []


def test_exec_remote_sends_placeholders_to_the_server_s_prompt_hook(
    tmp_path: Path, model: LoopModel
) -> None:
    from service_client import start_server

    model.default = Reply('{"advise": "check the lockfile"}')
    path = write_config(tmp_path, model.url)
    path.write_text(path.read_text() + '\n[service]\nsandboxes = ["none", "workspace"]\n')
    server = start_server(tmp_path, "--config", str(path), env={"LOOP_KEY": KEY})
    try:
        client = tmp_path / "client"
        client.mkdir()
        done = mcpx(
            "exec", "--remote", server.url, "--token-file", str(tmp_path / "token"), "--json",
            "--placeholder", "team=infra", "--", sys.executable, "-c", "raise SystemExit(3)",
            cwd=client,
        )  # fmt: skip
    finally:
        server.stop()
    assert done.returncode == 3, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    (hook,) = [f for f in frames if f["type"] == "hook"]
    assert hook["advice"] == ["check the lockfile"]
    assert '"infra"' in model.requests[0]["messages"][1]["content"]
    assert model.headers[0]["authorization"] == f"Bearer {KEY}"
    assert KEY not in done.stdout + done.stderr + server.stderr.read_text()


def test_explain_says_a_prompt_hook_without_a_model_will_not_run(
    tmp_path: Path, model: LoopModel
) -> None:
    write_config(tmp_path, model.url, model_name="elsewhere")
    done = mcpx("exec", "--config", "c.toml", "--explain", "--", "true", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "explain: no model configured: no [models.elsewhere]" in done.stdout
    write_config(tmp_path, model.url)
    done = mcpx("exec", "--config", "c.toml", "--explain", "--", "true", cwd=tmp_path)
    assert "no model configured" not in done.stdout and model.requests == []


def test_show_request_of_a_command_model_and_of_no_model(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[models.cli]\nprovider = "command"\ncommand = ["llm", "-m", "x"]\n'
        '[[hooks]]\nname = "a"\non = "script"\nphase = "before"\nprompt = "check @input"\n'
        'model = "cli"\n'
        '[[hooks]]\nname = "b"\non = "script"\nphase = "before"\nprompt = "check @input"\n'
    )
    done = mcpx("hook", "test", "a", "--config", "c.toml", "--show-request", cwd=tmp_path)
    shown = json.loads(done.stdout)
    assert shown["command"] == ["llm", "-m", "x"] and shown["body"]["model"] == "llm"
    assert "url" not in shown
    event = json.dumps({"input": {"token": KEY}})
    done = mcpx(
        "hook", "test", "b", "--config", "c.toml", "--show-request", "--event", "-",
        cwd=tmp_path, stdin=event,
    )  # fmt: skip
    shown = json.loads(done.stdout)
    assert shown["model"] is None and "declare [models.default]" in shown["note"]
    assert KEY in shown["messages"][1]["content"]  # not a secret of this config: shown as is


def test_hook_test_sends_the_model_a_secret_redacted_as_a_run_does(
    tmp_path: Path, model: LoopModel
) -> None:
    # `hook test` sent the model the values it was given as they were: the key itself went
    # out in the data (while --show-request printed it redacted, as a run sends it).
    model.default = Reply('{"advise": "check the lockfile"}')
    write_config(tmp_path, model.url)
    event = json.dumps({"error": {"message": "boom", "stderrTail": f"token {KEY}"}})
    done = mcpx("hook", "test", "explain", "--config", "c.toml", "--event", "-", cwd=tmp_path,
                stdin=event)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (request,) = model.requests
    data = request["messages"][1]["content"]
    assert "token [secret LOOP_KEY]" in data and KEY not in data


def test_a_key_pasted_as_apikeyenv_is_not_repeated(tmp_path: Path, model: LoopModel) -> None:
    """`apiKeyEnv = "sk-proj-…"` names no variable: the hook's failure said the name, the key
    itself, in its frame (and so the history and every follower). A "name" that reads as a
    key is refused with the config now; one that does not and is no variable's name is still
    not repeated when the hook finds it unset."""
    path = write_config(tmp_path, model.url)
    written = path.read_text()
    pasted = "sk-proj-Q1w2E3r4T5y6U7i8"
    path.write_text(written.replace('"LOOP_KEY"', f'"{pasted}"'))
    done = mcpx("hook", "test", "explain", "--config", "c.toml", "--json", cwd=tmp_path)
    assert done.returncode == 2 and model.requests == []
    assert pasted not in done.stdout + done.stderr
    assert "/models/default/apiKeyEnv: expected the name of the variable" in done.stderr
    odd = "openai key"
    path.write_text(written.replace('"LOOP_KEY"', f'"{odd}"'))
    done = mcpx("hook", "test", "explain", "--config", "c.toml", "--json", cwd=tmp_path)
    assert odd not in done.stdout + done.stderr and model.requests == []
    assert "(apiKeyEnv of model default) is not set" in json.loads(done.stdout)["reason"]


def test_validate_refuses_a_key_pasted_as_apikeyenv_by_its_length(
    tmp_path: Path, model: LoopModel
) -> None:
    """`validate` took `apiKeyEnv = "sk-proj-…"` (the key where its variable's name goes): it
    failed only when a hook ran. It is refused at its pointer, said by its length."""
    path = write_config(tmp_path, model.url)
    pasted = "sk-proj-" + "Q1w2E3r4T5y6U7i8o9P0" * 4
    path.write_text(path.read_text().replace('"LOOP_KEY"', f'"{pasted}"'))
    done = mcpx("validate", "c.toml", cwd=tmp_path)
    assert done.returncode == 2 and pasted not in done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == (
        "c.toml:/models/default/apiKeyEnv: expected the name of the variable that holds the API"
        f" key (letters, digits and _, as OPENAI_API_KEY), found a string of {len(pasted)}"
        " characters that reads as the key itself (not shown); put the key in a variable"
        " (export OPENAI_API_KEY=…) and name that variable here"
    )
    listed = mcpx("validate", "--json", "c.toml", cwd=tmp_path)
    assert listed.returncode == 2 and pasted not in listed.stdout + listed.stderr
    assert [p["pointer"] for p in json.loads(listed.stdout)] == ["/models/default/apiKeyEnv"]


def test_a_placeholder_no_prompt_hook_declares_is_a_usage_error(
    tmp_path: Path, model: LoopModel
) -> None:
    """`--placeholder teem=…` (a misspelt name) reached no prompt and was dropped without a
    word; the names the config's prompt hooks take are said."""
    write_config(tmp_path, model.url)
    done = mcpx(
        "exec", "--config", "c.toml", "--placeholder", "teem=infra", "--", "true", cwd=tmp_path
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mcpx-hooks exec: --placeholder teem: no prompt hook here has @teem in its vars"
        " (their vars: team)\n"
    )
    skipped = mcpx(
        "exec", "--config", "c.toml", "--skip", "explain", "--placeholder", "team=x", "--",
        "true", cwd=tmp_path,
    )  # fmt: skip
    assert skipped.returncode == 0, skipped.stderr  # (a hook --skip leaves out still takes it)


def test_a_request_s_placeholder_no_prompt_hook_declares_is_refused_every_way_in(
    tmp_path: Path, model: LoopModel
) -> None:
    """A `/v1/exec`, MCP or worker request's `placeholders` with a name no prompt hook of the
    server's config takes was dropped without a word; it is refused (4400) as `exec
    --placeholder` is, naming the names the server's prompt hooks take."""
    from mcpx_hooks.supervisor.config.loading import load_config
    from mcpx_hooks.supervisor.service.admission import Caller, admit
    from mcpx_hooks.supervisor.service.wire import Close

    config = load_config(
        [write_config(tmp_path, model.url)], cwd=tmp_path, environ={}, discover=False
    )
    env = {"HOME": "/nonexistent"}
    where = str(tmp_path)
    ways = (
        Caller.client(config, where, env),
        Caller.mcp(config, where, env),
        Caller.worker(config, where, env, "run-from-the-gateway", "box1"),
    )
    for caller in ways:
        sent = {"argv": ["true"], "cwd": where, "sandbox": "workspace"}
        with pytest.raises(WireError) as refused:
            admit(parse_exec(json.dumps({**sent, "placeholders": {"teem": "infra"}})), caller)
        assert refused.value.code is Close.BAD_REQUEST
        assert refused.value.message == (
            "placeholders: teem: no prompt hook here has @teem in its vars (their vars: team)"
        )
        taken = admit(parse_exec(json.dumps({**sent, "placeholders": {"team": "x"}})), caller)
        assert taken.request.placeholders == {"team": "x"}


def test_a_serve_judges_the_prompt_cache_by_the_checkout_a_request_s_run_works_in(
    tmp_path: Path, model: LoopModel
) -> None:
    """A `serve` started outside any checkout, whose state directory lies inside the git
    checkout a request's `cwd` is in, kept and reused that run's prompt answers there (it
    judged "inside the checkout" from its own working directory): a `run` answer the
    project's own files could plant was taken without asking the model. Now the run's
    checkout is the one judged: none is kept or read there, and the run says why; a state
    directory inside the checkout `serve` started in is still refused for a run elsewhere."""
    from service_client import arun, run_remote, start_server

    model.default = Reply(json.dumps({"run": {"argv": ["true"]}}))
    served, project, elsewhere = (tmp_path / n for n in ("served", "project", "elsewhere"))
    for directory in (served, project, elsewhere):
        directory.mkdir()
    (project / ".git").mkdir()
    path = served / "c.toml"
    path.write_text(
        f"""
[defaults]
sandbox = "none"
[script]
sandbox = "none"
[service]
sandboxes = ["none"]
roots = ["{project}", "{elsewhere}", "{served}"]

[models.default]
provider = "openai"
url = "{model.url}"
model = "loop-1"

[[hooks]]
name = "fix"
on = "script"
phase = "before"
prompt = "What should run first?"
effect = "run"
"""
    )

    def runs(started_in: Path, state: Path, cwd: Path) -> list[dict[str, Any]]:
        server = start_server(started_in, "--config", str(path), env={"XDG_STATE_HOME": str(state)})
        try:
            request = {"argv": ["true"], "cwd": str(cwd), "sandbox": "none"}
            return [arun(run_remote(server, request)).objects for _ in range(2)]
        finally:
            server.stop()

    asked = len(model.requests)
    for frames in runs(served, project / ".state", project):
        (hook,) = [f for f in frames if f["type"] == "hook"]
        assert hook["status"] == "ok" and hook["cached"] is False, hook
        (warning,) = [f["message"] for f in frames if f["type"] == "warning"]
        assert f"lies inside the git checkout {project}," in warning, warning
    assert len(model.requests) == asked + 2
    assert not (project / ".state" / "mcpx-hooks" / "prompts").exists()
    # serve started in the checkout that holds its state directory: refused for a run elsewhere
    asked = len(model.requests)
    for frames in runs(project, project / ".state", elsewhere):
        (hook,) = [f for f in frames if f["type"] == "hook"]
        assert hook["cached"] is False, hook
    assert len(model.requests) == asked + 2
    # and a state directory in no checkout keeps the answer for the next run
    asked = len(model.requests)
    cached = [
        next(f for f in frames if f["type"] == "hook")["cached"]
        for frames in runs(served, tmp_path / "state", project)
    ]
    assert cached == [False, True] and len(model.requests) == asked + 1
