"""A remote MCP server for the tests: the SDK's `MCPServer` (FastMCP) over streamable HTTP on
a loopback port, behind a bearer token it checks.

    python remote_http.py TOKEN [MODE]

MODE: `sse` (the default: each answer a server-sent event), `json` (each answer a JSON body),
`gzip` (JSON bodies, gzipped whatever the client asked). Prints `PORT <n>` once it listens. A
request without `Authorization: Bearer TOKEN` gets 401 with a body that echoes the
Authorization header it was sent (so a client that quotes an HTTP error's body would leak the
secret). Tools: `echo`, `add`, and `down`, which answers with a JSON-RPC error of code -32000
(the code the SDK's client also uses for a connection that ended), and `big`, whose answer is
`size` bytes of text.
"""

from __future__ import annotations

import socket
import sys
import zlib
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

TOKEN = sys.argv[1]
MODE = sys.argv[2] if len(sys.argv) > 2 else "sse"
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


@server.tool()
def big(size: int) -> str:
    """Answers `size` bytes of text."""
    return "x" * size


inner = server.streamable_http_app(json_response=MODE != "sse")


async def gzipped(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """`inner`, every body gzipped (and said to be) whatever the client accepts."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)

    async def packing(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message["headers"] if k.lower() != b"content-length"]
            message = {**message, "headers": [*kept, (b"content-encoding", b"gzip")]}
        elif message["type"] == "http.response.body":
            body = packer.compress(message.get("body", b""))
            if not message.get("more_body"):
                body += packer.flush()
            message = {**message, "body": body}
        await send(message)

    await inner(scope, receive, packing)


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
    await (gzipped if MODE == "gzip" else inner)(scope, receive, send)


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
