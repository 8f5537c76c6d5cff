"""The rules of a `[servers.<name>]` table the schema cannot say: `command` or `url`, not
both; `http://` only to a loopback host; `headers` only with `url`, their `${secret:NAME}`
naming a secret of the server's `secrets` list and nothing else looking like a reference."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core import egress
from ..core.errors import Problem
from ..core.servers import LOOPBACK_HOSTS, OTHER_REFERENCE, secrets_named
from .problems import pointer


def server_problems(
    files: Sequence[tuple[str, Mapping[str, Any]]],
    merged: Mapping[str, Any],
    unknown: Callable[[str, str], bool] = lambda table, key: False,
) -> list[Problem]:
    """What is wrong with the `[servers]` tables of the layers (`files`: each file's name
    and its `[servers]`, farthest first), given the tables they make together (`merged`).
    A server `unknown("servers", name)` says a problem took out of a layer (`validate`) is
    checked only on its own: what the layers make of it together is not known."""
    problems: list[Problem] = []
    for file, servers in files:
        problems += _file_problems(file, servers, merged, unknown)
    for name, table in merged.items():
        if unknown("servers", name):
            continue
        given = [(f, s[name]) for f, s in files if isinstance(s, Mapping) and name in s]
        if len(given) > 1 and not any("command" in t and "url" in t for _, t in given):
            problems += _both_problems(given[-1][0], name, table)  # said once, at the nearest
    return problems


def _file_problems(
    file: str,
    servers: Mapping[str, Any],
    merged: Mapping[str, Any],
    unknown: Callable[[str, str], bool],
) -> list[Problem]:
    """What is wrong with the `[servers]` tables of one file (`servers`), given the tables
    all the layers make together (`merged`: a `secrets` list may come from another layer)."""
    problems: list[Problem] = []
    if not isinstance(servers, Mapping):
        return problems
    for name, table in servers.items():
        if not isinstance(table, Mapping):
            continue
        at = ["servers", name]
        # (what the layers make of a server a problem took out of one is not known)
        known = not unknown("servers", name)
        if "command" in table and "url" in table:
            problems.append(
                Problem(
                    file,
                    pointer([*at, "url"]),
                    "expected either `command` (a server it runs) or `url` (a remote server),"
                    " found both",
                )
            )
        elif known and "command" not in table and "url" not in table:
            whole = merged.get(name, {})
            if "command" not in whole and "url" not in whole:
                problems.append(
                    Problem(
                        file,
                        pointer(at),
                        "expected `command` (a server it runs) or `url` (a remote server)",
                    )
                )
        profile = merged.get(name, {}).get("sandbox", egress.CONFINING[0])
        if (
            known
            and "network" in table
            and isinstance(profile, str)
            and profile not in egress.CONFINING
        ):
            problems.append(Problem(file, pointer([*at, "network"]), egress.unconfined(profile)))
        url = table.get("url")
        if isinstance(url, str):
            why = _url_problem(url)
            if why is not None:
                problems.append(Problem(file, pointer([*at, "url"]), why))
        if not known:
            continue
        headers = table.get("headers")
        if isinstance(headers, Mapping):
            if "url" not in table and "url" not in merged.get(name, {}):
                problems.append(
                    Problem(
                        file,
                        pointer([*at, "headers"]),
                        "`headers` are sent to a remote server: this server has no `url`",
                    )
                )
            secrets = [
                s if isinstance(s, str) else s.get("name")
                for s in merged.get(name, {}).get("secrets", ())
            ]
            for key, value in headers.items():
                if isinstance(value, str):
                    why = _header_problem(value, secrets)
                    if why is not None:
                        problems.append(Problem(file, pointer([*at, "headers", key]), why))
    return problems


def _both_problems(file: str, name: str, table: Mapping[str, Any]) -> list[Problem]:
    """A server that the layers together give both a `command` and a `url`."""
    if "command" in table and "url" in table:
        return [
            Problem(
                file,
                pointer(["servers", name]),
                "expected either `command` or `url`: the config files in force give this"
                " server both (one file's `command`, another's `url`)",
            )
        ]
    return []


def _url_problem(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return f"expected a url with a host, found {url!r}"
    loopback = parts.hostname in LOOPBACK_HOSTS or parts.hostname.startswith("127.")
    if parts.scheme == "http" and not loopback:
        return (
            "expected https:// (http:// is for a loopback host only: localhost, 127.0.0.1,"
            f" ::1), found {parts.hostname!r}"
        )
    return None


def _header_problem(value: str, secrets: Any) -> str | None:
    listed = list(secrets) if isinstance(secrets, list | tuple) else []
    for name in secrets_named(value):
        if name not in listed:
            known = ", ".join(listed) or "none"
            return (
                f"${{secret:{name}}} names a secret this server's `secrets` does not list"
                f" (its secrets: {known}); add {name!r} to `secrets`"
            )
    other = OTHER_REFERENCE.search(value)
    if other is not None:
        return (
            f"only ${{secret:NAME}} is expanded in a header value; {other.group(0)} would be"
            " sent as it is"
        )
    return None
