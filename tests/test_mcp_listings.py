"""What a client of `mcpx-hooks mcp` gets from tool servers whose listings or answers are not
MCP: a server's malformed listing leaves that server's items out (a `warning` frame in the
session's run says why), never the other servers'; a malformed answer is an error naming the
server, not the client's params."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Marker
from mcp import types
from mcp.shared.exceptions import MCPError
from mcpface_parts import HOSTILE, PY, stdio_session, through_mcpx


def two_servers(where: Path, marker: Marker) -> Path:
    """A config of `good` (the hostile server, well-behaved) and `bad` (its `malformed`)."""
    where.mkdir()
    servers = {
        name: {
            "command": [PY, HOSTILE, mode, str(where / f"{name}.log"), marker],
            "sandbox": "none",
        }
        for name, mode in (("good", "good"), ("bad", "malformed"))
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
