"""A tool server built with the MCP SDK, under a `network` list, whose tool opens more
connections through the proxy at once than a child may: the run that called it hears of the
bound from the supervisor (an `egress` frame naming the server, the host and what to do), not
only from whatever the server makes of a `503` (axios: "Request failed with status code
503"). A real `exec`, a real sandboxed server and a real upstream on loopback."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcpx_hooks.supervisor.process.egress import CONNECTIONS_MAX

PY = sys.executable
#: How long the upstream holds its answers at most: under the server's own 30 s for each
#: request, and far over what its 64 connections take to arrive (10 s was not, on a loaded
#: CI machine: the upstream let the first go, and a 65th request was served).
HOLD_S = 25.0
#: More connections at once than a child may have served.
MANY = CONNECTIONS_MAX + 6

#: An SDK server whose tool `burst` GETs its url `n` times at once through the proxy
#: variables, and says only the statuses it got (as most servers do: never the body).
SERVER = textwrap.dedent(
    """
    import concurrent.futures, json, urllib.error, urllib.request
    from mcp.server.mcpserver import MCPServer

    app = MCPServer("burst")

    def status(url):
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    @app.tool()
    def burst(url: str, n: int) -> str:
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            return json.dumps(sorted(pool.map(lambda _: status(url), range(n))))

    app.run()
    """
)


@contextlib.contextmanager
def _holding_upstream(held: int) -> Iterator[int]:
    """A loopback HTTP server that answers no request until `held` of them are open at once
    (or `HOLD_S` have passed); its port."""
    released = threading.Event()
    count = [0]
    lock = threading.Lock()

    class Hold(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                count[0] += 1
                if count[0] >= held:
                    released.set()
            released.wait(HOLD_S)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hold)
    server.request_queue_size = 256
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        released.set()
        server.shutdown()
        thread.join()
        server.server_close()


def test_a_server_past_the_connection_bound_is_told_to_its_run(readable_tmp: Path) -> None:
    """The connections past the bound were answered `503` and nothing else said so: the
    run saw the server's call succeed or fail in the server's words alone. Now each host a
    child met the bound on is an `egress` frame of the run, saying the bound and what to do."""
    (readable_tmp / "burst.py").write_text(SERVER)
    with _holding_upstream(CONNECTIONS_MAX) as port:
        url = f"http://localhost:{port}/"
        (readable_tmp / "c.toml").write_text(
            f'[servers.burst]\ncommand = ["{PY}", "burst.py"]\n'
            f'network = ["localhost:{port}"]\ncallTimeoutMs = 60000\n'
        )
        (readable_tmp / "script.py").write_text(
            f"def main():\n    return mcpx_call('burst.burst', {{'url': {url!r}, 'n': {MANY}}})\n"
        )
        done = subprocess.run(
            [
                *(PY, "-m", "mcpx_hooks.supervisor", "exec", "--json"),
                *("--config", "c.toml", "--python", "script.py"),
            ],
            check=False,
            cwd=readable_tmp,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
        )
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = next(f for f in frames if f["type"] == "result")
    statuses = json.loads(result["value"]["result"])
    # The upstream answers once the bound's 64 have reached it: a request of the burst that
    # reaches the proxy only after that is served in a freed place (seen once in CI: 65 and
    # 5). Each one past the bound while the 64 are held is a 503, and at least one is.
    assert statuses.count(200) + statuses.count(503) == MANY, statuses
    assert statuses.count(200) >= CONNECTIONS_MAX and statuses.count(503) >= 1, statuses
    egress = [f for f in frames if f["type"] == "egress"]
    assert len(egress) == 1, egress
    assert egress[0] | {"why": ""} == egress[0] | {
        "why": "",
        "server": "burst",
        "host": "localhost",
        "port": port,
        "allowed": False,
    }
    assert egress[0]["why"].startswith(
        f"too many connections at once: this child has {CONNECTIONS_MAX} connections open"
        " through the proxy, the most it may; close one, or open fewer at once"
    )
    kinds = [f["type"] for f in frames]
    assert kinds.index("egress") == kinds.index("call") - 1
