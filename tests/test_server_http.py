"""Plain HTTP on the service's port, against a real `mcpx-hooks serve`: answered at once,
with the JSON error of a refused upgrade, and the same port still takes upgrades. (What each
request gets is held without a socket in `tests/test_routes.py`.)"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_client import Server, arun, open_ws, read_all, served, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from served(tmp_path_factory.mktemp("serve"))


def test_plain_http_gets_400_at_once(server: Server) -> None:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", "/v1/hooks")
        assert conn.getresponse().status == 400
    finally:
        conn.close()
    assert time.monotonic() - started < 2  # not held for the handshake timeout


def test_plain_http_shares_the_port_with_the_upgrades(server: Server) -> None:
    def get(path: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request(method, path, headers=headers)
            response = conn.getresponse()
            assert response.getheader("Content-Type") == "application/json"
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    status, health = get("/healthz")  # no token asked
    assert status == 200 and health["ok"] is True and isinstance(health["version"], str)
    assert get("/v1/runs")[0] == 401
    status, error = get("/v1/nope", Authorization=f"Bearer {server.token}")
    assert (status, error["type"], error["code"]) == (404, "error", 404)
    assert get("/healthz", "POST")[0] == 405
    assert get("/healthz", Origin="http://evil.example")[0] == 403

    async def upgrade() -> int | None:  # and the same port takes upgrades
        async with open_ws(server, "/v1/hooks") as ws:
            return (await read_all(ws)).code

    assert arun(upgrade()) == 1000


def _status(port: int, method: str, path: str, host: str, **headers: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host)
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value)
        conn.endheaders(b"{}" if method == "POST" else None)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


_UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "MDEyMzQ1Njc4OWFiY2RlZg==",
    "Sec-WebSocket-Version": "13",
}


def test_without_a_token_a_request_must_name_the_server_by_its_address(tmp_path: Path) -> None:
    # DNS rebinding: a page of attacker.example has its name point to 127.0.0.1, then reads
    # its "own" origin: same-origin GETs carry no Origin, so only the Host names the page's
    # site. Without a token (--no-auth), that read the run list, a run's output, artifacts.
    srv = start_server(
        tmp_path,
        "--allow-origin",
        "https://dev.example:9443",
        auth=False,
    )
    try:
        port = srv.port
        for path in ("/v1/runs", "/healthz", "/"):
            assert _status(port, "GET", path, f"attacker.example:{port}") == 403, path
        assert _status(port, "GET", "/v1/events", f"attacker.example:{port}", **_UPGRADE) == 403
        assert _status(port, "POST", "/mcp", f"attacker.example:{port}") == 403
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
            assert _status(port, "GET", "/v1/runs", host) == 200, host
        assert _status(port, "GET", "/v1/runs", "app.localhost") == 200
        assert _status(port, "GET", "/v1/runs", "10.1.2.3:8765") == 200  # an address
        assert _status(port, "GET", "/v1/runs", "dev.example:9443") == 200  # --allow-origin's
        assert _status(port, "GET", "/v1/events", f"localhost:{port}", **_UPGRADE) == 101
    finally:
        assert srv.stop() == 0
    assert "Traceback" not in srv.log(), srv.log()


def test_an_absolute_form_target_names_the_host_whatever_the_host_header(tmp_path: Path) -> None:
    # `GET http://evil.example/v1/runs` with `Host: 127.0.0.1:PORT`: HTTP has the target's
    # authority win over the header. The Host check read the header only, and served it.
    srv = start_server(tmp_path, auth=False)
    try:
        port = srv.port
        ours, theirs = f"127.0.0.1:{port}", f"http://attacker.example:{port}"
        assert _status(port, "GET", f"{theirs}/v1/runs", ours) == 403
        assert _status(port, "GET", f"{theirs}/healthz?x=1", ours) == 403
        assert (
            _status(port, "GET", f"ws://attacker.example:{port}/v1/events", ours, **_UPGRADE) == 403
        )
        assert _status(port, "POST", f"{theirs}/mcp", ours) == 403
        # Its authority naming the server, it is read as the path it names.
        assert _status(port, "GET", f"http://{ours}/v1/runs", "attacker.example") == 200
        assert _status(port, "GET", f"http://localhost:{port}", ours) == 200  # the console
        assert _status(port, "GET", f"ws://{ours}/v1/events", "x.example", **_UPGRADE) == 101
        # A path that begins `//` was routed as what follows its "host" (urlsplit reads an
        # authority there): `//x/v1/runs` as `/v1/runs`, past a proxy in front that lets no
        # `/v1/` through. No path here begins so: it is refused, saying so.
        for target in (f"//{ours}/v1/runs", f"http://{ours}//x/v1/runs", "///v1/runs"):
            assert _status(port, "GET", target, ours) == 400, target
        for target in (
            "ftp://127.0.0.1/v1/runs",
            "http:///v1/runs",
            "http://u@127.0.0.1/",
            "127.0.0.1:80",
            "*",
            "http://127.0.0.1:x/",
        ):
            assert _status(port, "GET", target, ours) == 400, target
    finally:
        assert srv.stop() == 0
    assert "Traceback" not in srv.log(), srv.log()


def test_with_a_token_the_host_is_not_looked_at(server: Server) -> None:
    # (A page of another name has no token to present: behind a proxy, any Host goes.)
    auth = {"Authorization": f"Bearer {server.token}"}
    assert _status(server.port, "GET", "/v1/runs", "public.example", **auth) == 200


def test_out_of_descriptors_the_oldest_stalled_handshake_makes_room(tmp_path: Path) -> None:
    # A process may open fewer files than --max-pending and --max-connections add up to
    # (1,536 by default): sockets that stall their handshake then fill its descriptors before
    # they fill --max-pending, and accept(2) fails. Before, every new client waited behind
    # them for their 5 s handshake timeout, and the log said "a bug" ten times a second.
    srv = start_server(tmp_path, open_files=120)
    stalled: list[socket.socket] = []
    try:
        for _ in range(200):  # more than the server can hold: the rest wait in its backlog
            stalled.append(socket.create_connection(("127.0.0.1", srv.port), timeout=10))
        started = time.monotonic()
        assert _status(srv.port, "GET", "/healthz", f"127.0.0.1:{srv.port}") == 200
        assert time.monotonic() - started < 2.5  # not after the stalled ones' 5 s
    finally:
        for sock in stalled:
            sock.close()
        assert srv.stop() == 0
    log = srv.log()
    said = [line for line in log.splitlines() if "cannot accept a connection" in line]
    assert len(said) == 1, log
    assert "Too many open files (this process may open 120 files)" in said[0], said
    assert "the oldest connection still in its handshake is dropped" in said[0], said
    assert "a bug" not in log and "Traceback" not in log, log
