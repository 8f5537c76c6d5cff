"""The service's wire without a socket: requests, targets, queries, error messages."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.service.execrequest import EXEC_FIELDS, parse_exec
from mcpx_hooks.supervisor.service.targets import (
    Endpoint,
    check_from,
    parse_events,
    parse_from,
    parse_target,
    query_token,
)
from mcpx_hooks.supervisor.service.wire import (
    CLOSE_WORDS,
    AnswerMessage,
    Close,
    WireError,
    encode,
    parse_control,
)


def refused(text: str | bytes) -> WireError:
    with pytest.raises(WireError) as caught:
        parse_exec(text)
    return caught.value


def test_every_field_maps_onto_the_request() -> None:
    request = parse_exec(
        json.dumps(
            {
                "argv": ["echo", "x"],
                "stdin": "in",
                "input": None,
                "env": {"A": "1"},
                "cwd": "/tmp",
                "timeoutMs": 500,
                "hooks": [{"on": "script", "phase": "before", "run": ["true"]}],
                "script": {"before": [None, "x = 1"]},
                "autonomy": "advise",
                "cancelOnDisconnect": True,
                "sandbox": "strict",
                "network": ["pypi.org", "*.example.org:8443"],
                "passEnv": ["CI", "GITHUB_*"],
                "secrets": ["TOKEN"],
                "callerEnv": {"CI": "1", "TOKEN": "t0ken"},
            }
        )
    )
    assert request.script == Script(argv=("echo", "x"))
    assert (request.pass_env, request.secrets) == (("CI", "GITHUB_*"), ("TOKEN",))
    assert request.caller_env == {"CI": "1", "TOKEN": "t0ken"}
    assert request.sandbox is Profile.STRICT
    assert request.network == ("pypi.org", "*.example.org:8443")
    assert request.stdin == b"in"
    assert request.input == (None,)  # `null` is an input, absent is none
    assert (request.env, request.cwd, request.timeout_ms) == ({"A": "1"}, "/tmp", 500)
    assert request.autonomy is Effect.ADVISE and request.cancel_on_disconnect
    assert request.per_call
    assert set(EXEC_FIELDS) == {
        "argv", "python", "file", "stdin", "input", "env", "cwd", "timeoutMs",
        "hooks", "script", "autonomy", "cancelOnDisconnect", "sandbox", "passEnv",
        "secrets", "callerEnv", "placeholders", "network",
    }  # fmt: skip
    code = parse_exec('{"python": "print(1)"}')
    assert code.script == Script(python_code="print(1)") and code.input is None
    assert not code.per_call
    assert parse_exec('{"file": "job.py"}').script == Script(python_file="job.py")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "malformed JSON in the exec request: Expecting property name"),
        ("[]", "expected the exec request as a JSON object, got an array"),
        (
            '{"argv": []}',
            "argv: expected a non-empty array of strings (no NUL or lone surrogate; the first"
            " not empty), got an empty array",
        ),
        # What is wrong inside a value of the right type is said, where it is.
        ('{"argv": [""]}', "got an array whose item 0, the program, is empty"),
        ('{"argv": ["a", "b\\u0000"]}', "got an array whose item 1 holds a NUL character"),
        ('{"argv": ["\\ud800"]}', "got an array whose item 0 holds a lone surrogate"),
        ('{"argv": ["x"], "env": {"A=B": "v"}}', "got an object whose name 'A=B' holds '='"),
        ('{"argv": ["x"], "callerEnv": {"T": "v\\u0000"}}', "whose value of T holds a NUL"),
        ('{"argv": ["x"], "passEnv": ["A=B"]}', "got an array whose item 0 holds '='"),
        ('{"argv": ["x"], "cwd": "/a\\u0000"}', "got a string that holds a NUL character"),
        ('{"file": ""}', "got an empty string"),
        ('{"argv": [1]}', "argv: expected a non-empty array of strings"),
        (
            '{"argv": ["x"], "timeoutMs": true}',
            "timeoutMs: expected a positive integer, got a boolean",
        ),
        (
            '{"argv": ["x"], "timeoutMs": 0}',
            "timeoutMs: expected a positive integer, got the number 0",
        ),
        ('{"argv": ["x"], "env": {"A": 1}}', "env: expected an object of strings"),
        ('{"argv": ["x"], "autonomy": "max"}', "autonomy: expected an effect level"),
        ('{"argv": ["x"], "autonomy": "max"}', 'got "max"'),
        ('{"argv": ["x"], "sandbox": "stict"}', 'none), got "stict"'),
        ('{"argv": ["x"], "script": {"during": []}}', "script: expected an object of source"),
        ('{"argv": ["x"], "cancelOnDisconnect": 1}', "cancelOnDisconnect: expected true or false"),
        ('{"argv": ["x"], "stdin": 5}', "stdin: expected a string"),
        ('{"stdin": ""}', "expected exactly one of argv, python, file; found none"),
        ('{"argv": ["x"], "file": "f"}', "found argv, file"),
        ('{"argv": ["x"], "Argv": 1}', "unknown field 'Argv'"),
        # A key given twice: JSON keeps the last, and what read the request first may not.
        ('{"argv": ["echo"], "argv": ["rm", "-rf", "x"]}', "/argv: given more than once"),
        ('{"argv": ["x"], "env": {"A": "1", "A": "2"}}', "/env/A: given more than once"),
        ('{"argv": ["x"], "secrets": ["T*"]}', "secrets: expected an array of variable names (no"),
        ('{"argv": ["x"], "secrets": ["T*"]}', "got an array that names a glob ('T*')"),
    ],
)
def test_each_bad_request_says_what_is_wrong(text: str, says: str) -> None:
    error = refused(text)
    assert error.code is Close.BAD_REQUEST
    assert says in error.message, error.message


def test_a_refused_value_is_never_quoted() -> None:
    """A value may be a secret: what is wrong with it is said, by its name, never it."""
    error = refused('{"argv": ["x"], "callerEnv": {"TOKEN": "hunter2\\u0000"}}')
    assert "TOKEN" in error.message and "hunter2" not in error.message


def test_every_problem_is_listed_and_binary_is_unsupported() -> None:
    error = refused('{"argv": 1, "x": 2, "timeoutMs": -1}')
    assert len(error.problems) == 3
    assert to_json(error.payload)["problems"] == list(error.problems)
    assert refused(b"{}").code is Close.UNSUPPORTED


def test_error_message_is_not_a_frame_and_reason_fits_a_close_frame() -> None:
    error = WireError(Close.NOT_FOUND, "é" * 200)
    message = to_json(error.payload)
    assert message["type"] == "error" and "seq" not in message and "runId" not in message
    assert (message["code"], message["error"]) == (4404, "not-found")
    assert len(error.reason.encode()) <= 123
    assert set(CLOSE_WORDS) == set(Close)


def test_control_messages() -> None:
    assert parse_control('{"type": "cancel"}') == "cancel"
    with pytest.raises(WireError, match="second request"):
        parse_control('{"argv": ["true"]}')
    with pytest.raises(WireError, match="cancel takes no other field"):
        parse_control('{"type": "cancel", "now": true}')
    with pytest.raises(WireError, match="malformed"):
        parse_control("cancel")


def test_answer_messages() -> None:
    answer = parse_control('{"type": "answer", "askId": "ask-1", "answer": "no"}')
    assert answer == AnswerMessage("ask-1", "no")
    with pytest.raises(WireError) as caught:
        parse_control('{"type": "answer", "answer": "perhaps", "why": 1}')
    assert caught.value.problems == (
        "unknown field 'why' (fields: type, askId, answer)",
        "askId: expected the askId of an ask frame (a string of 1 to 64 characters), got nothing",
        "answer: expected yes or no, got a string",
    )
    assert caught.value.code == Close.BAD_REQUEST and caught.value.ask_id is None
    assert caught.value.message.startswith("a malformed answer message: unknown field 'why'")
    assert "answer: answer:" not in caught.value.message
    refused = WireError(Close.BAD_REQUEST, "answer refused: x", ask_id="ask-1").payload
    assert to_json(refused)["askId"] == "ask-1"
    # A "no" that JSON would read as the "yes" after it, as a log in front would not.
    with pytest.raises(WireError) as caught:
        parse_control('{"type": "answer", "askId": "ask-1", "answer": "no", "answer": "yes"}')
    assert caught.value.problems == ("/answer: given more than once",)
    assert caught.value.message == "a message after the request: /answer: given more than once"


@pytest.mark.parametrize(
    ("target", "endpoint", "run_id"),
    [
        ("/v1/exec", Endpoint.EXEC, None),
        ("/v1/exec/?token=t", Endpoint.EXEC, None),
        ("/v1/runs/abc?from=3", Endpoint.RUNS, "abc"),
        ("/v1/runs/a%2Fb", Endpoint.RUNS, "a/b"),
        ("/v1/events?kinds=hook,run&since=2", Endpoint.EVENTS, None),
        ("/v1/hooks", Endpoint.HOOKS, None),
    ],
)
def test_targets(target: str, endpoint: Endpoint, run_id: str | None) -> None:
    parsed = parse_target(target)
    assert parsed is not None
    assert (parsed.endpoint, parsed.run_id) == (endpoint, run_id)
    assert "token" not in parsed.query


@pytest.mark.parametrize("target", ["/", "/v1", "/v1/runs/", "/v1/runs/a/b", "/v2/exec"])
def test_unknown_targets(target: str) -> None:
    assert parse_target(target) is None


def test_query_token_from_any_target() -> None:
    assert query_token("/nope?token=a&token=b") == "b"
    assert query_token("/v1/exec") is None


def query(target: str) -> Any:
    parsed = parse_target(target)
    assert parsed is not None
    return parsed


def test_from_and_since_and_kinds() -> None:
    assert parse_from(query("/v1/runs/x")) == 0
    assert parse_from(query("/v1/runs/x?from=7&token=t")) == 7
    with pytest.raises(WireError, match="non-negative integer"):
        parse_from(query("/v1/runs/x?from=1.5"))
    with pytest.raises(WireError, match="given 2 times"):
        parse_from(query("/v1/runs/x?from=1&from=2"))
    with pytest.raises(WireError, match="unknown query parameter 'since'"):
        parse_from(query("/v1/runs/x?since=1"))
    check_from(3, 3)
    with pytest.raises(WireError) as caught:
        check_from(4, 3)
    assert caught.value.code is Close.OUT_OF_RANGE
    assert parse_events(query("/v1/events")) == ((), None)
    assert parse_events(query("/v1/events?kinds=hook,run.finished,&since=0")) == (
        ("hook", "run.finished"),
        0,
    )
    with pytest.raises(WireError, match="'hooks' matches no event kind"):
        parse_events(query("/v1/events?kinds=hooks"))


def test_encode_is_one_line_and_takes_what_orjson_refuses() -> None:
    assert encode({"a": "x\ny", "b": [1, 2]}) == '{"a":"x\\ny","b":[1,2]}'
    assert json.loads(encode({"big": 2**70})) == {"big": 2**70}
    assert "\n" not in encode({"big": 2**70, "s": "é\n"})


def test_the_wire_loads_no_trio() -> None:
    # The protocol module is pure: the remote client and the tests can use it without the
    # supervisor's trio side (the spawner, the running of scripts) coming along.
    code = "import sys, mcpx_hooks.supervisor.service.wire; assert 'trio' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
