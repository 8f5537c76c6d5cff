"""A remote MCP server for the tests: the SDK's `MCPServer` (FastMCP) over streamable HTTP on
a loopback port, behind a bearer token it checks.

    python remote_http.py TOKEN

Prints `PORT <n>` once it listens. A request without `Authorization: Bearer TOKEN` gets 401
with a body that echoes the Authorization header it was sent (so a client that quotes an HTTP
error's body would leak the secret). Tools: `echo`, `add`, and `down`, which answers with a
JSON-RPC error of code -32000 (the code the SDK's client also uses for a connection that
ended).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

TOKEN = sys.argv[1]
server = MCPServer("remote-words", version="2.0")


@server.tool()
def echo(text: str) -> str:
    """Says the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Adds two numbers."""
    return {"sum": a + b}


@server.tool()
def down() -> str:
    """Fails as a server whose database is down."""
    raise MCPError(code=-32000, message="the database is down")


inner = server.streamable_http_app()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"")
        if given != f"Bearer {TOKEN}".encode():
            body = b"unauthorized: you sent " + given
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"x-echo", given)],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
    await inner(scope, receive, send)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
