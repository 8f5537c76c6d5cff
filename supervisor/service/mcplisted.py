"""The gateway's listings (`tools/list`, `prompts/list`, `resources/list`,
`resources/templates/list`) as a client gets them: each item as its server wrote it
(`tools/listings.py`: its keys in its order, its numbers as written, a key of its own or of
a newer revision kept), with the gateway's own changes only: a tool's or a prompt's name
with its server's prefix, and the items `expose`, `hide` and a quarantine leave out. An item
of the gateway's own (`mcpx_exec`), or one its server's session read without keeping it, is
its model's fields."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import pydantic
import trio
from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from ..core.servers import ServerSpec, exposed_name
from ..tools.hearing import GONE
from ..tools.listings import as_listed, renamed
from ..tools.serverentry import ServerEntry, ServerFailing
from ..tools.servers import ServerManager
from .mcpwritten import keep_written, unread

_L = TypeVar("_L", bound=pydantic.BaseModel)
_I = TypeVar("_I")
#: How many of a server's tools not listed a warning names.
NAMED: Final = 5
#: How many tools' `expose` / `hide` verdicts a session keeps (then it forgets them all): a
#: server may list other names at each listing, once a second, for as long as it runs.
SHOWN_KEPT: Final = 4096
#: What a listing that names a cursor is answered (`refuse_cursors`).
NOT_OUR_CURSOR: Final = (
    "Invalid params: cursor: not one this server gave (its listings come whole, in one page:"
    " send none)"
)
_LISTINGS: Final = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list"}
)
#: What a client is sent when a kind of the servers' lists changed (`ServerManager.changes`):
#: the SDK's session's method.
_TOLD: Final = {
    "tools": "send_tool_list_changed",
    "prompts": "send_prompt_list_changed",
    "resources": "send_resource_list_changed",
}
#: How many tools' copies under their exposed names a session keeps (`add_tools`), then it
#: forgets them all.
RENAMES_KEPT: Final = 16384
#: Each listing's items: the key they are written under, and the SDK's model's field.
_ITEMS: Final = (
    ("tools", "tools"),
    ("prompts", "prompts"),
    ("resources", "resources"),
    ("resourceTemplates", "resource_templates"),
)


async def refuse_cursors(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """The SDK server's middleware that answers a listing that names a cursor with an error
    (-32602, as MCP asks of a cursor the server did not give): the gateway's listings come
    whole, in one page, so no cursor is one of its own, and one answered with the whole
    listing again would have a client that pages add it twice."""
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    if ctx.method in _LISTINGS and isinstance(params.get("cursor"), str):
        raise MCPError(code=types.INVALID_PARAMS, message=NOT_OUR_CURSOR)
    return await call_next(ctx)


async def tell_changed(manager: ServerManager, client: Callable[[], ServerSession | None]) -> None:
    """Tells the `client` (None: not yet initialized) which of its listings changed, each
    time a server's tools were listed again (as the server said they changed: the client
    lists them anew, and sees what its pin made of them) or a server said its prompts or
    its resources changed (their listings were forgotten: the client's next one asks the
    server)."""
    seen = dict(manager.changes)
    while True:
        await manager.relisted.wait()
        now = dict(manager.changes)
        changed = [kind for kind, count in now.items() if count != seen.get(kind)]
        seen, session = now, client()
        for kind in changed if session is not None else ():
            # (a client gone, or one its transport cannot reach now: it lists anew when it
            # next asks)
            with contextlib.suppress(*GONE, MCPError):
                await getattr(session, _TOLD[kind])()


async def open_each(
    manager: ServerManager | None, specs: Iterable[ServerSpec], run_id: str
) -> list[tuple[ServerSpec, ServerEntry | ServerFailing]]:
    """Each of the servers `specs` declares, in their order, running (started now if need
    be), or why it cannot be had. They are started all at once: a listing waits for the
    slowest start (a server that never answers its `initialize`: its `startTimeoutMs`), not
    for the sum of them; a server known to be failing is not waited for (its start after
    its backoff goes on in the background: `ServerManager.open`)."""
    specs = list(specs)
    opened: list[ServerEntry | ServerFailing] = [ServerFailing("not started")] * len(specs)

    async def open_one(at: int, spec: ServerSpec) -> None:
        assert manager is not None
        try:
            opened[at] = await manager.open(spec, run_id=run_id, listing=True)
        except ServerFailing as exc:
            opened[at] = exc

    async with trio.open_nursery() as nursery:
        for at, spec in enumerate(specs):
            nursery.start_soon(open_one, at, spec)
    return list(zip(specs, opened, strict=True))


def keep_listed(result: _L) -> _L:
    """`result`, the gateway's answer to a listing, kept for the client as it is sent
    (`mcpwritten.answer_as_written`): each item as its server wrote it. Returns what the
    handler returns: where it was kept, the least listing (`unread`), which the SDK checks
    and dumps in place of the whole."""
    for key, field in _ITEMS:
        items = getattr(result, field, None)
        if isinstance(items, list):
            rest = result.model_dump(
                by_alias=True, mode="json", exclude_unset=True, exclude_none=True, exclude={field}
            )
            if keep_written({**rest, key: [as_listed(item) for item in items]}):
                return unread(result)
            break
    return result


def add_tools(
    listed: dict[str, types.Tool],
    spec: ServerSpec,
    tools: Iterable[types.Tool],
    shows: Callable[[ServerSpec, str], bool],
    separator: str,
    *,
    renames: dict[tuple[str, str], tuple[types.Tool, types.Tool]] | None = None,
) -> tuple[list[str], str | None]:
    """Adds the `tools` of the server `spec` that `shows` shows to `listed`, each by its
    exposed name (its copy so named kept in `renames`, by server and tool, for as long as
    the server lists that very tool: a listing of 900 tools made 900 copies each time);
    returns the names added, and what to say of those left out for their name (None:
    none): a tool without a name (it cannot be called), one whose exposed name a tool
    listed before it has (the server listed two of that name, or another server's tool is
    named so: the first is listed, and called)."""
    names: list[str] = []
    nameless, taken = 0, []
    for tool in tools:
        if not shows(spec, tool.name):
            continue
        name = exposed_name(spec.name, tool.name, separator)
        if not tool.name:
            nameless += 1
        elif name in listed:
            taken.append(name)
        else:
            kept = renames.get((spec.name, tool.name)) if renames is not None else None
            if kept is None or kept[0] is not tool:
                kept = (tool, renamed(tool, name))
                if renames is not None:
                    if len(renames) >= RENAMES_KEPT:  # (a server renaming its tools at will)
                        renames.clear()
                    renames[spec.name, tool.name] = kept
            listed[name] = kept[1]
            names.append(name)
    said = []
    if nameless:
        said.append(f"{nameless} without a name (no call could name it)")
    if taken:
        more = f" and {len(taken) - NAMED} more" if len(taken) > NAMED else ""
        shown = ", ".join(repr(n) for n in taken[:NAMED])
        said.append(
            f"{len(taken)} named as a tool listed before ({shown}{more}): the first of each"
            " name is listed, and called"
        )
    if not said:
        return names, None
    return names, f"some tools of server {spec.name} are not listed: {'; '.join(said)}"


def first_of_each(
    items: Iterable[_I], key: Callable[[_I], str], seen: set[str]
) -> tuple[list[_I], list[str]]:
    """The `items` whose `key` (a prompt's exposed name, a resource's URI, a template's URI
    template) is not in `seen`, the first of each, each key added to `seen`; and the keys
    of those left out (listed before, by this server or one before it)."""
    kept: list[_I] = []
    taken: list[str] = []
    for item in items:
        name = key(item)
        if name in seen:
            taken.append(name)
        else:
            seen.add(name)
            kept.append(item)
    return kept, taken


def left_out_twice(what: str, server: str, by: str, taken: list[str]) -> str:
    """What to say of a server's `what` (prompts, resources, resource templates) left out
    for a `by` (name, URI, URI template) listed before: the first of each is listed, and
    the one a request for it reaches."""
    names = list(dict.fromkeys(taken))
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    shown = ", ".join(repr(n) for n in names[:NAMED])
    return (
        f"some {what} of server {server} are not listed: {len(taken)} with a {by} listed"
        f" before ({shown}{more}): the first of each {by} is listed, and asked"
    )
