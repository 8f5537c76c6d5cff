"""The `mcp` SDK's own server on stdio, relaying each tool call to the SDK's client of a server
it starts: what a proxy written the SDK's way costs, `mcp_face.py`'s peer (no hooks, no run,
no frames, no limits).

    python bench/_sdkproxy.py SERVER-COMMAND...
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def proxy(command: str, args: list[str]) -> None:
    params = StdioServerParameters(command=command, args=args)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as upstream:
        await upstream.initialize()

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return await upstream.list_tools()

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await upstream.call_tool(params.name, params.arguments)

        server: Server[Any] = Server("proxy", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (client_read, client_write):
            await server.run(client_read, client_write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(proxy, sys.argv[1], sys.argv[2:], backend="trio")
