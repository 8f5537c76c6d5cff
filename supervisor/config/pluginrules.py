"""The rules of tool servers and `plugin` hooks the schema cannot say: a plugin hook's server
is declared and the placeholders of its `args` name what its phase has; a server's `env`
values are literal."""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

from ..core.errors import Problem
from ..core.hooks import Hook
from ..core.passenv import reference_problem
from ..core.placeholders import PHASE_BUILTINS, value_names
from ..core.places import hook_place
from ..core.points import POINTS, Phase, When
from ..core.servers import ServerSpec, split_tool
from .closest import did_you_mean
from .problems import pointer
from .trust import TrustState, pin_key

#: The built-ins a phase has (`PHASE_BUILTINS`) that a plugin hook's `args` are not given
#: (`run/pluginhook.plugin_names`).
PLUGIN_LACKS: Final = frozenset({"source", "artifacts"})


def plugin_problems(
    hook: Hook, file: str, pointer: str, servers: Collection[str] | None
) -> list[Problem]:
    """What is wrong with plugin hook `hook` (declared at `file`:`pointer`), given the names
    of the servers declared (None: its server's table is not known, `validate` said why)."""
    assert isinstance(hook.target, str)
    server, _ = split_tool(hook.target)
    problems = []
    if servers is not None and server not in servers:
        known = ", ".join(sorted(servers)) or "none"
        problems.append(
            Problem(
                file,
                f"{pointer}/plugin",
                f'expected a declared tool server: "{server}" has no [servers.{server}]'
                f" (declared: {known})",
            )
        )
    given = PHASE_BUILTINS.get(hook.phase, frozenset()) - PLUGIN_LACKS
    if hook.on == "server.start":
        given -= {"run"}
    for name in sorted(value_names(dict(hook.args or {})) - given):
        problems.append(
            Problem(
                file,
                f"{pointer}/args",
                f'"@{name}" names nothing a plugin hook has in {hook.on}.{hook.phase.value}'
                f" (it has: {', '.join(sorted(given))})",
            )
        )
    return problems


def server_env_problems(file: str, servers: Mapping[str, Any]) -> list[Problem]:
    """Each `[servers.<name>] env` value of one file that looks like `${NAME}`: refused as a
    hook's is, saying how to pass the variable."""
    problems = []
    for name, table in servers.items() if isinstance(servers, Mapping) else ():
        env = table.get("env") if isinstance(table, Mapping) else None
        for key, value in env.items() if isinstance(env, Mapping) else ():
            why = reference_problem(value) if isinstance(value, str) else None
            if why is not None:
                problems.append(Problem(file, pointer(["servers", name, "env", key]), why))
    return problems


def exposed_name_warnings(hooks: Iterable[Hook], servers: Collection[str], sep: str) -> list[str]:
    """A warning for each `when.tool` pattern written as an MCP client sees a tool
    (`<server><sep><tool>`, its server declared): hooks name a tool `server.tool` or by its
    own name, so such a pattern matches only a tool whose own name it is. (With a separator
    of ".", what a client sees is what hooks name: nothing to say.)"""
    said: list[str] = []
    if sep == ".":
        return said
    for hook in hooks:
        for pattern in hook.when.get(When.TOOL) or ():
            for server in servers:
                rest = pattern[len(server) + len(sep) :]
                if rest and pattern.startswith(server + sep):
                    said.append(
                        f'hook "{hook.name}": when.tool "{pattern}" is the name an MCP client'
                        f' sees; hooks name that tool "{server}.{rest}" or "{rest}", so as'
                        " written it matches only a tool whose own name it is"
                    )
    return said


def server_name_warnings(servers: Mapping[str, ServerSpec], sep: str) -> list[str]:
    """A warning for each `expose` or `hide` pattern of a server written as an MCP client
    sees its tools (`<server><sep><tool>`), and each `tools` key naming a tool otherwise than
    by its own name (`<server><sep><tool>` or `server.tool`): as written, each matches only a
    tool whose own name it is, so a `hide` hid nothing, and a limit limited nothing."""
    said: list[str] = []
    for server, spec in servers.items():
        client = server + sep
        if sep != ".":
            for key, patterns in (("expose", spec.expose), ("hide", spec.hide)):
                for pattern in patterns:
                    rest = pattern[len(client) :]
                    if rest and pattern.startswith(client):
                        said.append(
                            f'server {server}: {key} "{pattern}" is the name an MCP client'
                            f' sees; {key} matches a tool by its own name ("{rest}") or as'
                            f' "{server}.{rest}", so as written it matches only a tool whose'
                            " own name it is"
                        )
        for name in spec.tool_limits:
            rest = next((name[len(p) :] for p in (client, server + ".") if name.startswith(p)), "")
            if rest:
                said.append(
                    f'server {server}: tools."{name}" names the tool otherwise than by its own'
                    f' name; a tool\'s limits are keyed by its own name ("{rest}"), so as'
                    " written they limit only a tool whose own name it is"
                )
    return said


def unknown_server_warnings(hooks: Iterable[Hook], servers: Collection[str]) -> list[str]:
    """A warning for each hook on a tool server's point whose `when.server` matches none of
    the servers declared, or that the config gives no server at all (a name misspelt, or a
    server declared elsewhere): a `server.start` hook never fires, a `call` hook fires only
    for a script's call to a server not declared, which fails (`exec --explain` says so)."""
    said: list[str] = []
    for hook in hooks:
        point = POINTS.get(hook.on)
        if hook.phase is Phase.OBSERVE or point is None or When.SERVER not in point.when:
            continue
        where = hook_place(hook.source.file, hook.source.index) if hook.source.file else ""
        named = f'hook "{hook.name}"{f" ({where})" if where else ""}'
        patterns = hook.when.get(When.SERVER)
        matched = not patterns or any(fnmatch.fnmatchcase(s, p) for p in patterns for s in servers)
        if servers and matched:
            continue
        if not servers:
            why = f'it is on "{hook.on}", and no tool server is declared here'
        else:
            shown = ", ".join(f'"{p}"' for p in patterns or ())
            known = ", ".join(sorted(servers))
            why = f"when.server [{shown}] matches none of the servers declared here ({known})"
        said.append(f"{named}: {why}: {_NEVER[hook.on == 'call']}")
    return said


#: What a hook on a server's point that matches no declared server does (by: it is on `call`).
_NEVER: Final = {
    False: "it never fires",
    True: "it fires only for a call to a server not declared, which fails",
}


def pinned_tool_warnings(
    hooks: Iterable[Hook], servers: Mapping[str, ServerSpec], state: TrustState
) -> list[str]:
    """A warning for each `when.tool` pattern of a `call` hook that matches no tool of the
    servers it applies to, where each of them is pinned (their tools known without starting
    them): as the servers stand, it fires only for a call to a tool they do not have, which
    fails (a tool's name misspelt). Nothing is said of a hook one of whose servers is not
    pinned, or pinned with no tools."""
    said: list[str] = []
    for hook in hooks:
        patterns = hook.when.get(When.TOOL)
        if not patterns or hook.phase is Phase.OBSERVE:
            continue
        chosen = hook.when.get(When.SERVER) or ("*",)
        names = [n for n in servers if any(fnmatch.fnmatchcase(n, p) for p in chosen)]
        tools = {
            n: state.tool_names(pin_key(n, servers[n].where, servers[n].workdir)) or []
            for n in names
        }
        if not names or any(not found for found in tools.values()):
            continue  # (no server at all is `unknown_server_warnings`' to say)
        seen = [form for n, own in tools.items() for t in own for form in (f"{n}.{t}", t)]
        where = hook_place(hook.source.file, hook.source.index) if hook.source.file else ""
        for pattern in patterns:
            if any(fnmatch.fnmatchcase(form, pattern) for form in seen):
                continue
            counted = ", ".join(f"{n}: {len(own)}" for n, own in tools.items())
            said.append(
                f'hook "{hook.name}"{f" ({where})" if where else ""}: when.tool "{pattern}"'
                f" matches no tool of the servers as pinned ({counted} tools): it fires only"
                f" for a call to a tool they do not have, which fails{did_you_mean(pattern, seen)}"
            )
    return said
