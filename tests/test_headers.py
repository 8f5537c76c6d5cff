"""The headers every HTTP answer of the service carries, over a real `mcpx-hooks serve`
(issue 25, case 5): no answer may be framed (`X-Frame-Options: DENY`, a
`Content-Security-Policy` with `frame-ancestors 'none'`), none but the console's own files is
kept by a cache (`Cache-Control: no-store`: run data, artifacts, errors), and a `token` query
parameter given twice is refused (400) wherever a token is read.

The walk is built from the code's own tables: every route of `routes.ROUTES` (its `{…}`
segments filled from a real run with an artifact, and every file `pages.shipped()` lists for
the console's), every WebSocket endpoint, and the error answers around them (401, 404, 405,
400), each asked with GET and HEAD.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
from service_client import Server, arun, run_remote, served

from mcpx_hooks.supervisor.service import pages, routes
from mcpx_hooks.supervisor.service.targets import Endpoint

#: A console file (200, or 304 when revalidated) may say `no-cache` (kept, and asked again
#: each time) instead of `no-store`: it holds no data.
CONSOLE_FILE = "/console/{file}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from served(tmp_path_factory.mktemp("serve"))


def ask(
    server: Server,
    path: str,
    *,
    method: str = "GET",
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, http.client.HTTPMessage]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        conn.request(method, path, headers=sent)
        response = conn.getresponse()
        response.read()
        return response.status, response.msg
    finally:
        conn.close()


def check(status: int, got: http.client.HTTPMessage, what: str, *, file: bool = False) -> None:
    """The headers of §8's end, on one answer."""
    assert got.get_all("X-Frame-Options") == ["DENY"], (what, status, got.items())
    assert got.get_all("X-Content-Type-Options") == ["nosniff"], (what, status, got.items())
    policies = got.get_all("Content-Security-Policy") or []
    assert any("frame-ancestors 'none'" in [d.strip() for d in p.split(";")] for p in policies), (
        what,
        status,
        policies,
    )
    cache = got.get_all("Cache-Control") or []
    if file and status == 200:  # the console page by its file name is the page: its policy
        assert any("default-src 'self'" in p for p in policies), (what, policies)
    if file and status in (200, 304):
        assert cache == ["no-cache"], (what, status, cache)
    else:
        assert cache == ["no-store"], (what, status, cache)


@pytest.fixture(scope="module")
def filled(server: Server) -> dict[str, list[str]]:
    """Each route's paths with its `{…}` segments filled: a real run's id and its artifact's,
    and every file the console ships."""
    script = 'printf "<b>hi</b>" > "$MCPX_ARTIFACTS_DIR/page.html"'
    stream = arun(run_remote(server, {"argv": ["sh", "-c", script], "sandbox": "workspace"}))
    assert stream.code == 1000, stream
    (artifact,) = [f for f in stream.frames if f["type"] == "artifact"]
    values = {"runId": [artifact["runId"]], "id": [artifact["id"]], "file": sorted(pages.shipped())}
    assert values["file"], "the console ships no file"
    paths: dict[str, list[str]] = {}
    for pattern in routes.ROUTES:
        found = [pattern]
        for name, choices in values.items():
            if "{" + name + "}" in pattern:
                found = [p.replace("{" + name + "}", c) for p in found for c in choices]
        assert all("{" not in p for p in found), f"a route this test cannot fill: {pattern}"
        paths[pattern] = found
    return paths


def test_every_route_and_console_file_and_error_carries_the_headers(
    server: Server, filled: dict[str, list[str]]
) -> None:
    token = server.token
    assert token is not None
    asked = 0
    for pattern, paths in filled.items():
        route = routes.ROUTES[pattern]
        for path in paths:
            for method in ("GET", "HEAD"):
                status, got = ask(server, path, method=method, token=token)
                assert status in (200, 303), (path, status)
                check(status, got, f"{method} {path}", file=pattern == CONSOLE_FILE)
                asked += 1
            if route.token:  # refused without the token, and with a wrong one
                for given in (None, "not-the-token"):
                    status, got = ask(server, path, token=given)
                    assert status == 401, (path, status)
                    check(status, got, f"GET {path} with token {given}")
            # Revalidation of a console file (304), and the way in at `/` (303 and 401).
            if pattern == CONSOLE_FILE:
                status, got = ask(server, path)
                etag = got["ETag"]
                status, got = ask(server, path, headers={"If-None-Match": etag})
                assert status == 304, path
                check(status, got, f"GET {path} revalidated", file=True)
    assert asked == 2 * (len(routes.ROUTES) - 1 + len(pages.shipped()))
    for path in ("/?token=" + token, "/?token=nope"):
        status, got = ask(server, path)
        assert status in (303, 401), (path, status)
        check(status, got, f"GET {path}")
    run_id = filled["/v1/runs/{runId}/artifacts/{id}"][0].split("/")[3]
    errors = {
        "/nothing-here": 404,
        "/console/nothing-here.js": 404,
        f"/v1/runs/{run_id}/artifacts/nothing-here": 404,
        "/v1/runs/nothing-here/artifacts/nothing-here": 404,
    }
    for path, want in errors.items():
        status, got = ask(server, path, token=token)
        assert status == want, (path, status)
        check(status, got, f"GET {path}")
    status, got = ask(server, "/v1/runs", method="POST", token=token)
    assert status == 405
    check(status, got, "POST /v1/runs")


def test_every_websocket_endpoint_without_an_upgrade_or_refused_carries_the_headers(
    server: Server, filled: dict[str, list[str]]
) -> None:
    run_id = filled["/v1/runs/{runId}/artifacts/{id}"][0].split("/")[3]
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    for endpoint in Endpoint:
        path = endpoint.value.replace("{runId}", run_id)
        status, got = ask(server, path, token=server.token)
        assert status == 400, (path, status)  # a WebSocket endpoint answers an upgrade only
        check(status, got, f"GET {path} without an upgrade")
        status, got = ask(server, path, headers=upgrade)
        assert status == 401, (path, status)
        check(status, got, f"an upgrade of {path} without the token")


@pytest.mark.parametrize("path", ["/v1/runs", "/", "/healthz", "/console/index.html"])
def test_a_token_given_twice_is_refused(server: Server, path: str) -> None:
    """`?token=bad&token=GOOD`: which one counts would depend on who reads it; none does."""
    token = server.token
    for query in (f"?token=bad&token={token}", f"?token={token}&token={token}"):
        status, got = ask(server, path + query)
        assert status == 400, (path, query, status)
        check(status, got, f"GET {path}{query}")
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    status, _ = ask(server, f"/v1/events?token=bad&token={token}", headers=upgrade)
    assert status == 400
    status, _ = ask(server, f"/v1/runs?token={token}")
    assert status == 200  # one token is still the way in
