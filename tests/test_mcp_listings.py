"""What a client of `mcpx-hooks mcp` gets from tool servers whose listings or answers are not
MCP: a server's malformed listing leaves that server's items out (a `warning` frame in the
session's run says why), never the other servers'; a malformed answer is an error naming the
server, not the client's params."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Marker
from mcp import types
from mcp.shared.exceptions import MCPError
from mcpface_parts import HOSTILE, PY, memory_session, stdio_session, through_mcpx

from mcpx_hooks.supervisor.config.loading import load_config


def two_servers(where: Path, marker: Marker, bad: str = "malformed") -> Path:
    """A config of `good` (the hostile server, well-behaved) and `bad` (in mode `bad`)."""
    where.mkdir()
    servers = {
        name: {
            "command": [PY, HOSTILE, mode, str(where / f"{name}.log"), marker],
            "sandbox": "none",
        }
        for name, mode in (("good", "good"), ("bad", bad))
    }
    config = {"servers": servers, "defaults": {"sandbox": "none"}}
    (where / "config.json").write_text(json.dumps(config))
    return where / "config.json"


async def test_a_server_s_malformed_prompts_hurt_no_other_server_s(
    tmp_path: Path, marker: Marker
) -> None:
    # The whole listing failed, every server's prompts with it, as -32602 "Invalid request
    # parameters: prompts.1.name: Field required": the client's params blamed.
    config = two_servers(tmp_path / marker, marker)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        listed = await session.list_prompts()
        good = await session.get_prompt("good__greet", {"who": "Ada"})
        with pytest.raises(MCPError) as refused:
            await session.get_prompt("bad__greet", {"who": "Ada"})
    assert [p.name for p in listed.prompts] == ["good__greet"]
    assert good.messages[0].content == types.TextContent(
        type="text", text="Hello, Ada", annotations=types.Annotations(priority=1)
    )
    error = refused.value.error
    assert error.code == types.INTERNAL_ERROR
    assert error.message == (
        "server bad: its answer is not MCP (GetPromptResult: messages: Field required)"
    )
    assert marker.alive() == []


async def test_a_server_whose_tools_are_not_mcp_is_said_so_in_a_few_words(
    tmp_path: Path, marker: Marker
) -> None:
    # It was said in pydantic's whole report, to the agent too: "ValidationError: 1
    # validation error for ListToolsResult\ntools.9.inputSchema\n  Field required
    # [type=missing, input_value={'name': 'loose'}, …]\n    For further information visit …".
    config = two_servers(tmp_path / marker, marker, bad="schemaless")
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        listed = [t.name for t in (await session.list_tools()).tools]
        refused = await session.call_tool("bad__echo", {})
    assert "good__echo" in listed and not any(n.startswith("bad__") for n in listed)
    said = "server bad failed: its answer is not MCP (ListToolsResult: tools.9.inputSchema: Field"
    assert refused.is_error is True
    (text,) = [c.text for c in refused.content if c.type == "text"]
    assert text.startswith(said + " required) (next start in ")
    assert said in (tmp_path / "err").read_text()
    assert marker.alive() == []


async def test_tools_a_client_could_not_tell_apart_or_call_are_left_out_and_said(
    tmp_path: Path, marker: Marker
) -> None:
    # The second `echo` was left out without a word, and the nameless tool listed as
    # `bad__`, which no call could name ("Unknown tool: bad__"); so was a nameless prompt.
    # A second prompt `greet`, resource or template of one URI was listed as it came: a
    # client saw two of a name, and a request for it reached the first.
    config = two_servers(tmp_path / marker, marker, bad="twice")
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        tools = (await session.list_tools()).tools
        echoed = await session.call_tool("bad__echo", {"a": 1})
        prompts = [p.name for p in (await session.list_prompts()).prompts]
        resources = (await session.list_resources()).resources
        templates = (await session.list_resource_templates()).resource_templates
        (await session.list_prompts())  # (said once)
    listed = [t.name for t in tools if t.name.startswith("bad__")]
    assert listed == [t.name.replace("good__", "bad__") for t in tools if t.name[:6] == "good__"]
    assert [t.description for t in tools if t.name == "bad__echo"] == [None]
    assert echoed.is_error is False
    assert prompts == ["good__greet", "bad__greet"]  # (a nameless prompt was `bad__`)
    said = (
        "some tools of server bad are not listed: 1 without a name (no call could name it);"
        " 1 named as a tool listed before ('bad__echo'): the first of each name is listed,"
        " and called"
    )
    assert (tmp_path / "err").read_text().count(said) == 1
    assert [str(r.uri) for r in resources] == ["file:///h/notes.txt"]
    assert [r.description for r in resources] == [None]  # good's, the first listed
    assert [t.uri_template for t in templates] == ["file:///h/notes/{name}"]
    assert [t.description for t in templates] == [None]
    err = (tmp_path / "err").read_text()
    for what, by, name, count in (
        ("prompts", "name", "bad__greet", 1),
        ("resources", "URI", "file:///h/notes.txt", 2),  # (good's, then its own again)
        ("resource templates", "URI template", "file:///h/notes/{name}", 2),
    ):
        said = (
            f"some {what} of server bad are not listed: {count} with a {by} listed before"
            f" ('{name}'): the first of each {by} is listed, and asked"
        )
        assert err.count(said) == 1, said
    assert err.count("1 prompt(s) of server bad without a name: not listed") == 1
    assert marker.alive() == []


async def test_what_a_session_keeps_of_its_servers_tool_names_is_bounded(
    tmp_path: Path, marker: Marker
) -> None:
    # A server may list new names at each listing, once a second: the session kept whether
    # each name it ever saw was shown, for as long as it lasted.
    from mcpx_hooks.supervisor.config.loading import load_config
    from mcpx_hooks.supervisor.run.runtime import open_runtime
    from mcpx_hooks.supervisor.service.mcpface import Gateway
    from mcpx_hooks.supervisor.service.mcplisted import SHOWN_KEPT

    config_path = two_servers(tmp_path / marker, marker)
    config = load_config([str(config_path)], cwd=config_path.parent, environ={}, discover=False)
    async with open_runtime(config) as runtime:
        gateway = Gateway(runtime)
        spec = config.servers["bad"]
        for n in range(3 * SHOWN_KEPT):
            assert gateway.shows(spec, f"renamed{n}") is True
        assert len(gateway._shown) <= SHOWN_KEPT


async def test_a_server_that_answers_a_listing_with_an_error_hurts_no_other_server_s(
    tmp_path: Path,
    marker: Marker,
    no_leaks: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The server's JSON-RPC error was the whole listing's answer: the client's prompts/list
    # failed with "the index is being rebuilt", every server's prompts with it, and so did a
    # resources/read of another server's resource (it lists the resources first).
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = two_servers(tmp_path / marker, marker, bad="unlisting")
    config = load_config([str(path)], cwd=path.parent, environ={}, discover=False)
    frames: list[dict[str, Any]] = []
    async with memory_session(config, frames) as session:
        prompts = [p.name for p in (await session.list_prompts()).prompts]
        resources = [str(r.uri) for r in (await session.list_resources()).resources]
        templates = (await session.list_resource_templates()).resource_templates
        read = await session.read_resource("file:///h/notes.txt")
        good = await session.get_prompt("good__greet", {"who": "Ada"})
    assert prompts == ["good__greet"] and resources == ["file:///h/notes.txt"]
    assert [t.uri_template for t in templates] == ["file:///h/notes/{name}"]
    assert read.contents and good.messages
    said = {f["message"] for f in frames if f["type"] == "warning"}
    why = "it answered the listing with the JSON-RPC error -32603"
    logged = [r.getMessage() for r in caplog.records if r.name == "mcpx_hooks.mcp"]
    for what in ("prompts", "resources", "resource templates"):
        assert f"the {what} of server bad are not listed: {why}" in said
        assert f"the {what} of server bad are not listed: {why}" in logged  # (stderr too)
    assert not any("being rebuilt" in s for s in said)  # (its words may hold a secret)
    assert marker.alive() == []


async def test_a_listing_that_names_a_cursor_the_gateway_never_gave_is_an_error(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cursor was ignored: the whole listing came again, and a client that pages (a stale
    # cursor, one of the server behind) added every item twice.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = two_servers(tmp_path / marker, marker)
    config = load_config([str(path)], cwd=path.parent, environ={}, discover=False)
    paged = types.PaginatedRequestParams(cursor="1")
    async with memory_session(config, []) as session:
        whole = await session.list_tools(params=types.PaginatedRequestParams())
        for listing in (
            session.list_tools,
            session.list_prompts,
            session.list_resources,
            session.list_resource_templates,
        ):
            with pytest.raises(MCPError) as refused:
                await listing(params=paged)
            assert refused.value.error.code == types.INVALID_PARAMS
            assert "cursor: not one this server gave" in refused.value.error.message
    assert whole.tools and whole.next_cursor is None
    assert marker.alive() == []
