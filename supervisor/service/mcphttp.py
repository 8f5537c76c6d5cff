"""`/mcp` on the service's port: MCP's streamable HTTP transport, for MCP clients that reach
the supervisor over the network rather than start `mcpx-hooks mcp` themselves.

The request is admitted as every request of the port is (a method other than GET, POST and
DELETE: 405 with `Allow`; `access.check_access`: the bearer token unless `--no-auth`, the
Origin rule, 401 / 403 otherwise; 503 once the server is stopping), then answered by the
MCP SDK's transport through the small ASGI bridge (`asgi.py`), its body bounded by the
port's message cap (413 past it). The sessions themselves are `mcpweb.Sessions`: each one a
`Gateway` as over stdio.

Each refusal of ours there (the token, the Origin, the body's size, the server stopping) has
a JSON-RPC error with a null `id` as its body, as the transport's own refusals do: MCP's SDK
clients read that body, and say its message (the Python SDK says only "Server returned an
error response" of any other, so a client without the token would not be told so).

The MCP SDK weighs about a second of imports (0.7 s here), which the first request to `/mcp`
waited for (0.8 s against 4 ms for the next ones): when the config declares a tool server, it
is imported in a worker thread as soon as the port listens (`preload`, which the service
starts then), so neither `serve`'s start line nor any other client waits while it loads, and
an agent's first call finds it loaded (a request that comes sooner waits only for the rest of
it). Without a tool server, it is loaded at the first `/mcp` request (docs/internals/
service.md says why). A stop does not wait for a load under way. The sessions' tasks run in
`serve`'s nursery; `close` ends them all (each run gets its `result` and `end`) before the
runtime under them closes.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
from typing import TYPE_CHECKING, Final

import trio

from ..core.errors import bug_summary
from .access import Refusal, check_access, header
from .asgi import LINGER_BYTES, respond_unread, serve_asgi
from .connection import ServerConnection
from .protocolevents import Request
from .targets import query_tokens

if TYPE_CHECKING:
    from ..run.runtime import Runtime
    from .mcpexec import RunSlots
    from .mcpweb import Sessions

logger = logging.getLogger("mcpx_hooks.server")

#: The path of the transport.
MCP_PATH: Final = "/mcp"
#: The methods the transport takes; any other is 405, before the token is looked at (as on
#: the port's other paths).
MCP_METHODS: Final = ("GET", "POST", "DELETE")
#: A session without a request in flight for this long has lost its client: it is ended.
IDLE_S: Final = 30 * 60.0
#: Sessions open at once; past it a new one takes the place of the one idle longest, or is
#: refused (503) when each has a request in flight.
MAX_SESSIONS: Final = 256
#: The JSON-RPC codes of those refusals, MCP's (`mcp_types`, not imported here: the SDK is
#: loaded later): a request refused for what it is, or one the server could not take now.
INVALID_REQUEST: Final = -32600
INTERNAL_ERROR: Final = -32603


def refusal_body(status: int, message: str) -> bytes:
    """A refusal of `/mcp` (HTTP `status`) as a JSON-RPC error tied to no request."""
    code = INTERNAL_ERROR if status >= 500 else INVALID_REQUEST
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return json.dumps(error, separators=(",", ":")).encode()


class McpHttp:
    """`/mcp` of one service: its sessions, loaded and started at their first request."""

    def __init__(
        self,
        runtime: Runtime,
        served_from: str,
        slots: RunSlots | None = None,
        *,
        max_body: int,
        body_s: float,
        idle_s: float = IDLE_S,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.runtime = runtime
        self.served_from = served_from
        self.slots = slots
        self.max_body = max_body
        self.body_s = body_s
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        self.sessions: Sessions | None = None
        self._nursery: trio.Nursery | None = None
        self._loading = trio.Lock()
        #: The load under way: `close` cancels it, its import left to finish in its thread.
        self._load_scope: trio.CancelScope | None = None
        self._closed = trio.Event()
        #: Set once the SDK is loaded and the sessions are set up.
        self.loaded = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Owns the sessions' tasks until `close` has ended them all, or until cancelled
        (each session's run is closed then too)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._closed.wait()

    async def preload(self) -> None:
        """Loads the SDK and sets the sessions up now, in a worker thread, rather than at
        the first request (started once the port listens). A load that fails (no file
        descriptor left, the server stopping first) is tried again at the first request,
        which answers for it; here it is only logged at debug level."""
        try:
            await self._load()
        except Exception as exc:
            logger.debug("MCP over HTTP not loaded ahead: %s", bug_summary(exc))

    async def freeze_once_loaded(self) -> None:
        """For `serve` alone: what the SDK's load allocated (~45 MB) lives as long as the
        process, as what its start allocated, which `serve` froze once listening; it is moved
        out of the collector's walks too (`gc.freeze`). Walked, it made each full collection
        80-160 ms, the GIL held, whichever thread ran it (5,000 per-call hooks being admitted:
        GET /healthz waited up to 150 ms)."""
        await self.loaded.wait()
        gc.freeze()

    async def answer(
        self,
        conn: ServerConnection,
        request: Request,
        *,
        token: str | None,
        origins: frozenset[str],
        stopping: bool,
        server: tuple[str, int] | None = None,
        names: frozenset[str] | None = None,
    ) -> None:
        """Answers one request to `/mcp`; the caller ends the connection afterwards."""
        allowed = ", ".join(MCP_METHODS)
        refusal = (
            Refusal(
                405,
                f"method {request.method} is not allowed on {MCP_PATH} ({allowed})",
                ((b"Allow", allowed.encode()),),
            )
            if request.method not in MCP_METHODS
            else check_access(
                request.headers,
                query_tokens(request.target),
                token=token,
                origins=origins,
                names=names,
            )
        )
        if refusal is None and (stopping or self._nursery is None):
            refusal = Refusal(503, "the server is shutting down")
        if refusal is not None:
            body = refusal_body(refusal.status, refusal.message)
            declared = header(request.headers, b"content-length")
            rest = int(declared) if declared is not None else LINGER_BYTES
            await respond_unread(conn, refusal.status, body, refusal.headers, rest=rest)
            return
        sessions = await self._load()
        await serve_asgi(
            conn,
            request,
            sessions.app,
            max_body=self.max_body,
            body_s=self.body_s,
            server=server,
            body_of=refusal_body,
        )

    async def _load(self) -> Sessions:
        async with self._loading:
            if self._closed.is_set():
                raise trio.ClosedResourceError("the server is shutting down")
            if self.sessions is None:
                assert self._nursery is not None
                name = f"{__package__}.mcpweb"
                self._load_scope = trio.CancelScope()
                with self._load_scope:
                    web = await trio.to_thread.run_sync(
                        importlib.import_module, name, abandon_on_cancel=True
                    )
                if self._load_scope.cancelled_caught:  # (`close`: the server is stopping)
                    raise trio.ClosedResourceError("the server is shutting down")
                self.sessions = web.Sessions(
                    self.runtime,
                    self.served_from,
                    self._nursery,
                    slots=self.slots,
                    idle_s=self.idle_s,
                    max_sessions=self.max_sessions,
                )
                self.loaded.set()
        assert self.sessions is not None
        return self.sessions

    async def close(self) -> None:
        """Ends every session, each run with its `result` and `end`; no new one opens. A
        load under way is not waited for (its import goes on in its thread, unheard)."""
        if self._load_scope is not None:
            self._load_scope.cancel()
        async with self._loading:  # (the load under way has let go of it)
            self._closed.set()
            if self.sessions is not None:
                await self.sessions.close()
