"""An MCP server built with the official SDK (`MCPServer`), over stdio, with tools shaped
like those of published servers: `get_current_time` answers a plain structured object (as
`mcp-server-time` does), `say` answers plain text, `text_json` answers an object as JSON text
only, `verdict` answers an object with a hook's keys (structured and as text)."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

server = MCPServer("sdktools")


@server.tool()
def get_current_time(timezone: str = "Europe/Warsaw") -> dict[str, Any]:
    """The time in `timezone` (a fixed one: the tests compare it)."""
    return {"timezone": timezone, "datetime": "2026-01-01T12:00:00+01:00", "is_dst": False}


@server.tool()
def say(text: str = "") -> str:
    """`text` as it is."""
    return text


@server.tool(structured_output=False)
def text_json(obj: dict[str, Any]) -> list[TextContent]:
    """`obj` as JSON text, with no structured content."""
    return [TextContent(type="text", text=json.dumps(obj))]


@server.tool()
def verdict(advise: str) -> dict[str, Any]:
    """A hook's answer: `{"advise": advise}`."""
    return {"advise": advise}


if __name__ == "__main__":
    server.run()
