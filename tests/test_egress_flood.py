"""A real sandboxed hook floods the egress proxy: a strict hook with `network` opens tunnels
through it to a loopback upstream until its 65th is answered `503`, while another hook of
the same run, in parallel, is served; the run, and the supervisor, end as usual, with the
bound said in an `egress` frame, and nothing left open. Run by `exec` as root, and as
`nobody` where this Python can be run by it. The upstream coordinates the two hooks (no
sleeps): the other hook's answer waits until the flood holds its 64 tunnels, and the flood
ends only once that answer was sent."""

from __future__ import annotations

import json
import os
import socketserver
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, hook_user_processes, require_rootless
from test_rootless import Caller, caller  # noqa: F401 (a fixture)

from mcpx_hooks.supervisor.process import egress

#: How long the upstream waits for the other hook's part (far more than it takes).
WAIT_S = 60.0

FLOOD = """
import json, os, socket, sys
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["HTTP_PROXY"])
held, seen = [], []
for _ in range(int(sys.argv[2]) + 1):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=60)
    s.sendall(b"CONNECT " + sys.argv[1].encode() + b" HTTP/1.1\\r\\n\\r\\n")
    seen.append(s.recv(300).decode())
    held.append(s)
held[0].sendall(b"ping")  # (answered once the other hook was served)
seen.append(held[0].recv(10).decode())
print(json.dumps({"advise": json.dumps(seen)}))
"""

CALM = """
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r:
    print(json.dumps({"advise": r.read().decode()}))
"""


class _Server(socketserver.ThreadingTCPServer):
    #: The flood's tunnels may come faster than a loaded machine's accept loop takes them:
    #: past the default backlog of 5 a connection's SYN is dropped and tried again seconds
    #: later (a tunnel then missing when the other hook's answer waits for all of them).
    request_queue_size = 128


class Upstream:
    """Two loopback servers: one the flood's tunnels reach (it counts those open), one the
    other hook asks (it answers once the flood holds `CONNECTIONS_MAX` tunnels)."""

    def __init__(self) -> None:
        self.open = 0
        self.changed = threading.Condition()
        self.served = threading.Event()
        up = self

        class Tunnel(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with up.changed:
                    up.open += 1
                    up.changed.notify_all()
                try:
                    while data := self.request.recv(100):
                        if data == b"ping" and up.served.wait(WAIT_S):
                            self.request.sendall(b"pong")
                finally:
                    with up.changed:
                        up.open -= 1
                        up.changed.notify_all()

        class Calm(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.recv(65536)
                with up.changed:
                    up.changed.wait_for(lambda: up.open >= egress.CONNECTIONS_MAX, WAIT_S)
                body = b"hello %d" % up.open
                self.request.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                up.served.set()

        self.servers = [_Server(("127.0.0.1", 0), handler) for handler in (Tunnel, Calm)]
        for server in self.servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self.tunnel, self.calm = (s.server_address[1] for s in self.servers)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    try:
        yield up
    finally:
        up.close()


def _config(where: Path, python: str, up: Upstream) -> Path:
    hook = (
        '[[hooks]]\non = "script"\nphase = "before"\nname = "{name}"\nparallel = true\n'
        'sandbox = "strict"\ntimeoutMs = 60000\n'
        f'network = ["localhost:{up.tunnel}", "localhost:{up.calm}"]\n'
        "run = {run}\n"
    )
    for name, text in (("flood.py", FLOOD), ("calm.py", CALM)):
        (where / name).write_text(textwrap.dedent(text))
        (where / name).chmod(0o644)
    flood = [python, str(where / "flood.py"), f"localhost:{up.tunnel}"]
    flood.append(str(egress.CONNECTIONS_MAX))
    calm = [python, str(where / "calm.py"), f"http://localhost:{up.calm}/"]
    config = where / "c.toml"
    config.write_text(
        hook.format(name="flood", run=json.dumps(flood))
        + hook.format(name="calm", run=json.dumps(calm))
    )
    config.chmod(0o644)
    return config


def _check(done: subprocess.CompletedProcess[str], up: Upstream) -> None:
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    hooks: dict[str, Any] = {f["name"]: f for f in frames if f["type"] == "hook"}
    assert hooks["flood"]["status"] == hooks["calm"]["status"] == "ok", done.stdout
    seen = json.loads(hooks["flood"]["advice"][0])
    assert len(seen) == egress.CONNECTIONS_MAX + 2
    assert all(s.startswith("HTTP/1.1 200 ") for s in seen[: egress.CONNECTIONS_MAX])
    assert seen[-2].startswith("HTTP/1.1 503 Too Many Connections\r\n")
    assert seen[-2].endswith("close one, or open fewer at once\n")
    assert seen[-1] == "pong"
    # The other hook was served while the flood held every place of its own.
    assert hooks["calm"]["advice"] == [f"hello {egress.CONNECTIONS_MAX}"]
    said = [f for f in frames if f["type"] == "egress"]
    assert [(f["hook"], f["host"], f["port"]) for f in said] == [("flood", "localhost", up.tunnel)]
    assert said[0]["why"].startswith("too many connections at once: this child has 64 ")
    assert hooks["flood"]["egress"] == [said[0]["why"]]
    # Nothing left open: every tunnel reached its upstream's end.
    with up.changed:
        assert up.changed.wait_for(lambda: up.open == 0, WAIT_S), up.open


def test_a_hook_flooding_the_proxy_as_root(readable_tmp: Path, upstream: Upstream) -> None:
    require_rootless()
    config = _config(readable_tmp, sys.executable, upstream)
    argv = [sys.executable, "-m", "mcpx_hooks.supervisor", "exec", "--json"]
    done = subprocess.run(
        [*argv, "--config", str(config), "--", "true"],
        check=False,
        cwd=readable_tmp,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
    )
    _check(done, upstream)
    assert hook_user_processes() == []


@pytest.mark.skipif(not ROOT, reason="the test above runs as this user")
def test_a_hook_flooding_the_proxy_as_nobody(
    caller: Caller,  # noqa: F811
    upstream: Upstream,
) -> None:
    config = _config(caller.world, caller.python, upstream)
    argv = ["-m", "mcpx_hooks.supervisor", "exec", "--json", "--config", str(config)]
    done = caller.run(*argv, "--", "true")
    _check(done, upstream)
