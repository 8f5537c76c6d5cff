"""The one spawn path: every hook and script process starts here, through the resident spawner.

`open_spawner()` starts `runners/spawner.py` (standard library only) and owns it; `Spawner.
open_child()` starts one child and owns it until its whole tree is gone. Timeouts belong to
the caller: cancel the scope around `open_child` and the child's tree gets SIGTERM, the grace,
then SIGKILL, and is reaped before `open_child` exits (shielded, bounded).

How the spawner owns a tree (`Spawner.mode`; the spawner's docstring has the details):
`pidns` where PID namespaces can be made (root; for an ordinary user, in a user namespace of
the spawner's own, `runners/userns.py`): the spawner is PID 1 of a namespace of its own and
every child is PID 1 of a namespace nested in it, so the kernel kills whatever is left of a
tree when its child ends, and everything when the spawner ends; no Python fork per child
(rootless, one per sandboxed child, for its own user namespace).
`keeper` elsewhere: one pre-forked subreaper process per child. `MCPX_HOOKS_SPAWN=pidns|keeper`
forces one (`SPAWN_MODE_ENV`); pidns forced where it cannot be had is a `SpawnError`.

A `ChildSpec` with a `SandboxPlan` (`spawnspec.py`) is confined by the spawner (profiles
strict and net, docs/sandbox.md); `Spawner.mechanisms` says what the spawner found at its
start. A running child is a `child.Child`; starting and ending the spawner process itself is
`launch.py`.
"""

from __future__ import annotations

import array
import contextlib
import errno
import functools
import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Final

import orjson
import trio

from ..core.errors import SpawnError
from ..core.limits import MB
from .child import Child, Outcome, SpawnerGone, SpawnerLink
from .childfds import ChildFds, env_memfd
from .launch import (
    HIDE_ENV,
    RUNNER_FLAGS,
    SPAWN_MODE_ENV,
    SPAWN_MODES,
    SPAWNER_EXIT_BOUND,
    SpawnerProcess,
    TakenCount,
    close_spawner,
    raise_open_files_limit,
    start_spawner_process,
)
from .runnerside import protocol, runner_path
from .spawnspec import ChildSpec, ModuleCall, SandboxPlan, spawn_request

if TYPE_CHECKING:
    from .egress import EgressProxy

#: `off`: `module` hooks start a new interpreter each (cold) instead of a fork of the warm
#: spawner (`runners/warm.py`); for comparing the two. Anything else, or unset: warm.
WARM_ENV: Final = "MCPX_HOOKS_WARM"
#: For callers, with the rest of the spawn path.
__all__ = [
    "HIDE_ENV",
    "RUNNER_FLAGS",
    "SPAWN_MODES",
    "SPAWN_MODE_ENV",
    "Child",
    "ChildSpec",
    "ModuleCall",
    "Outcome",
    "SandboxPlan",
    "SpawnerProcess",
    "TakenCount",
    "runner_path",
]

_log = logging.getLogger(__name__)


class Spawner:
    """Handle to the resident spawner process. Use through `open_spawner()`.

    If the spawner dies (any way: killed, out of memory), the next `open_child` starts a new
    one (`restarts` counts them). A child whose request the dead spawner had not taken is
    started once more on the new one; a child it had taken (it may have started: the spawner
    counts a request as taken before anything can start it, `TakenCount`) dies with its
    spawner's namespace and its `Outcome.lost` is set: never retried, as it may have done
    part of its work.
    """

    def __init__(self, started: SpawnerProcess) -> None:
        self._lock = trio.Lock()
        self._restart_lock = trio.Lock()

        #: How many times the spawner was started again after dying.
        self.restarts = 0
        self._egress: EgressProxy | None = None
        self._adopt(started)

    def _adopt(self, started: SpawnerProcess) -> None:
        proc, mode, report = started.proc, started.mode, started.report
        self._proc = proc
        self._raw = started.sock
        self._sock = trio.socket.from_stdlib_socket(started.sock)  # owns it; non-blocking
        self._taken = started.taken
        #: The largest request its socket carries: one datagram, at most the send buffer
        #: less 32 bytes (`launch.py` raises it as far as the kernel allows).
        sndbuf = started.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        self.request_max = min(protocol.MAX_MESSAGE, sndbuf - 32)
        #: Requests sent to this spawner, numbered as it takes them (`TakenCount`).
        self._sent = 0
        #: The spawner's pid (the process that serves: rootless, a child of the one started
        #: here, `runners/userns.py`), and how it owns trees: "pidns" or "keeper".
        self.pid = int(report.get("pid") or proc.pid)
        self.mode = mode
        #: Whether it runs in a user namespace of its own (an ordinary user's supervisor).
        self.userns = report.get("userns") is True
        #: The settings that can refuse user namespaces: name, value (None: not on this
        #: kernel), whether it refuses them (reported to an ordinary user's supervisor).
        self.userns_settings: list[tuple[str, str | None, bool]] = [
            (str(n), None if v is None else str(v), bool(r))
            for n, v, r in report.get("usernsSettings") or ()
        ]
        #: Whether `module` hooks run warm, in a fork of the spawner (pidns mode; `WARM_ENV`).
        self.warm = mode == "pidns" and os.environ.get(WARM_ENV, "on") != "off"
        #: Isolation mechanisms the spawner found at its start: name -> True, or why it is
        #: missing (`runners/mechanisms.py`).
        self.mechanisms: dict[str, bool | str] = dict(report.get("mechanisms") or {})
        self.landlock_abi = int(report.get("landlockAbi") or 0)
        #: What bounds a sandboxed tree's memory (`runners/memcg.py`): {"by": "cgroup",
        #: "version", "path"} or {"by": "rlimit", "why"}.
        self.memory: dict[str, object] = dict(report.get("memory") or {})
        #: pidns: how each tree's reaper, its namespace's first process, is made
        #: (`runners/reapers.py`), in words; None in keeper mode.
        self.reaper = str(report["reaper"]) if "reaper" in report else None

    @property
    def egress(self) -> EgressProxy:
        """The proxy of the children with a `network` list (`egress.py`): one per
        supervisor, made when the first such child starts."""
        if self._egress is None:
            from .egress import EgressProxy

            self._egress = EgressProxy()
        return self._egress

    @contextlib.asynccontextmanager
    async def open_child(
        self,
        spec: ChildSpec,
        *,
        kill_grace: float,
        stdin: bool = True,
        stdin_data: bytes = b"",
        extra_fds: Sequence[int] = (),
        collect: tuple[int, int] | None = None,
        outcome: Outcome | None = None,
    ) -> AsyncIterator[Child]:
        """Starts a child; on exit its whole tree is gone and reaped, whatever happened.

        Inside, the child runs in its own session with fds 0, 1, 2 as pipes to `Child.stdin`,
        `stdout`, `stderr` (stdin /dev/null when `stdin` is false), one pipe per `extra_fds`
        at that number in the child (read end `Child.extra[i]`; then `spec.input_fds`).
        `stdin_data` is written to stdin before the child is even asked for, as far as the
        pipe takes it, and closed when all of it fits; `communicate` writes the rest. `collect`
        (stdout cap, stderr tail), for a child that only `communicate`s: the spawner moves
        both into memfds and sends them with the exit report (pidns mode; else ignored). Its
        environment is exactly `spec.env`. A block left early (timeout, cancellation, error)
        gives the tree SIGTERM, then SIGKILL after `kill_grace` seconds, shielded; one left
        normally, whatever still runs. Raises `SpawnError` when the child cannot start.

        A collected child that ends soon is heard of once, at its exit (the spawner holds its
        "started" back, `runners/trees.py` `Held`): it may have run to its end before this
        block is entered, or been cut short by a timeout before it is; `outcome`, when given,
        is the `Child.outcome` that says what it did either way."""
        if self.mode != "pidns":
            collect = None
        outcome = Outcome() if outcome is None else outcome
        if spec.sandbox is not None and spec.sandbox.memory_bytes:
            outcome.memory_mb = spec.sandbox.memory_bytes // MB
            outcome.memory_cgroup = self.memory.get("by") == "cgroup"
        stdin_arg = stdin_data or stdin
        child = await self._start(
            spec, stdin_arg, extra_fds, kill_grace, collect=collect, outcome=outcome
        )
        try:
            yield child
        finally:
            if child.done:  # (the common end: nothing to wait for, no scope needed)
                child.close()
            else:
                with trio.CancelScope(shield=True):
                    await child._terminate(kill_grace)
                    await child.aclose()

    async def _start(
        self,
        spec: ChildSpec,
        stdin: bool | bytes,
        extra_fds: Sequence[int],
        kill_grace: float,
        *,
        collect: tuple[int, int] | None,
        outcome: Outcome,
    ) -> Child:
        """A started child (or, collected, one that ended); once more on a new spawner if the
        spawner died before it."""
        for attempt in (1, 2):
            generation = self.restarts
            if self._proc.poll() is not None:
                await self._restart(generation)
                generation = self.restarts
            child: Child | None = None
            try:
                child = await self._request(spec, stdin, extra_fds, collect, outcome)
                if collect is not None and child._unwritten:
                    await child._feed_until_started()
                else:
                    await child._wait_started()
                return child
            except SpawnerGone as exc:
                if child is not None:
                    await child.aclose()
                if attempt == 2 or not await self._wait_dead():
                    raise SpawnError(str(exc)) from None
                await self._restart(generation)
            except BaseException:
                if child is not None:
                    # Cancelled before "started" arrived: the spawner may start it anyway.
                    with trio.CancelScope(shield=True):
                        await child._terminate(kill_grace)
                        await child.aclose()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _request(
        self,
        spec: ChildSpec,
        stdin: bool | bytes,
        extra_fds: Sequence[int],
        collect: tuple[int, int] | None,
        outcome: Outcome,
    ) -> Child:
        """Sends the spawn request; the child's pipes and control socket, not yet started.
        `stdin`: False for /dev/null, True for a pipe, bytes for a pipe holding them."""
        try:
            mine, keeper_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError as exc:
            raise SpawnError(f"cannot make the child's control socket: {exc.strerror}") from exc
        try:
            fds = ChildFds.make(stdin, extra_fds, outputs=not collect, inputs=spec.input_fds)
        except BaseException:
            mine.close()
            keeper_end.close()
            raise
        try:
            env_fd = None
            if spec.module is not None and self.warm:
                # The environment goes to the child only, never through the spawner.
                env_fd = max(2, *fds.targets) + 1
                fds.give(env_memfd(spec.env), env_fd)
            request = spawn_request(spec, fds.targets, collect=collect, env_fd=env_fd)
            try:
                body = orjson.dumps(request)
            except orjson.JSONEncodeError:  # a lone surrogate: the spawner refuses it by name
                body = json.dumps(request).encode()
            if len(body) > self.request_max:
                raise SpawnError(self._too_big(spec, len(body)))
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_array([keeper_end, *fds.theirs]))]
            try:
                number = await self._send_request(body, rights)
            except OSError as exc:
                if exc.errno in (errno.EMSGSIZE, errno.ENOBUFS):  # not the spawner's doing
                    raise SpawnError(f"{self._too_big(spec, len(body))}: {exc.strerror}") from None
                raise SpawnerGone(f"the spawner is not running: {exc.strerror}") from exc
        except BaseException:
            fds.close_ours()
            mine.close()
            raise
        finally:
            keeper_end.close()
            fds.close_theirs()
        taken = functools.partial(self._taken.reached, number)
        link = SpawnerLink(mine, taken)
        link.on_listener = spec.on_listener
        return fds.child(link, outcome)

    def _too_big(self, spec: ChildSpec, size: int) -> str:
        """Why a request of `size` bytes for `spec` is not sent: what in it is large."""
        argv = sum(len(a.encode(errors="surrogatepass")) + 1 for a in spec.argv)
        env = sum(len(f"{k}={v}".encode(errors="surrogatepass")) + 1 for k, v in spec.env.items())
        bound = (
            " (net.core.wmem_max, the kernel's bound on a socket's buffer, sets it)"
            if self.request_max < protocol.MAX_MESSAGE
            else ""
        )
        return (
            f"its request to the spawner is {size:,} bytes (argv {len(spec.argv):,} items,"
            f" {argv:,} bytes; environment {len(spec.env):,} variables, {env:,} bytes), over the"
            f" {self.request_max:,} bytes one request can be{bound}"
        )

    async def _send_request(self, request: bytes, rights: list[tuple[int, int, bytes]]) -> int:
        """Sends one request; returns its number, counting from 1 for this spawner, in the
        order the spawner will take them (`TakenCount`).

        A request is one datagram, sent whole or not at all: tried at once (no scheduler pass
        before the spawner can start work), queued behind the lock only when the socket is
        full. Not a checkpoint by itself; `open_child` is one further on. Nothing else runs
        between a send and its numbering."""
        try:
            self._raw.sendmsg([request], rights, socket.MSG_NOSIGNAL)
        except BlockingIOError:
            async with self._lock:
                while True:
                    await trio.lowlevel.wait_writable(self._raw)
                    try:
                        self._raw.sendmsg([request], rights, socket.MSG_NOSIGNAL)
                        break
                    except BlockingIOError:
                        continue
        self._sent += 1
        return self._sent

    async def _wait_dead(self) -> bool:
        """Whether the spawner has exited, waiting up to `SPAWNER_EXIT_BOUND` for it."""
        pidfd = os.pidfd_open(self._proc.pid)
        try:
            with trio.move_on_after(SPAWNER_EXIT_BOUND):
                await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return self._proc.poll() is not None

    async def _restart(self, generation: int) -> None:
        """Replaces a dead spawner (once per death: `generation` is `restarts` when the
        caller saw it dead). Raises `SpawnError` if the new one does not start."""
        async with self._restart_lock:
            if self.restarts != generation:
                return  # another caller did it
            dead = self._proc
            self._sock.close()  # (its `TakenCount` lives on for its children's last word)
            await close_spawner(dead)
            _log.warning(
                "the spawner (pid %d) died (exit status %s); starting a new one",
                dead.pid,
                dead.returncode,
            )
            self._adopt(await start_spawner_process())
            self.restarts += 1

    def _close(self) -> None:
        self._sock.close()
        self._taken.close()


def _fd_array(fds: Sequence[int | socket.socket]) -> bytes:
    return array.array("i", [fd if isinstance(fd, int) else fd.fileno() for fd in fds]).tobytes()


@contextlib.asynccontextmanager
async def open_spawner() -> AsyncIterator[Spawner]:
    """Starts the resident spawner and owns it; on exit it is closed and reaped.

    In pidns mode the spawner is PID 1 of its own PID namespace, so if it dies, by any means,
    the kernel kills every process it started. It is forked from this thread, so its
    parent-death signal (SIGKILL) is tied to the thread that lives as long as the supervisor.
    It runs in its own session, so a terminal's Ctrl-C reaches the supervisor, which then
    cancels its runs, and not the spawner. Closing: end of file on its stdin, then up to
    `SPAWNER_EXIT_BOUND` for it to kill and reap what is left, then SIGKILL; shielded.
    A spawner that dies is started again by the next `open_child` (`Spawner`).
    """
    raise_open_files_limit()
    spawner = Spawner(await start_spawner_process())
    try:
        yield spawner
    finally:
        spawner._close()
        await close_spawner(spawner._proc)
