"""A strict hook with `network` reaches the proxy, and nothing else, with sockets that ignore
the proxy variables: a Unix socket it can see (a file in a directory it may read, which its
network namespace does not bound) is refused at `socket()`, as are the families that are no
network namespace's (vsock) or need none (packet); TCP and UDP to its own loopback, netlink
and `socketpair` stay. Run by `exec` as root, and as `nobody` where this Python can be run by
it, against a world-writable listener of the test's own and a loopback upstream."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, hook_user_processes, require_rootless
from test_rootless import Caller, caller  # noqa: F401 (a fixture)

PROBE = """
import errno, json, os, socket, sys, urllib.request
seen = {}
def attempt(name, make):
    try:
        make()
        seen[name] = "made"
    except OSError as exc:
        seen[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def unix():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sys.argv[1])
        s.sendall(b"out")
attempt("unix", unix)
attempt("vsock", lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close())
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close())
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close())
attempt("udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
attempt("pair", lambda: [s.close() for s in socket.socketpair()])
with urllib.request.urlopen(sys.argv[2], timeout=30) as r:
    seen["proxy"] = r.read().decode()
print(json.dumps({"advise": json.dumps(seen, sort_keys=True)}))
"""


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _listener(where: Path) -> socket.socket:
    """A Unix socket anyone may connect to, in a directory the hook may read."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(where / "door.sock"))
    (where / "door.sock").chmod(0o777)
    sock.listen()
    sock.setblocking(False)
    return sock


def _config(where: Path, python: str, port: int) -> Path:
    (where / "probe.py").write_text(textwrap.dedent(PROBE))
    (where / "probe.py").chmod(0o644)
    run = [python, str(where / "probe.py"), str(where / "door.sock"), f"http://localhost:{port}/"]
    config = where / "c.toml"
    config.write_text(
        '[[hooks]]\non = "script"\nphase = "before"\nname = "probe"\nsandbox = "strict"\n'
        f'network = ["localhost:{port}"]\nrun = {json.dumps(run)}\n'
    )
    config.chmod(0o644)
    return config


def _check(done: subprocess.CompletedProcess[str], door: socket.socket) -> None:
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (hook,) = [f for f in frames if f["type"] == "hook"]
    assert hook["status"] == "ok", done.stdout
    assert json.loads(hook["advice"][0]) == {
        "unix": "EACCES",
        "vsock": "EACCES",
        "packet": "EACCES",
        "netlink": "made",
        "udp6": "made",
        "pair": "made",
        "proxy": "hello",
    }
    with pytest.raises(BlockingIOError):
        door.accept()  # nothing came through the door


def test_a_network_hook_reaches_no_unix_socket_as_root(readable_tmp: Path, upstream: int) -> None:
    require_rootless()
    config = _config(readable_tmp, sys.executable, upstream)
    argv = [sys.executable, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--config"]
    with _listener(readable_tmp) as door:
        done = subprocess.run(
            [*argv, str(config), "--", "true"],
            check=False,
            cwd=readable_tmp,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
        )
        _check(done, door)
    assert hook_user_processes() == []


@pytest.mark.skipif(not ROOT, reason="the test above runs as this user")
def test_a_network_hook_reaches_no_unix_socket_as_nobody(
    caller: Caller,  # noqa: F811
    upstream: int,
) -> None:
    config = _config(caller.world, caller.python, upstream)
    with _listener(caller.world) as door:
        argv = ["-m", "mcpx_hooks.supervisor", "exec", "--json", "--config", str(config)]
        _check(caller.run(*argv, "--", "true"), door)
