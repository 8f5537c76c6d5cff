"""What a tool server's life is once its MCP session is open, whatever carries it (a child's
pipes, `serverproc.py`; streamable HTTP, `remote.py`): `initialize` and `tools/list`, the
`onSuccess` hooks, serving until idle; and a failure in words."""

from __future__ import annotations

import logging
import math
import time
from typing import Final

import pydantic
import trio
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from ..core.points import Phase
from .listings import redacted_tool
from .mcpclient import ServerBroken, connection_closed, every_page, not_mcp
from .serverentry import ServerEntry, StartHooks, tool_json

logger = logging.getLogger("mcpx_hooks.mcp")

#: The least time between two listings of a server's tools as it says they changed: what it
#: says meanwhile waits, and is one listing at the end. A server that says so on every
#: listing (or floods the notification) costs one listing a second, not a loop of them, and
#: its clients are told at most that often.
RELIST_GAP_S: Final = 1.0


async def serve_session(
    start_hooks: StartHooks,
    entry: ServerEntry,
    session: ClientSession,
    start_scope: trio.CancelScope,
) -> str | None:
    """MCP `initialize` and `tools/list` on `session`, the `onSuccess` hooks, then serving
    uses until the server has been unused for `idleMs` (None), or why it was stopped. A
    connection closed during the start waits for the caller to end the life (its process's
    exit says why)."""
    spec = entry.spec
    try:
        init = await session.initialize()
        tools = await _listed(session)
        # What it said changed before it answered this start's listing (some servers say
        # their tools changed at `initialize`, or once told `initialized`) is in it.
        entry.relist, entry.lists_said, entry.lists_changed = trio.Event(), trio.Event(), set()
    except MCPError as exc:
        if not connection_closed(exc.error):
            raise
        await trio.sleep_forever()  # until the caller ends the life (`_cancel_when_gone`)
    start_scope.deadline = math.inf  # started: from now on idleMs rules
    entry.tools, entry.listed_at = _redacted(entry, tools), time.time()
    entry.forget_lists()  # (a new life lists its prompts and resources anew)
    info = init.server_info
    entry.info = entry.redactor.value({"name": info.name, "version": info.version})
    entry.capabilities = init.capabilities
    result = {**entry.info, "server": spec.name}
    result["tools"] = [tool_json(t) for t in entry.tools]
    refusal = await start_hooks(
        Phase.ON_SUCCESS, spec.name, entry.started_by, result={"value": result}
    )
    if refusal is not None:
        return f"server {spec.name} was stopped: its start was {refusal}"
    entry.session, entry.state, entry.since = session, "running", time.time()
    entry.retiring = trio.Event()
    entry.reason = ""
    entry.last_used = trio.current_time()
    entry.ready.set()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_relist, entry, session)
        nursery.start_soon(_tell_changed, entry)
        await _until_idle(entry)
        nursery.cancel_scope.cancel()
    entry.session, entry.state = None, "stopping"  # no new use may take it
    return None


async def _relist(entry: ServerEntry, session: ClientSession) -> None:
    """Lists the server's tools again each time it says they changed: its uses from then
    on see the new list (the MCP face holds it to the server's pin, `service/mcpface.py`).
    A listing that fails leaves the list as it was, and the log says so (not the server's
    words: they may hold what it was given as a secret). Listings are `RELIST_GAP_S` apart
    at least."""
    name = entry.spec.name
    while True:
        await entry.relist.wait()
        entry.relist = trio.Event()
        try:
            tools = await _listed(session)
        except MCPError as exc:
            if connection_closed(exc.error):
                return  # (its life is ending: its end says why)
            why = f"it answered the listing with the JSON-RPC error {exc.error.code}"
        except ServerBroken as exc:
            why = str(exc)
        except pydantic.ValidationError as exc:
            why = not_mcp(exc)
        else:
            why = ""
            entry.tools, entry.listed_at = _redacted(entry, tools), time.time()
            entry.poke()
            if entry.on_relisted is not None:
                entry.on_relisted("tools")
        if why:
            logger.warning(
                "server %s said its tools changed, but %s: they stay as listed", name, why
            )
        await trio.sleep(RELIST_GAP_S)


async def _tell_changed(entry: ServerEntry) -> None:
    """Tells the server's clients (`on_relisted`) that its prompts or its resources changed,
    as it said (`ServerEntry.notified`, which forgot their listings at once), at most once
    each `RELIST_GAP_S`: what it says meanwhile is told at the end of that gap."""
    while True:
        await entry.lists_said.wait()
        entry.lists_said = trio.Event()
        told, entry.lists_changed = entry.lists_changed, set()
        for kind in sorted(told):
            if entry.on_relisted is not None:
                entry.on_relisted(kind)
        await trio.sleep(RELIST_GAP_S)


async def _listed(session: ClientSession) -> tuple[types.Tool, ...]:
    """The server's tools, every page of their listing."""
    pages = await every_page("tools", lambda page: session.list_tools(params=page))
    return tuple(tool for page in pages for tool in page.tools)


def _redacted(entry: ServerEntry, tools: tuple[types.Tool, ...]) -> tuple[types.Tool, ...]:
    """`tools` with the server's secrets redacted from all but their names (by which they
    are called): a server that says what it was given in a description or a schema must not
    have it shown, nor pinned in the trust state."""
    if not entry.redactor.secrets:
        return tools
    return tuple(redacted_tool(tool, entry.redactor.value) for tool in tools)


async def _until_idle(entry: ServerEntry) -> None:
    """Returns once the server has had no use for `idleMs`, or none in flight once it is
    retired (`entry.retire`). A use does not wake this wait: the wait sleeps until the last
    use's end plus `idleMs` (or its retirement) and looks again then; only when a use is
    still going at that time does it wait for a use to end (`entry.poke`)."""
    idle = entry.spec.idle_ms / 1000
    while True:
        if entry.in_use:
            await entry.changed.wait()
        elif entry.retiring.is_set():
            return
        elif trio.current_time() < entry.last_used + idle:
            with trio.move_on_at(entry.last_used + idle):
                await entry.retiring.wait()
        else:
            return


def words(exc: BaseException) -> str:
    """The first real error inside `exc` (nurseries wrap them in groups), in words."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ServerBroken):
        return str(exc)
    if isinstance(exc, pydantic.ValidationError):  # (its listing, say: not pydantic's report)
        return not_mcp(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
