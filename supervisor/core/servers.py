"""Tool servers (`[servers.<name>]`): MCP servers over stdio that the supervisor runs, or
remote ones it reaches by `url`, as they are in force, and the table of their settings.

Pure data; `config/build.py` builds these, `tools/servers.py` runs them.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from .hooks import PROFILE_GRANTS, Profile, SandboxPaths
from .limits import DEFAULT_LIMITS, Limits
from .passenv import pass_environment
from .records import Record

#: The first wait before a failed server is started again; it doubles up to `BACKOFF_MAX_S`.
BACKOFF_FIRST_S: Final = 1.0
BACKOFF_MAX_S: Final = 30.0
#: The longest JSON-RPC line a server may write; a longer one is dropped and counted as bad.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
#: Lines that are not JSON-RPC a server may write before it is stopped as failing.
MAX_BAD_LINES: Final = 100
#: The end of a server's stderr kept, for the reason it failed.
SERVER_STDERR_TAIL: Final = 4096
#: What `[mcp] separator` may be made of (its default is `hooks.DEFAULT_SEPARATOR`).
SEPARATOR_PATTERN: Final = r"^[A-Za-z0-9_.-]+$"


@attrs.frozen(repr=False, eq=False)
class ServerSetting(Record):
    """One row of the server settings table: a key of `[servers.<name>]` with a default."""

    key: str
    attr: str
    default: int | str
    meaning: str
    minimum: int | None = None


#: The settings of a server that have defaults (`command`, `cwd`, `env`, `passEnv`,
#: `secrets` have none).
SERVER_SETTINGS: Final = (
    ServerSetting("sandbox", "sandbox", Profile.STRICT.value, "The server's sandbox profile"),
    ServerSetting(
        "startTimeoutMs",
        "start_timeout_ms",
        10_000,
        "How long the server may take to start and answer MCP `initialize`, in ms",
        1,
    ),
    ServerSetting(
        "idleMs",
        "idle_ms",
        300_000,
        "How long the server is kept running unused before it is stopped, in ms",
        1,
    ),
    ServerSetting(
        "callTimeoutMs",
        "call_timeout_ms",
        60_000,
        "How long one of a script's calls may take, in ms; past it the call is cancelled on"
        " the server and the script gets an error",
        1,
    ),
    ServerSetting(
        "killGraceMs", "kill_grace_ms", 500, "The grace from SIGTERM to SIGKILL when stopped", 0
    ),
)
_DEFAULT = {s.attr: s.default for s in SERVER_SETTINGS}
_NO_PATHS: Final = SandboxPaths()
_STRICT: Final = Profile(str(_DEFAULT["sandbox"]))


#: `[servers.x] pin`: how a server's tool list is held to its pin (`tools/pins.py`); the
#: first is the default.
PIN_MODES: Final = ("first-use", "require", "off")


@attrs.frozen(repr=False, eq=False)
class CallLimits(Record):
    """`callsPerMinute` and `maxConcurrent` of a server or of one of its tools (None: no
    limit), for the calls MCP clients make through `mcpx-hooks mcp`."""

    calls_per_minute: int | None = None
    max_concurrent: int | None = None


NO_CALL_LIMITS: Final = CallLimits()
#: The keys of a `CallLimits` in a config file.
CALL_LIMIT_KEYS: Final = (
    ("callsPerMinute", "calls_per_minute", "calls in any 60 seconds"),
    ("maxConcurrent", "max_concurrent", "calls at once"),
)


def call_limits(table: Mapping[str, Any]) -> CallLimits:
    return CallLimits(**{attr: table[key] for key, attr, _ in CALL_LIMIT_KEYS if key in table})


@attrs.frozen(repr=False, eq=False)
class ServerSpec(Record):
    """A tool server in force. Hashable: the supervisor keeps one running server per spec,
    so a changed declaration is another server."""

    name: str
    #: Its argv; empty for a remote server (`url`).
    command: tuple[str, ...]
    declaring_dir: str
    cwd: str | None = None
    env: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    pass_env: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    sandbox: Profile = _STRICT
    #: The hosts it reaches through the supervisor's proxy (`core/egress.py`; None: none),
    #: and those of `secrets` it sees only as placeholders, swapped for these hosts.
    network: tuple[str, ...] | None = None
    secret_hosts: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, hash=False)
    start_timeout_ms: int = int(_DEFAULT["start_timeout_ms"])
    idle_ms: int = int(_DEFAULT["idle_ms"])
    call_timeout_ms: int = int(_DEFAULT["call_timeout_ms"])
    kill_grace_ms: int = int(_DEFAULT["kill_grace_ms"])
    limits: Limits = DEFAULT_LIMITS
    paths: SandboxPaths = _NO_PATHS
    #: The models' key variables (`Models.key_names`): no `passEnv` of it passes them.
    withheld: frozenset[str] = attrs.field(default=frozenset(), eq=False)
    #: `expose` and `hide`: which of its tools an MCP client of `mcpx-hooks mcp` sees. Not
    #: part of the server's identity (changing them restarts nothing).
    expose: tuple[str, ...] = attrs.field(default=("*",), eq=False)
    hide: tuple[str, ...] = attrs.field(default=(), eq=False)
    #: The limits on MCP clients' calls: the server's (all its tools together), and its
    #: tools' own (`[servers.x.tools."name"]`). Not part of its identity either.
    call_limits: CallLimits = attrs.field(default=NO_CALL_LIMITS, eq=False)
    tool_limits: Mapping[str, CallLimits] = attrs.field(factory=dict, eq=False)
    #: `pin`: how its tool list is held to the one pinned (`first-use`, `require`, `off`).
    pin: str = attrs.field(default=PIN_MODES[0], eq=False)
    #: A remote server's endpoint (MCP's streamable HTTP), and the headers sent with every
    #: request (their `${secret:NAME}` expanded when it starts, `tools/remote.py`).
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    #: `install`: the argv that fetches an ecosystem server's package into its cache (None:
    #: the one its command implies, `tools/packages.py`).
    install: tuple[str, ...] | None = None
    #: Its hash, once made: a spec is looked up by on every call (the manager's entries).
    _hash: int | None = attrs.field(default=None, init=False, repr=False, eq=False)

    def __hash__(self) -> int:
        known = self._hash
        if known is None:
            known = Record.__hash__(self)
            object.__setattr__(self, "_hash", known)
        return known

    @property
    def where(self) -> tuple[str, ...]:
        """What it is reached by: its url, or its argv."""
        return (self.url,) if self.url is not None else self.command

    @property
    def workdir(self) -> str:
        return self.cwd or self.declaring_dir

    def shows(self, tool: str) -> bool:
        """Whether an MCP client sees `tool`: one `expose` glob and no `hide` glob matches
        it, as its own name or as `server.tool`."""
        names = (tool, f"{self.name}.{tool}")
        return _any_glob(self.expose, names) and not _any_glob(self.hide, names)


def _any_glob(globs: Iterable[str], names: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(n, g) for g in globs for n in names)


def server_spec(name: str, table: Mapping[str, Any], declaring_dir: str) -> ServerSpec:
    """The server a validated `[servers.<name>]` table declares (`cwd` resolved against the
    declaring directory)."""
    cwd = table.get("cwd")
    given: dict[str, Any] = {s.attr: table[s.key] for s in SERVER_SETTINGS if s.key in table}
    if "sandbox" in given:
        given["sandbox"] = Profile(given["sandbox"])
    install = table.get("install")
    return ServerSpec(
        name=name,
        command=tuple(table.get("command", ())),
        url=table.get("url"),
        headers=dict(table.get("headers") or {}),
        install=None if install is None else tuple(install),
        declaring_dir=declaring_dir,
        cwd=None if cwd is None else os.path.normpath(os.path.join(declaring_dir, cwd)),
        env=dict(table.get("env") or {}),
        pass_env=tuple(table.get("passEnv", ())),
        secrets=tuple(s if isinstance(s, str) else s["name"] for s in table.get("secrets", ())),
        secret_hosts={
            s["name"]: tuple(s["hosts"]) for s in table.get("secrets", ()) if isinstance(s, dict)
        },
        network=None if "network" not in table else tuple(table["network"]),
        expose=tuple(table.get("expose", ("*",))),
        hide=tuple(table.get("hide", ())),
        pin=str(table.get("pin", PIN_MODES[0])),
        call_limits=call_limits(table),
        tool_limits={k: call_limits(v) for k, v in (table.get("tools") or {}).items()},
        **given,
    )


def split_tool(target: str) -> tuple[str, str]:
    """`server.tool` → (server, tool): the server is the part before the first dot."""
    server, _, tool = target.partition(".")
    return server, tool


def undeclared(server: str, declared: Iterable[str]) -> str:
    """Why a call or hook naming `server` reaches none: no such server is declared."""
    known = ", ".join(sorted(declared)) or "none"
    return f"no tool server named {server!r} is declared ([servers.{server}]; declared: {known})"


def exposed_name(server: str, tool: str, separator: str) -> str:
    """The name an MCP client of `mcpx-hooks mcp` sees a server's tool by."""
    return f"{server}{separator}{tool}"


#: The tool names every client we know of takes: the most-used model APIs (Anthropic's,
#: OpenAI's) refuse a tool list holding any other, so a client sending it fails whole.
PORTABLE_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


#: How many of a server's tool names `unportable_names` says (then how many more).
ODD_NAMES_SAID: Final = 5


def unportable_names(names: Iterable[str], server: str) -> str | None:
    """Why some clients would refuse some of `server`'s exposed tool `names`, or None."""
    said: list[str] = []
    more = 0
    for name in names:
        if PORTABLE_TOOL_NAME.fullmatch(name) is None:
            if len(said) == ODD_NAMES_SAID:  # (a listing of thousands: one bounded line)
                more += 1
                continue
            odd = "".join(sorted({c for c in name if not PORTABLE_TOOL_NAME.fullmatch(c)}))
            shown = name if len(name) <= 80 else f"{name[:64]}…"
            said.append(f"{shown!r} ({f'holds {odd!r}' if odd else f'{len(name)} characters'})")
    if not said:
        return None
    if more:
        said.append(f"{more} more")
    return (
        f"some clients refuse a whole tool list for one name longer than 64 characters or"
        f" holding anything but letters, digits, _ and -, and the tools of server {server}"
        f" are listed as {', '.join(said)}; rename the server in the config, or set another"
        " [mcp] separator"
    )


def exposed_targets(name: str, servers: Iterable[str], separator: str) -> list[tuple[str, str]]:
    """The (server, tool) pairs an exposed `name` may stand for, in the order of `servers`
    (a separator that also appears in a server's or a tool's name can make more than one)."""
    return [
        (server, name[len(server) + len(separator) :])
        for server in servers
        if name.startswith(server + separator) and len(name) > len(server) + len(separator)
    ]


#: A secret named in a remote server's header value: `${secret:NAME}`.
SECRET_REFERENCE: Final = re.compile(r"\$\{secret:([^}]*)\}")
#: Anything else that looks like a reference in a header value (never expanded).
OTHER_REFERENCE: Final = re.compile(r"\$\{(?!secret:)[^}]*\}")
#: The hosts an `http://` url may name (anything else must be `https://`).
LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def secrets_named(value: str) -> list[str]:
    """The secrets a header value names."""
    return SECRET_REFERENCE.findall(value)


def expand_headers(headers: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """`headers` with each `${secret:NAME}` replaced by the secret's value (`secrets` holds
    every one named: the config's check saw to it, the start's `pass_environment` found them)."""
    return {
        key: SECRET_REFERENCE.sub(lambda m: secrets[m.group(1)], value)
        for key, value in headers.items()
    }


def server_secrets(specs: Iterable[ServerSpec], environ: Mapping[str, str]) -> dict[str, str]:
    """The secret values the servers are given, from `environ`: what a run's (and the bus's)
    redaction hides, so a tool that echoes one in an error never puts it in a frame or an
    event."""
    found: dict[str, str] = {}
    for spec in specs:
        found.update(pass_environment((), spec.secrets, environ).secrets)
    return found


#: The first word of an MCP session run's argv; the client's name follows it.
SESSION_ARGV0: Final = "mcp"
#: The `call` frame's `error` of a call its MCP client cancelled before its answer.
CALL_CANCELLED: Final = "cancelled by the client before its answer"
#: The `call` frame's `error` of a call in flight when its MCP session ended (the client went,
#: or the command was stopped): given up on its server, never answered.
CALL_SESSION_ENDED: Final = "the session ended before its answer"

#: What a program says (its stderr, a tool's failed answer) when it tried to reach the network
#: and could not (Node's `fetch` says only "fetch failed").
NO_NETWORK_SIGNS: Final = re.compile(
    r"ENOTCACHED|ENETUNREACH|EAI_AGAIN|ENOTFOUND|getaddrinfo|Network is unreachable"
    r"|network unreachable|only-if-cached|offline mode|--offline|Temporary failure in name"
    r"|Failed to fetch|fetch failed|dns error|Could not resolve host",
    re.IGNORECASE,
)


def offline_note(spec: ServerSpec, error: str) -> str | None:
    """What the `call` frame of a call that failed with `error` notes when `spec`'s server
    runs without network (its profile grants none, and its `network` names no host) and
    `error` says it tried to reach one; None otherwise. Never part of what the caller gets."""
    if not spec.command or spec.network or "the host network" in PROFILE_GRANTS[spec.sandbox]:
        return None
    if not NO_NETWORK_SIGNS.search(error):
        return None
    return (
        f"server {spec.name} runs without network (sandbox {spec.sandbox.value}): to let it"
        f' reach a host, name it in [servers.{spec.name}] network = ["example.com"]'
    )
