"""Hostile lines from an MCP client: `mcpx-hooks mcp` (stdio), with real tool servers behind it
(the docs' wordtools, the tests' hostile server in its well-behaved mode), takes any line a
client may write (bytes that are not UTF-8, JSON that is not JSON-RPC, JSON-RPC requests and
notifications of every MCP method and of none, with any id and any params, tool calls with any
name and arguments, answers to questions never asked) and goes on: whatever it writes back is
a JSON-RPC message, a `ping` sent after them is answered, and no traceback reaches its stderr.
One gateway serves every example, as a client's one session would.

The same over HTTP: `/mcp` on a real `serve` takes any request (method, headers, session id,
protocol version, body) and answers it with a status, never a traceback, and a client's own
session, opened first, is still served after each."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from conftest import Marker
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from mcpface_parts import MCPX, write_config
from service_client import Server, start_server

#: How long the gateway may take to answer the probe after a batch of hostile lines, in s: a
#: generous bound for a loaded machine, never waited out unless it is stuck.
ANSWER_S = 30.0

#: JSON nested deeper than Python's parser goes (it raises `RecursionError`, not `ValueError`).
DEEP = b"[" * 100_000 + b"]" * 100_000
#: A client's first request, over stdio and over HTTP.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "hello",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "hostile-client", "version": "0"},
    },
}
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "completion/complete",
    "logging/setLevel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "sampling/createMessage",
    "elicitation/create",
]
#: Tools a call may name: every tool listed (none that waits), and some that are not.
TOOLS = ["words__count", "words__shout", "h__echo", "h__fail", "h__mixed", "words__remove", "x"]


def _json_values(text: Callable[[int], st.SearchStrategy[str]]) -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text(40)
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text(12), inner, max_size=4),
        max_leaves=12,
    )


def clean_text(size: int) -> st.SearchStrategy[str]:
    """Text without lone surrogates: what must reach a server (the gateway answers a request
    holding an escaped one with -32700 before any server sees it)."""
    return st.text(st.characters(exclude_categories=("Cs",)), max_size=size)


json_values = _json_values(lambda size: st.text(max_size=size))
clean_values = _json_values(clean_text)
ids = json_values | st.integers() | st.text(max_size=8)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON-RPC message of any shape: request, notification, answer, or something between."""
    message: dict[str, Any] = {}
    if draw(st.booleans()):
        message["jsonrpc"] = draw(st.sampled_from(["2.0", "1.0", 2]) | json_values)
    if draw(st.booleans()):
        message["id"] = draw(ids)
    shape = draw(st.sampled_from(["method", "call", "answer", "error", "none"]))
    if shape == "method":
        message["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=20))
        if draw(st.booleans()):
            message["params"] = draw(json_values)
    elif shape == "call":
        message["method"] = "tools/call"
        params: dict[str, Any] = {"name": draw(st.sampled_from(TOOLS) | st.text(max_size=12))}
        if draw(st.booleans()):
            params["arguments"] = draw(json_values)
        if draw(st.booleans()):
            params["_meta"] = draw(st.fixed_dictionaries({"progressToken": ids}) | json_values)
        message["params"] = params
    elif shape == "answer":
        message["result"] = draw(json_values)
    elif shape == "error":
        message["error"] = draw(
            st.fixed_dictionaries({"code": st.integers(), "message": st.text()}) | json_values
        )
    message.update(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=2)))
    return message


def _refused(message: Any) -> bool:
    return isinstance(message, dict) and message.get("jsonrpc") == "2.0" and "error" in message


def _line(value: Any) -> bytes:
    return json.dumps(value).encode()


hostile_lines = (
    messages().map(_line)
    | json_values.map(_line)
    | st.lists(messages(), min_size=1, max_size=3).map(_line)  # a batch (not MCP's any more)
    | st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" "))
    | st.text(max_size=100).map(lambda t: t.replace("\n", " ").encode("utf-8", "surrogatepass"))
)


class Gateway:
    """`mcpx-hooks mcp` as a subprocess, spoken to line by line."""

    def __init__(self, where: Path, marker: Marker, **config: Any) -> None:
        config_path = write_config(where, marker, **config)
        self.errlog = where / "stderr.txt"
        env = {
            **os.environ,
            "MCPX_HOOKS_NO_DISCOVERY": "1",
            "XDG_STATE_HOME": str(where / "state"),
        }
        with self.errlog.open("wb") as err:
            self.process = subprocess.Popen(
                [MCPX, "mcp", "--config", str(config_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=where,
                env=env,
            )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def answer_to(self, request: dict[str, Any], error_too: bool = False) -> dict[str, Any]:
        """Sends `request` and reads until its answer (a result; `error_too`: or an error);
        every line before it must be a JSON-RPC message (answers to the hostile lines,
        notifications)."""
        self.send(_line(request))
        while True:
            try:
                raw = self.lines.get(timeout=ANSWER_S)
            except queue.Empty:
                raise AssertionError(f"no answer to {request['method']} in {ANSWER_S} s") from None
            assert raw, f"the gateway ended: {self.errlog.read_text()[-2000:]}"
            message = json.loads(raw)
            if isinstance(message, list):  # a batch's answer: an error for each request
                assert message and all(_refused(m) for m in message), raw
                continue
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", raw
            if message.get("id") == request["id"] and "method" not in message:
                assert "result" in message or (error_too and "error" in message), message
                return message

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            return self.process.wait(timeout=ANSWER_S)
        finally:
            self.process.kill()
            self.process.wait()
            self._reader.join(timeout=ANSWER_S)
            assert self.process.stdout is not None
            self.process.stdout.close()


@contextlib.contextmanager
def _session(where: Path, **config: Any) -> Iterator[Gateway]:
    """`mcpx-hooks mcp` in `where`, initialized; on the way out its stdin closed, its exit 0,
    no traceback on its stderr and none of its processes left."""
    marker = Marker(f"mcpx-test-{uuid.uuid4().hex}")
    face = Gateway(where / marker, marker, **config)
    face.answer_to(INITIALIZE)
    face.send(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    yield face
    code = face.close()
    stderr = face.errlog.read_text(errors="replace")
    assert "Traceback" not in stderr, stderr[-4000:]
    assert code == 0, stderr[-4000:]
    assert marker.alive() == []


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with _session(tmp_path_factory.mktemp("face")) as face:
        yield face


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(hostile_lines, min_size=1, max_size=4))
@example(lines=[b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}'])
@example(lines=[b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', b"\xff\xfe", b"[]"])
@example(lines=[b'{"jsonrpc":"2.0","id":"x","result":{}}', b'{"jsonrpc":"2.0","id":2}'])
@example(
    lines=[
        DEEP,
        b'{"method":"tools/call","x":' + DEEP + b"}",
        b'{"method":"notifications/cancelled","x":' + DEEP + b"}",
    ]
)
def test_hostile_client_lines_never_stop_the_gateway(gateway: Gateway, lines: list[bytes]) -> None:
    for line in lines:
        gateway.send(line)
    probe = f"probe-{uuid.uuid4().hex}"
    answered = gateway.answer_to({"jsonrpc": "2.0", "id": probe, "method": "ping"})
    assert answered["result"] == {}
    assert gateway.process.poll() is None
    listed = gateway.answer_to({"jsonrpc": "2.0", "id": probe + "-t", "method": "tools/list"})
    assert "words__count" in [t["name"] for t in listed["result"]["tools"]]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    rid=st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=12),
    args=st.dictionaries(clean_text(12), clean_values, max_size=4),
    token=st.none() | st.integers() | st.text(max_size=8),
)
def test_a_call_comes_back_under_its_own_id_with_what_the_server_answered(
    gateway: Gateway, rid: int | str, args: dict[str, Any], token: int | str | None
) -> None:
    """Relayed around the SDK once the server runs (its id swapped there and back), or not:
    the client's own id, and the arguments as the echo server read them."""
    params: dict[str, Any] = {"name": "h__echo", "arguments": args}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    call = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    answered = gateway.answer_to(call)
    assert answered["result"]["structuredContent"] == args
    assert json.loads(answered["result"]["content"][0]["text"]) == args


def test_a_request_that_cannot_be_read_is_answered_when_its_id_can(gateway: Gateway) -> None:
    """JSON that Python reads but the SDK does not (a lone surrogate, escaped), and a request
    over the size of a message, get an error naming their id: the client's call ends."""
    call = {"jsonrpc": "2.0", "id": f"lone-{uuid.uuid4().hex}", "method": "tools/call"}
    params = {"name": "h__echo", "arguments": {"a": "\udcff"}}
    refused = gateway.answer_to({**call, "params": params}, error_too=True)
    assert refused["error"]["code"] == -32700 and "surrogate" in refused["error"]["message"]
    huge = {"name": "h__echo", "arguments": {"a": "x" * (17 * 1024 * 1024)}}
    big = {**call, "id": f"big-{uuid.uuid4().hex}", "params": huge}
    refused = gateway.answer_to(big, error_too=True)
    assert refused["error"] == {
        "code": -32600,
        "message": f"a message over {16 * 1024 * 1024} bytes was dropped",
    }
    # JSON that is no JSON-RPC message: where it is wrong, in a line.
    listed = {**call, "id": f"listed-{uuid.uuid4().hex}", "params": [1]}
    assert gateway.answer_to(listed, error_too=True)["error"] == {
        "code": -32600,
        "message": "not a JSON-RPC message: params: Input should be an object",
    }
    gateway.send(b'{"jsonrpc": "2.0", "id": "an-answer", "result": "\\udcff"}')  # not answered
    after = {"jsonrpc": "2.0", "id": f"after-{uuid.uuid4().hex}", "method": "ping"}
    assert gateway.answer_to(after)["result"] == {}


def test_a_batch_is_refused_whole_with_an_answer_for_each_request(gateway: Gateway) -> None:
    """A JSON-RPC batch (which this MCP revision has not) gets one array of errors, one for
    each request in it, by its id; an empty one, one error; one of notifications, nothing."""
    tag = uuid.uuid4().hex
    batch = [
        {"jsonrpc": "2.0", "id": f"a-{tag}", "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": "an-answer", "result": {}},
    ]
    gateway.send(json.dumps(batch).encode())
    answer = json.loads(gateway.lines.get(timeout=ANSWER_S))
    assert [m["id"] for m in answer] == [f"a-{tag}", 7]
    assert all(m["error"]["code"] == -32600 and "batch" in m["error"]["message"] for m in answer)
    gateway.send(b"[ ]")
    empty = json.loads(gateway.lines.get(timeout=ANSWER_S))
    assert empty["id"] is None and empty["error"]["code"] == -32600
    gateway.send(json.dumps(batch[1:2]).encode())
    after = {"jsonrpc": "2.0", "id": f"after-{tag}", "method": "ping"}
    gateway.send(_line(after))
    answered = json.loads(gateway.lines.get(timeout=ANSWER_S))  # the next line: nothing between
    assert answered == {"jsonrpc": "2.0", "id": f"after-{tag}", "result": {}}


def test_a_batch_too_long_or_not_json_gets_one_error_and_the_session_goes_on(
    gateway: Gateway,
) -> None:
    """A batch over the size of a message was dropped without a word, and one that is not
    JSON too: the client waited for ever for the answers to its requests. JSON-RPC answers
    a batch that cannot be read with one error, its `id` null."""
    tag = uuid.uuid4().hex
    ping = {"jsonrpc": "2.0", "id": f"in-{tag}", "method": "ping", "params": {"x": "y" * 4096}}
    count = 16 * 1024 * 1024 // len(json.dumps(ping)) + 8
    gateway.send(("[" + ",".join([json.dumps(ping)] * count) + "]").encode())
    too_long = json.loads(gateway.lines.get(timeout=ANSWER_S))
    assert too_long == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": f"a batch over {16 * 1024 * 1024} bytes was dropped: a batch is not"
            " served: send each message on its own",
        },
    }
    gateway.send(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc"')
    unread = json.loads(gateway.lines.get(timeout=ANSWER_S))
    assert unread["id"] is None and unread["error"]["code"] == -32700
    after = {"jsonrpc": "2.0", "id": f"after-{tag}", "method": "ping"}
    gateway.send(_line(after))
    answered = json.loads(gateway.lines.get(timeout=ANSWER_S))  # the next line: nothing between
    assert answered == {"jsonrpc": "2.0", "id": f"after-{tag}", "result": {}}


class Relayed:
    """A gateway whose server `h` answers `h__relay` with whatever the call asks it to; made
    anew (`renew`) once its server has written more bad lines than a session bears, so that
    the examples after reach a server again."""

    def __init__(self, where: Path, hooks: Sequence[dict[str, Any]] = ()) -> None:
        self._where = where
        self._hooks = hooks
        self._stack = contextlib.ExitStack()
        self.face = self._open()

    def _open(self) -> Gateway:
        config = {"expose": ("echo", "relay"), "h_mode": "relay", "hooks": self._hooks}
        return self._stack.enter_context(_session(self._where, **config))

    def renew_if_broken(self) -> None:
        """Made anew if `h` is failing for its bad lines (its next call says so)."""
        probe = {"name": "h__echo", "arguments": {"k": 1}}
        echoed = self.face.answer_to(
            {
                "jsonrpc": "2.0",
                "id": f"probe-{uuid.uuid4().hex}",
                "method": "tools/call",
                "params": probe,
            }
        )
        result = echoed["result"]
        if result.get("isError"):
            assert "lines on stdout that are not MCP" in result["content"][0]["text"], echoed
            event("the next call: refused with why")
            self.renew()
        else:
            assert result["structuredContent"] == {"k": 1}, echoed

    def renew(self) -> None:
        self.close()
        self._stack = contextlib.ExitStack()
        self.face = self._open()

    def close(self) -> None:
        self._stack.close()  # (every check of `_session`'s end)


@pytest.fixture(scope="module")
def relayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relayed]:
    relay = Relayed(tmp_path_factory.mktemp("relay"))
    yield relay
    relay.close()


#: What a server may write besides its answer: its own requests and notifications to the
#: gateway, answers to requests never made, and anything else.
SERVER_METHODS = [
    "notifications/progress",
    "notifications/message",
    "notifications/tools/list_changed",
    "notifications/resources/updated",
    "notifications/cancelled",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "ping",
]
server_lines = hostile_lines.map(
    lambda b: b.decode("latin-1")  # (the server writes these bytes back)
) | st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(SERVER_METHODS)},
    optional={"id": clean_values, "params": clean_values},
).map(json.dumps)
content_items = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "audio", "resource_link", "resource", "x"])},
    optional={
        "text": clean_values,
        "data": clean_values,
        "mimeType": clean_values,
        "uri": clean_values,
        "name": clean_values,
        "resource": clean_values,
        "annotations": clean_values,
        "_meta": clean_values,
    },
)
tool_results = clean_values | st.fixed_dictionaries(
    {"content": st.lists(content_items, max_size=3) | clean_values},
    optional={"structuredContent": clean_values, "isError": clean_values, "_meta": clean_values},
)
relay_arguments = st.fixed_dictionaries(
    {"lines": st.lists(server_lines, max_size=3)},
    optional={
        "result": tool_results,
        "error": clean_values
        | st.fixed_dictionaries({"code": st.integers(), "message": clean_values}),
    },
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(arguments=relay_arguments)
@example(arguments={"lines": [], "result": {"content": "not a list", "isError": "maybe"}})
@example(arguments={"lines": ['{"jsonrpc": "2.0", "id": 0, "result": {}}', "\xed\xb3\xbf"]})
@example(arguments={"lines": [], "error": {"code": "x", "message": 1}})
def test_hostile_server_answers_reach_the_client_as_answers(
    relayed: Relayed, arguments: dict[str, Any]
) -> None:
    """Whatever a server answers a call with, and whatever it writes beside the answer, the
    client gets one answer to its call (a tool result, or an error), and the server's next
    call is served, or refused with the reason."""
    call = f"call-{uuid.uuid4().hex}"
    answered = relayed.face.answer_to(
        {
            "jsonrpc": "2.0",
            "id": call,
            "method": "tools/call",
            "params": {"name": "h__relay", "arguments": arguments},
        },
        error_too=True,
    )
    if "result" in answered:
        assert isinstance(answered["result"].get("content"), list), answered
    event("a tool result" if "result" in answered else "a JSON-RPC error")
    relayed.renew_if_broken()


#: A `before` plugin hook on `h.echo` calling `h.relay` with the echo call's own arguments:
#: whatever `relay` answers is the hook's answer.
RELAY_HOOK = {
    "name": "relay-hook",
    "on": "call",
    "phase": "before",
    "when": {"tool": ["h.echo"]},
    "plugin": "h.relay",
    "args": {"lines": "@input.args.lines", "result": "@input.args.result"},
    "effect": "apply",
    "timeoutMs": 10_000,
}


@pytest.fixture(scope="module")
def plugged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relayed]:
    relay = Relayed(tmp_path_factory.mktemp("plugged"), hooks=[RELAY_HOOK])
    yield relay
    relay.close()


#: A tool result whose structured content is a hook's answer: each key in its usual shape or
#: any JSON at all, beside any tool result at all.
hook_answer_keys = st.fixed_dictionaries(
    {},
    optional={
        "advise": clean_text(20) | clean_values,
        "refuse": clean_text(20) | clean_values,
        # (A question nobody here can answer waits out its deadline: 0 takes the default.)
        "ask": st.fixed_dictionaries(
            {"question": clean_text(10), "deadlineMs": st.just(0)},
            optional={"default": st.sampled_from(["yes", "no"]) | clean_values},
        )
        | clean_values,
        "propose": st.fixed_dictionaries({"value": clean_values}) | clean_values,
        "apply": st.fixed_dictionaries({"value": clean_values}) | clean_values,
        "run": st.fixed_dictionaries({"argv": st.lists(clean_text(8), max_size=3)}) | clean_values,
        "x": clean_values,
    },
)
hook_answers = tool_results | st.fixed_dictionaries(
    {
        "content": st.sampled_from([[], [{"type": "text", "text": "t"}]])
        | st.lists(content_items, max_size=2),
        "structuredContent": hook_answer_keys,
    }
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    arguments=st.fixed_dictionaries(
        {"lines": st.lists(server_lines, max_size=2), "result": hook_answers}
    )
)
@example(arguments={"lines": [], "result": {"content": [], "structuredContent": {"apply": 1}}})
@example(arguments={"lines": [], "result": {"structuredContent": {"refuse": {"x": [1]}}}})
@example(arguments={"lines": [], "result": {"content": [], "structuredContent": {"refuse": "no"}}})
@example(
    arguments={
        "lines": ["x"],
        "result": {"content": [], "structuredContent": {"apply": {"value": [1]}}},
    }
)
@example(
    arguments={
        "lines": [],
        "result": {"content": [], "structuredContent": {"ask": {"question": "q", "deadlineMs": 0}}},
    }
)
@example(
    arguments={
        "lines": [],
        "result": {"content": [], "structuredContent": {"run": {"argv": ["true"]}}},
    }
)
def test_hostile_plugin_hook_answers_end_in_one_answer_to_the_call(
    plugged: Relayed, arguments: dict[str, Any]
) -> None:
    """Whatever a plugin hook's tool answers (any tool result, any hook answer keys with any
    values, any lines beside), the call it gates gets one answer, and the session goes on."""
    call = {"name": "h__echo", "arguments": arguments}
    answered = plugged.face.answer_to(
        {
            "jsonrpc": "2.0",
            "id": f"gated-{uuid.uuid4().hex}",
            "method": "tools/call",
            "params": call,
        },
        error_too=True,
    )
    if "result" in answered:
        assert isinstance(answered["result"].get("content"), list), answered
        text = "".join(c.get("text", "") for c in answered["result"]["content"])
        event("refused" if text.startswith("refused by relay-hook") else "a tool result")
    else:
        event("a JSON-RPC error")
    plugged.renew_if_broken()


#: What a POST to /mcp carries besides its body, as a client of the transport sends it.
POST_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
#: Stands for the port's own origin in a drawn request (its port is known only then).
SAME_ORIGIN = "same-origin"


@attrs.define
class Port:
    server: Server
    #: The session the module's own client opened (hostile requests may name it).
    session: str

    def request(
        self, method: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on a connection of its own; a GET's body (an event stream) is not
        read, only its status and headers."""
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=ANSWER_S)
        try:
            connection.request(method, "/mcp", body=body, headers=headers)
            response = connection.getresponse()
            read = b"" if method == "GET" else response.read()
            return response.status, dict(response.getheaders()), read
        finally:
            connection.close()

    def ping(self) -> None:
        """The module's own session still answers."""
        status, _, body = self.request(
            "POST",
            _line({"jsonrpc": "2.0", "id": "probe", "method": "ping"}),
            {**POST_HEADERS, **self.server.headers(), "Mcp-Session-Id": self.session},
        )
        assert status == 200, (status, body)
        assert b'"id":"probe"' in body and b'"result":{}' in body, body


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Port]:
    marker = Marker(f"mcpx-test-{uuid.uuid4().hex}")
    where = tmp_path_factory.mktemp("port") / marker
    config = write_config(where, marker)
    server = start_server(where, "--config", str(config), env={"XDG_STATE_HOME": str(where)})
    try:
        opened = Port(server, "")
        status, headers, body = opened.request(
            "POST", _line(INITIALIZE), {**POST_HEADERS, **server.headers()}
        )
        assert status == 200, (status, body)
        opened.session = headers["mcp-session-id"]
        notified = {**POST_HEADERS, **server.headers(), "Mcp-Session-Id": opened.session}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert opened.request("POST", _line(initialized), notified)[0] == 202
        opened.ping()
        yield opened
    finally:
        assert server.stop() == 0
        log = server.log()
        assert "Traceback" not in log, log[-4000:]
        assert marker.alive() == []


header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@st.composite
def http_requests(draw: st.DrawFn) -> tuple[str, bytes | None, dict[str, str], bool]:
    """A request to /mcp: its method, body, headers, and whether it names the module's session."""
    method = draw(st.sampled_from(["POST", "POST", "POST", "GET", "DELETE", "PUT", "OPTIONS"]))
    body = draw(st.none() | hostile_lines | st.just(_line(INITIALIZE)))
    headers: dict[str, str] = {}
    for name, usual in [
        ("Accept", POST_HEADERS["Accept"]),
        ("Content-Type", POST_HEADERS["Content-Type"]),
        ("Mcp-Protocol-Version", "2025-06-18"),
        ("Origin", SAME_ORIGIN),
        ("Last-Event-ID", "1"),
    ]:
        chosen = draw(st.sampled_from(["usual", "none", "drawn"]))
        if chosen != "none":
            headers[name] = usual if chosen == "usual" else draw(header_values)
    own = draw(st.sampled_from(["own", "none", "drawn"]))
    if own == "drawn":
        headers["Mcp-Session-Id"] = draw(header_values)
    return method, body, headers, own == "own"


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(asked=st.lists(http_requests(), min_size=1, max_size=3))
@example(asked=[("DELETE", None, {}, False), ("GET", None, {"Accept": "text/event-stream"}, True)])
def test_hostile_requests_to_mcp_never_stop_the_port(
    port: Port, asked: list[tuple[str, bytes | None, dict[str, str], bool]]
) -> None:
    for method, body, headers, own in asked:
        sent = {**headers, **port.server.headers()}
        if sent.get("Origin") == SAME_ORIGIN:
            sent["Origin"] = f"http://127.0.0.1:{port.server.port}"
        if own and method != "DELETE":  # the module's own session stays open (the probe's)
            sent["Mcp-Session-Id"] = port.session
        status, _, answer = port.request(method, body, sent)
        # 503: past the cap of open sessions (hostile `initialize`s open some). Never a 500:
        # a request the port could not answer.
        assert 200 <= status < 500 or status == 503, (method, headers, body, status, answer)
        event(f"{method} {'own session' if own else 'no session of its own'}: {status}")
        assert b"Traceback" not in answer
    port.ping()
    assert port.server.proc.poll() is None
    log = port.server.log()
    assert "Traceback" not in log and "a bug" not in log, log[-4000:]
