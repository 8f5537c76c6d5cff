"""`mcpx-hooks mcp`: the MCP SDK's own stdio client starts it as a subprocess, with real tool
servers (the docs' wordtools, the tests' hostile server) behind it; and one session served in
this process, over the SDK's in-memory streams, to read its run's frames."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from conftest import Marker
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcpface_parts import (
    HOSTILE,
    LISTED,
    MCPX,
    PY,
    answer,
    call_hook,
    direct,
    direct_answers,
    dumped,
    memory_session,
    stdio_session,
    texts,
    through_mcpx,
    write_config,
)

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.servers import CallLimits, ServerSpec
from mcpx_hooks.supervisor.service.mcpcalls import applied_result
from mcpx_hooks.supervisor.service.mcplimits import CallLimiter
from mcpx_hooks.supervisor.service.mcprelay import template_prefix


async def test_the_tools_are_listed_as_server__tool_as_their_servers_give_them(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        listed = (await session.list_tools()).tools
    async with stdio_session(direct([PY, "wordtools.py"], where), tmp_path / "e1") as words:
        words_tools = (await words.list_tools()).tools
    hostile = [PY, HOSTILE, "good", str(tmp_path / "direct.log")]
    async with stdio_session(direct(hostile, where), tmp_path / "e2") as h:
        h_tools = (await h.list_tools()).tools
    expected = [
        t.model_copy(update={"name": f"words__{t.name}"})
        for t in words_tools
        if t.name != "remove"  # hidden
    ] + [
        t.model_copy(update={"name": f"h__{t.name}"})
        for t in h_tools
        if t.name in ("echo", "fail", "mixed")  # exposed
    ]
    assert [t.name for t in listed] == LISTED  # its own first, then the servers' in order
    # Equal as JSON: the SDK's server writes a schema's keys in its own order.
    assert [json.loads(dumped(t)) for t in listed[1:]] == [json.loads(dumped(t)) for t in expected]
    assert marker.alive() == []  # the client closed: `mcp` and its servers are gone


async def test_a_call_no_hook_changes_is_what_the_server_answered(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker, [call_hook("note", "suffix", {"advise": "seen"})])
    calls = [("words", "count", {"text": "one two\nthree"}), ("words", "shout", {"text": "hi"})]
    calls += [("h", "mixed", {"n": 7}), ("h", "fail", {"why": "no"}), ("h", "echo", {})]
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        through = [await session.call_tool(f"{s}__{t}", a) for s, t, a in calls]
    direct_results = await direct_answers(where, tmp_path, calls)
    assert [dumped(r) for r in through] == [dumped(r) for r in direct_results]
    mixed = through[2]
    kinds = [c.type for c in mixed.content]
    assert kinds == ["text", "image", "audio", "resource_link", "resource"]
    assert mixed.meta == {"example.org/trace": "abc"} and mixed.structured_content == {"n": 7}
    assert through[3].is_error is True  # an isError answer is passed on, not turned around
    assert marker.alive() == []
    # Nothing went wrong: on stderr, only that the servers were pinned at their first use.
    said = (tmp_path / "err").read_text().splitlines()
    assert [line.split(":")[:2] for line in said] == [
        ["mcpx-hooks mcp", " server words"],
        ["mcpx-hooks mcp", " server h"],
    ]
    assert all("pinned at their first use" in line for line in said)


async def test_a_stop_signal_ends_the_session_and_every_process(
    tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        await session.list_tools()  # both servers running
        (mcpx,) = [p for p in marker.alive() if "mcp" in p.cmdline()[1:3]]
        assert len(marker.alive()) == 3
        mcpx.send_signal(signal.SIGTERM)
        assert await trio.to_thread.run_sync(mcpx.wait, 10) == 0
        assert marker.alive() == []


async def test_unknown_and_hidden_tools_are_json_rpc_errors(tmp_path: Path, marker: Marker) -> None:
    config = write_config(tmp_path / marker, marker)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        for name in ("words__remove", "h__rm", "words__nothing", "nowhere__count", "count"):
            with pytest.raises(MCPError) as caught:
                await session.call_tool(name, {})
            assert caught.value.error.code == types.INVALID_PARAMS, name
            assert name in caught.value.error.message
        # the session goes on after them
        assert (await session.call_tool("words__shout", {"text": "a"})).is_error is False
    assert marker.alive() == []


async def test_a_before_hook_refuses_and_the_client_reads_why(
    tmp_path: Path, marker: Marker
) -> None:
    hooks = [
        call_hook(
            "no-shouting",
            "before",
            {"refuse": "indoor voices"},
            effect="ask",
            when={"tool": ["words.shout"], "client": ["test-*"]},
        ),
        call_hook(
            "other-clients",
            "before",
            {"refuse": "never seen"},
            effect="ask",
            when={"client": ["claude-*"]},
        ),
    ]
    config = write_config(tmp_path / marker, marker, hooks)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        refused = await session.call_tool("words__shout", {"text": "hey"})
        allowed = await session.call_tool("words__count", {"text": "hey"})
    assert refused.is_error is True and refused.structured_content is None
    assert [c.model_dump() for c in refused.content] == [
        {
            "type": "text",
            "text": "refused by no-shouting: indoor voices",
            "annotations": None,
            "meta": None,
        }
    ]
    assert allowed.is_error is False and allowed.structured_content == {"words": 1, "lines": 1}
    assert marker.alive() == []


async def test_hooks_apply_arguments_and_results(tmp_path: Path, marker: Marker) -> None:
    hooks = [
        call_hook(
            "quieter",
            "before",
            {"apply": {"value": {"text": "rewritten"}}},
            effect="apply",
            when={"tool": ["shout"]},
        ),
        call_hook(
            "summary",
            "onSuccess",
            {"apply": {"value": {"total": 2}}},
            effect="apply",
            when={"tool": ["words.count"]},
        ),
        call_hook(
            "forgive",
            "onError",
            {"apply": {"value": {"content": [{"type": "text", "text": "fine"}]}}},
            effect="apply",
        ),
    ]
    config = write_config(tmp_path / marker, marker, hooks)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        shouted = await session.call_tool("words__shout", {"text": "hi"})
        counted = await session.call_tool("words__count", {"text": "a b"})
        forgiven = await session.call_tool("h__fail", {"x": 1})
    assert [c.text for c in shouted.content if c.type == "text"] == ["REWRITTEN"]
    assert counted.structured_content == {"total": 2} and counted.is_error is False
    assert [c.text for c in counted.content if c.type == "text"] == ['{"total": 2}']
    assert forgiven.is_error is False and forgiven.structured_content is None
    assert [c.text for c in forgiven.content if c.type == "text"] == ["fine"]
    assert marker.alive() == []


def ask_hook(deadline_ms: int) -> dict[str, Any]:
    question = {"question": "Shout it?", "default": "no", "deadlineMs": deadline_ms}
    return call_hook("confirm", "before", {"ask": question}, effect="ask", when={"tool": ["shout"]})


async def test_a_hook_s_question_is_put_to_the_person_at_the_client(
    tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker, [ask_hook(30_000)])
    replies = iter(
        [
            types.ElicitResult(action="accept", content={"answer": "yes"}),
            types.ElicitResult(action="accept", content={"answer": "no"}),
            types.ElicitResult(action="decline"),
        ]
    )
    asked: list[tuple[str, dict[str, Any]]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append((params.message, params.requested_schema))
        return next(replies)

    async with stdio_session(
        through_mcpx(config), tmp_path / "err", elicitation_callback=elicit
    ) as session:
        results = [await session.call_tool("words__shout", {"text": "hi"}) for _ in range(3)]
    assert texts(results[0]) == ["HI"] and results[0].is_error is False
    refused = "refused by confirm: Shout it? (answered no by the client)"
    assert [(texts(r), r.is_error) for r in results[1:]] == [([refused], True)] * 2
    form = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
    }
    assert asked == [("Shout it?", form)] * 3
    assert marker.alive() == []


async def test_a_client_that_cannot_be_asked_gets_the_default_at_the_deadline(
    tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker, [ask_hook(300)])
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        result = await session.call_tool("words__shout", {"text": "hi"})
    assert texts(result) == [
        "refused by confirm: Shout it? (unanswered by the deadline, default no)"
    ]
    assert result.is_error is True
    assert marker.alive() == []


async def test_prompts_and_resources_are_relayed_as_the_servers_give_them(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        prompts = (await session.list_prompts()).prompts
        greeting = await session.get_prompt("h__greet", {"who": "Ada"})
        resources = (await session.list_resources()).resources
        notes = await session.read_resource("file:///h/notes.txt")
        with pytest.raises(MCPError) as unknown:
            await session.get_prompt("words__greet", {})
        with pytest.raises(MCPError) as missing:
            await session.read_resource("file:///h/none.txt")
    hostile = [PY, HOSTILE, "good", str(tmp_path / "direct.log")]
    async with stdio_session(direct(hostile, where), tmp_path / "e2") as h:
        direct_prompts = (await h.list_prompts()).prompts
        direct_greeting = await h.get_prompt("greet", {"who": "Ada"})
        direct_resources = (await h.list_resources()).resources
        direct_notes = await h.read_resource("file:///h/notes.txt")
    # wordtools serves no prompts and no resources: only the hostile server's are listed.
    assert [p.name for p in prompts] == ["h__greet"]
    assert dumped(prompts[0]) == dumped(direct_prompts[0].model_copy(update={"name": "h__greet"}))
    assert dumped(greeting) == dumped(direct_greeting)
    assert [dumped(r) for r in resources] == [dumped(r) for r in direct_resources]
    assert dumped(notes) == dumped(direct_notes)
    assert unknown.value.error.code == types.INVALID_PARAMS
    assert missing.value.error.code == -32002
    assert marker.alive() == []


async def test_completions_of_a_prompt_s_or_a_template_s_arguments_come_from_its_server(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    greet, note = "greet", "file:///h/notes/{name}"

    async def ask(session: ClientSession, prefix: str) -> list[Any]:
        prompt = types.PromptReference(type="ref/prompt", name=prefix + greet)
        template = types.ResourceTemplateReference(type="ref/resource", uri=note)
        return [
            dumped(await session.complete(prompt, {"name": "who", "value": "A"})),
            dumped(await session.complete(template, {"name": "name", "value": "to"})),
            dumped(await session.complete(prompt, {"name": "nobody", "value": ""})),
        ]

    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        through = await ask(session, "h__")
        with pytest.raises(MCPError) as unknown:  # (wordtools serves no prompts)
            await session.complete(
                types.PromptReference(type="ref/prompt", name="words__greet"),
                {"name": "who", "value": ""},
            )
        with pytest.raises(MCPError) as unlisted:
            await session.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="file:///x/{y}"),
                {"name": "y", "value": ""},
            )
    hostile = [PY, HOSTILE, "good", str(tmp_path / "direct.log")]
    async with stdio_session(direct(hostile, where), tmp_path / "e2") as h:
        directly = await ask(h, "")
    assert through == directly
    assert [json.loads(c)["completion"]["values"] for c in through] == [
        ["Ada", "Alan"],
        ["today", "tomorrow"],
        [],
    ]
    assert unknown.value.error.code == unlisted.value.error.code == types.INVALID_PARAMS
    assert marker.alive() == []


async def test_resource_templates_are_relayed_and_a_uri_of_one_is_read_from_its_server(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        templates = (await session.list_resource_templates()).resource_templates
        note = await session.read_resource("file:///h/notes/today")
        with pytest.raises(MCPError) as missing:
            await session.read_resource("file:///elsewhere/today")
    hostile = [PY, HOSTILE, "good", str(tmp_path / "direct.log")]
    async with stdio_session(direct(hostile, where), tmp_path / "e2") as h:
        direct_templates = (await h.list_resource_templates()).resource_templates
        direct_note = await h.read_resource("file:///h/notes/today")
    assert [dumped(t) for t in templates] == [dumped(t) for t in direct_templates]
    assert [t.uri_template for t in templates] == ["file:///h/notes/{name}"]
    assert dumped(note) == dumped(direct_note)
    assert missing.value.error.code == -32002
    assert marker.alive() == []


@pytest.mark.parametrize(
    ("template", "prefix"),
    [
        ("file:///h/notes/{name}", "file:///h/notes/"),
        ("repo://{owner}/{repo}/contents{/path*}", "repo://"),
        ("db://{+path}", "db://"),
        ("{+uri}", ""),
        ("plain://no/expression", "plain://no/expression"),
    ],
)
def test_a_template_s_fixed_beginning_is_what_comes_before_its_first_expression(
    template: str, prefix: str
) -> None:
    assert template_prefix(template) == prefix


async def test_listings_given_in_pages_are_relayed_whole(tmp_path: Path, marker: Marker) -> None:
    # The hostile server in `paged` mode gives each tool, prompt and resource on a page of
    # its own: a client sees them all, as from a server that lists at once.
    where = tmp_path / marker
    config = write_config(where, marker, h_mode="paged", expose=("echo", "mixed", "whoami"))
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        tools = [t.name for t in (await session.list_tools()).tools]
        prompts = [p.name for p in (await session.list_prompts()).prompts]
        resources = [str(r.uri) for r in (await session.list_resources()).resources]
        templates = (await session.list_resource_templates()).resource_templates
        mixed = await session.call_tool("h__mixed", {"n": 2})
        with pytest.raises(MCPError) as missing:  # (no template to look the URI up in)
            await session.read_resource("file:///h/notes/today")
    assert [t for t in tools if t.startswith("h__")] == ["h__echo", "h__mixed", "h__whoami"]
    assert prompts == ["h__greet", "h__part"]
    assert resources == ["file:///h/notes.txt", "file:///h/more.txt"]
    assert templates == [] and missing.value.error.code == -32002
    assert mixed.structured_content == {"n": 2}
    assert marker.alive() == []


async def test_a_server_that_does_not_answer_is_left_out_at_its_call_timeout(
    tmp_path: Path, marker: Marker
) -> None:
    # The hostile server in `deaf` mode never answers about its prompts or resources: a
    # listing goes on without it, and a request of it is answered with why, at its timeout.
    where = tmp_path / marker
    config = write_config(where, marker, h_mode="deaf")
    edit = json.loads(config.read_text())
    edit["servers"]["h"]["callTimeoutMs"] = 300
    config.write_text(json.dumps(edit))
    with trio.fail_after(60):  # (it hung before: nothing bounded what it waited for)
        async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
            prompts = (await session.list_prompts()).prompts
            resources = (await session.list_resources()).resources
            with pytest.raises(MCPError) as asked:
                await session.get_prompt("h__greet", {"who": "Ada"})
            tools = [t.name for t in (await session.list_tools()).tools]
    assert prompts == [] and resources == []
    assert str(asked.value) == "server h did not answer within its callTimeoutMs (300 ms)"
    assert "h__echo" in tools  # its tools were listed when it started, as ever
    assert marker.alive() == []


RUNS_HERE = {"script": {"sandbox": "none"}, "service": {"sandboxes": ["none"]}}


async def test_mcpx_exec_runs_a_script_with_its_hooks_and_reports_its_frames(
    tmp_path: Path, marker: Marker
) -> None:
    advise = {"name": "tip", "on": "script", "phase": "before", "run": answer({"advise": "hi"})}
    config = write_config(tmp_path / marker, marker, [advise], **RUNS_HERE)
    logged: list[types.LoggingMessageNotificationParams] = []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    script = "import json, os; print(json.dumps({'cwd': os.getcwd()}))"
    async with stdio_session(through_mcpx(config), tmp_path / "err", logging_callback=log) as s:
        ran = await s.call_tool("mcpx_exec", {"argv": [PY, "-c", script]})
        failed = await s.call_tool("mcpx_exec", {"argv": [PY, "-c", "raise SystemExit(3)"]})
        refused = await s.call_tool("mcpx_exec", {"argv": ["true"], "cwd": "/"})
        unallowed = await s.call_tool("mcpx_exec", {"argv": ["true"], "sandbox": "strict"})
    out = ran.structured_content
    assert ran.is_error is False and out is not None
    assert (out["status"], out["exitCode"], out["advice"]) == ("result", 0, ["hi"])
    assert out["result"] == {"cwd": str(tmp_path / marker)}  # the first root: where mcp started
    frames = [f for p in logged if p.data["runId"] == out["runId"] for f in p.data["frames"]]
    check_order(frames)
    assert [f["type"] for f in frames] == ["start", "hook", "stdout", "result", "end"]
    assert {p.logger for p in logged} == {"mcpx-hooks"}
    assert failed.is_error is True and failed.structured_content is not None
    assert failed.structured_content["status"] == "error"
    assert failed.structured_content["exitCode"] == 3
    assert refused.is_error is True and refused.structured_content is None
    assert texts(refused)[0].startswith("the request was not admitted: ")
    # Each problem said once: the message joins them, and they were repeated after it.
    assert texts(unallowed) == [
        "the request was not admitted: sandbox: the run's profile \"strict\" (the request's"
        " sandbox) is not allowed; requests to this server may use the sandboxes: none"
        " ([service] sandboxes)"
    ]
    assert marker.alive() == []


async def test_a_cancelled_mcpx_exec_run_ends_with_its_suffix_hooks_and_end(
    tmp_path: Path, marker: Marker
) -> None:
    after = {"name": "after", "on": "script", "phase": "suffix", "run": answer({"advise": "x"})}
    config = write_config(tmp_path / marker, marker, [after], **RUNS_HERE)
    ready, run_ids = trio.Event(), []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        run_ids.append(params.data["runId"])
        if any(frame["type"] == "stdout" for frame in params.data["frames"]):
            ready.set()

    script = "import time; print('ready', flush=True); time.sleep(60)"
    async with stdio_session(through_mcpx(config), tmp_path / "err", logging_callback=log) as s:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(s.call_tool, "mcpx_exec", {"argv": [PY, "-c", script]})
            with trio.fail_after(30):
                await ready.wait()
            nursery.cancel_scope.cancel()  # the client cancels its call
        still = await s.call_tool("mcpx_exec", {"argv": [PY, "-c", "pass"]})
    assert still.is_error is False
    env = {**os.environ, **(through_mcpx(config).env or {})}
    shown = await trio.run_process(
        [MCPX, "runs", "show", run_ids[0], "--json"], env=env, capture_stdout=True
    )
    frames = [json.loads(line) for line in shown.stdout.splitlines()]
    # It was cut short as an agent asked, and ended as any cancelled run does; it was left
    # without its error, its suffix hooks and its end ('running' for good).
    assert [f["type"] for f in frames] == ["start", "stdout", "error", "hook", "end"]
    assert (frames[2]["message"], frames[3]["name"]) == ("cancelled", "after")
    assert marker.alive() == []


async def test_mcpx_exec_can_be_left_out(tmp_path: Path, marker: Marker) -> None:
    config = write_config(tmp_path / marker, marker, mcp={"exec": False})
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        names = [t.name for t in (await session.list_tools()).tools]
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("mcpx_exec", {"argv": ["true"]})
    assert "mcpx_exec" not in names and names[0] == "words__count"
    assert unknown.value.error.code == types.INVALID_PARAMS
    assert marker.alive() == []


async def test_a_call_past_a_limit_is_answered_at_once_with_the_limit(
    tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker)
    doc = json.loads(config.read_text())
    doc["servers"]["words"].update(callsPerMinute=3, tools={"shout": {"callsPerMinute": 1}})
    config.write_text(json.dumps(doc))
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        shouts = [await session.call_tool("words__shout", {"text": "a"}) for _ in range(2)]
        counts = [await session.call_tool("words__count", {"text": "a"}) for _ in range(3)]
    assert [r.is_error for r in shouts] == [False, True]
    assert texts(shouts[1]) == ["rate limit: 1 calls per minute for words__shout"]
    assert [r.is_error for r in counts] == [False, False, True]  # the server's 3: 1 shout + 2
    # The server's limit, said as the server's: count had had two calls of the three.
    assert texts(counts[2]) == [
        "rate limit: 3 calls per minute for server words, all its tools together"
    ]
    assert marker.alive() == []


def test_the_limits_count_calls_by_server_and_by_tool_and_let_none_wait() -> None:
    spec = ServerSpec(
        "h",
        ("unused",),
        "/",
        call_limits=CallLimits(max_concurrent=2),
        tool_limits={"wait": CallLimits(calls_per_minute=2, max_concurrent=1)},
    )
    limiter = CallLimiter()
    with limiter.take(spec, "wait", "h__wait", 0.0) as first:
        assert first is None
        with limiter.take(spec, "wait", "h__wait", 1.0) as second:
            assert second == "concurrency limit: 1 calls at once for h__wait"
        with limiter.take(spec, "echo", "h__echo", 1.0) as other:
            assert other is None  # the server allows two at once
            with limiter.take(spec, "echo", "h__echo", 1.0) as third:
                assert (
                    third
                    == "concurrency limit: 2 calls at once for server h, all its tools together"
                )
    with limiter.take(spec, "wait", "h__wait", 2.0) as again:
        assert again is None
    with limiter.take(spec, "wait", "h__wait", 3.0) as over:
        assert over == "rate limit: 2 calls per minute for h__wait"
    with limiter.take(spec, "wait", "h__wait", 60.5) as later:
        assert later is None  # the call at 0.0 is out of the last minute


def test_tool_names_some_clients_refuse_are_named_with_why() -> None:
    from mcpx_hooks.supervisor.core.servers import unportable_names

    assert unportable_names(["words__count", "words__a-b_9"], "words") is None
    at_most = "s" * 58 + "__tool"  # 64 characters: taken
    longer = "s" * 59 + "__tool"
    said = unportable_names([at_most, longer, "s__x y"], "s")
    assert said == (
        "some clients refuse a whole tool list for one name longer than 64 characters or"
        " holding anything but letters, digits, _ and -, and the tools of server s are listed"
        f" as '{longer}' (65 characters), 's__x y' (holds ' '); rename the server in the"
        " config, or set another [mcp] separator"
    )
    # A listing of thousands of such names, long ones: one bounded line (it was every name,
    # whole: megabytes in a `warning` frame, at each listing).
    many = unportable_names([f"s__{n}{'x' * 300}" for n in range(1000)], "s")
    assert many is not None and len(many) < 1000
    assert f"'s__4{'x' * 60}…' (304 characters), 995 more; rename the server" in many


def test_an_applied_value_becomes_a_tool_result() -> None:
    assert dumped(applied_result("ok")) == dumped(
        types.CallToolResult(content=[types.TextContent(type="text", text='"ok"')])
    )
    shaped = {"content": [{"type": "text", "text": "x"}], "isError": True, "extra": 1}
    assert applied_result(shaped).structured_content == shaped  # not only a result's keys
    bad = {"content": [{"type": "nothing"}]}
    assert applied_result(bad).structured_content == bad  # not a tool result after all


async def test_a_session_is_a_run_with_its_calls_and_their_counts(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the servers' pins
    hooks = [
        call_hook(
            "no-sleep", "before", {"refuse": "not now"}, effect="ask", when={"tool": ["sleep"]}
        ),
        call_hook("seen", "onSuccess", {"advise": "fine"}),
    ]
    path = write_config(tmp_path / marker, marker, hooks, mcp={"separator": "."})
    config = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    # What loading had to say (a project file skipped, say) opens the run, as for a script.
    config = attrs.evolve(config, warnings=("skipped /x/.mcpx-hooks.toml: not trusted",))
    frames: list[dict[str, Any]] = []
    async with memory_session(config, frames) as session:
        names = [t.name for t in (await session.list_tools()).tools]
        assert names[:4] == ["mcpx_exec", "words.count", "words.shout", "words.sleep"]
        await session.call_tool("words.count", {"text": "x"})
        await session.call_tool("words.sleep", {"ms": 1})
        await session.call_tool("h.fail", {})
    check_order(frames)
    assert frames[0]["type"] == "start" and frames[0]["argv"] == ["mcp", "test-agent"]
    assert (frames[1]["type"], frames[1]["message"]) == (
        "warning",
        "skipped /x/.mcpx-hooks.toml: not trusted",
    )
    steps = [f.get("name") or f["type"] for f in frames if f["type"] in ("hook", "call")]
    assert steps == ["call", "seen", "no-sleep", "call", "call"]
    # A dot in the names: said once a server, in the run and on stderr.
    odd = [f["message"] for f in frames if "some clients refuse" in f.get("message", "")]
    assert len(odd) == 2 and "tools of server words are listed as 'words.count'" in odd[0]
    assert "'words.count' (holds '.'), 'words.shout' (holds '.')" in odd[0]
    calls = [f for f in frames if f["type"] == "call"]
    assert [(c["server"], c["tool"], c["ok"]) for c in calls] == [
        ("words", "count", True),
        ("words", "sleep", False),
        ("h", "fail", False),
    ]
    assert calls[1]["refusedBy"] == "no-sleep"
    assert [f["type"] for f in frames[-2:]] == ["result", "end"]
    assert frames[-2]["value"] == {"calls": 3, "refused": 1, "failed": 1}
    assert marker.alive() == []


async def test_calls_of_one_session_run_at_once_and_each_one_s_frames_stay_together(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the servers' pins
    hooks = [call_hook("seen", "onSuccess", {"advise": "fine"}, when={"tool": ["count"]})]
    path = write_config(tmp_path / marker, marker, hooks, expose=("wait", "echo"))
    config = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    frames: list[dict[str, Any]] = []
    async with memory_session(config, frames) as session:
        await session.list_tools()
        async with trio.open_nursery() as calls:
            waiting = trio.CancelScope()

            async def wait() -> None:
                with waiting:
                    await session.call_tool("h__wait", {})

            calls.start_soon(wait)
            # `h__wait` never answers: the calls after it are answered beside it,
            # with a hook (`count`) and without one (`echo`).
            with trio.fail_after(30):
                counted = await session.call_tool("words__count", {"text": "a b"})
                echoed = await session.call_tool("h__echo", {"n": 1})
            waiting.cancel()
    assert counted.structured_content == {"words": 2, "lines": 1}
    assert echoed.structured_content == {"n": 1}
    check_order(frames)
    steps = [f.get("name") or f.get("tool") for f in frames if f["type"] in ("hook", "call")]
    # The call the client cancelled has its frame, written when it was cancelled.
    assert steps == ["count", "seen", "echo", "wait"]
    (cancelled,) = [f for f in frames if f.get("tool") == "wait"]
    assert cancelled["error"] == "cancelled by the client before its answer"
    assert marker.alive() == []


def test_a_when_tool_written_as_a_client_sees_the_tool_is_said(tmp_path: Path) -> None:
    # `fs__delete_file` is the name the agent sees; a gate written so never fired, silently.
    config = tmp_path / "c.toml"
    config.write_text(
        '[servers.fs]\ncommand = ["true"]\n\n[[hooks]]\nname = "no-deletes"\non = "call"\n'
        'phase = "before"\nwhen = { tool = ["fs__delete_file", "fs.create_file", "move"] }\n'
        'run = ["true"]\n'
    )
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(tmp_path)}
    said = (
        'mcpx-hooks: warning: hook "no-deletes": when.tool "fs__delete_file" is the name an MCP'
        ' client sees; hooks name that tool "fs.delete_file" or "delete_file", so as written it'
        " matches only a tool whose own name it is"
    )
    for args in (["validate", str(config)], ["hooks", "list", "--config", str(config)]):
        done = subprocess.run(
            [MCPX, *args], env=env, capture_output=True, text=True, check=False, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == [said], (args, done.stderr)
    # With "." between, the name a client sees is the one hooks use: nothing to say.
    config.write_text(config.read_text() + '\n[mcp]\nseparator = "."\n')
    done = subprocess.run(
        [MCPX, "validate", str(config)], env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


async def test_hide_expose_and_tool_limits_written_as_a_client_sees_the_tool_are_said(
    tmp_path: Path, marker: Marker
) -> None:
    # `words__remove` is the name the agent sees: a hide written so hid nothing, and a limit
    # keyed so limited nothing, without a word.
    where = tmp_path / marker
    config = write_config(where, marker)
    doc = json.loads(config.read_text())
    doc["servers"]["words"]["hide"] = ["words__remove", "words.sleep"]  # (the second is right)
    doc["servers"]["words"]["tools"] = {"words.shout": {"callsPerMinute": 1}}
    config.write_text(json.dumps(doc))
    said = [
        'server words: hide "words__remove" is the name an MCP client sees; hide matches a tool'
        ' by its own name ("remove") or as "words.remove", so as written it matches only a tool'
        " whose own name it is",
        'server words: tools."words.shout" names the tool otherwise than by its own name; a'
        ' tool\'s limits are keyed by its own name ("shout"), so as written they limit only a'
        " tool whose own name it is",
    ]
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(tmp_path)}
    for args in (["validate", str(config)], ["hooks", "list", "--config", str(config)]):
        done = await warned(args, env)
        assert done.returncode == 0, done.stderr
        assert done.stderr.decode().splitlines() == [f"mcpx-hooks: warning: {w}" for w in said]
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        listed = [t.name for t in (await session.list_tools()).tools]
    assert "words__remove" in listed and "words__sleep" not in listed  # (as written)
    lines = (tmp_path / "err").read_text().splitlines()
    assert [line for line in lines if "is the name" in line or "tools." in line] == [
        f"mcpx-hooks: warning: {w}" for w in said
    ]
    # With "." between, what a client sees is what expose and hide match: nothing to say.
    doc["mcp"] = {"separator": "."}
    doc["servers"]["words"]["tools"] = {}
    config.write_text(json.dumps(doc))
    done = await warned(["validate", str(config)], env)
    assert (done.returncode, done.stderr) == (0, b"")
    assert marker.alive() == []


async def warned(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [MCPX, *args], env=env, capture_stdout=True, capture_stderr=True, check=False
        )
