"""What a plain HTTP request (no WebSocket upgrade) gets on the service's port. Pure: no
trio, no socket; `server.py` writes the answer.

One table says which paths answer plain HTTP, each with whether it asks for the token. Today
that is `/healthz` alone (`{"ok": true, "version": …}`, no token; the Origin rule still
applies). A WebSocket endpoint asked without an upgrade gets 400 at once; any other path, 404
once the token and Origin are checked as for an upgrade; a method other than GET or HEAD, 405.
Every answer but the health one has the JSON error body of a refused upgrade.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

import attrs

from .access import Refusal, check_access
from .protocol import Request, error_body
from .targets import parse_target, query_token


@attrs.frozen
class Answer:
    """An HTTP answer: status, body, extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def _health() -> bytes:
    # The package root's version, as `--version` reads it (imported already: it is our root).
    version = str(importlib.import_module("mcpx_hooks").__version__)
    return json.dumps({"ok": True, "version": version}).encode()


@attrs.frozen
class Route:
    """A plain HTTP path: its body, and whether it asks for the token."""

    body: Callable[[], bytes]
    token: bool


#: The paths that answer plain HTTP. The run list, artifacts and the console join it later.
ROUTES: Final[dict[str, Route]] = {
    "/healthz": Route(_health, token=False),
}
#: The methods a plain request may use.
METHODS: Final = ("GET", "HEAD")


def answer(
    request: Request, *, token: str | None, origins: frozenset[str], stopping: bool
) -> Answer:
    """The answer to a plain request; the checks in the module docstring's order."""
    path = urlsplit(request.target).path
    if request.method not in METHODS:
        allow = ((b"Allow", ", ".join(METHODS).encode()),)
        return _error(405, f"method {request.method} is not allowed here (GET or HEAD)", allow)
    if parse_target(request.target) is not None:
        return _error(400, f"{path} is a WebSocket endpoint: it answers an upgrade only")
    if stopping:
        return _error(503, "the server is shutting down")
    route = ROUTES.get(path)
    refusal = check_access(
        request.headers,
        query_token(request.target),
        token=token if route is None or route.token else None,
        origins=origins,
    )
    if refusal is not None:
        return refused(refusal)
    if route is None:
        return _error(404, f"no such endpoint: {path}")
    return Answer(200, route.body())


def refused(refusal: Refusal) -> Answer:
    """A refusal as an HTTP answer (the same for a refused upgrade)."""
    return _error(refusal.status, refusal.message, refusal.headers)


def _error(status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Answer:
    return Answer(status, error_body(status, message), headers)
