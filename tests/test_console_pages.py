"""The console's pages and its cookie, without a browser: what `GET /` and `/console/NAME`
answer (types, caching, the policy, no path outside the shipped files), the way in by
`/?token=`, and the cookie as a way to present the token, to plain HTTP and to WebSocket
upgrades of a real `serve`, with the Origin rule still in force."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_client import CLI, ENV, READY_S, Server, arun, open_ws, read_all, start_server
from websockets.exceptions import InvalidStatus

from mcpx_hooks.supervisor.service import pages
from mcpx_hooks.supervisor.service.access import (
    check_access,
    console_cookie,
    cookie_name,
    cookie_token,
)
from mcpx_hooks.supervisor.service.protocolevents import Request
from mcpx_hooks.supervisor.service.routes import Answer, answer

OWN = frozenset({"http://127.0.0.1:8765"})
HOST = (b"host", b"127.0.0.1:8765")
TOKEN = "t0k-en_0123456789"
COOKIE = f"mcpx-hooks-token-8765={TOKEN}".encode()


def _answer(
    target: str,
    *headers: tuple[bytes, bytes],
    method: str = "GET",
    token: str | None = TOKEN,
) -> Answer:
    request = Request(method, target, (HOST, *headers), websocket=False)
    got = answer(request, token=token, origins=OWN, stopping=False)
    assert isinstance(got, Answer)
    return got


def _header(got: Answer, name: bytes) -> bytes | None:
    return next((v for k, v in got.headers if k.lower() == name.lower()), None)


# ---- the page and its files -------------------------------------------------------------------


def test_the_page_is_html_under_a_strict_policy_and_never_cached() -> None:
    got = _answer("/")
    assert got.status == 200 and got.content_type == b"text/html; charset=utf-8"
    assert got.body.startswith(b"<!doctype html>")
    policy = (_header(got, b"Content-Security-Policy") or b"").decode()
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"  # no inline script, no other host
    assert directives["connect-src"] == "'self' ws://127.0.0.1:8765"
    assert directives["frame-ancestors"] == "'none'"
    assert _header(got, b"Cache-Control") == b"no-store"
    assert _header(got, b"X-Content-Type-Options") == b"nosniff"
    assert _header(got, b"Referrer-Policy") == b"no-referrer"
    # Nothing in the page runs inline or comes from elsewhere.
    text = got.body.decode()
    assert "<script>" not in text and "http://" not in text and "https://" not in text


def test_a_host_header_that_is_not_a_host_never_reaches_the_policy() -> None:
    request = Request("GET", "/", ((b"host", b"x; script-src *"),), websocket=False)
    got = answer(request, token=TOKEN, origins=OWN, stopping=False)
    assert isinstance(got, Answer)
    assert b"script-src *" not in (_header(got, b"Content-Security-Policy") or b"")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("app.js", b"text/javascript; charset=utf-8"),
        ("tables.js", b"text/javascript; charset=utf-8"),  # made by the server, not shipped
        ("console.css", b"text/css; charset=utf-8"),
        ("icon.svg", b"image/svg+xml"),
        ("index.html", b"text/html; charset=utf-8"),
    ],
)
def test_each_shipped_file_has_its_type_and_a_tag_to_revalidate(name: str, kind: bytes) -> None:
    got = _answer(f"/console/{name}")
    assert got.status == 200 and got.content_type == kind
    assert got.body == pages.shipped()[name].body
    assert _header(got, b"Cache-Control") == b"no-cache"
    tag = _header(got, b"ETag")
    assert tag is not None
    again = _answer(f"/console/{name}", (b"if-none-match", tag))
    assert again.status == 304 and again.body == b""
    assert _answer(f"/console/{name}", (b"if-none-match", b'"other"')).status == 200


def test_every_module_the_page_imports_is_shipped() -> None:
    files = pages.shipped()
    for name, file in files.items():
        if name.endswith(".js"):
            for line in file.body.decode().splitlines():
                if line.startswith("import "):
                    module = line.rsplit('"', 2)[-2].removeprefix("./")
                    assert module in files, (name, module)


@pytest.mark.parametrize(
    "path",
    [
        "/console/..%2Fpages.py",
        "/console/%2E%2E%2Fpages.py",
        "/console/../pages.py",
        "/console/..",
        "/console/%2Fetc%2Fpasswd",
        "/console/pages.py",
        "/console/app.js%00",
        "/console/APP.JS",
        "/console/app.js/",
        "/console/sub/app.js",
        "/console/",
        "/console",
        "/console/" + "a" * 5000,
        "/index.html",
        "//console/app.js",
    ],
)
def test_no_path_reaches_a_file_that_is_not_shipped(path: str) -> None:
    got = _answer(path, (b"authorization", f"Bearer {TOKEN}".encode()))
    assert got.status == 404, path
    assert got.content_type == b"application/json"
    assert json.loads(got.body)["code"] == 404
    assert b"import" not in got.body and b"root:" not in got.body
    assert len(got.body) < 400


def test_the_page_keeps_the_origin_rule() -> None:
    assert _answer("/", (b"origin", b"http://evil.example")).status == 403
    assert _answer("/console/app.js", (b"origin", b"http://localhost:9999")).status == 403
    assert _answer("/", (b"origin", b"http://127.0.0.1:8765")).status == 200


def test_a_head_request_is_answered_like_a_get() -> None:
    assert _answer("/", method="HEAD").status == 200
    assert _answer("/", method="POST").status == 405


# ---- the way in ------------------------------------------------------------------------------


def test_the_token_once_sets_the_cookie_and_leaves_the_address() -> None:
    got = _answer(f"/?token={TOKEN}")
    assert got.status == 303 and _header(got, b"Location") == b"/"
    cookie = (_header(got, b"Set-Cookie") or b"").decode()
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0] == f"mcpx-hooks-token-8765={TOKEN}"
    assert set(parts[1:]) == {"HttpOnly", "SameSite=Strict", "Path=/"}
    assert _header(got, b"Cache-Control") == b"no-store"


def test_a_wrong_token_gets_the_page_with_401_and_no_cookie() -> None:
    got = _answer("/?token=nope")
    assert got.status == 401 and got.body.startswith(b"<!doctype html>")
    assert _header(got, b"Set-Cookie") is None


def test_a_server_without_auth_sets_no_cookie() -> None:
    got = _answer("/?token=anything", token=None)
    assert got.status == 303 and _header(got, b"Set-Cookie") is None


def test_the_cookie_is_a_way_to_present_the_token() -> None:
    assert _answer("/v1/runs", (b"cookie", COOKIE)).status == 200
    assert _answer("/v1/runs", (b"cookie", b"a=1; " + COOKIE + b"; b=2")).status == 200
    assert _answer("/v1/runs", (b"cookie", b"a=1"), (b"cookie", COOKIE)).status == 200
    assert _answer("/v1/runs", (b"cookie", b"mcpx-hooks-token-8765=nope")).status == 401
    # Another server's cookie (cookies are not kept apart by port) is not this one's.
    assert _answer("/v1/runs", (b"cookie", f"mcpx-hooks-token-9000={TOKEN}".encode())).status == 401
    # An explicit token wins over the cookie.
    assert _answer("/v1/runs?token=nope", (b"cookie", COOKIE)).status == 401


def test_a_page_of_another_origin_is_refused_whatever_cookie_it_brings() -> None:
    for origin in (b"http://localhost:9999", b"http://evil.example", b"null"):
        refusal = check_access(
            (HOST, (b"cookie", COOKIE), (b"origin", origin)), (), token=TOKEN, origins=OWN
        )
        assert refusal is not None and refusal.status == 403


def test_the_cookie_admits_only_what_the_browser_says_its_own_pages_or_the_person_sent() -> None:
    for site in (b"same-origin", b"none", b"Same-Origin"):
        assert _answer("/v1/runs", (b"cookie", COOKIE), (b"sec-fetch-site", site)).status == 200
    # A page on another port of this host is the same site: the browser sends the cookie,
    # without an Origin for an <img> or a <script>. Refused.
    for site in (b"same-site", b"cross-site", b"x"):
        got = _answer("/v1/runs", (b"cookie", COOKIE), (b"sec-fetch-site", site))
        assert got.status == 403, site
    # A token presented otherwise is not the cookie's to limit.
    bearer = (b"authorization", f"Bearer {TOKEN}".encode())
    assert _answer("/v1/runs", bearer, (b"sec-fetch-site", b"cross-site")).status == 200


def test_cookie_names_follow_the_port_of_the_host() -> None:
    assert cookie_name([(b"host", b"127.0.0.1:8765")]) == "mcpx-hooks-token-8765"
    assert cookie_name([(b"host", b"[::1]:9000")]) == "mcpx-hooks-token-9000"
    assert cookie_name([(b"host", b"example")]) == "mcpx-hooks-token-80"
    assert cookie_name([(b"host", b"[::1]")]) == "mcpx-hooks-token-80"
    assert cookie_name([]) == "mcpx-hooks-token-80"
    many = b"; ".join(b"x%d=1" % i for i in range(100)) + b"; " + COOKIE
    assert cookie_token([HOST, (b"cookie", many)]) is None  # past the bound: not looked at
    assert console_cookie([HOST], TOKEN).startswith(b"mcpx-hooks-token-8765=")


# ---- a real server ---------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    started = start_server(tmp_path)
    yield started
    started.stop()


def _get(server: Server, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    url = f"http://127.0.0.1:{server.port}{path}"
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kw: object) -> None:
        return None


def test_a_real_server_lets_the_cookie_in_over_http_and_websocket(server: Server) -> None:
    status, headers, _ = _get(server, f"/?token={server.token}", {})
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"].split(";")[0]
    assert cookie == f"mcpx-hooks-token-{server.port}={server.token}"
    status, headers, body = _get(server, "/", {"Cookie": cookie})
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert body.startswith(b"<!doctype html>") and "Content-Security-Policy" in headers
    assert _get(server, "/v1/runs", {"Cookie": cookie})[0] == 200
    assert _get(server, "/v1/runs", {})[0] == 401
    own = f"http://127.0.0.1:{server.port}"
    assert _get(server, "/v1/runs", {"Cookie": cookie, "Origin": "http://localhost:1"})[0] == 403

    async def upgrades() -> None:
        bare = Server(server.proc, server.url, None, server.cwd, server.stderr)
        # The page's own origin with its cookie: admitted, as the browser's socket is.
        async with open_ws(bare, "/v1/hooks", headers={"Cookie": cookie}, origin=own) as ws:
            stream = await read_all(ws)
        assert stream.code == 1000 and stream.objects[0]["type"] == "hooks"
        assert stream.objects[0]["skipped"] == []
        # Another origin with the same cookie: refused before the upgrade.
        with pytest.raises(InvalidStatus) as refused:
            async with open_ws(
                bare, "/v1/hooks", headers={"Cookie": cookie}, origin="http://localhost:1"
            ):
                pass
        assert refused.value.response.status_code == 403
        with pytest.raises(InvalidStatus) as missing:
            async with open_ws(bare, "/v1/hooks", origin=own):
                pass
        assert missing.value.response.status_code == 401

    arun(upgrades())
    assert server.token not in server.log()


def test_serve_names_the_console_without_printing_the_token_off_a_terminal(
    server: Server,
) -> None:
    assert server.proc.stdout is not None
    line = server.proc.stdout.readline()
    assert line.startswith(f"mcpx-hooks serve: console http://127.0.0.1:{server.port}/ ")
    assert "(mcpx-hooks console --open opens it with the token)" in line
    assert server.token is not None and server.token not in line


def test_on_a_terminal_serve_prints_the_console_address_with_its_token(tmp_path: Path) -> None:
    main, side = pty.openpty()
    token_file = tmp_path / "token"
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--token-file", str(token_file)],
        cwd=tmp_path,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=side,
        stderr=subprocess.DEVNULL,
    )
    os.close(side)
    try:
        with os.fdopen(main, "rb", buffering=0) as terminal:
            seen = b""
            while seen.count(b"\n") < 2:
                ready, _, _ = select.select([terminal], [], [], READY_S)
                assert ready, f"serve printed only {seen!r}"
                seen += terminal.read(4096)
        listening, console = seen.decode().splitlines()[:2]
        port = re.search(r"127\.0\.0\.1:(\d+)", listening)
        assert port is not None
        token = token_file.read_text().strip()
        assert console == f"mcpx-hooks serve: console http://127.0.0.1:{port[1]}/?token={token}"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


# ---- `mcpx-hooks console` --------------------------------------------------------------------


def _console(server: Server, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [*CLI, "console", "--remote", server.url, *args],
        cwd=server.cwd,
        env={**ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_console_prints_an_address_that_lets_a_browser_in(server: Server) -> None:
    token_file = str(server.cwd / "token")
    done = _console(server, "--token-file", token_file)
    assert done.returncode == 0, done.stderr
    address = done.stdout.strip()
    assert address == f"http://127.0.0.1:{server.port}/?token={server.token}"
    status, headers, _ = _get(server, address.split(str(server.port), 1)[1], {})
    assert status == 303 and "Set-Cookie" in headers


def test_console_checks_the_token_and_the_server_first(server: Server, tmp_path: Path) -> None:
    done = _console(server, env={"MCPX_HOOKS_TOKEN": "not-the-token"})
    assert done.returncode == 1 and done.stdout == ""
    assert "mcpx-hooks console:" in done.stderr and "Traceback" not in done.stderr
    gone = subprocess.run(
        [
            *CLI,
            "console",
            "--remote",
            "ws://127.0.0.1:9",
            "--token-file",
            str(server.cwd / "token"),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert gone.returncode == 1 and gone.stdout == "" and "Traceback" not in gone.stderr
    bad = _console(server, "--remote", "http://x", "--token-file", str(server.cwd / "token"))
    assert bad.returncode == 2 and "ws://" in bad.stderr


def test_console_open_hands_the_address_to_the_browser(server: Server, tmp_path: Path) -> None:
    seen = tmp_path / "opened"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {seen}\n')
    browser.chmod(0o755)
    token_file = str(server.cwd / "token")
    done = _console(server, "--open", "--token-file", token_file, env={"BROWSER": str(browser)})
    assert done.returncode == 0, done.stderr
    assert seen.read_text() == done.stdout.strip()
