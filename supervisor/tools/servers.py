"""The tool servers of one supervisor: started on first use, shared by every run, stopped
when idle, restarted with backoff after a failure.

`open_manager` owns a nursery with one task per running server (`serverproc.py`); leaving
it stops them all, each tree killed and reaped. A use (`ServerManager.call`) never hangs on
a server: while it starts it is bounded by `startTimeoutMs`; a server that failed refuses
its uses at once with the reason until its backoff (1, 2, 4 … 30 s) has passed, and the
next use after that starts it again (a listing, `open(listing=True)`, does not wait for that
start, and its clients are told when it has started); a call is bounded by its caller's
scope, and a call cut short is cancelled on the server (`notifications/cancelled`, sent by
the MCP SDK).

The `server.start` hooks are not run here: the manager is given them (`StartHooks`), so this
room never imports the one that runs hooks (`run/serverhooks.py` gives them).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

import attrs
import trio

from ..core.records import Record
from ..core.servers import ServerSpec, undeclared
from ..process.spawner import Spawner
from .hearing import Progress
from .serverentry import (
    AnswerTooLarge,
    LogHearer,
    ServerEntry,
    ServerFailing,
    StartHooks,
    ToolFailed,
    entry_json,
    where_json,
)

if TYPE_CHECKING:  # the MCP SDK is imported when a server starts (`serverproc.py`), not before
    from mcp import types
    from mcp.client.session import ClientSession

#: The kinds of a server's lists its clients are told changed (`ServerManager.changes`).
LISTS_TOLD: Final = ("tools", "prompts", "resources")
#: What a listing says of a server known to be failing whose start goes on meanwhile.
RETRYING: Final = (
    "starting again in the background: listed once it has started, and the clients told"
    " their lists changed"
)
#: How long a use whose connection closed under it waits for the server's own reason.
_REASON_WAIT_S: Final = 5.0


class ServerManager:
    """The servers of one supervisor, by spec (a changed declaration is another server)."""

    def __init__(self, nursery: trio.Nursery, spawner: Spawner, start_hooks: StartHooks):
        self._nursery = nursery
        self.spawner = spawner
        #: The `server.start` hooks each start runs (the supervisor's config's).
        self.start_hooks = start_hooks
        self.entries: dict[ServerSpec, ServerEntry] = {}
        #: Set (then made anew) each time a running server's tools were listed again, as it
        #: said they changed, or it said its prompts or its resources changed: the MCP face
        #: tells its clients so (which, `changes` says).
        self.relisted = trio.Event()
        #: How many times each kind of the servers' lists changed (`tools`, `prompts`,
        #: `resources`).
        self.changes: dict[str, int] = dict.fromkeys(LISTS_TOLD, 0)

    def _relisted(self, kind: str) -> None:
        self.changes[kind] = self.changes.get(kind, 0) + 1
        self.relisted.set()
        self.relisted = trio.Event()

    def view(self, specs: Mapping[str, ServerSpec]) -> ToolServers:
        """What a run whose config declares `specs` reaches these servers through."""
        return ToolServers(self, specs)

    async def open(
        self, spec: ServerSpec, *, run_id: str | None = None, listing: bool = False
    ) -> ServerEntry:
        """The server, running: started now if it is not (bounded by `startTimeoutMs`).
        Raises `ServerFailing` with the reason when it cannot be had. For a `listing`, a
        server known to be failing is not waited for: its start after its backoff goes on in
        the background (`RETRYING`), and once it has started, its clients are told its lists
        changed."""
        entry = self.entries.get(spec)
        if entry is None:
            entry = self.entries[spec] = ServerEntry(spec, on_relisted=self._relisted)
        if entry.state == "failing" and trio.current_time() < entry.retry_at:
            wait = entry.retry_at - trio.current_time()
            entry.left_out |= listing
            raise ServerFailing(f"{entry.reason} (next start in {wait:.1f} s)")
        if entry.state == "stopping":  # idle, on its way down: the next life starts after
            await entry.ended.wait()
        if entry.state in ("idle", "failing"):
            from .serverproc import serve_server  # it loads the MCP SDK: at the first start

            entry.retrying = entry.state == "failing"
            entry.state, entry.ready, entry.ended = "starting", trio.Event(), trio.Event()
            entry.started_by = run_id
            self._nursery.start_soon(serve_server, self.spawner, self.start_hooks, entry)
            if entry.retrying:
                self._nursery.start_soon(self._back, entry)
        if listing and entry.retrying and not entry.ready.is_set():
            entry.left_out = True
            raise ServerFailing(f"{entry.reason} ({RETRYING})")
        if not entry.ready.is_set():  # (a wait on a set event would be a scheduler pass)
            await entry.ready.wait()
        if entry.session is None:  # it failed to start, or is going down: its end says why
            with trio.move_on_after(_REASON_WAIT_S):
                await entry.ended.wait()
            raise ServerFailing(entry.reason or f"server {spec.name} stopped")
        return entry

    async def _back(self, entry: ServerEntry) -> None:
        """Once `entry`'s start after a failure has ended: when it started, and a listing
        left it out meanwhile, its clients are told their lists changed (they list anew)."""
        await entry.ready.wait()
        entry.retrying = False
        if entry.session is None or not entry.left_out:
            return
        entry.left_out = False
        capabilities = entry.capabilities
        for kind in LISTS_TOLD:
            if kind == "tools" or getattr(capabilities, kind, None) is not None:
                self._relisted(kind)

    async def call(
        self,
        spec: ServerSpec,
        tool: str,
        args: Mapping[str, Any],
        *,
        run_id: str | None = None,
        progress: Progress | None = None,
        log: LogHearer | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> tuple[types.CallToolResult, ServerEntry]:
        """Calls `tool` with `args` on the server (started if need be). The caller's scope
        bounds it; cancelled, the SDK tells the server (`notifications/cancelled`). The
        server's progress notifications for the call go to `progress` (then the call asks
        for them), and its log messages while the call is in flight to `log`; `meta` goes
        in the request's `_meta` (beside the progress token). Raises `ServerFailing` or
        `ToolFailed`."""
        entry = await self.open(spec, run_id=run_id)
        from mcp.shared.exceptions import MCPError  # loaded by the server's start already

        from .mcpclient import connection_closed

        session = entry.session
        assert session is not None
        if entry.tool(tool) is None:
            listed = ", ".join(t.name for t in entry.tools) or "none"
            raise ToolFailed(f"server {spec.name} lists no tool {tool!r} (its tools: {listed})")
        entry.in_use += 1
        entry.poke()
        if log is not None:
            entry.log_hearers.append(log)
        try:
            result = await _call_tool(entry, session, tool, dict(args), progress, meta=meta)
        except ToolFailed:
            raise
        except MCPError as exc:
            if not connection_closed(exc.error):
                raise answered(entry, tool, exc.error) from None
            raise ServerFailing(await gone_reason(entry, exc.error.message)) from None
        except Exception as exc:  # the SDK's checks of the answer (its shape, outputSchema)
            raise ToolFailed(not_a_result(entry, tool, exc)) from None
        finally:
            if log is not None:
                entry.log_hearers.remove(log)
            done_using(entry)
        entry.failures = 0  # it served: a later failure starts the backoff again
        if not strict_json(result.structured_content):
            raise ToolFailed(f"server {spec.name} answered {tool} with NaN or Infinity")
        return result, entry

    @contextlib.asynccontextmanager
    async def open_session(
        self, spec: ServerSpec, *, run_id: str | None = None, listing: bool = False
    ) -> AsyncIterator[tuple[ClientSession, ServerEntry]]:
        """The server's MCP session (started if need be), for a request other than a tool
        call (its prompts, its resources; a `listing`, as `open` has it): a use, so the
        server is not stopped as idle while the block runs. The caller's scope bounds it;
        what the server answers with an error raises the SDK's `MCPError`. Raises
        `ServerFailing`."""
        entry = await self.open(spec, run_id=run_id, listing=listing)
        session = entry.session
        assert session is not None
        entry.in_use += 1
        entry.poke()
        try:
            yield session, entry
        finally:
            done_using(entry)

    def status(self) -> list[dict[str, Any]]:
        """Each server's state, as `servers list --json` shows it."""
        return [entry_json(e) for e in self.entries.values()]

    def states(self, specs: Iterable[ServerSpec]) -> list[dict[str, Any]]:
        """The state of each of `specs` (idle when never started), with its command."""
        return [
            {**entry_json(self.entries.get(s) or ServerEntry(s)), **where_json(s)} for s in specs
        ]


@attrs.frozen(repr=False, eq=False)
class ToolServers(Record):
    """What a run's hooks and calls reach servers through: the supervisor's manager, and
    the servers the run's config declares by name."""

    manager: ServerManager
    specs: Mapping[str, ServerSpec]

    def spec(self, server: str) -> ServerSpec:
        """The server named `server`; raises `ServerFailing` when none is declared."""
        spec = self.specs.get(server)
        if spec is None:
            raise ServerFailing(undeclared(server, self.specs))
        return spec


async def _call_tool(
    entry: ServerEntry,
    session: ClientSession,
    tool: str,
    args: dict[str, Any],
    progress: Progress | None,
    *,
    meta: Mapping[str, Any] | None,
) -> types.CallToolResult:
    """The call, on the server's `RawChannel` when it has one and the session speaks a
    revision of the handshake era: written and read as the SDK's client would, without its
    request's machinery (a task, a stream, a span); else through the SDK's client. Raises
    what the SDK's client raises for the same answer (`MCPError`, a check's error), but
    `ToolFailed` (`answered`) for a JSON-RPC error read on the pipe: the server's own,
    whatever its code."""
    from mcp import types
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    channel = entry.raw
    sdk_meta = cast("types.RequestParamsMeta", dict(meta)) if meta else None
    if channel is None or session.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return await session.call_tool(tool, args, progress_callback=progress, meta=sdk_meta)
    try:
        answer = await channel.call_tool(tool, args, progress, meta)
    except ValueError:  # not strict JSON in UTF-8: the SDK's client says what it says of it
        return await session.call_tool(tool, args, progress_callback=progress, meta=sdk_meta)
    if answer is None:
        from .mcpclient import CLOSED

        raise MCPError(code=types.CONNECTION_CLOSED, message=CLOSED)
    if isinstance(answer, types.JSONRPCError):  # the server's own answer, whatever its code
        raise answered(entry, tool, answer.error)
    from .wireresult import WrittenResult

    result = WrittenResult.read(answer.result)
    if not result.is_error:
        await session.validate_tool_result(tool, result)
    return result


def done_using(entry: ServerEntry) -> None:
    """A use of `entry` ended (the idle wait counts from now)."""
    entry.in_use -= 1
    entry.last_used = trio.current_time()
    entry.poke()


def answered(entry: ServerEntry, tool: str, error: types.ErrorData) -> ToolFailed:
    """What a call fails with when the server answered it with the JSON-RPC `error` (or
    its answer was too large to read: `AnswerTooLarge`)."""
    from .mcpclient import is_too_large

    why = error_answer(entry, tool, error.code, error.message)
    return AnswerTooLarge(why) if is_too_large(error.code, error.message) else ToolFailed(why)


def error_answer(entry: ServerEntry, tool: str, code: int, message: str) -> str:
    """What a call of `tool` fails with when the server answered it with a JSON-RPC error
    (or its answer was too large to read: `mcpclient.too_large`). The message is ours, the
    server's words in it: its secrets are redacted from them (a tool result's own text is
    the server's, and goes as it wrote it)."""
    from .mcpclient import is_too_large

    said = entry.redactor.text(message)
    if is_too_large(code, message):
        return f"server {entry.spec.name}: {said}"
    return f"server {entry.spec.name} answered {tool} with an error: {said}"


def not_a_result(entry: ServerEntry, tool: str, exc: Exception) -> str:
    """What a call fails with when the answer is not a tool result (its shape, its schema:
    a schema's complaint may quote the value, redacted as `error_answer` redacts)."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    said = entry.redactor.text(first)
    return f"server {entry.spec.name} answered {tool} with what is not a tool result: {said}"


def strict_json(value: Any) -> bool:
    """Whether `value` is JSON strictly (no NaN, no Infinity): what goes on as a value."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


async def gone_reason(entry: ServerEntry, fallback: str) -> str:
    """Why a use of `entry` ended with its connection: the life's own reason once it has
    ended (waited for at most `_REASON_WAIT_S`), else `fallback`."""
    with trio.move_on_after(_REASON_WAIT_S):
        await entry.ended.wait()
    return entry.reason or fallback


@contextlib.asynccontextmanager
async def open_manager(spawner: Spawner, start_hooks: StartHooks) -> AsyncIterator[ServerManager]:
    """A manager whose servers all stop (trees killed and reaped) when the block is left."""
    async with trio.open_nursery() as nursery:
        manager = ServerManager(nursery, spawner, start_hooks)
        try:
            yield manager
        finally:
            nursery.cancel_scope.cancel()
