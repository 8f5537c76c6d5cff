"""`mcpx-hooks mcp`'s calls that no hook can touch, relayed as lines around the SDK's two
sessions (`service/mcpraw.py`): what a client gets is what the server answered, or what the
same call through the call point gives, and the run keeps the same frames. The tests'
hostile server's `whoami` tells which way a call came (the id the server saw: `mcpx-relay-N`
relayed, `mcpx-call-N` through the call point, on the pipe beside the SDK's client)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import Marker, cut_once_waiting
from mcp import types
from mcp.shared.message import SessionMessage
from mcpface_parts import (
    MCPX,
    PY,
    RAW_CLIENT,
    call_hook,
    direct_answers,
    dumped,
    line_client,
    server_waiting,
    session_frames,
    stdio_session,
    texts,
    through_mcpx,
    write_config,
)

from mcpx_hooks.supervisor.service.mcpstdio import ODD_ID
from mcpx_hooks.supervisor.service.mcpwriter import ClientWriter
from mcpx_hooks.supervisor.tools.jsonlines import LineWriter

#: A `suffix` hook that advises: it fires for every call and changes no answer, so the calls
#: it is on go through the call point.
NOTE = call_hook("note", "suffix", {"advise": "seen"})


def edit_config(path: Path, server: str, **keys: Any) -> None:
    """Sets `keys` on `server`'s declaration in the config file at `path`."""
    config = json.loads(path.read_text())
    config["servers"][server].update(keys)
    path.write_text(json.dumps(config))


async def seen_id(session: Any) -> Any:
    """The id the hostile server saw `whoami`'s call come with, once the tools are listed
    (the servers started: a call that starts its server takes the SDK's way)."""
    await session.list_tools()
    return json.loads(texts(await session.call_tool("h__whoami", {}))[0])


async def test_a_call_no_hook_touches_is_relayed_and_answers_as_the_server_does(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker, expose=("echo", "fail", "mixed", "whoami"))
    calls = [("words", "count", {"text": "one two\nthree"}), ("words", "shout", {"text": "hé"})]
    calls += [("h", "echo", {"n": [1, 2.5, None, "ü"]}), ("h", "fail", {"why": "no"})]
    calls += [("h", "mixed", {"n": 7})]
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        relayed_id = await seen_id(session)
        through = [await session.call_tool(f"{s}__{t}", a) for s, t, a in calls]
    direct_results = await direct_answers(where, tmp_path, calls)
    assert relayed_id == "mcpx-relay-1"
    assert [dumped(r) for r in through] == [dumped(r) for r in direct_results]
    assert marker.alive() == []
    # The run holds each call's frame as the call point writes it, and counts them.
    frames = session_frames(config)
    made = [f for f in frames if f["type"] == "call"]
    assert [(f["server"], f["tool"], f["ok"]) for f in made] == [
        ("h", "whoami", True),
        ("words", "count", True),
        ("words", "shout", True),
        ("h", "echo", True),
        ("h", "fail", False),
        ("h", "mixed", True),
    ]
    assert made[4]["error"] == '{"why": "no"}'  # an isError answer's text (its structure)
    assert [f["type"] for f in frames][-2:] == ["result", "end"]
    assert frames[-2]["value"] == {"calls": 6, "refused": 0, "failed": 1}


async def test_a_call_a_hook_fires_for_or_with_limits_takes_the_sdk_s_way(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    hook = {**NOTE, "when": {"tool": ["echo"]}}
    config = write_config(where, marker, [hook], expose=("echo", "whoami"))
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        free = await seen_id(session)
    edit_config(config, "h", callsPerMinute=1000)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        limited = await seen_id(session)
    config = write_config(where, marker, [NOTE], expose=("echo", "whoami"))
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        hooked = await seen_id(session)
    # Relayed around the gateway's SDK session, or through its call point: both ways reach
    # the server on the pipe beside the SDK's client, with ids of their own.
    assert (free, limited, hooked) == ("mcpx-relay-1", "mcpx-call-1", "mcpx-call-1")
    assert marker.alive() == []


def raw_results(
    argv: Sequence[str], cwd: Path, env: dict[str, str], calls: Sequence[tuple[str, Any]]
) -> list[Any]:
    """Each call's (tool, arguments) `result` object as the process at `argv` wrote it, a
    client of its stdio speaking JSON lines; the process is killed past 60 s."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        timer = threading.Timer(60, proc.kill)
        timer.start()
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        def send(message: dict[str, Any]) -> None:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()

        def answer(rid: int, method: str, params: dict[str, Any]) -> Any:
            send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            while (said := json.loads(stdout.readline())).get("id") != rid:
                pass
            return said["result"]

        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        answer(0, "initialize", {**hello, "clientInfo": RAW_CLIENT})
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if "mcp" in argv:
            answer(1, "tools/list", {})  # (the servers started: calls then take the short way)
        results = [
            answer(n, "tools/call", {"name": name, "arguments": args})
            for n, (name, args) in enumerate(calls, start=2)
        ]
        stdin.close()
        proc.wait()
        timer.cancel()
    return results


@pytest.mark.parametrize("hooks", [[], [NOTE]])
def test_an_answer_no_hook_changed_keeps_the_server_s_own_keys(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]]
) -> None:
    # wordtools writes neither `isError` nor anything else the SDK's model has a default for:
    # through the gateway, relayed or through the call point, its answer has none added.
    where = tmp_path / marker
    config = write_config(where, marker, hooks)
    args = {"text": "one two\nthree"}
    direct = raw_results([PY, "wordtools.py"], where, dict(os.environ), [("count", args)])
    env = {**os.environ, **(through_mcpx(config).env or {})}
    argv = [MCPX, "mcp", "--config", str(config)]
    through = raw_results(argv, where, env, [("words__count", args)])
    assert through == direct
    assert set(direct[0]) == {"content", "structuredContent"}
    assert marker.alive() == []


#: A `before` hook that may ask (and does not): its calls are the SDK's server's to serve.
MAY_ASK = call_hook("may-ask", "before", {"advise": "seen"}, effect="ask")


@pytest.mark.parametrize(("hooks", "kind"), [([], "relay"), ([NOTE], "call"), ([MAY_ASK], "call")])
async def test_a_client_s_own_meta_goes_with_its_call_every_way(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], kind: str
) -> None:
    """As clients send an id of their tool use, or a trace context, beside the progress
    token: relayed, served through the call point outside the SDK's server, and by it."""
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("meta", "whoami"))
    mine = {"example.org/toolUseId": "toolu_1", "traceparent": "00-ab-cd-01"}
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        await seen_id(session)  # (its server running, its pin decided)
        plain = await session.call_tool("h__meta", {}, meta=mine)
        ticked = await session.call_tool("h__meta", {}, progress_callback=_ignored, meta=mine)
        bare = await session.call_tool("h__meta", {})
    first, second, third = (json.loads(texts(r)[0]) for r in (plain, ticked, bare))
    assert first["meta"] == mine
    assert first["id"].startswith(f"mcpx-{kind}-")
    assert second["meta"] == {**mine, "progressToken": second["id"]}
    assert third["meta"] is None
    assert marker.alive() == []


async def _ignored(progress: float, total: float | None, message: str | None) -> None:
    pass


#: A `before` hook that may ask (and only advises): the calls it is on go through the SDK's
#: server, whose request context would put its question to the client.
MAY_ASK = call_hook("gate", "before", {"advise": "fine"}, effect="ask")


@pytest.mark.parametrize(
    ("hooks", "kind", "hooked"), [([], "relay", 0), ([NOTE], "call", 3), ([MAY_ASK], "call", 4)]
)
async def test_progress_logs_and_a_cancellation_are_carried_with_the_ids_swapped(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], kind: str, hooked: int
) -> None:
    """Relayed, served through the call point (a hook on it) outside the SDK's server, or
    by the SDK's server (a hook that may ask): progress with the client's token, the log
    message once, a cancellation carried, and the cancelled call in the run."""
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("progress", "wait", "echo"))
    heard: list[tuple[float, float | None, str | None]] = []
    logged: list[types.LoggingMessageNotificationParams] = []

    async def hear(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    async with stdio_session(
        through_mcpx(config), tmp_path / "err", logging_callback=log
    ) as session:
        await session.list_tools()  # (the servers started: a first call takes the SDK's way)
        done = await session.call_tool("h__progress", {}, progress_callback=hear)
        quiet = await session.call_tool("h__progress", {})  # no token: no progress asked for
        await cut_once_waiting(where / "h.log", lambda: session.call_tool("h__wait", {}))
        await session.call_tool("h__echo", {})  # answered after the server read the cancel
    assert texts(done) == texts(quiet) == ["done"]
    assert heard == [(1, 2, "one"), (2, 2, "two")]
    assert [(p.level, p.logger, p.data) for p in logged] == [
        ("warning", "hostile", {"step": 2})
    ] * 2
    said = [line.split() for line in (where / "h.log").read_text().splitlines()]
    assert said[1:] == [["waiting", f"mcpx-{kind}-3"], ["cancelled", f"mcpx-{kind}-3"]]
    assert marker.alive() == []
    # A cancelled call is never answered; its `call` frame says the client cancelled it, and
    # it is counted (it was one of the client's calls), as the SDK's way has it.
    frames = session_frames(config)
    calls = [f for f in frames if f["type"] == "call"]
    assert [f["tool"] for f in calls] == ["progress", "progress", "wait", "echo"]
    assert calls[2]["ok"] is False
    assert calls[2]["error"] == "cancelled by the client before its answer"
    assert isinstance(calls[2]["durationMs"], int)
    assert frames[-2]["value"] == {"calls": 4, "refused": 0, "failed": 0}
    assert len([f for f in frames if f["type"] == "hook"]) == hooked


async def test_a_log_message_reaches_a_client_once_however_many_of_its_calls_wait(
    tmp_path: Path, marker: Marker
) -> None:
    # A server's log message is its own, not a call's: every call in flight hears it, and a
    # client with two of them in flight to the server got it twice.
    where = tmp_path / marker
    config = write_config(where, marker, expose=("progress", "wait", "whoami"))
    logged: list[types.LoggingMessageNotificationParams] = []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    fifo = where / "h.log.waiting"  # (the server writes a byte there once `wait` reached it)
    async with stdio_session(
        through_mcpx(config), tmp_path / "err", logging_callback=log
    ) as session:
        await seen_id(session)  # (its server running, its pin decided: calls are relayed)
        os.mkfifo(fifo)
        said = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.call_tool, "h__wait", {})
                with trio.fail_after(60):
                    await trio.lowlevel.wait_readable(said)
                done = await session.call_tool("h__progress", {})
                nursery.cancel_scope.cancel()
        finally:
            os.close(said)
    assert texts(done) == ["done"]
    assert [(p.level, p.data) for p in logged] == [("warning", {"step": 2})]
    assert marker.alive() == []


@pytest.mark.parametrize(("hooks", "kind"), [([], "relay"), ([NOTE], "call")])
async def test_past_call_timeout_ms_the_call_is_cancelled_on_the_server_and_says_why(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], kind: str
) -> None:
    """Relayed, or through the call point (a hook on it): the same words, and the server is
    told the call was given up."""
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("wait", "echo"))
    edit_config(config, "h", callTimeoutMs=300)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        await session.list_tools()
        with trio.fail_after(30):
            late = await session.call_tool("h__wait", {})
        await session.call_tool("h__echo", {})  # answered after the server read the cancel
    assert late.is_error is True
    assert texts(late) == [
        "the call took longer than callTimeoutMs (300 ms); it was cancelled on the server"
    ]
    said = [line.split() for line in (where / "h.log").read_text().splitlines()]
    assert said[1:] == [["waiting", f"mcpx-{kind}-1"], ["cancelled", f"mcpx-{kind}-1"]]
    assert marker.alive() == []


async def test_a_server_s_bad_answers_and_end_read_the_same_both_ways(
    tmp_path: Path, marker: Marker
) -> None:
    """Each hostile mode's answer to `echo`, relayed and through the call point (a hook on
    it), is the same tool result: an error saying why, never the bad answer itself."""
    got: dict[str, list[str]] = {}
    for mode in ("lying", "garbled", "nan", "crash-on-call"):
        for hooks in ([], [NOTE]):
            where = tmp_path / f"{marker}-{mode}-{len(hooks)}"
            config = write_config(where, marker, hooks, h_mode=mode)
            async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
                await session.list_tools()
                result = await session.call_tool("h__echo", {})
            assert result.is_error is True
            got.setdefault(mode, []).append(texts(result)[0])
    assert marker.alive() == []
    for mode, (relayed, through_sdk) in got.items():
        assert relayed == through_sdk, mode
    assert got["lying"][0] == "server h answered echo with an error: I lied: there is no such tool"
    assert got["garbled"][0].startswith("server h answered echo with what is not a tool result")
    assert got["nan"][0] == "server h answered echo with NaN or Infinity"
    assert got["crash-on-call"][0].startswith("server h exited with status 7")


#: What a client writing lines by hand says it is.


async def cancelled_on_the_server(
    where: Path, config: Path, rid: Any, cancel: dict[str, Any]
) -> list[list[str]]:
    """What the hostile server's log says once a call of `wait` (by the id `rid`) was
    cancelled by the client (`cancel`: the params of its `notifications/cancelled`) and a
    call of `echo` after it was answered, with nothing before its answer."""
    with server_waiting(where) as said, trio.fail_after(60):
        async with line_client(config) as client:
            call = {"jsonrpc": "2.0", "id": rid, "method": "tools/call"}
            await client.send({**call, "params": {"name": "h__wait", "arguments": {}}})
            await trio.lowlevel.wait_readable(said)
            await client.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
            )
            # Answered after the server read the cancellation, and nothing came before.
            echo = {"name": "h__echo", "arguments": {}}
            came = await client.answer(2, "tools/call", echo)
            assert [c.get("id") for c in came] == [2]
            return [line.split() for line in (where / "h.log").read_text().splitlines()]


@pytest.mark.parametrize("rid", ["7", "-7", 7], ids=["digits", "minus", "number"])
@pytest.mark.parametrize(("hooks", "kind"), [([], "relay"), ([NOTE], "call")])
async def test_a_call_whose_id_is_digits_in_a_string_is_cancelled_as_the_sdk_cancels_it(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], kind: str, rid: Any
) -> None:
    # The SDK's server takes "7" and 7 for one id (as the TypeScript SDK does): a client's
    # cancellation naming its call "7" cancels it. Relayed, or served outside the SDK's
    # server, such a call was held by "7" and its cancellation looked up as 7: not found, the
    # server was never told, and the client got an answer to the call it had given up.
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("wait", "echo"))
    cancel = {"requestId": rid, "reason": "the user stopped it"}
    log = await cancelled_on_the_server(where, config, rid, cancel)
    assert log[1:] == [["waiting", f"mcpx-{kind}-1"], ["cancelled", f"mcpx-{kind}-1"]]
    assert marker.alive() == []


@pytest.mark.parametrize(("hooks", "kind"), [([], "relay"), ([NOTE], "call")])
async def test_a_cancellation_whose_reason_names_the_method_is_carried(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], kind: str
) -> None:
    # A line holding "tools/call" was taken for a call, and when it was none it went to the
    # SDK's server without a look for a cancellation: one whose reason was "tools/call" was
    # lost for a call relayed or served outside the SDK's server.
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("wait", "echo"))
    log = await cancelled_on_the_server(where, config, 5, {"requestId": 5, "reason": "tools/call"})
    assert log[1:] == [["waiting", f"mcpx-{kind}-1"], ["cancelled", f"mcpx-{kind}-1"]]
    assert marker.alive() == []


async def test_a_server_that_stops_reading_holds_up_none_of_the_session_s_other_calls(
    tmp_path: Path, marker: Marker
) -> None:
    # A server stuck in a call reads nothing more: once its stdin is full, a cancellation of
    # a call relayed to it cannot be written. It was written in the task that reads the
    # client's lines (and past callTimeoutMs in the one that ends calls), so every later
    # call of the session, to any server, waited until the server read again: for a server
    # that hung, for good. The cancellation now waits for room in a task of its own.
    where = tmp_path / marker
    config = write_config(where, marker, expose=("wait", "echo"))
    with server_waiting(where) as said, trio.fail_after(60):
        async with line_client(config) as client:
            call = {"jsonrpc": "2.0", "method": "tools/call"}
            deaf = {"name": "h__wait", "arguments": {"deaf": True}}
            await client.send({**call, "id": "stuck", "params": deaf})
            await trio.lowlevel.wait_readable(said)
            # Calls too large to relay fill its stdin, waiting for room (the SDK's way).
            padded = {"name": "h__echo", "arguments": {"pad": "x" * 200_000}}
            for n in range(2):
                await client.send({**call, "id": f"pad-{n}", "params": padded})
            cancel = {"requestId": "stuck"}
            await client.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
            )
            with trio.fail_after(10):
                count = {"name": "words__count", "arguments": {"text": "one two"}}
                came = await client.answer(3, "tools/call", count)
            assert came[-1]["result"]["structuredContent"] == {"words": 2, "lines": 1}
    assert marker.alive() == []


async def test_a_request_whose_id_mcp_does_not_take_is_answered_not_left_waiting(
    tmp_path: Path, marker: Marker
) -> None:
    # The SDK's models read a request whose id is null, a fraction (2.0: Python's JSON
    # writes a float so), a boolean or an object as a notification, dropping its id: it was
    # never answered, and its client waited for good. It is an invalid request, answered so.
    where = tmp_path / marker
    config = write_config(where, marker)
    count = {"name": "words__count", "arguments": {"text": "one two"}}
    with trio.fail_after(60):
        async with line_client(config) as client:
            for odd in (None, 2.0, True, {"n": 1}):
                await client.send({"jsonrpc": "2.0", "id": odd, "method": "tools/call"})
            # A notification that holds an `id` below its top level is one all the same, and
            # one a careless client gives a null `id` is taken for what it names.
            said = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
            await client.send({**said, "params": {"_meta": {"id": 1}}})
            await client.send({**said, "id": None})
            came = await client.answer(5, "tools/call", count)
    refused = {"code": -32600, "message": ODD_ID}
    assert came[:-1] == [{"jsonrpc": "2.0", "id": None, "error": refused}] * 4
    assert came[-1]["result"]["structuredContent"] == {"words": 2, "lines": 1}
    assert marker.alive() == []


@pytest.mark.parametrize(("hooks", "kind"), [([], "relay"), ([NOTE], "call")])
async def test_requests_open_when_the_client_closes_its_end_are_answered_that_it_closed(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], kind: str
) -> None:
    # A client that closes stdin with calls still running (`printf ... | mcpx-hooks mcp`, or
    # an SDK client shutting down) got no answer to them at all: the session ended and they
    # were dropped. The SDK's own server answers each such request -32000 "Connection
    # closed"; so now does the gateway, whichever way the call went, and nothing twice.
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("wait", "echo"))
    with server_waiting(where) as said, trio.fail_after(60):
        async with line_client(config) as client:
            call = {"jsonrpc": "2.0", "method": "tools/call"}
            await client.send({**call, "id": "w", "params": {"name": "h__wait", "arguments": {}}})
            await trio.lowlevel.wait_readable(said)
            script = {"name": "mcpx_exec", "arguments": {"argv": ["sleep", "60"]}}
            await client.send({**call, "id": 9, "params": script})
            while (await client.line()).get("method") != "notifications/message":
                pass  # (its run started: a frame came)
            came = await client.close_and_read()
    answers = [c for c in came if "id" in c]
    closed = {"code": -32000, "message": "Connection closed"}
    assert sorted(answers, key=lambda a: str(a["id"])) == [
        {"jsonrpc": "2.0", "id": 9, "error": closed},
        {"jsonrpc": "2.0", "id": "w", "error": closed},
    ], came
    assert (where / "h.log").read_text().split()[1:3] == ["waiting", f"mcpx-{kind}-1"]
    assert marker.alive() == []


async def test_an_answer_that_comes_as_the_session_ends_is_not_written_a_second_time() -> None:
    # A call whose answer was on its way as the client closed its end: the session's end
    # answers it "Connection closed", and the answer that comes after is not written too
    # (two answers to one id break JSON-RPC).
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader:
        async with trio.lowlevel.FdStream(write_fd) as pipe:
            writer = ClientWriter(LineWriter(pipe))
            for rid in ("late", 2, "3"):
                writer.asked(rid)
            await writer.send_line(b'{"jsonrpc":"2.0","id":2,"result":{}}\n', answers=2)
            await writer.answer_unanswered()
            await writer.send_line(b'{"jsonrpc":"2.0","id":"late","result":{}}\n', answers="late")
            answer = types.JSONRPCResponse(jsonrpc="2.0", id="3", result={})
            await writer.send(SessionMessage(answer))
        lines = [json.loads(line) for line in reader.read().splitlines()]
    closed = {"code": -32000, "message": "Connection closed"}
    assert lines == [
        {"jsonrpc": "2.0", "id": 2, "result": {}},
        {"jsonrpc": "2.0", "id": "late", "error": closed},
        {"jsonrpc": "2.0", "id": "3", "error": closed},
    ]


@pytest.mark.parametrize(
    ("hooks", "hooked"), [([], 0), ([NOTE], 1), ([MAY_ASK], 2)], ids=["relay", "call", "sdk"]
)
async def test_a_call_in_flight_when_its_session_ends_has_its_frame_and_is_counted(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], hooked: int
) -> None:
    # The client went (its stdin closed) while a call waited on its server: the call was
    # given up on the server, and the session's run had no frame of it and did not count it
    # (`calls: 1` for the client's two), where a call the client cancelled has its frame.
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("wait", "echo"))
    with server_waiting(where) as said, trio.fail_after(60):
        async with line_client(config) as client:
            await client.answer(2, "tools/call", {"name": "h__echo", "arguments": {}})
            wait = {"name": "h__wait", "arguments": {}}
            await client.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": wait})
            await trio.lowlevel.wait_readable(said)
    assert marker.alive() == []
    frames = session_frames(config)
    calls = [f for f in frames if f["type"] == "call"]
    assert [(f["tool"], f["ok"], f.get("error")) for f in calls] == [
        ("echo", True, None),
        ("wait", False, "the session ended before its answer"),
    ]
    assert isinstance(calls[1]["durationMs"], int)
    assert [f["type"] for f in frames][-2:] == ["result", "end"]
    assert frames[-2]["value"] == {"calls": 2, "refused": 0, "failed": 0}
    # (a `suffix` hook runs for the answered call only; a `before` hook for both)
    assert len([f for f in frames if f["type"] == "hook"]) == hooked


@pytest.mark.parametrize("hooks", [[], [NOTE]], ids=["relay", "call"])
async def test_a_server_s_secret_in_its_json_rpc_error_is_not_in_the_message_we_make_of_it(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "server h answered fail with an error: bad hunter2-…": the message is ours (a tool
    # result's text is the server's own, and goes as it wrote it), and a secret's value never
    # appears in an error message the supervisor writes.
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("fail",), h_mode="leak")
    edit_config(config, "h", secrets=["MCPX_TEST_TOKEN"])
    params = through_mcpx(config)
    assert params.env is not None
    params.env["MCPX_TEST_TOKEN"] = "hunter2-is-the-password"
    async with stdio_session(params, tmp_path / "err") as session:
        await session.list_tools()  # (its server running: the call may be relayed)
        result = await session.call_tool("h__fail", {})
    assert result.is_error
    assert texts(result) == ["server h answered fail with an error: bad [secret MCPX_TEST_TOKEN]"]
    assert marker.alive() == []
