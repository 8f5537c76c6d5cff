"""The config schema's parts for what a child takes from outside its sandbox: variables
(`passEnv`, `secrets`) and hosts (`network`), on hooks, `[script]`, servers and `[defaults]`.
"""

from __future__ import annotations

from typing import Any

from ..core import egress
from ..core.egress import NETWORK_KEY
from ..core.passenv import MIN_SECRET_CHARS, PASS_ENV_KEY, SECRET_NAME_PATTERN, SECRETS_KEY
from ..core.spawntext import ENV_NAME_PATTERN


def pass_keys(who: str, *, hosts: bool = False) -> dict[str, Any]:
    """`passEnv` and `secrets`, on a hook or under `[script]`; `hosts`: a secret may be
    `{ name, hosts }`, which the child only ever sees as a placeholder."""
    name = {"type": "string", "pattern": SECRET_NAME_PATTERN}
    item: dict[str, Any] = {**name, "description": "A variable name (no glob)."}
    if hosts:
        with_hosts = {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "hosts"],
            "properties": {
                "name": {**name, "description": "A variable name (no glob)."},
                "hosts": {
                    **network_schema("the secret's value is sent to"),
                    "minItems": 1,
                    "description": "The hosts the proxy sends the secret's value to, in"
                    " place of the placeholder the child has (`mcpx-secret-NAME-<nonce>`) in"
                    " the request headers; sent anywhere else, the request is refused.",
                },
            },
            "description": "A secret the child never sees (docs/egress.md).",
        }
        item = {
            "type": ["string", "object"],
            "if": {"type": "string"},
            "then": item,
            "else": with_hosts,
            "description": "A variable name, or { name, hosts }.",
        }
    return {
        PASS_ENV_KEY: {
            "type": "array",
            "items": {
                "type": "string",
                "pattern": ENV_NAME_PATTERN,
                "description": "A variable name or a glob (`GITHUB_*`).",
            },
            "description": f"Variables {who} copies, unchanged, from the environment it is"
            " given (the supervisor's; for a run or a per-call hook, the caller's).",
        },
        SECRETS_KEY: {
            "type": "array",
            "items": item,
            "description": f"Variables {who} copies the same way, as secrets: their values"
            " are redacted as `[secret NAME]` wherever the supervisor writes or sends text,"
            " and one that is not set (or has fewer than"
            f" {MIN_SECRET_CHARS} characters) fails {who} instead of running without it.",
        },
    }


def network_schema(who: str, *, layered: bool = False) -> dict[str, Any]:
    """`network`: the hosts `who` reaches through the supervisor's proxy; `layered`: a list
    the layers merge (a `null` splices in the farther one)."""
    return {
        "type": "array",
        "items": {
            "type": ["string", "null"] if layered else "string",
            "pattern": egress.PATTERN,
            "description": "A host glob (`*` any characters, dots included) with an optional"
            " port (`pypi.org`, `*.example.com:8443`); without a port, 80 and 443.",
        },
        "description": f"The hosts {who} may reach, through the supervisor's proxy, from"
        " its sandbox's empty network (docs/egress.md); any other is refused. A nearer layer"
        " may narrow a farther one's list, never widen it.",
    }


__all__ = ["NETWORK_KEY", "network_schema", "pass_keys"]
