"""The schema of `[servers.<name>]`, from the server settings table (`core/servers.py`)."""

from __future__ import annotations

from typing import Any, Final

from ..core.hooks import Profile
from ..core.servers import SERVER_SETTINGS
from ..core.spawntext import ENV_NAME_PATTERN
from .schemaparts import argv, enum_of, integer, table, text

#: A server's name: the part of `plugin = "server.tool"` before the dot.
SERVER_NAME_PATTERN: Final = r"^[A-Za-z0-9_-]+$"


def servers_schema(pass_keys: dict[str, Any]) -> dict[str, Any]:
    """`[servers]`: a table of tool servers by name; `pass_keys` are `passEnv` and
    `secrets` as hooks have them."""
    settings: dict[str, Any] = {}
    for s in SERVER_SETTINGS:
        meaning = f"{s.meaning} (default {s.default})."
        if s.key == "sandbox":
            settings[s.key] = enum_of(tuple(p.value for p in Profile), meaning)
        else:
            settings[s.key] = integer(s.minimum or 0, meaning)
    server = table(
        {
            "command": argv("The server's argv (MCP over stdio), never a shell string."),
            "cwd": text("Working directory, relative to the declaring directory."),
            "env": {
                "type": "object",
                "propertyNames": {"pattern": ENV_NAME_PATTERN},
                "additionalProperties": text("The variable's value, a literal string."),
                "description": "Variables added to the server's scrubbed environment.",
            },
            **pass_keys,
            **settings,
        },
        "A tool server the supervisor starts on first use, sandboxed like a hook.",
    )
    server["required"] = ["command"]
    return {
        "type": "object",
        "description": 'MCP tool servers over stdio, by name (`plugin = "name.tool"`).',
        "propertyNames": {"pattern": SERVER_NAME_PATTERN},
        "additionalProperties": server,
    }
