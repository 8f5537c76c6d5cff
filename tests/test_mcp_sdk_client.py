"""`mcpx-hooks mcp` as the MCP SDK's own `Client` reaches it, written as its README has it
(its default mode: a `server/discover` probe at the newest protocol, then the `initialize`
handshake when the server does not serve that protocol)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Marker
from mcp import Client
from mcpface_parts import LISTED, through_mcpx, write_config


async def test_the_sdk_s_client_in_its_default_mode_lists_and_calls_over_stdio(
    tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker)
    async with Client(through_mcpx(config)) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        counted = await client.call_tool("words__count", {"text": "one two three"})
    assert listed == LISTED
    assert counted.structured_content == {"words": 3, "lines": 1}, json.dumps(counted.content)
    assert marker.alive() == []  # the client closed: `mcp` and its servers are gone
