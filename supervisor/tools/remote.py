"""A remote tool server's life (`[servers.x] url`): MCP's streamable HTTP with the official
SDK's client (`mcp.client.streamable_http`), to a server the supervisor does not run.

The same life as a server it runs (`serverlife.serve_session`): `initialize` and
`tools/list` within `startTimeoutMs`, the `server.start` hooks, serving until idle for
`idleMs`, then the session is closed (the SDK's `DELETE`). What it cannot reach, what
answers with an HTTP error, and a connection lost while serving end the life with a reason,
and the manager's backoff follows as for a crashed server.

The headers' `${secret:NAME}` are expanded here, from the secrets the server lists, and
only into the HTTP client's headers: a reason says the url, the HTTP status and the error's
kind, never a header, and every secret value is redacted from it besides.
"""

from __future__ import annotations

import os
from typing import Final

import attrs
import httpx2
import trio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from ..core.passenv import pass_environment
from ..core.records import Record
from ..core.redact import Redactor
from ..core.servers import expand_headers
from .mcpclient import CLIENT_INFO
from .serverentry import ServerEntry, StartHooks
from .serverlife import serve_session, words

#: Connecting (and each write) gives up after this long; a response stream may stay open
#: (a long call's progress) for `_READ_S`.
_CONNECT_S: Final = 10.0
_READ_S: Final = 300.0


@attrs.define(repr=False)
class _LastStatus(Record):
    """The last HTTP error status the server answered with (0: none)."""

    status: int = 0
    phrase: str = ""

    async def heard(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.status, self.phrase = response.status_code, response.reason_phrase

    def said(self) -> str:
        return f" (it answered HTTP {self.status} {self.phrase})" if self.status else ""


async def remote_life(start_hooks: StartHooks, entry: ServerEntry) -> str | None:
    """Serves the remote server until it is idle (None) or fails (the reason)."""
    spec = entry.spec
    assert spec.url is not None
    passed = pass_environment((), spec.secrets, os.environ)
    if passed.problem is not None:
        return f"server {spec.name}: {passed.problem}"
    redactor = Redactor(passed.secrets)
    last = _LastStatus()
    client = httpx2.AsyncClient(
        headers=expand_headers(spec.headers, passed.secrets),
        timeout=httpx2.Timeout(_CONNECT_S, read=_READ_S),
        event_hooks={"response": [last.heard]},
    )
    where = f"server {spec.name} ({spec.url})"
    why: str | None = None
    try:
        with trio.move_on_after(spec.start_timeout_ms / 1000) as start_scope:
            async with (
                client,
                streamable_http_client(spec.url, http_client=client) as (read, write),
                ClientSession(
                    read,
                    write,
                    client_info=CLIENT_INFO,
                    logging_callback=entry.heard,
                    message_handler=entry.notified,
                ) as session,
            ):
                why = await serve_session(start_hooks, entry, session, start_scope)
    except Exception as exc:  # the transport's and the SDK's: the server's failure, in words
        return redactor.text(f"{where} failed: {words(exc)}{last.said()}")
    if start_scope.cancelled_caught:
        return redactor.text(
            f"{where} did not answer MCP initialize within startTimeoutMs"
            f" ({spec.start_timeout_ms} ms){last.said()}"
        )
    return None if why is None else redactor.text(why)
