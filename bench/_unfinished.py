"""The measuring aid behind the figures of what unfinished messages cost `serve`
(docs/internals/service.md): N raw sockets each hold an unfinished 1 MiB message (a WebSocket
text message on `/v1/exec` or `/v1/events`, the frame's head and all but a byte of its payload;
or an `/mcp` POST body, all but its last byte), and `serve`'s peak RSS (VmHWM) is read before
and 2 s after. A fresh `serve` on a free port each time, its token in a temporary directory;
`--mcp-first` sends one `initialize` first, so the MCP SDK's own memory is in "before".

    .venv/bin/python bench/_unfinished.py --kind ws --path exec -n 200
    .venv/bin/python bench/_unfinished.py --kind mcp -n 400 --mcp-first
    .venv/bin/python bench/_unfinished.py --serve /other/checkout/.venv/bin/mcpx-hooks ...
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SIZE = 1024 * 1024 - 16
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def peak_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no VmHWM")


def hold(port: int, token: str, kind: str, path: str) -> socket.socket:
    """One socket holding an unfinished message; its handshake (if any) done."""
    sock = socket.create_connection(("127.0.0.1", port))
    auth = f"Authorization: Bearer {token}\r\nHost: 127.0.0.1\r\n"
    if kind == "ws":
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET /v1/{path} HTTP/1.1\r\n{auth}Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        frame_head = bytes([0x81, 0x80 | 127]) + struct.pack("!Q", SIZE) + b"\0\0\0\0"  # mask 0
        data = frame_head + b"a" * (SIZE - 1)
    else:
        data = (
            f"POST /mcp HTTP/1.1\r\n{auth}Content-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {SIZE}\r\n\r\n"
        ).encode() + b"a" * (SIZE - 1)
    sock.settimeout(10)
    with contextlib.suppress(OSError):  # refused meanwhile (the connection closed)
        sock.sendall(data)
    return sock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("ws", "mcp"), default="ws")
    parser.add_argument("--path", choices=("exec", "events"), default="exec")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--mcp-first", action="store_true")
    parser.add_argument("--serve", default=str(Path(sys.executable).with_name("mcpx-hooks")))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        token_file = Path(tmp, "token")
        serve = subprocess.Popen(
            [args.serve, "serve", "--port", "0", "--token-file", str(token_file)],
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert serve.stdout is not None
            line = serve.stdout.readline()
            port = int(line.split("ws://")[1].split(";")[0].rsplit(":", 1)[1])
            token = token_file.read_text().strip()
            if args.mcp_first:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/mcp",
                    json.dumps(INITIALIZE).encode(),
                    {
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                    },
                )
                urllib.request.urlopen(request, timeout=30).read()
            before = peak_mb(serve.pid)
            socks = [hold(port, token, args.kind, args.path) for _ in range(args.n)]
            time.sleep(2)
            after = peak_mb(serve.pid)
            told: collections.Counter[bytes] = collections.Counter()
            for sock in socks:
                sock.settimeout(0.2)
                try:
                    told[sock.recv(200)[:40]] += 1
                except OSError:
                    told[b"(nothing yet)"] += 1
                sock.close()
            what = f"/v1/{args.path}" if args.kind == "ws" else "/mcp"
            print(f"{args.n} x {what}: peak RSS {before} MB -> {after} MB (+{after - before} MB)")
            for said, count in told.most_common(3):
                print(f"  {count} sockets were told {said!r}")
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)


if __name__ == "__main__":
    main()
