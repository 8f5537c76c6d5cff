"""`exec --explain` for the hooks of the tool points (`call`, `server.start`): which of the
configured servers and of their pinned tools their `when` matches, and, for a call named with
`--tool SERVER.TOOL`, whether each fires for it and why not. Pure: each server's pinned tool
names come from the `pinned` callable `explain.run` hands in (it reads the trust state).

A script's call has no MCP client, so a `call` hook with `when.client` never fires in a run
(it does for calls through `mcpx-hooks mcp`). A `server.start` hook fires only for a server
the config declares; a `call` hook fires for any call the script makes, to a server declared
or not (a call to one not declared then fails), so what its `when` matches is a note, not a
reason it will not run.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..core.hooks import Hook

#: At most this many matching tools are named in a note; the rest are counted.
_SHOWN_TOOLS = 12


def _shown(patterns: Sequence[str]) -> str:
    return ", ".join(f'"{p}"' for p in patterns)


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def _servers_of(hook: Hook, servers: Sequence[str]) -> list[str]:
    from ..core.when import tool_mismatch

    return [s for s in servers if tool_mismatch(_only_server(hook), s, None) is None]


def _only_server(hook: Hook) -> Mapping[str, Sequence[str]]:
    from ..core.points import When

    return {k: v for k, v in hook.when.items() if k == When.SERVER}


def parse_tool(text: str) -> tuple[str, str] | None:
    """`--tool SERVER.TOOL` as (server, tool), split as a script's call is; None when it is
    not of that shape."""
    from ..core.servers import split_tool

    server, tool = split_tool(text)
    return (server, tool) if server and tool else None


def why_not(hook: Hook, servers: Sequence[str], call: tuple[str, str] | None) -> str | None:
    """Why a `call` or `server.start` hook will not fire in a script run whose config declares
    `servers` (for the call `call` to `server.tool`, when one is given); None when it may."""
    from ..core.points import When
    from ..core.when import tool_mismatch

    if hook.on == "server.start":
        if call is not None and call[0] not in servers:
            return f'no tool server "{call[0]}" is configured, so a call to it starts none'
        if call is not None:
            return tool_mismatch(hook.when, call[0], None)
        if not servers:
            return "no tool server is configured, so none starts"
        if When.SERVER in hook.when and not _servers_of(hook, servers):
            return (
                f"when.server [{_shown(hook.when[When.SERVER])}] matches none of the"
                f" configured servers ({_names(servers)})"
            )
        return None
    if When.CLIENT in hook.when and call is None:
        return (
            f"when.client [{_shown(hook.when[When.CLIENT])}]: a script's call has no MCP"
            " client (it matches calls made through mcpx-hooks mcp)"
        )
    if call is not None:
        return tool_mismatch(hook.when, call[0], call[1], None)
    return None


def note(
    hook: Hook, servers: Sequence[str], pinned: Callable[[str], Sequence[str] | None]
) -> str | None:
    """For a tool point's hook that may fire: what its `when` matches of the configured
    servers and their pinned tools (None when it has no `when.server` or `when.tool`)."""
    from ..core.points import When

    server_patterns, tool_patterns = hook.when.get(When.SERVER), hook.when.get(When.TOOL)
    if server_patterns is None and (tool_patterns is None or hook.on != "call"):
        return None
    matched = _servers_of(hook, servers)
    parts = []
    if server_patterns is not None:
        if matched:
            parts.append(f"when.server [{_shown(server_patterns)}] matches {_names(matched)}")
        else:
            parts.append(
                f"when.server [{_shown(server_patterns)}] matches none of the configured"
                f" servers ({_names(servers)}): it fires only for a call to a server not"
                " declared, which fails"
            )
    if tool_patterns is not None and hook.on == "call" and matched:
        parts.append(_tools_note(hook, matched, pinned))
    elif tool_patterns is not None and hook.on == "call" and server_patterns is None:
        parts.append(f"when.tool [{_shown(tool_patterns)}]: no tool server is configured")
    return "; ".join(parts)


def _tools_note(
    hook: Hook, servers: Sequence[str], pinned: Callable[[str], Sequence[str] | None]
) -> str:
    from ..core.points import When
    from ..core.when import tool_mismatch

    patterns = hook.when[When.TOOL]
    tools: list[str] = []
    unpinned = []
    for server in servers:
        listed = pinned(server)
        if listed is None:
            unpinned.append(server)
            continue
        only_tool: dict[str, Sequence[str]] = {When.TOOL: patterns}
        tools += [f"{server}.{t}" for t in listed if tool_mismatch(only_tool, server, t) is None]
    said = f"when.tool [{_shown(patterns)}]"
    if len(unpinned) < len(servers):
        more = len(tools) - _SHOWN_TOOLS
        shown = ", ".join(tools[:_SHOWN_TOOLS]) + (f" and {more} more" if more > 0 else "")
        said += f" matches {shown or 'none'} of the pinned tools"
    if unpinned:
        said += (
            f"{',' if len(unpinned) < len(servers) else ':'} the tools of {_names(unpinned)}"
            " are not pinned, so not known here (mcpx-hooks servers list shows them)"
        )
    return said
