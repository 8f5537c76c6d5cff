"""One tool server's life, from its `server.start` hooks to its tree's reap.

`serve_server` runs in the manager's nursery (`servers.py`): the `before` hooks, run by the
`StartHooks` it is given (a refusal stops the start), the spawn through the supervisor's
spawner and sandbox (the server's `cwd`, `env`, `passEnv`, `secrets`, scrubbed environment
and scratch directory as a hook has them), MCP `initialize` and `tools/list` within
`startTimeoutMs`, the `onSuccess` or `onError` hooks, then serving until it has been unused
for `idleMs`, its process ends, or it closes its stdout. Whatever ends it, its tree is
killed and reaped (`Spawner.open_child`), and the entry says why (`failing` with the reason,
or `idle`). Cancelled (the manager closing), it kills the tree and propagates.
"""

from __future__ import annotations

import os
from typing import Any, Final

import trio

from ..core.errors import SandboxUnavailable, SpawnError
from ..core.hookenv import base_environment
from ..core.passenv import pass_environment
from ..core.points import Phase
from ..core.redact import Redactor
from ..core.servers import SERVER_STDERR_TAIL
from ..process import programs
from ..process.egresschild import egress_spec, open_egress
from ..process.scratch import scratch_dir
from ..process.spawner import Spawner
from ..process.spawnspec import ChildSpec
from . import packages
from .mcpclient import open_session
from .serverentry import ServerEntry, StartHooks
from .serverlife import serve_session, words

#: What `_serve` returns when the server's stdout closed under it (it exited).
_EXITED: Final = "exited"
#: How much of the server's stderr a failure reason quotes.
_REASON_STDERR: Final = 500


async def serve_server(spawner: Spawner, start_hooks: StartHooks, entry: ServerEntry) -> None:
    spec, run_id = entry.spec, entry.started_by
    try:
        facts: dict[str, Any] = {"server": spec.name}
        if spec.url is not None:
            facts["url"] = spec.url
        else:
            facts["command"] = list(spec.command)
        refusal = await start_hooks(Phase.BEFORE, spec.name, run_id, input=(facts,))
        if refusal is not None:
            entry.failed(f"the start of server {spec.name} was {refusal}")
            return
        if spec.url is not None:
            from .remote import remote_life  # it loads the SDK's HTTP client: at its start

            reason = await remote_life(start_hooks, entry)
        else:
            reason = await _life(spawner, start_hooks, entry)
        if reason is None:
            entry.reason = ""
            return
        if entry.since is None:  # it never started: onError sees why
            await start_hooks(Phase.ON_ERROR, spec.name, run_id, error={"message": reason})
        entry.failed(reason)
    finally:
        entry.session = entry.raw = None
        if entry.state in ("running", "starting", "stopping"):  # idle, or the manager closing
            entry.state = "idle"
        entry.since = None
        entry.ready.set()
        entry.ended.set()


async def _life(spawner: Spawner, start_hooks: StartHooks, entry: ServerEntry) -> str | None:
    """Runs the server until it is idle (None) or fails (the reason)."""
    spec = entry.spec
    passed = pass_environment(spec.pass_env, spec.secrets, os.environ, withheld=spec.withheld)
    if passed.problem is not None:
        return f"server {spec.name}: {passed.problem}"
    redactor = entry.redactor = Redactor(passed.secrets)
    stderr = bytearray()
    eco = packages.ecosystem(spec)

    def said() -> str:  # its stderr's end, and whether it tried to reach a network it lacks
        text = bytes(stderr).decode(errors="replace")
        return _tail(stderr) + packages.no_network(spec.sandbox, text)

    with scratch_dir("server-") as scratch:
        async with open_egress(spawner, spec.network, spec.sandbox) as lease:
            entry.egress = lease  # (its callers read its refusals: `run/callpoint.py`)
            installed = (  # with a lease, its install step fetches through the proxy too
                None if eco is None else await packages.ensure_installed(spawner, spec, eco, lease)
            )
            if isinstance(installed, str):
                return redactor.text(installed)
            try:
                cache = None if installed is None else installed.cache
                rlimits, plan = packages.server_plan(spec, spec.sandbox, spawner, scratch, cache)
                env = base_environment(os.environ, scratch)
                env.update(passed.values)
                env.update(spec.env)
                if installed is not None and eco is not None:
                    env.update(installed.env)
                    env.update(packages.bounds_env(eco, rlimits, spec.env))
                programs.check_command(
                    spec.command,
                    cwd=spec.workdir,
                    env=env,
                    plan=plan,
                    profile=spec.sandbox,
                    sees="the server's directory, the system and the grants",
                )
            except SandboxUnavailable as exc:
                return f"server {spec.name} could not start: {exc}"
            child_spec = egress_spec(
                ChildSpec(spec.command, spec.workdir, env, rlimits, plan), lease, spec.secret_hosts
            )
            timeout = spec.start_timeout_ms / 1000
            outcome, why = None, None
            try:
                with trio.move_on_after(timeout) as start_scope:
                    async with spawner.open_child(
                        child_spec, kill_grace=spec.kill_grace_ms / 1000
                    ) as child:
                        outcome = child.outcome
                        why = await _serve(start_hooks, entry, child, stderr, start_scope)
                        if why is not None and why is not _EXITED:
                            return redactor.text(why)
            except SpawnError as exc:
                return redactor.text(f"server {spec.name} could not start: {exc}")
            except Exception as exc:  # the SDK's and the protocol's: its failure, in words
                return redactor.text(f"server {spec.name} failed: {words(exc)}{said()}")
        if start_scope.cancelled_caught:
            return redactor.text(
                f"server {spec.name} did not answer MCP initialize within startTimeoutMs"
                f" ({spec.start_timeout_ms} ms); its process tree was killed{said()}"
            )
        if why is _EXITED and outcome is not None:
            how = (
                "closed its stdout (its tree was killed)"
                if not outcome.exited or outcome.killed
                else f"was killed by signal {outcome.signal}"
                if outcome.signal is not None
                else f"exited with status {outcome.exit_code}"
            )
            return redactor.text(f"server {spec.name} {how}{said()}")
    return None


async def _serve(
    start_hooks: StartHooks,
    entry: ServerEntry,
    child: Any,
    stderr: bytearray,
    start_scope: trio.CancelScope,
) -> str | None:
    closed = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_keep_tail, child.stderr, stderr)
        async with open_session(child.stdin, child.stdout, closed, entry.heard, entry.notified) as (
            session,
            raw,
        ):
            entry.raw = raw
            with trio.CancelScope() as life:
                nursery.start_soon(_cancel_when_gone, child, closed, life, entry)
                why = await serve_session(start_hooks, entry, session, start_scope)
                if why is not None:
                    nursery.cancel_scope.cancel()
                    return why
            nursery.cancel_scope.cancel()
            if life.cancelled_caught:
                return _EXITED
    return None


async def _cancel_when_gone(
    child: Any, closed: trio.Event, life: trio.CancelScope, entry: ServerEntry
) -> None:
    """Ends the server's life when its stdout closes (it exited, or closed it)."""
    await closed.wait()
    entry.session = None  # no new use may take it
    with trio.move_on_after(entry.spec.kill_grace_ms / 1000):
        await child.wait()  # its own exit status, if it is exiting
    life.cancel()


async def _keep_tail(stream: trio.abc.ReceiveStream, tail: bytearray) -> None:
    while chunk := await stream.receive_some(65536):
        tail.extend(chunk)
        if len(tail) > SERVER_STDERR_TAIL:
            del tail[: len(tail) - SERVER_STDERR_TAIL]


def _tail(stderr: bytearray) -> str:
    """Its stderr's last `_REASON_STDERR` bytes, from a line's start when one begins in the
    first half of them (not mid-line, mid-character)."""
    kept = bytes(stderr[-_REASON_STDERR:])
    newline = kept.find(b"\n") if len(stderr) > _REASON_STDERR else -1
    if 0 <= newline < _REASON_STDERR // 2:
        kept = kept[newline + 1 :]
    text = kept.decode(errors="replace").strip()
    return f"; its stderr ends: {text}" if text else ""
