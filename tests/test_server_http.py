"""Plain HTTP on the service's port, against a real `mcpx-hooks serve`: answered at once,
with the JSON error of a refused upgrade, and the same port still takes upgrades. (What each
request gets is held without a socket in `tests/test_routes.py`.)"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from service_client import Server, arun, open_ws, read_all, served


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
