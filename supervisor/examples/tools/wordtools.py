"""A small MCP tool server over stdio, standard library only: the example of the docs and of
`mcpx-hooks demo`.

Tools: `count` (words and lines of a text, as structured content), `shout` (the text in
capitals, as text content), `sleep` (waits `ms`; a call cancelled with
`notifications/cancelled` stops waiting at once and is dropped unanswered) and `remove`
(pretends to delete a path: annotated `destructiveHint`, so a `call` hook can gate it).

One JSON-RPC message per line on stdin and stdout, as MCP's stdio transport has them.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

TOOLS = [
    {
        "name": "count",
        "description": "Counts the words and lines of `text`.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "shout",
        "description": "`text` in capitals.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "sleep",
        "description": "Waits `ms` milliseconds, then answers.",
        "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}},
    },
    {
        "name": "remove",
        "description": "Pretends to remove `path` (nothing is removed).",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
        "annotations": {"destructiveHint": True},
    },
]

_out = threading.Lock()
#: The calls running, by request id: each one's event is set when it is cancelled.
_running: dict[object, threading.Event] = {}


def send(message: dict[str, Any]) -> None:
    with _out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def text(value: str, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": error}


def call(name: str, args: dict[str, Any], cancelled: threading.Event) -> dict[str, Any]:
    if name == "count":
        body = str(args.get("text", ""))
        counts = {"words": len(body.split()), "lines": len(body.splitlines())}
        return {
            "content": [{"type": "text", "text": json.dumps(counts)}],
            "structuredContent": counts,
        }
    if name == "shout":
        return text(str(args.get("text", "")).upper())
    if name == "sleep":  # (waits on its call's cancellation, which ends the wait at once)
        return text("cancelled" if cancelled.wait(int(args.get("ms", 0)) / 1000) else "slept")
    if name == "remove":
        return text(f"would remove {args.get('path')}")
    return text(f"no tool {name!r}", error=True)


def answer(msg: dict[str, Any], cancelled: threading.Event) -> None:
    rid = msg["id"]
    params = msg.get("params") or {}
    try:
        result = call(str(params.get("name")), dict(params.get("arguments") or {}), cancelled)
    except Exception as exc:  # a tool's failure is the tool's answer, never the server's end
        result = text(f"{type(exc).__name__}: {exc}", error=True)
    _running.pop(rid, None)
    if not cancelled.is_set():
        send({"jsonrpc": "2.0", "id": rid, "result": result})


def main() -> None:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            version = (msg.get("params") or {}).get("protocolVersion", "2025-06-18")
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": version,
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "wordtools", "version": "1.0"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            cancelled = _running[rid] = threading.Event()
            try:
                threading.Thread(target=answer, args=(msg, cancelled), daemon=True).start()
            except RuntimeError:  # no thread to be had (its sandbox bounds its processes)
                _running.pop(rid, None)
                busy = {"code": -32000, "message": "too many calls at once; try again"}
                send({"jsonrpc": "2.0", "id": rid, "error": busy})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "notifications/cancelled":
            running = _running.get((msg.get("params") or {}).get("requestId"))
            if running is not None:
                running.set()
            sys.stderr.write(f"cancelled {(msg.get('params') or {}).get('requestId')}\n")
            sys.stderr.flush()
        elif rid is not None:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "error": {"code": -32601, "message": "no such method"},
                }
            )


if __name__ == "__main__":
    main()
