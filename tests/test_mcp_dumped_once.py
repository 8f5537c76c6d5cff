"""An answer `mcpx-hooks mcp` sends as it was written (a listing of the servers' items, a
tool's answer, a prompt, a resource) is not also dumped by the MCP SDK's server from the
handler's model of it: the SDK checks and dumps the least answer of its kind, and the client
gets the whole one, as written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pydantic
import pytest
from conftest import Marker
from mcp import types
from mcp.server import runner
from mcpface_parts import memory_session, write_config

from mcpx_hooks.supervisor.config.loading import load_config

#: The keys of an answer that hold its items (a listing's, a prompt's, a resource's, a call's).
_ITEMS = ("tools", "prompts", "resources", "resourceTemplates", "messages", "contents", "content")


async def test_the_sdk_dumps_no_answer_that_is_sent_as_written(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's server dumped each handler's model whole (and checked the dump against its
    # schema), and the as-written answer then replaced it: a listing of 900 tools of 1 KB
    # each cost about twice what it had to.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the servers' pins
    dumped: list[tuple[str, int]] = []
    dump = runner._dump_result

    def counted(result: Any) -> dict[str, Any]:
        out = dump(result)
        if isinstance(result, pydantic.BaseModel):  # (a handler's model, not what was kept)
            dumped.extend((key, len(out[key])) for key in _ITEMS if out.get(key))
        return out

    monkeypatch.setattr(runner, "_dump_result", counted)
    path = write_config(tmp_path / marker, marker, mcp={"exec": False})
    config = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    async with memory_session(config, []) as session:
        tools = (await session.list_tools()).tools
        prompts = (await session.list_prompts()).prompts
        resources = (await session.list_resources()).resources
        templates = (await session.list_resource_templates()).resource_templates
        prompt = await session.get_prompt("h__greet", {"who": "Ada"})
        read = await session.read_resource(resources[0].uri)
        echoed = await session.call_tool("h__echo", {"a": 1})
    assert [len(tools), len(prompts), len(resources), len(templates)] == [6, 1, 1, 1]
    assert prompt.messages and read.contents and echoed.content
    assert echoed.structured_content == {"a": 1}
    assert dumped == []
    assert marker.alive() == []


async def test_a_server_s_tools_are_renamed_once_while_it_lists_the_same(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each listing copied every tool under its exposed name, and wrote each copy's JSON
    # anew: 900 copies and 900 dicts for each tools/list of a server of 900 tools.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    copies: list[str] = []
    copy = pydantic.BaseModel.model_copy

    def counted(self: pydantic.BaseModel, **kw: Any) -> Any:
        if isinstance(self, types.Tool):
            copies.append(self.name)
        return copy(self, **kw)

    monkeypatch.setattr(pydantic.BaseModel, "model_copy", counted)
    path = write_config(tmp_path / marker, marker, mcp={"exec": False})
    config = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    async with memory_session(config, []) as session:
        first = (await session.list_tools()).tools
        made = len(copies)
        again = (await session.list_tools()).tools
    assert made == len(first) == 6
    assert len(copies) == made and again == first
    assert marker.alive() == []
