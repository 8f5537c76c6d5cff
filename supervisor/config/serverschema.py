"""The schema of `[servers.<name>]`, from the server settings table (`core/servers.py`)."""

from __future__ import annotations

from typing import Any, Final

from ..core.hooks import DEFAULT_SEPARATOR, Profile
from ..core.servers import CALL_LIMIT_KEYS, PIN_MODES, SEPARATOR_PATTERN, SERVER_SETTINGS
from ..core.spawntext import ENV_NAME_PATTERN
from .childschema import network_schema, pass_keys
from .schemaparts import argv, enum_of, integer, string, strings, table, text

#: What a remote server's `url` looks like (loopback for `http://` is a rule of its own).
URL_PATTERN: Final = r"^https?://[^\s]+$"
#: A server's name: the part of `plugin = "server.tool"` before the dot.
SERVER_NAME_PATTERN: Final = r"^[A-Za-z0-9_-]+$"


def servers_schema() -> dict[str, Any]:
    """`[servers]`: a table of tool servers by name (`passEnv`, `secrets` and `network` as
    hooks have them)."""
    settings: dict[str, Any] = {}
    for s in SERVER_SETTINGS:
        meaning = f"{s.meaning} (default {s.default})."
        if s.key == "sandbox":
            settings[s.key] = enum_of(tuple(p.value for p in Profile), meaning)
        else:
            settings[s.key] = integer(s.minimum or 0, meaning)
    limits = {
        key: integer(
            1,
            f"At most this many {what} from MCP clients of `mcpx-hooks mcp` (default no"
            " limit); past it a call is answered at once with `isError` and the limit.",
        )
        for key, _, what in CALL_LIMIT_KEYS
    }
    server = table(
        {
            "command": argv(
                "The server's argv (MCP over stdio), never a shell string; `npx` and `uvx`"
                " fetch their package once into a cache, then run offline. Not with `url`."
            ),
            "url": string(
                "A remote server the supervisor does not run, spoken to with MCP's streamable"
                " HTTP: `https://…`, or `http://` to a loopback host. Not with `command`.",
                pattern=URL_PATTERN,
            ),
            "headers": {
                "type": "object",
                "additionalProperties": string(
                    "The header's value; `${secret:NAME}` stands for the secret NAME, which"
                    " the server's `secrets` must list."
                ),
                "description": "HTTP headers sent to a remote server (`url`) with every request.",
            },
            "install": argv(
                "The argv that fetches the server's package into its cache, with network,"
                " before its first start (default: the one `npx` or `uvx` implies)."
            ),
            "cwd": text("Working directory, relative to the declaring directory."),
            "network": network_schema("the server"),
            "env": {
                "type": "object",
                "propertyNames": {"pattern": ENV_NAME_PATTERN},
                "additionalProperties": text("The variable's value, a literal string."),
                "description": "Variables added to the server's scrubbed environment.",
            },
            **pass_keys("the server", hosts=True),
            **settings,
            "expose": strings(
                "The tools an MCP client of `mcpx-hooks mcp` sees: glob patterns matched"
                " against the tool's own name and against `server.tool` (default all).",
            ),
            "hide": strings(
                "Tools an MCP client of `mcpx-hooks mcp` never sees, even when `expose` matches"
                " them (the same globs); a call to one is a call to an unknown tool.",
            ),
            "pin": enum_of(
                PIN_MODES,
                "How its tool list is held to the one pinned in the trust state (`mcpx-hooks"
                " trust --servers`): `first-use` (default) pins a server never pinned at its"
                " first use by `mcpx-hooks mcp`, with a warning; `require` refuses it instead;"
                " `off` pins nothing. A server whose tools differ from its pin is quarantined.",
            ),
            **limits,
            "tools": {
                "type": "object",
                "description": "Limits of single tools, by their own name, besides the"
                " server's (which count all its tools together).",
                "additionalProperties": table(dict(limits), "One tool's limits."),
            },
        },
        "A tool server the supervisor starts on first use, sandboxed like a hook, or a remote"
        " one by `url`.",
    )
    return {
        "type": "object",
        "description": 'MCP tool servers over stdio, by name (`plugin = "name.tool"`).',
        "propertyNames": {"pattern": SERVER_NAME_PATTERN},
        "additionalProperties": server,
    }


def mcp_schema() -> dict[str, Any]:
    """`[mcp]`: how `mcpx-hooks mcp` shows the tool servers' tools to MCP clients."""
    return table(
        {
            "separator": string(
                "What joins a server's name and its tool's in the names MCP clients see"
                f" (`<server>{DEFAULT_SEPARATOR}<tool>`; default `{DEFAULT_SEPARATOR}`): letters,"
                " digits, `_`, `-` or `.`. Hooks always name a tool `server.tool`.",
                pattern=SEPARATOR_PATTERN,
            ),
            "exec": {
                "type": "boolean",
                "description": "Whether MCP clients get the `mcpx_exec` tool, which runs a"
                " script with its hooks as the service's `/v1/exec` does (default true).",
            },
        },
        "`mcpx-hooks mcp`: the tool servers' tools served to MCP clients.",
    )
