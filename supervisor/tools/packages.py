"""Servers the ecosystem's way: `command = ["npx", "-y", "pkg"]` or `["uvx", "pkg"]`.

The package is fetched once, with network, into a cache of the server's own under the
supervisor's state directory (`packages/npm/<server>-<hash>`, `packages/uv/…`, by its name,
install step and working directory): the install step (`[servers.x] install`, or the one the
command implies: npx installs the package and runs `node -e ""`, uvx builds the tool's
environment and runs `python -c ""`) runs under the `net` profile with only that cache writable
(a server with a `network` list: under its own profile, through the egress proxy, judged
against that list, which must then name the registry), and a file in it records that it
succeeded, so it runs again only when the step changes or the cache is removed. The server
itself then runs under its own profile (no network under `strict`) with the ecosystem told to
stay offline (npm: `npm_config_cache`, `npm_config_offline=true`; uv: `UV_CACHE_DIR`,
`UV_OFFLINE=1`). Its cache is writable to it: npm and uv write to their cache even offline (npm
locks `_npx/<hash>` and refreshes its index, uv locks its cache), and a read-only one fails
them ("ENOTCACHED"); being its own, no other server's start reads what it writes there. Nothing
else of the state directory is in its view.

A server that fails to start under a profile without network and whose stderr shows it
tried to reach one (a package not in the cache, a server that connects at its start) gets
"no network under <profile>" in its reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Final

import attrs
import trio

from ..config.statefiles import state_path
from ..core.errors import SandboxUnavailable, SpawnError
from ..core.hookenv import base_environment
from ..core.hooks import Profile
from ..core.records import Record
from ..core.servers import NO_NETWORK_SIGNS, ServerSpec
from ..core.shellwords import shell_line
from ..process import programs, sandbox
from ..process.egress import Lease
from ..process.egresschild import egress_spec, refusals
from ..process.scratch import scratch_dir
from ..process.spawner import Spawner
from ..process.spawnspec import ChildSpec, SandboxPlan

#: How long an install step may take (fetching a package tree may be slow).
INSTALL_TIMEOUT_S: Final = 600.0
#: How much of an install step's stderr its failure quotes.
_TAIL: Final = 1000
#: Set for both steps unless the server's `env` names it: glibc's malloc keeps two arenas.
#: Each further one (a thread allocating while the others' are busy makes one, up to eight
#: per core) reserves 64 MiB of address space that it mostly never touches; where
#: `RLIMIT_AS` stands in for a memory cgroup (an ordinary user's supervisor, `memoryMb`
#: per process), uv's thread pools and npm's threads ran out of address space that way,
#: well under their memory (a thread's stack could then not be mapped: "Resource
#: temporarily unavailable", V8's "out of memory").
ALLOCATOR: Final = {"MALLOC_ARENA_MAX": "2"}
#: Set for both steps of an npx server whose memory `RLIMIT_AS` bounds, unless its `env` names
#: NODE_OPTIONS. V8 bounds-checks a WebAssembly memory with guard pages, reserving about
#: 10 GiB of address space for each, and Node's own `fetch` (undici) makes one when it is
#: first touched (axios touches it as it loads): under `memoryMb` as an address-space limit
#: that fails ("Cannot allocate Wasm memory") and the process with it. Without the trap
#: handler V8 checks bounds itself and reserves only what it uses (Node 20.15, 22.2, later).
WASM_BOUNDS: Final = {"NODE_OPTIONS": "--disable-wasm-trap-handler"}

logger = logging.getLogger(__name__)


@attrs.frozen(repr=False, eq=False)
class Ecosystem(Record):
    """A package runner: its program's name, its cache's directory name under
    `packages/`, the variable naming its cache, and the variables that keep it offline."""

    program: str
    cache: str
    cache_env: str
    offline: Mapping[str, str]
    #: Set for both steps: nothing asked, nothing reported home.
    quiet: Mapping[str, str]
    #: The options that name the package (the command is then a program in it), and the
    #: other options that take a value (a `--python 3.12` is no package).
    package_options: tuple[str, ...]
    value_options: tuple[str, ...]


ECOSYSTEMS: Final = (
    Ecosystem(
        "npx",
        "npm",
        "npm_config_cache",
        {"npm_config_offline": "true"},
        {
            "npm_config_update_notifier": "false",
            "npm_config_fund": "false",
            "npm_config_audit": "false",
            "npm_config_yes": "true",
        },
        ("-p", "--package"),
        ("-c", "--call", "-w", "--workspace"),
    ),
    Ecosystem(
        "uvx",
        "uv",
        "UV_CACHE_DIR",
        {"UV_OFFLINE": "1"},
        {"UV_NO_PROGRESS": "1"},
        ("--from",),
        (
            "--with",
            "--with-editable",
            "--with-requirements",
            "-p",
            "--python",
            "--index",
            "--index-url",
            "--extra-index-url",
            "--default-index",
            "-c",
            "--constraints",
            "--overrides",
        ),
    ),
)


def ecosystem(spec: ServerSpec) -> Ecosystem | None:
    """The package runner a server's command starts with, if any."""
    if not spec.command:
        return None
    name = os.path.basename(spec.command[0])
    return next((e for e in ECOSYSTEMS if e.program == name), None)


def install_argv(spec: ServerSpec, eco: Ecosystem) -> tuple[str, ...]:
    """The install step: `install` when given, else the one the command implies."""
    if spec.install is not None:
        return spec.install
    program, args = spec.command[0], list(spec.command[1:])
    options: list[str] = []
    packages: list[str] = []
    while args and args[0].startswith("-"):
        arg = args.pop(0)
        name, has_value, value = arg.partition("=")
        if name in eco.package_options:
            packages.append(value if has_value else args.pop(0) if args else "")
        elif name in eco.value_options:
            options.append(arg)
            if not has_value and args:
                options.append(args.pop(0))
        elif arg not in ("-y", "--yes", "--"):
            options.append(arg)
    if not packages and args:
        packages.append(args[0])
    if eco.program == "npx":
        given = [f"--package={p}" for p in packages]
        return (program, "--yes", *options, *given, "--", "node", "-e", "")
    given = [a for p in packages for a in ("--from", p)]
    return (program, *options, *given, "python", "-c", "")


def cache_dir(
    eco: Ecosystem, spec: ServerSpec, argv: tuple[str, ...], environ: Mapping[str, str]
) -> str | None:
    """The server's own cache under the state directory, by its name, install step and
    working directory (None: there is no state directory)."""
    state = state_path(environ)
    if state is None:
        return None
    key = json.dumps([spec.name, list(argv), spec.workdir])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return str(state.parent / "packages" / eco.cache / f"{spec.name}-{digest}")


def step_env(eco: Ecosystem, cache: str, given: Mapping[str, str]) -> dict[str, str]:
    """What both steps' environment gets over the server's `env` (`given`): its cache, the
    ecosystem kept quiet, and `ALLOCATOR` where `given` does not name it."""
    kept = {k: v for k, v in ALLOCATOR.items() if k not in given}
    return {**kept, eco.cache_env: cache, **eco.quiet}


def bounds_env(
    eco: Ecosystem, rlimits: tuple[tuple[str, int, int], ...], given: Mapping[str, str]
) -> dict[str, str]:
    """`WASM_BOUNDS` for an npx server's steps where `RLIMIT_AS` bounds them and its `env`
    (`given`) does not name NODE_OPTIONS; else nothing."""
    if eco.program != "npx" or "NODE_OPTIONS" in given:
        return {}
    return dict(WASM_BOUNDS) if any(name == "RLIMIT_AS" for name, _, _ in rlimits) else {}


def server_env(eco: Ecosystem, cache: str, given: Mapping[str, str]) -> dict[str, str]:
    """What the server's environment gets over its `env` (`given`): `step_env`, offline."""
    return {**step_env(eco, cache, given), **eco.offline}


def no_network(profile: Profile, stderr: str) -> str:
    """ "; no network under strict" when a server without network says it tried to reach it."""
    if profile in (Profile.NET, Profile.NONE) or not NO_NETWORK_SIGNS.search(stderr):
        return ""
    return f"; no network under {profile.value}: it tried to reach the network (its package"
    " not in the cache, or a connection at its start)"


def _made(cache: str, done: str) -> bool:
    """Whether the install step succeeded before (the cache is made if it is not there)."""
    os.makedirs(cache, mode=0o700, exist_ok=True)
    return os.path.exists(done)


def _mark(done: str, shown: str) -> None:
    with open(done, "w") as f:
        f.write(shown + "\n")


@attrs.frozen(repr=False, eq=False)
class Installed(Record):
    """A package in the cache: where the cache is, and what the server's environment gets."""

    cache: str
    env: Mapping[str, str]


def done_file(cache: str) -> str:
    """The file that says the install step into `cache` succeeded."""
    return os.path.join(cache, ".mcpx-installed")


async def ensure_installed(
    spawner: Spawner, spec: ServerSpec, eco: Ecosystem, lease: Lease | None = None
) -> Installed | str:
    """Runs the install step unless it succeeded before (bounded by `INSTALL_TIMEOUT_S`);
    returns the cache, or why it failed. Cancelled, the step's tree is killed and reaped,
    and it runs again next time. With the server's `lease` (its `network` list), the step
    runs under the server's own profile through the proxy, not under `net`."""
    argv = install_argv(spec, eco)
    cache = cache_dir(eco, spec, argv, os.environ)
    if cache is None:
        return (
            f"server {spec.name}: no state directory for its package cache (set"
            " XDG_STATE_HOME or HOME)"
        )
    done = done_file(cache)
    if _made(cache, done):
        return Installed(cache, server_env(eco, cache, spec.env))
    shown = shell_line(argv)  # (`node -e ''`: an empty argument is seen)
    profile = Profile.NET if lease is None else spec.sandbox
    with scratch_dir("install-") as scratch:
        try:
            rlimits, plan = server_plan(spec, profile, spawner, scratch, cache)
            env = base_environment(os.environ, scratch)
            env.update(spec.env)
            env.update(step_env(eco, cache, spec.env))
            env.update(bounds_env(eco, rlimits, spec.env))
            programs.check_program(argv[0], cwd=spec.workdir, env=env, plan=plan, profile=profile)
        except SandboxUnavailable as exc:
            return f"server {spec.name}: its install step ({shown}) could not start: {exc}"
        child_spec = egress_spec(ChildSpec(argv, spec.workdir, env, rlimits, plan), lease, {})
        # Said, since the first use waits for it in silence otherwise (npm: 10-30 s here).
        logger.warning(
            "server %s: fetching its package into its cache, once (%s); its first start"
            " waits for it, up to %.0f s",
            spec.name,
            shown,
            INSTALL_TIMEOUT_S,
        )
        try:
            with trio.move_on_after(INSTALL_TIMEOUT_S) as scope:
                async with spawner.open_child(
                    child_spec, kill_grace=spec.kill_grace_ms / 1000
                ) as child:
                    outcome = child.outcome
                    await child.communicate(b"", 1 << 20, 8192)
        except SpawnError as exc:
            return f"server {spec.name}: its install step ({shown}) could not start: {exc}"
    tail = bytes(outcome.stderr_tail[-_TAIL:]).decode(errors="replace").strip()
    said = f"; its stderr ends: {tail}" if tail else ""
    if scope.cancelled_caught:
        took = f"took over {INSTALL_TIMEOUT_S:.0f} s"
        return f"server {spec.name}: its install step ({shown}) {took}{said}"
    if outcome.signal is not None or outcome.exit_code != 0:
        how = (
            f"signal {outcome.signal}"
            if outcome.signal is not None
            else f"status {outcome.exit_code}"
        )
        if (over := outcome.over_memory) is not None:
            how += f", over memoryMb {over}"
        refused = "".join(
            f"; the proxy refused {h} (not in its network)" for h, _ in refusals(lease)
        )
        return f"server {spec.name}: its install step ({shown}) failed ({how}){refused}{said}"
    _mark(done, shown)
    return Installed(cache, server_env(eco, cache, spec.env))


def server_plan(
    spec: ServerSpec, profile: Profile, spawner: Spawner, scratch: str, cache: str | None
) -> tuple[tuple[tuple[str, int, int], ...], SandboxPlan | None]:
    """The sandbox of a server's process (the server itself, or its install step under
    `net`): its declaring and working directories granted, its package `cache` its own."""
    return sandbox.plan(
        profile,
        spawner,
        scratch=scratch,
        dirs=(spec.declaring_dir, spec.workdir),
        workdir=spec.workdir,
        granted=(spec.declaring_dir, spec.workdir),
        paths=spec.paths,
        limits=spec.limits,
        own=() if cache is None else ((cache, True),),
    )
