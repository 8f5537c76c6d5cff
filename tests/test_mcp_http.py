"""`/mcp` on `serve`'s port: the MCP SDK's own streamable HTTP client (over httpx) against the
service in process on loopback, with real tool servers (the docs' wordtools, the tests'
hostile server) behind it, as `test_mcp_face.py` has them behind `mcpx-hooks mcp`."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx2
import pytest
import trio
import trio.testing
from conftest import Marker, cut_once_waiting
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcpface_parts import AGENT, LISTED, PY, call_hook, texts, write_config
from service_client import start_server
from trio_websocket import ConnectionClosed, open_websocket_url

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.run.runtime import Runtime, open_runtime
from mcpx_hooks.supervisor.service.mcpface import ALREADY_INITIALIZED
from mcpx_hooks.supervisor.service.options import Limits
from mcpx_hooks.supervisor.service.server import Service, ServiceOptions

#: The SDK's HTTP client leaves its SSE readers (httpx2's and httpcore2's async generators) to
#: the garbage collector when it closes; under Trio that is a ResourceWarning. It is the
#: client's, not the server's under test: those, and only those, are let through.
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpx2\.:ResourceWarning"),
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpcore2\.:ResourceWarning"),
]

TOKEN = "the-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: What a POST to /mcp carries besides its body (the transport asks for both types).
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


@attrs.define
class Served:
    service: Service
    runtime: Runtime
    base: str

    @property
    def url(self) -> str:
        return self.base + "/mcp"


@asynccontextmanager
async def served(
    tmp_path: Path,
    marker: Marker,
    monkeypatch: pytest.MonkeyPatch,
    hooks: Sequence[dict[str, Any]] = (),
    token: str | None = TOKEN,
    limits: Limits | None = None,
    **more: Any,
) -> AsyncIterator[Served]:
    """The service in this process with the tests' two tool servers (`more`: other config
    tables); stopped on the way out, with every session's run ended and every tool server
    gone."""
    where = tmp_path / marker
    config_path = write_config(where, marker, hooks, **more)
    monkeypatch.setenv("XDG_STATE_HOME", str(where / "state"))  # the servers' pins
    config = load_config([str(config_path)], cwd=where, environ={}, discover=False)
    options = ServiceOptions(
        port=0, token=token, cwd=str(where), environ={}, limits=limits or Limits()
    )
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening = await nursery.start(service.serve)
        yield Served(service, runtime, f"http://127.0.0.1:{listening.port}")
        service.stop()
    assert marker.alive() == []


@asynccontextmanager
async def http_session(
    url: str, headers: dict[str, str], terminate_on_close: bool = True, **client: Any
) -> AsyncIterator[ClientSession]:
    """The SDK's streamable HTTP client, initialized; `client`: the `ClientSession`'s own
    arguments (an elicitation callback)."""
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http, terminate_on_close=terminate_on_close) as (
            read,
            write,
        ),
        ClientSession(read, write, client_info=AGENT, **client) as session,
    ):
        await session.initialize()
        yield session


async def ended_frames(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    """The run's frames once it has its `end` (waits for it, at most 20 s)."""
    journal = runtime.journals.get(run_id)
    with trio.fail_after(20):
        async for _ in journal.follow(0):
            pass
    return journal.decoded(0)


def session_run_ids(runtime: Runtime) -> list[str]:
    return [s["runId"] for s in runtime.journals.summaries() if s["argv"][0] == "mcp"]


async def test_a_client_lists_calls_and_is_refused_through_the_hooks_and_its_session_is_a_run(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse = call_hook(
        "no-shouting",
        "before",
        {"refuse": "indoor voices"},
        effect="ask",
        when={"tool": ["words.shout"], "client": ["test-*"]},
    )
    async with served(tmp_path, marker, monkeypatch, [refuse]) as srv:
        async with http_session(srv.url, AUTH) as session:
            listed = [t.name for t in (await session.list_tools()).tools]
            counted = await session.call_tool("words__count", {"text": "one two\nthree"})
            refused = await session.call_tool("words__shout", {"text": "hey"})
        # The client ended its session (DELETE): the run ends, and /v1/runs shows it.
        (run_id,) = session_run_ids(srv.runtime)
        frames = await ended_frames(srv.runtime, run_id)
        async with httpx2.AsyncClient(headers=AUTH) as http:
            runs = (await http.get(srv.base + "/v1/runs")).json()
        assert len(srv.service.mcp.sessions or ()) == 0
    assert listed == LISTED
    assert counted.is_error is False and counted.structured_content == {"words": 3, "lines": 2}
    assert refused.is_error is True and texts(refused) == ["refused by no-shouting: indoor voices"]
    (summary,) = [r for r in runs if r["runId"] == run_id]
    assert summary["argv"] == ["mcp", "test-agent"] and summary["status"] == "result"
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "start" and frames[0]["argv"] == ["mcp", "test-agent"]
    assert kinds[-2:] == ["result", "end"]
    assert frames[-2]["value"] == {"calls": 2, "refused": 1, "failed": 0}
    calls = [f for f in frames if f["type"] == "call"]
    assert [(c["server"], c["tool"]) for c in calls] == [("words", "count"), ("words", "shout")]
    assert "one two" not in json.dumps(frames)  # arguments stay out of frames


async def test_a_client_over_http_is_told_when_a_server_s_tools_changed(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hostile server in `drift` mode adds a tool when `grow` is called and says so: the
    # server is quarantined in the session (its list is no longer the pinned one), and the
    # client is told its tools changed.
    told = trio.Event()

    async def heard(message: object) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            told.set()

    config = {"h_mode": "drift", "expose": ("echo", "grow", "extra")}
    async with (
        served(tmp_path, marker, monkeypatch, **config) as face,
        http_session(face.url, AUTH, message_handler=heard) as session,
    ):
        before = [t.name for t in (await session.list_tools()).tools]
        await session.call_tool("h__grow", {})
        with trio.fail_after(30):
            await told.wait()
        after = [t.name for t in (await session.list_tools()).tools]
    assert "h__grow" in before and not any(n.startswith("h__") for n in after)


async def test_the_token_and_the_origin_rule_hold_for_mcp(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps(INITIALIZE)
    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        missing = await http.post(srv.url, content=body, headers=MCP_HEADERS)
        wrong = await http.post(
            srv.url, content=body, headers={**MCP_HEADERS, "Authorization": "Bearer nope"}
        )
        foreign = await http.post(
            srv.url, content=body, headers={**MCP_HEADERS, **AUTH, "Origin": "http://evil.test"}
        )
        own_origin = {**MCP_HEADERS, **AUTH, "Origin": srv.base}
        admitted = await http.post(srv.url, content=body, headers=own_origin)
        session_id = admitted.headers["mcp-session-id"]
        # A session's id is no token: without the token it is refused like anything else.
        stolen = await http.delete(srv.url, headers={"Mcp-Session-Id": session_id})
        ended = await http.delete(srv.url, headers={"Mcp-Session-Id": session_id, **AUTH})
        gone = await http.delete(srv.url, headers={"Mcp-Session-Id": session_id, **AUTH})
        assert srv.service.mcp.sessions is not None and len(srv.service.mcp.sessions) == 0
    assert missing.status_code == 401 and "token is required" in missing.json()["error"]["message"]
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert wrong.status_code == 401 and "not this server's" in wrong.json()["error"]["message"]
    assert foreign.status_code == 403 and "evil.test" in foreign.json()["error"]["message"]
    assert admitted.status_code == 200 and admitted.headers["x-frame-options"] == "DENY"
    assert stolen.status_code == 401
    assert (ended.status_code, gone.status_code) == (200, 404)


def _leaves(group: BaseExceptionGroup[MCPError]) -> list[MCPError]:
    return [
        leaf
        for exc in group.exceptions
        for leaf in (_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    ]


async def test_the_sdk_client_is_told_why_its_request_was_refused(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal of the port (no token, a wrong one, a body over the cap) comes as a JSON-RPC
    error, so that MCP's SDK client says it in our words rather than "Server returned an
    error response" (what it said of the port's own error body)."""
    said: dict[str, str] = {}
    limits = Limits(max_message_bytes=4096)
    async with served(tmp_path, marker, monkeypatch, limits=limits) as srv:
        for name, headers in (("missing", {}), ("wrong", {"Authorization": "Bearer nope"})):
            # (the SDK's task groups wrap its error)
            with pytest.RaisesGroup(MCPError, flatten_subgroups=True) as refused:
                async with http_session(srv.url, headers):
                    pass
            error = _leaves(refused.value)[0].error
            said[name] = f"{error.code} {error.message}"
        async with http_session(srv.url, AUTH) as session:
            with pytest.raises(MCPError) as refused:
                await session.call_tool("words__shout", {"text": "x" * 5000})
            said["huge"] = f"{refused.value.error.code} {refused.value.error.message}"
            assert (await session.call_tool("words__shout", {"text": "a"})).is_error is False
    assert said["missing"].startswith("-32600 a token is required: Authorization: Bearer TOKEN")
    assert said["wrong"] == "-32600 the token is not this server's"
    assert said["huge"] == "-32600 the request body is over 4096 bytes"


async def test_a_method_mcp_does_not_take_is_405_with_allow(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        opened = await http.post(
            srv.url, content=json.dumps(INITIALIZE), headers=MCP_HEADERS | AUTH
        )
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        answers = [
            await http.request(method, srv.url, content=b"{}", headers=headers)
            for method in ("PUT", "PATCH", "OPTIONS", "HEAD")
            for headers in ({}, {**MCP_HEADERS, **AUTH}, {**MCP_HEADERS, **AUTH, **session})
        ]
        ended = await http.delete(srv.url, headers={**session, **AUTH})
    for answer in answers:
        assert answer.status_code == 405, (answer.request.method, answer.text)
        assert answer.headers["allow"] == "GET, POST, DELETE"
        if answer.request.method != "HEAD":
            assert answer.json()["error"] == {
                "code": -32600,
                "message": f"method {answer.request.method} is not allowed on /mcp"
                " (GET, POST, DELETE)",
            }
    assert ended.status_code == 200  # the session was there all along


async def test_mcp_without_auth_needs_no_token(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        served(tmp_path, marker, monkeypatch, token=None) as srv,
        http_session(srv.url, {}) as session,
    ):
        assert (await session.call_tool("words__shout", {"text": "a"})).is_error is False


async def test_hostile_requests_get_clear_answers_and_the_server_goes_on(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = 1024 * 1024  # the port's message cap (`Limits.max_message_bytes`)
    headers = {**MCP_HEADERS, **AUTH}

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"x" * 65536

    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        garbage = await http.post(srv.url, content=b'{"jsonrpc": "2.0", "id": [', headers=headers)
        not_rpc = await http.post(srv.url, content=b'{"hello": 1}', headers=headers)
        listed = await http.post(srv.url, json={**INITIALIZE, "params": [1]}, headers=headers)
        batch = await http.post(srv.url, json=[INITIALIZE], headers=headers)
        odd_id = await http.post(srv.url, json={**INITIALIZE, "id": 1.0}, headers=headers)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        no_session = await http.post(srv.url, content=json.dumps(listing), headers=headers)
        json_only = {**headers, "Accept": "application/json"}
        unacceptable = await http.post(srv.url, content=json.dumps(INITIALIZE), headers=json_only)
        huge = await http.post(srv.url, content=b" " * (cap + 1), headers=headers)
        streamed = await http.post(srv.url, content=chunks(), headers=headers)
        unknown = await http.post(
            srv.url, content=json.dumps(INITIALIZE), headers={**headers, "Mcp-Session-Id": "x"}
        )
        future = await http.post(
            srv.url,
            content=json.dumps(INITIALIZE),
            headers={**headers, "Mcp-Protocol-Version": "2999-01-01"},
        )
        assert srv.service.mcp.sessions is not None and len(srv.service.mcp.sessions) == 0
        async with http_session(srv.url, AUTH) as session:  # still serving
            assert (await session.call_tool("words__shout", {"text": "a"})).is_error is False
        # An `initialize` naming a version the server does not know (no header): answered
        # with the server's own, as MCP has it; only the header's version is refused.
        unknown_version = {
            **INITIALIZE,
            "params": {**INITIALIZE["params"], "protocolVersion": "2999-01-01"},
        }
        own = await http.post(srv.url, json=unknown_version, headers=headers)
        assert own.status_code == 200 and '"protocolVersion":"2025-11-25"' in own.text
    # Each said in a line of where it is wrong, not the SDK's report of every model it is not.
    said = {
        r: (r.status_code, r.json()["error"]) for r in (garbage, not_rpc, listed, batch, odd_id)
    }
    assert said[garbage][0] == 400 and said[garbage][1]["code"] == -32700
    assert said[garbage][1]["message"].startswith("Parse error: Invalid JSON")
    assert said[not_rpc] == (
        400,
        {"code": -32600, "message": "not a JSON-RPC message: jsonrpc: Field required"},
    )
    assert said[listed] == (
        400,
        {
            "code": -32600,
            "message": "not a JSON-RPC message: params: Input should be an object",
        },
    )
    assert said[batch] == (
        400,
        {"code": -32600, "message": "a batch is not served: send each message on its own"},
    )
    # (a request whose id is 1.0, null, …: the SDK read it as a notification, and answered 202)
    assert said[odd_id] == (
        400,
        {
            "code": -32600,
            "message": "not a JSON-RPC message: id: a request's id is a string or an integer",
        },
    )
    assert all(len(error["message"]) < 120 for _, error in said.values())
    assert no_session.status_code == 400 and unacceptable.status_code == 406
    # None of them opened a session, and none names one (each named one that never was).
    for refused in (garbage, not_rpc, listed, batch, odd_id, no_session, unacceptable):
        assert "mcp-session-id" not in refused.headers, refused.headers
    assert huge.status_code == 413 and f"over {cap} bytes" in huge.json()["error"]["message"]
    assert streamed.status_code == 413
    assert unknown.status_code == 404
    assert future.status_code == 400 and "2999-01-01" in future.json()["error"]["message"]


#: `initialize` requests the server answers with a JSON-RPC error (in its event stream, under
#: a 200 that names the session): params of the wrong shape, none at all, a nameless client.
FAILED_INITIALIZE = (
    {**INITIALIZE, "params": {"protocolVersion": 5}},
    {"jsonrpc": "2.0", "id": 1, "method": "initialize"},
    {**INITIALIZE, "params": {"protocolVersion": "2025-11-25", "capabilities": {}}},
)


async def test_a_session_whose_initialize_failed_is_ended_at_once_and_holds_nothing(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {**MCP_HEADERS, **AUTH}
    listing = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        srv.service.mcp.max_sessions = 2  # before the first request: the sessions' bound
        failed = [
            await http.post(srv.url, content=json.dumps(body), headers=headers)
            for body in FAILED_INITIALIZE * 2  # more of them than the bound
        ]
        await trio.testing.wait_all_tasks_blocked()  # (each one's task has wound up)
        assert srv.service.mcp.sessions is not None and len(srv.service.mcp.sessions) == 0
        named = [{"Mcp-Session-Id": answer.headers["mcp-session-id"]} for answer in failed]
        later = [await http.post(srv.url, content=listing, headers=headers | n) for n in named]
        async with http_session(srv.url, AUTH) as session:  # the bound is not taken up
            assert (await session.call_tool("words__shout", {"text": "a"})).is_error is False
        (run_id,) = session_run_ids(srv.runtime)  # the one session that opened
        assert await ended_frames(srv.runtime, run_id)
    for answer in failed:
        assert answer.status_code == 200 and '"code":-32602' in answer.text, answer.text
    assert [answer.status_code for answer in later] == [404] * len(failed)


def _initialize(client: str) -> str:
    params = {**INITIALIZE["params"], "clientInfo": {"name": client, "version": "1"}}
    return json.dumps({**INITIALIZE, "params": params})


PING = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})


async def test_at_the_bound_the_session_idle_longest_makes_room_for_a_new_one(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that opened sessions and left them (three bare `initialize`s) held every place
    for 30 minutes: the SDK's client was refused 503. Now the one idle longest makes room."""
    headers = {**MCP_HEADERS, **AUTH}
    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        srv.service.mcp.max_sessions = 3  # before the first request: the sessions' bound
        named = {}
        for client in ("left-a", "left-b", "left-c"):
            opened = await http.post(srv.url, content=_initialize(client), headers=headers)
            named[client] = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        await http.post(srv.url, content=PING, headers=headers | named["left-a"])  # a: not idle
        async with http_session(srv.url, AUTH) as session:
            shouted = await session.call_tool("words__shout", {"text": "a"})
        pinged = {
            client: (await http.post(srv.url, content=PING, headers=headers | n)).status_code
            for client, n in named.items()
        }
        runs = {s["argv"][1]: s["runId"] for s in srv.runtime.journals.summaries()}
        frames = await ended_frames(srv.runtime, runs["left-b"])
    assert shouted.is_error is False
    assert pinged == {"left-a": 200, "left-b": 404, "left-c": 200}
    assert [f["type"] for f in frames][-3:] == ["warning", "result", "end"]
    assert frames[-3]["message"].startswith(
        "this MCP session was ended to make room for a new one: 3 were open (the cap)"
    )


async def test_past_the_bound_a_new_session_is_refused_while_each_has_a_request_in_flight(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {**MCP_HEADERS, **AUTH}
    body = json.dumps(INITIALIZE)
    said = (
        "too many MCP sessions open (the cap is 1), each with a request in flight:"
        " try again once one ends"
    )
    told = pytest.RaisesExc(MCPError, check=lambda e: e.message == said)  # (the SDK's client)
    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        srv.service.mcp.max_sessions = 1  # before the first request: the sessions' bound
        first = await http.post(srv.url, content=body, headers=headers)
        session = {"Mcp-Session-Id": first.headers["mcp-session-id"]}
        listening = {"Accept": "text/event-stream", **session, **AUTH}
        async with http.stream("GET", srv.url, headers=listening) as stream:  # in flight
            assert stream.status_code == 200
            refused = await http.post(srv.url, content=body, headers=headers)
            with pytest.RaisesGroup(told, flatten_subgroups=True):
                async with http_session(srv.url, AUTH):
                    pass
        await trio.testing.wait_all_tasks_blocked()  # (the stream's end is heard)
        again = await http.post(srv.url, content=body, headers=headers)
        gone = await http.post(srv.url, content=PING, headers=headers | session)
        await http.delete(
            srv.url, headers={"Mcp-Session-Id": again.headers["mcp-session-id"]} | AUTH
        )
    assert (first.status_code, again.status_code, gone.status_code) == (200, 200, 404)
    assert refused.status_code == 503 and "mcp-session-id" not in refused.headers
    assert refused.json()["error"]["message"] == said


async def test_stopping_the_server_ends_each_session_and_its_run(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with served(tmp_path, marker, monkeypatch) as srv:
        runtime = srv.runtime
        async with http_session(srv.url, AUTH) as session:
            await session.call_tool("words__shout", {"text": "a"})
            (run_id,) = session_run_ids(runtime)
            srv.service.stop()
            frames = await ended_frames(runtime, run_id)
    assert [f["type"] for f in frames][-2:] == ["result", "end"]
    assert frames[-2]["value"] == {"calls": 1, "refused": 0, "failed": 0}


async def test_a_client_that_goes_away_without_a_word_has_its_session_ended(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with served(tmp_path, marker, monkeypatch) as srv:
        srv.service.mcp.idle_s = 0.5  # before the first request: the sessions' idle bound
        async with http_session(srv.url, AUTH, terminate_on_close=False) as session:
            await session.list_tools()
        (run_id,) = session_run_ids(srv.runtime)
        frames = await ended_frames(srv.runtime, run_id)
        await trio.testing.wait_all_tasks_blocked()  # the session's task has wound up too
        assert srv.service.mcp.sessions is not None and len(srv.service.mcp.sessions) == 0
    assert [f["type"] for f in frames][-2:] == ["result", "end"]


async def test_a_hook_s_question_is_put_to_the_client_as_an_elicitation_over_http(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = {"question": "Shout it?", "default": "no", "deadlineMs": 30_000}
    ask = call_hook("confirm", "before", {"ask": question}, effect="ask", when={"tool": ["shout"]})
    replies = iter(
        [
            types.ElicitResult(action="accept", content={"answer": "yes"}),
            types.ElicitResult(action="decline"),
        ]
    )
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return next(replies)

    async with (
        served(tmp_path, marker, monkeypatch, [ask]) as srv,
        http_session(srv.url, AUTH, elicitation_callback=elicit) as session,
    ):
        results = [await session.call_tool("words__shout", {"text": "hi"}) for _ in range(2)]
    assert asked == ["Shout it?"] * 2
    assert texts(results[0]) == ["HI"] and results[0].is_error is False
    refused = "refused by confirm: Shout it? (answered no by the client)"
    assert (texts(results[1]), results[1].is_error) == ([refused], True)


#: `mcpx_exec` reports frames as MCP log messages, which the SDK marks deprecated from its
#: newest protocol version on; in process, that warning would be an error of this test.
async def test_mcpx_exec_is_admitted_as_v1_exec_and_its_run_is_the_service_s(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs_here = {"script": {"sandbox": "none"}, "service": {"sandboxes": ["none"]}}
    logged: list[types.LoggingMessageNotificationParams] = []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    script = "import json, os; print(json.dumps({'cwd': os.getcwd()}))"
    async with served(tmp_path, marker, monkeypatch, **runs_here) as srv:
        async with http_session(srv.url, AUTH, logging_callback=log) as session:
            ran = await session.call_tool("mcpx_exec", {"argv": [PY, "-c", script]})
            refused = await session.call_tool("mcpx_exec", {"argv": ["true"], "cwd": "/"})
            strict = await session.call_tool("mcpx_exec", {"argv": ["true"], "sandbox": "strict"})
        out = ran.structured_content
        assert out is not None
        summary = srv.runtime.journals.get(out["runId"]).summary()
    assert ran.is_error is False and (out["status"], out["exitCode"]) == ("result", 0)
    assert out["result"] == {"cwd": str(tmp_path / marker)}  # serve's directory: its root
    assert summary["argv"] == [PY, "-c", script] and summary["status"] == "result"
    frames = [f for p in logged if p.data["runId"] == out["runId"] for f in p.data["frames"]]
    assert [f["type"] for f in frames] == ["start", "stdout", "result", "end"]
    for result in (refused, strict):
        assert result.is_error is True
        assert texts(result)[0].startswith("the request was not admitted: ")
    assert "strict" in texts(strict)[0] and "none" in texts(strict)[0]  # names the allowed


async def test_mcpx_exec_runs_count_against_max_runs_as_v1_exec_runs_do(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs_here = {"script": {"sandbox": "none"}, "service": {"sandboxes": ["none"]}}
    gate = tmp_path / "go"
    waits = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)"
    started = trio.Event()

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        if any(f["type"] == "start" for f in params.data["frames"]):
            started.set()

    async with served(tmp_path, marker, monkeypatch, limits=Limits(max_runs=1), **runs_here) as srv:
        results: list[types.CallToolResult] = []
        async with trio.open_nursery() as nursery:

            async def first() -> None:
                async with http_session(srv.url, AUTH, logging_callback=log) as session:
                    results.append(
                        await session.call_tool("mcpx_exec", {"argv": [PY, "-c", waits]})
                    )

            nursery.start_soon(first)
            with trio.fail_after(30):
                await started.wait()
            assert srv.service.runs_in_progress == 1
            async with http_session(srv.url, AUTH) as other:
                second = await other.call_tool("mcpx_exec", {"argv": ["true"]})
            gate.touch()
        assert srv.service.runs_in_progress == 0
    (ran,) = results
    assert ran.is_error is False and ran.structured_content is not None
    assert ran.structured_content["status"] == "result"
    assert second.is_error is True
    assert texts(second) == [
        "the request was not admitted: too many runs in progress (the cap is 1); try again later"
    ]


#: Every socket of this process is a client's here (the server is another process): the SDK's
#: client, cancelled while its GET stream reconnects, leaves a socket to the collector.
@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
async def test_mcpx_exec_over_http_leaves_serve_s_stderr_all_log_lines(
    tmp_path: Path, marker: Marker
) -> None:
    """The run's frames go to the client as log messages, a capability the SDK marks
    deprecated: its warning reached serve's stderr raw (a path, then a line of source)."""
    where = tmp_path / marker
    config = write_config(where, marker)
    server = start_server(where, "--config", str(config), env={"XDG_STATE_HOME": str(where)})
    try:
        base = server.url.replace("ws://", "http://")
        async with http_session(base + "/mcp", server.headers()) as session:
            ran = await session.call_tool("mcpx_exec", {"argv": ["true"]})
    finally:
        assert server.stop() == 0
    assert ran.structured_content is not None and ran.structured_content["status"] == "result"
    lines = server.stderr.read_text().splitlines()
    assert [line for line in lines if not line.startswith("mcpx-hooks serve: ")] == []
    assert "Warning" not in "\n".join(lines)


#: As above.
@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
async def test_a_real_serve_answers_mcp_and_its_run_is_followed_to_its_end(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    state = {"XDG_STATE_HOME": str(where / "state")}
    server = start_server(where, "--config", str(config), env=state)
    try:
        base = server.url.replace("ws://", "http://")
        async with http_session(base + "/mcp", server.headers()) as session:
            counted = await session.call_tool("words__count", {"text": "a b"})
        async with httpx2.AsyncClient(headers=server.headers()) as http:
            runs = (await http.get(base + "/v1/runs")).json()
        (run,) = [r for r in runs if r["argv"][0] == "mcp"]
        headers = [(k.lower().encode(), v.encode()) for k, v in server.headers().items()]
        frames: list[dict[str, Any]] = []
        with trio.fail_after(20):
            url = f"{server.url}/v1/runs/{run['runId']}?from=0"
            async with open_websocket_url(url, extra_headers=headers) as ws:
                with contextlib.suppress(ConnectionClosed):
                    while True:
                        message = await ws.get_message()
                        frames += [json.loads(line) for line in str(message).splitlines()]
    finally:
        code = server.stop()
    assert code == 0
    # A client closing an event stream it has read is its own end, not "a bug" in the log
    # (the SDK's transport logged one, "SSE response error", for each).
    assert "a bug" not in server.stderr.read_text() and "SSE" not in server.stderr.read_text()
    assert counted.structured_content == {"words": 2, "lines": 1}
    assert run["argv"] == ["mcp", "test-agent"]
    assert frames[0]["type"] == "start" and frames[0]["argv"] == ["mcp", "test-agent"]
    assert [f["type"] for f in frames][-2:] == ["result", "end"]
    assert frames[-2]["value"] == {"calls": 1, "refused": 0, "failed": 0}
    assert marker.alive() == []


async def test_a_second_initialize_in_a_session_is_refused_and_the_session_goes_on(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {**MCP_HEADERS, **AUTH}
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    listing = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        first = await http.post(srv.url, content=json.dumps(INITIALIZE), headers=headers)
        named = {**headers, "Mcp-Session-Id": first.headers["mcp-session-id"]}
        named["Mcp-Protocol-Version"] = "2025-11-25"
        await http.post(srv.url, content=initialized, headers=named)
        again = await http.post(srv.url, content=json.dumps({**INITIALIZE, "id": 2}), headers=named)
        listed = await http.post(srv.url, content=listing, headers=named)
        await http.delete(srv.url, headers=named)
    assert '"code":-32600' in again.text and ALREADY_INITIALIZED in again.text, again.text
    assert '"words__shout"' in listed.text


async def test_a_notification_as_its_session_ends_is_answered_and_logs_no_bug(
    tmp_path: Path,
    marker: Marker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A notification POSTed as its session ended (a DELETE at the same moment, from another
    # connection): the SDK's transport answered 202, found the session's stream closed, and
    # answered again (500), which failed an assertion of the front door's; serve's log said
    # 'Error handling POST request: ClosedResourceError (a bug: …)' and 'connection N failed:
    # AssertionError: http.response.start sent twice (a bug: …)'. The moment is made here by
    # a stream to the session that is closed when the POST's message is handed to it.
    headers = {**MCP_HEADERS, **AUTH}
    cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
    async with served(tmp_path, marker, monkeypatch) as srv, httpx2.AsyncClient() as http:
        first = await http.post(srv.url, content=json.dumps(INITIALIZE), headers=headers)
        sid = first.headers["mcp-session-id"]
        named = {**headers, "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
        sessions = srv.service.mcp.sessions
        assert sessions is not None
        transport = sessions._open[sid].transport

        class Ended:  # the session's stream, closed under the POST as the session ends
            async def send(self, _: object) -> None:
                raise anyio.ClosedResourceError

        stream, transport._read_stream_writer = transport._read_stream_writer, Ended()
        said = await http.post(srv.url, content=json.dumps(cancelled), headers=named)
        transport._read_stream_writer = stream
        async with http_session(srv.url, AUTH) as session:  # the server goes on
            assert (await session.call_tool("words__shout", {"text": "a"})).is_error is False
    assert said.status_code in (202, 404)
    bugs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in bugs if "POST" in m or "failed" in m], bugs


async def test_a_request_s_body_is_parsed_once_on_its_way(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's transport parses each POST body; the check of it in our words parsed it
    # before, every time: a second parse of every request (10 ms for 1 MiB of small objects).
    import pydantic_core

    parsed: list[bytes] = []
    from_json = pydantic_core.from_json

    def counted(data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, bytes | bytearray):
            parsed.append(bytes(data))
        return from_json(data, *args, **kwargs)

    monkeypatch.setattr(pydantic_core, "from_json", counted)
    text = "31415926535897932384"
    async with served(tmp_path, marker, monkeypatch) as srv:
        async with http_session(srv.url, AUTH) as session:
            shouted = await session.call_tool("words__shout", {"text": text})
            assert shouted.is_error is False
        async with httpx2.AsyncClient() as http:
            headers = {**MCP_HEADERS, **AUTH}
            garbage = await http.post(
                srv.url, content=b'{"jsonrpc": "2.0", "id": [', headers=headers
            )
    assert len([body for body in parsed if text.encode() in body]) == 1
    assert garbage.status_code == 400
    assert garbage.json()["error"]["message"].startswith("Parse error: Invalid JSON")


@pytest.mark.parametrize("hooks", [[], [call_hook("note", "suffix", {"advise": "seen"})]])
async def test_a_call_the_client_cancels_is_in_its_session_s_run(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch, hooks: list[dict[str, Any]]
) -> None:
    # A call the client cancelled left no trace: the run's result counted the other calls
    # only, and nothing said one was made and given up.
    async with served(tmp_path, marker, monkeypatch, hooks, expose=("wait", "echo")) as srv:
        async with http_session(srv.url, AUTH) as session:
            await session.list_tools()
            log = tmp_path / marker / "h.log"
            await cut_once_waiting(log, lambda: session.call_tool("h__wait", {}))
            await session.call_tool("h__echo", {})  # answered after the server read the cancel
        (run_id,) = session_run_ids(srv.runtime)
        frames = await ended_frames(srv.runtime, run_id)
    calls = [f for f in frames if f["type"] == "call"]
    assert [(c["tool"], c["ok"]) for c in calls] == [("wait", False), ("echo", True)]
    assert calls[0]["error"] == "cancelled by the client before its answer"
    assert frames[-2]["value"] == {"calls": 2, "refused": 0, "failed": 0}
