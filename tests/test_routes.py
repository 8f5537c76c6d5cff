"""What a plain HTTP request gets, without a socket: health without a token, the rest behind
the token and Origin checks of an upgrade, a WebSocket endpoint 400, another method 405."""

from __future__ import annotations

import json

import pytest

import mcpx_hooks
from mcpx_hooks.supervisor.service.protocolevents import Request
from mcpx_hooks.supervisor.service.routes import ROUTES, Answer, Later, answer

OWN = frozenset({"http://127.0.0.1:8765"})


def _answer(
    target: str,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    *,
    method: str = "GET",
    stopping: bool = False,
) -> Answer:
    request = Request(method, target, ((b"host", b"x"), *headers), websocket=False)
    return answer(request, token="t0k", origins=OWN, stopping=stopping)


def _message(got: Answer) -> str:
    body = json.loads(got.body)
    assert body["type"] == "error" and body["code"] == got.status
    return str(body["message"])


def test_health_needs_no_token_and_says_the_version() -> None:
    for method in ("GET", "HEAD"):
        got = _answer("/healthz", method=method)
        assert got.status == 200
        assert json.loads(got.body) == {"ok": True, "version": mcpx_hooks.__version__}
    assert _answer("/healthz?x=1", ((b"origin", b"http://127.0.0.1:8765"),)).status == 200


def test_health_keeps_the_origin_rules() -> None:
    assert _answer("/healthz", ((b"origin", b"http://evil.example"),)).status == 403
    twice = ((b"origin", b"http://127.0.0.1:8765"), (b"origin", b"http://127.0.0.1:8765"))
    assert _answer("/healthz", twice).status == 400


@pytest.mark.parametrize("target", ["/v1/exec", "/v1/hooks", "/v1/events?since=1", "/v1/runs/r1"])
def test_a_websocket_endpoint_without_an_upgrade_is_400_before_the_token(target: str) -> None:
    got = _answer(target)
    assert got.status == 400 and "WebSocket endpoint" in _message(got)


def test_another_path_is_404_once_the_token_is_checked() -> None:
    assert _answer("/v1/nope").status == 401
    assert _answer("/v1/nope", ((b"authorization", b"Bearer nope"),)).status == 401
    got = _answer("/v1/nope", ((b"authorization", b"Bearer t0k"),))
    assert got.status == 404 and _message(got) == "no such endpoint"  # (the path not echoed)
    echoed = _answer("/v1/<script>alert(1)</script>", ((b"authorization", b"Bearer t0k"),))
    assert echoed.status == 404 and b"script" not in echoed.body
    assert _answer("/?token=t0k").status == 303  # the console's way in (test_console_pages)
    foreign = ((b"authorization", b"Bearer t0k"), (b"origin", b"http://evil.example"))
    assert _answer("/x", foreign).status == 403


def test_a_401_says_how_to_authenticate() -> None:
    got = _answer("/nope")
    assert got.status == 401 and (b"WWW-Authenticate", b'Bearer realm="mcpx-hooks"') in got.headers


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS"])
def test_a_method_other_than_get_is_405_with_allow(method: str) -> None:
    for target in ("/healthz", "/v1/exec", "/nope"):
        got = _answer(target, method=method)
        assert got.status == 405 and got.headers == ((b"Allow", b"GET, HEAD"),)


def test_a_server_shutting_down_answers_503() -> None:
    assert _answer("/healthz", stopping=True).status == 503


def test_every_route_that_needs_no_token_is_named_here() -> None:
    # The console's page holds no data, and its files are the package's (test_console_pages).
    untokened = {path for path, route in ROUTES.items() if not route.token}
    assert untokened == {"/healthz", "/", "/console/{file}"}


#: (target, what the 400 says)
_UNTAKEN = [
    ("/v1/search?qq=word", "'qq' (/v1/search takes limit, q, run, token)"),
    ("/v1/search?q=word&limt=5", "'limt' (/v1/search takes limit, q, run, token)"),
    ("/v1/runs?limit=5", "'limit' (/v1/runs takes token)"),
    ("/v1/runs/r1/output.txt?from=3", "'from' (/v1/runs/r1/output.txt takes token)"),
    ("/v1/runs/r1/artifacts/a1?x=&y=", "'x', 'y' (/v1/runs/r1/artifacts/a1 takes token)"),
]


@pytest.mark.parametrize(
    ("target", "said"),
    [(t, f"unknown query parameter {said}") for t, said in _UNTAKEN]
    + [("/v1/search?q=a&q=b", "query parameter 'q' given 2 times")],
)
def test_a_v1_path_refuses_a_query_parameter_it_does_not_take_naming_it(
    target: str, said: str
) -> None:
    got = _answer(target, ((b"authorization", b"Bearer t0k"),))
    assert got.status == 400 and _message(got) == said
    assert _answer(target).status == 401  # (the token first, as for any path)


def test_the_token_in_the_query_is_taken_by_every_v1_path() -> None:
    assert _answer("/v1/runs?token=t0k").status == 200
    searched = _answer("/v1/search?token=t0k&q=word&run=r1&limit=3")
    assert isinstance(searched, Later)  # (made in a worker thread: not refused)
