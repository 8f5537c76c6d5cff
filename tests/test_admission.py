"""One way in (`service/admission.py`): every run is admitted by `admit(request, caller)`, each
way in held to its row of `RULES`, every default filled there once. Without a server: `admit`
is a plain function over a request and a caller."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest

from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process import release_held
from mcpx_hooks.supervisor.run.scriptrun import DEFAULT_SCRIPT_TIMEOUT_MS
from mcpx_hooks.supervisor.service.admission import RULES, Caller, Way, admit
from mcpx_hooks.supervisor.service.execrequest import ExecRequest, parse_exec, wire_request
from mcpx_hooks.supervisor.service.roots import HOW_TO_ADD
from mcpx_hooks.supervisor.service.wire import Close, WireError

SUPERVISOR = Path(__file__).resolve().parent.parent / "supervisor"
ENVIRON = {"HOME": "/nonexistent", "MCPX_HOOKS_NO_DISCOVERY": "1", "TOKEN": "server's own"}


def callers(config: Config, served_from: Path) -> dict[Way, Caller]:
    where = str(served_from)
    return {
        Way.LOCAL: Caller.local(config, where, ENVIRON),
        Way.CLIENT: Caller.client(config, where, ENVIRON),
        Way.WORKER: Caller.worker(config, where, ENVIRON, "run-from-the-gateway", "box1"),
        Way.MCP: Caller.mcp(config, where, ENVIRON),
    }


def request(**fields: Any) -> ExecRequest:
    return parse_exec(json.dumps({"argv": ["true"], **fields}))


def refusal(req: ExecRequest, caller: Caller) -> WireError:
    with pytest.raises(WireError) as caught:
        admit(req, caller)
    assert caught.value.code is Close.BAD_REQUEST
    return caught.value


def test_every_way_in_has_its_row_of_rules() -> None:
    assert set(RULES) == set(Way)
    # Only the operator's own `exec` is not held to the server's roots and sandboxes.
    assert [way for way, rules in RULES.items() if not rules.roots] == [Way.LOCAL]
    assert [way for way, rules in RULES.items() if not rules.sandboxes] == [Way.LOCAL]
    assert [way for way, rules in RULES.items() if not rules.sent_env] == [Way.LOCAL]


def test_parsing_fills_no_default_and_admit_fills_each_once(tmp_path: Path) -> None:
    bare = request(cwd=str(tmp_path))
    # What depends on where it runs is left to `admit`.
    assert (bare.sandbox, bare.timeout_ms, bare.autonomy) == (None, None, None)
    config = Config(
        script_sandbox=Profile.STRICT,
        autonomy_hooks=Effect.ADVISE,
        script={Phase.BEFORE: ("x = 1",)},
    )
    for way, caller in callers(config, tmp_path).items():
        run = admit(bare, caller).request
        assert run.sandbox is Profile.STRICT, way
        assert run.timeout_ms == DEFAULT_SCRIPT_TIMEOUT_MS, way
        assert run.autonomy is Effect.ADVISE, way
        assert run.sources == {Phase.BEFORE: ("x = 1",)}, way
        assert run.cwd == os.path.realpath(tmp_path) and not run.cwd_made, way
        # What the request asks for wins, the autonomy only lowered.
        asked = admit(request(cwd=str(tmp_path), sandbox="workspace", timeoutMs=5), caller)
        assert (asked.request.sandbox, asked.request.timeout_ms) == (Profile.WORKSPACE, 5), way
        for word, level in (("off", Effect.OFF), ("run", Effect.ADVISE)):
            lowered = admit(request(cwd=str(tmp_path), autonomy=word), caller)
            assert lowered.request.autonomy is level, way
        assert admit(bare, caller).config is config, way  # nothing per call: the caller's


def test_the_run_id_is_the_gateways_for_a_worker_and_new_otherwise(tmp_path: Path) -> None:
    ways = callers(Config(), tmp_path)
    assert admit(request(), ways[Way.WORKER]).request.run_id == "run-from-the-gateway"
    ids = {admit(request(), ways[way]).request.run_id for way in (Way.LOCAL, Way.CLIENT, Way.MCP)}
    assert len(ids) == 3 and "run-from-the-gateway" not in ids


def test_the_callers_environment_is_its_own_only_in_process(tmp_path: Path) -> None:
    sent = request(secrets=["TOKEN"], callerEnv={"TOKEN": "the client's"})
    for way, caller in callers(Config(), tmp_path).items():
        env = admit(sent, caller).request.caller_env
        assert env == (ENVIRON if way is Way.LOCAL else {"TOKEN": "the client's"}), way


def test_a_served_cwd_must_lie_inside_a_root(tmp_path: Path) -> None:
    root, other = tmp_path / "root", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    config = Config(service_roots=(str(root),))
    ways = callers(config, tmp_path)
    outside = request(cwd=str(other))
    for way in (Way.CLIENT, Way.MCP):
        assert refusal(outside, ways[way]).message == (
            f"cwd: {other} is not inside a root of this server ({root}); to allow it, {HOW_TO_ADD}"
        )
    # A worker's client talks to a gateway: the refusal says whose roots they are.
    assert refusal(outside, ways[Way.WORKER]).message == (
        f"cwd: {other} is not inside a root of the worker on box1 ({root}); to allow it, add"
        ' its directory to the worker\'s config, e.g. [service] roots = ["/srv/project"], and'
        " restart it"
    )
    missing = request(cwd=str(tmp_path / "gone"))
    assert refusal(missing, ways[Way.WORKER]).message == (
        f"cwd: no such directory on the worker on box1: {tmp_path / 'gone'}"
    )
    assert refusal(missing, ways[Way.CLIENT]).message == (
        f"cwd: no such directory on this server: {tmp_path / 'gone'}"
    )
    for way in (Way.CLIENT, Way.WORKER, Way.MCP):
        # Without a cwd: the first root.
        assert admit(request(), ways[way]).request.cwd == str(root)
    # The operator's own `exec` runs where it is.
    assert admit(outside, ways[Way.LOCAL]).request.cwd == str(other)
    assert admit(request(), ways[Way.LOCAL]).request.cwd == str(tmp_path)


def test_a_directory_made_for_a_refused_run_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    # Served from `/`: no root at all, so a run without cwd gets a directory of its own.
    ways = callers(Config(), Path("/"))
    for way in (Way.CLIENT, Way.WORKER, Way.MCP):
        run = admit(request(), ways[way]).request
        assert run.cwd_made and Path(run.cwd).parent == temp and Path(run.cwd).is_dir()
        release_held(run.cwd)  # (as the run would at its end: the directory and its lock file)
        refusal(request(sandbox="none"), ways[way])
        assert list(temp.iterdir()) == [], way


def test_a_served_run_uses_only_the_sandboxes_the_server_allows(tmp_path: Path) -> None:
    unconfined = Config(script_sandbox=Profile.NONE)
    for way in (Way.CLIENT, Way.WORKER, Way.MCP):
        # A worker's refusal names the worker (the client talks to a gateway), and its config.
        who, whose = (
            ("the worker on box1", "the worker's")
            if way is Way.WORKER
            else (
                "this server",
                "the server's",
            )
        )
        asked = refusal(request(sandbox="none"), callers(Config(), tmp_path)[way])
        assert asked.problems == (
            "sandbox: the run's profile \"none\" (the request's sandbox) is not allowed",
            f"requests to {who} may use the sandboxes: strict, workspace ([service] sandboxes)",
        )
        own = refusal(request(), callers(unconfined, tmp_path)[way])
        assert own.problems[0] == (
            f'sandbox: the run\'s profile "none" ({whose} [script] sandbox) is not allowed'
        )
        assert own.message == "; ".join(own.problems)
    # `exec` in process runs what its operator asks for.
    local = callers(unconfined, tmp_path)[Way.LOCAL]
    assert admit(request(sandbox="none"), local).request.sandbox is Profile.NONE


def test_per_call_hooks_are_layered_and_held_to_the_rules(tmp_path: Path) -> None:
    hook = {"name": "gate", "on": "script", "phase": "before", "run": ["true"]}
    for way, caller in callers(Config(), tmp_path).items():
        admitted = admit(request(cwd=str(tmp_path), hooks=[hook]), caller)
        assert [h.name for h in admitted.config.hooks] == ["gate"], way
        invalid = refusal(request(hooks=[{**hook, "phase": "during"}]), caller)
        assert invalid.message.startswith("the per-call hooks or script are invalid: "), way
    ways = callers(Config(), tmp_path / "served")
    (tmp_path / "served").mkdir()
    wider = request(cwd=str(tmp_path / "served"), hooks=[{**hook, "cwd": str(tmp_path)}])
    for way in (Way.CLIENT, Way.WORKER, Way.MCP):
        said = refusal(wider, ways[way]).message
        assert re.match(r"hooks\[0\] \(gate\): cwd .* is not inside the run's cwd or a root", said)
        unconfined = refusal(request(hooks=[{**hook, "sandbox": "none"}]), ways[way])
        assert unconfined.problems[0] == (
            'hooks[0] (gate): the profile "none" (declared) is not allowed'
        )
        louder = refusal(request(hooks=[{**hook, "maxOutputBytes": 1 << 40}]), ways[way])
        whose = "the worker's" if way is Way.WORKER else "the server's"
        assert f"maxOutputBytes 1099511627776 is over {whose}" in louder.problems[0]
        assert "sandboxes" not in louder.message  # (no profile refused: none said)
    assert admit(wider, ways[Way.LOCAL]).config.hooks[0].name == "gate"


def test_a_client_writes_its_request_from_the_table_the_server_reads() -> None:
    sent = {
        "file": "job.py", "stdin": "in", "input": None, "env": {"A": "1"},
        "passEnv": ["CI"], "secrets": ["TOKEN"], "callerEnv": {"TOKEN": "t"},
        "cwd": "/srv", "sandbox": "strict", "timeoutMs": 5,
        "hooks": [{"on": "script", "phase": "before", "run": ["true"]}],
        "script": {"before": [None, "x = 1"]}, "autonomy": "advise",
        "cancelOnDisconnect": True, "placeholders": {"team": {"a": 1}},
    }  # fmt: skip
    assert wire_request(parse_exec(json.dumps(sent))) == sent
    assert wire_request(ExecRequest(python="print(1)")) == {"python": "print(1)"}


def test_a_run_request_is_made_only_by_admit() -> None:
    # Every way in (exec, /v1/exec, a worker, the demo) goes through `admit`. (The class's
    # own statement, `class RunRequest(Record):`, makes none.)
    made = sorted(
        str(path.relative_to(SUPERVISOR))
        for path in SUPERVISOR.rglob("*.py")
        if re.search(r"(?<!class )RunRequest\(", path.read_text())
    )
    assert made == ["service/admission.py"]


def test_the_request_and_its_table_load_without_the_server() -> None:
    import subprocess
    import sys

    code = (
        "import sys, mcpx_hooks.supervisor.service.execrequest;"
        " assert 'trio' not in sys.modules, 'trio'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_exec_request_is_frozen_and_keyword_only() -> None:
    with pytest.raises(TypeError):
        ExecRequest("true")  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        request().cwd = "/"  # type: ignore[misc]


GOOD: list[dict[str, Any]] = [
    {"argv": ["true"]},
    {"python": "print(1)", "input": None, "autonomy": "off", "sandbox": "strict"},
    {"file": "job.py", "cwd": "/srv", "timeoutMs": 1, "script": {"before": [None, "x"]}},
    {"argv": ["x"], "env": {"A": "1"}, "passEnv": ["CI", "GH_*"], "callerEnv": {"CI": "1"}},
    {"argv": ["x"], "hooks": [{}], "placeholders": {"team": [1]}, "cancelOnDisconnect": False},
]
BAD: list[dict[str, Any]] = [
    {},
    {"argv": []},
    {"argv": [""]},
    {"argv": [1]},
    {"argv": ["x"], "file": "f"},
    {"file": ""},
    {"argv": ["x"], "Argv": 1},
    {"argv": ["x"], "timeoutMs": 0},
    {"argv": ["x"], "timeoutMs": True},
    {"argv": ["x"], "env": {"A": 1}},
    {"argv": ["x"], "env": {"A=B": "1"}},
    {"argv": ["x"], "secrets": ["A=B"]},
    {"argv": ["x"], "cwd": "relative"},
    {"argv": ["x"], "sandbox": "loose"},
    {"argv": ["x"], "autonomy": "max"},
    {"argv": ["x"], "script": {"during": []}},
    {"argv": ["x"], "script": {"before": [1]}},
    {"argv": ["x"], "hooks": [1]},
    {"argv": ["x"], "cancelOnDisconnect": 1},
    {"argv": ["x"], "placeholders": {"a b": 1}},
    {"argv": ["x"], "stdin": 5},
]


@pytest.mark.parametrize("sent", GOOD + BAD)
def test_the_requests_json_schema_says_what_its_checks_say(sent: dict[str, Any]) -> None:
    import jsonschema

    from mcpx_hooks.supervisor.service.execrequest import EXEC_FIELDS, request_schema

    schema = request_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(schema["properties"]) == list(EXEC_FIELDS)
    valid = jsonschema.Draft202012Validator(schema).is_valid(sent)
    try:
        parse_exec(json.dumps(sent))
    except WireError:
        assert not valid
    else:
        assert valid
