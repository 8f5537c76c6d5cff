"""A remote MCP server for the tests: the SDK's `MCPServer` (FastMCP) over streamable HTTP on
a loopback port, behind a bearer token it checks.

    python remote_http.py TOKEN [MODE]

MODE: `sse` (the default: each answer a server-sent event), `json` (each answer a JSON body),
`gzip` (JSON bodies, gzipped whatever the client asked), `odd` (JSON bodies, each tool
result with a key of a newer revision first, `ODD`, as a server of another SDK may write
it). Prints `PORT <n>` once it listens. A request without `Authorization: Bearer TOKEN`
gets 401 with a body that echoes the Authorization header it was sent (so a client that
quotes an HTTP error's body would leak the secret). Tools: `echo`, `add`, and `down`, which
answers with a JSON-RPC error of code -32000 (the code the SDK's client also uses for a
connection that ended), `tick`, which reports its progress and logs a line, and `big`, whose
answer is `size` bytes of text.
"""

from __future__ import annotations

import json
import socket
import sys
import zlib
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
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
async def tick(ctx: Context) -> str:
    """Reports its progress (0, then 1 of 1) and logs a line, then answers."""
    await ctx.report_progress(0, 1)
    await ctx.info("ticked")
    await ctx.report_progress(1, 1)
    return "ticked"


@server.tool()
def big(size: int) -> str:
    """Answers `size` bytes of text."""
    return "x" * size


inner = server.streamable_http_app(json_response=MODE != "sse")
#: What `odd` adds to each tool result, before its other keys.
ODD = {"example.org/eta": {"seconds": 0, "sure": 0.5}}


async def odd(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """`inner`, each JSON body holding a tool result given `ODD` (read whole, then sent)."""
    held: list[dict[str, Any]] = []
    body = bytearray()

    async def oddly(message: dict[str, Any]) -> None:
        nonlocal body
        if message["type"] == "http.response.start":
            held.append(message)
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        body += message.get("body", b"")
        if message.get("more_body"):
            return
        said = bytes(body)
        if said.startswith(b"{"):
            answer = json.loads(said)
            result = answer.get("result")
            if isinstance(result, dict) and "content" in result:
                answer["result"] = {**ODD, **result}
                said = json.dumps(answer).encode()
        start = held.pop()
        kept = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        length = str(len(said)).encode()
        await send({**start, "headers": [*kept, (b"content-length", length)]})
        await send({"type": "http.response.body", "body": said})

    await inner(scope, receive, oddly)


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
    await {"gzip": gzipped, "odd": odd}.get(MODE, inner)(scope, receive, send)


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
