"""A child process while it runs: what it did (`Outcome`), and its owner's handle (`Child`).

`Spawner.open_child` makes them; a `Child` hears of its process and acts on it through its
control socket to the spawner (`SpawnerLink`; `runners/spawner.py` has the protocol).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from typing import Any, Final

import attrs
import trio

from ..core.errors import SpawnError
from ..core.records import Record
from .childlink import SpawnerLink, received_fds
from .runnerside import protocol

#: For callers, with the child's handle.
__all__ = ["Child", "Outcome", "SpawnerGone", "SpawnerLink", "received_fds"]

#: How long the keeper may take to report after SIGKILL before we kill it and give up waiting.
KILL_REPORT_BOUND: Final = 5.0
_READ_CHUNK: Final = 65536


#: What a process prints when an allocation was refused (Python, libc's strerror, glibc and
#: the usual runtimes): how a tree that a per-process limit at its memory bound stopped
#: (`RLIMIT_DATA` beside a cgroup, `RLIMIT_AS` without one) is told from one that failed
#: otherwise (`Outcome.over_memory`).
ALLOCATION_FAILURES: Final = (
    b"MemoryError",
    b"Cannot allocate memory",
    b"out of memory",
    b"Out of memory",
    b"memory allocation of",  # Rust's: "memory allocation of N bytes failed"
)
#: And without a cgroup, a full scratch too: the tmpfs is then no larger than the bound.
MEMORY_FAILURES: Final = (*ALLOCATION_FAILURES, b"No space left on device")
_MEMORY_TAIL: Final = 4096


@attrs.define(repr=False)
class Outcome(Record):
    """What happened to a child; filled in as it runs, so a timeout still has the tail."""

    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int = 0
    max_rss_kb: int = 0
    stdout: bytearray = attrs.field(factory=bytearray)
    stdout_overflow: bool = False
    stderr_tail: bytearray = attrs.field(factory=bytearray)
    #: Set when the owner had to kill the tree (timeout, cancellation, overflow).
    killed: bool = False
    exited: bool = False
    #: Set when the spawner died while the child ran: the tree died with it, unreported.
    lost: bool = False
    #: The tree's memory bound in MiB (a sandboxed child's `memoryMb`), whether a cgroup
    #: enforced it, and whether the spawner saw the tree go over it (its cgroup's OOM).
    memory_mb: int | None = None
    memory_cgroup: bool = False
    memory_exceeded: bool = False

    @property
    def over_memory(self) -> int | None:
        """The `memoryMb` the tree went over, when it failed for it; else None. A cgroup's
        OOM the spawner reports. Otherwise the failure is what the tree could see, in what
        it printed last on stderr: an allocation refused (each process's `RLIMIT_DATA` is
        at the bound beside a cgroup, its `RLIMIT_AS` without one: one process that
        allocates past the bound is stopped there before the cgroup is full), or, without a
        cgroup, a full scratch tmpfs."""
        if self.memory_mb is None:
            return None
        if self.memory_exceeded:
            return self.memory_mb
        failed = self.exited and (self.signal is not None or self.exit_code != 0)
        if not failed:
            return None
        tail = bytes(self.stderr_tail[-_MEMORY_TAIL:])
        said = ALLOCATION_FAILURES if self.memory_cgroup else MEMORY_FAILURES
        return self.memory_mb if any(m in tail for m in said) else None


class SpawnerGone(SpawnError):
    """The spawner went away before it started the child: nothing of it ran."""


class Child:
    """A running child owned by `Spawner.open_child`, heard of and acted on through `link`.

    Its stdout and stderr are streams here, or, when `collected`, read by the spawner and
    sent with the exit report (`communicate` then only waits).
    """

    def __init__(
        self,
        link: SpawnerLink,
        stdin: trio.lowlevel.FdStream | None,
        outputs: tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream] | None,
        extra: Sequence[trio.lowlevel.FdStream],
        outcome: Outcome | None = None,
    ) -> None:
        self._link = link
        self.stdin = stdin
        self._outputs = outputs
        self.collected = outputs is None
        #: Extra channels the caller asked for (read ends), e.g. a frames fd.
        self.extra = tuple(extra)
        self.outcome = Outcome() if outcome is None else outcome
        self.keeper: int | None = None
        self._exit_seen = trio.Event()
        #: Whether a keeper said it took the request (it may start the child from then on).
        self._accepted = False
        #: pidns: the child's pidfd and its reaper's, from "started" (`_kill_tree`).
        self._pidfds: list[int] = []
        #: `communicate`'s caps, and which of its outputs it has not read to the end.
        self._caps: tuple[int, int] | None = None
        self._unread = set() if outputs is None else {"stdout", "stderr"}
        #: What of `open_child`'s `stdin_data` the pipe did not take; `communicate` writes it.
        self._unwritten = b""

    @property
    def stdout(self) -> trio.lowlevel.FdStream:
        assert self._outputs is not None, "a collected child has no stdout stream"
        return self._outputs[0]

    @property
    def stderr(self) -> trio.lowlevel.FdStream:
        assert self._outputs is not None, "a collected child has no stderr stream"
        return self._outputs[1]

    async def _recv(self) -> dict[str, Any] | None:
        return await self._link.recv()

    def _taken(self) -> bool:
        """Whether the spawner took the request: it said "accepted" (keeper mode), or its
        count of requests taken reached this one's (pidns mode)."""
        return self._accepted or self._link.taken()

    def _note(self, msg: dict[str, Any] | None) -> None:
        """Takes in a message; the tree is over at "exit", "error" or end of file."""
        event = None if msg is None else msg.get("event")
        if event in ("accepted", "listening"):  # (taken; an `egress` child's socket, served)
            if msg is not None and event == "accepted":
                self._accepted = True
                self.keeper = msg.get("keeper")
            return
        if msg is not None and event == "started":
            self.outcome.pid = msg["pid"]
            self.keeper = msg.get("keeper") or self.keeper
            self._pidfds = msg.get("pidfds", [])
            return
        if msg is not None and event == "exit":
            if "pid" in msg:  # (a collected child's "started" may never have come)
                self.outcome.pid = msg["pid"]
            self.outcome.exit_code = msg["code"]
            self.outcome.signal = msg["signal"]
            self.outcome.cpu_ms = msg["cpuMs"]
            self.outcome.max_rss_kb = msg["maxRssKb"]
            self.outcome.memory_exceeded = msg.get("overMemory") is True
            self.outcome.exited = True
            if "output" in msg:  # collected by the spawner
                self.outcome.stdout[:], self.outcome.stderr_tail[:] = msg["output"]
                if msg.get("overflow"):
                    self.outcome.stdout_overflow = self.outcome.killed = True
        elif msg is None and (self.outcome.pid is not None or self._taken()):
            self.outcome.lost = True
        self._exit_seen.set()

    async def _wait_started(self) -> None:
        """Returns once the child started, or ended (a collected child whose "started" the
        spawner held back), or once it is lost: the spawner went away after it took the
        request, so the child may have run (`Outcome.lost`; never started again).
        Raises `SpawnerGone` when the spawner went away before it took the request (nothing
        ran: safe to send again), `SpawnError` when it could not start."""
        while True:
            msg = await self._recv()
            self._note(msg)
            if msg is None:
                if self._taken():
                    return
                raise SpawnerGone("the spawner went away before the child started")
            event = msg.get("event")
            if event in ("started", "exit"):
                return
            if event not in ("accepted", "listening"):
                raise SpawnError(str(msg.get("message", msg)))

    async def _feed_until_started(self) -> None:
        """`_wait_started`, writing meanwhile what of stdin the pipe did not take: the
        spawner holds a collected child's "started" until it ends, and a child reading its
        input whole before anything else would end only once the hold is up (a second)."""
        failed: Exception | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._feed)
            try:
                await self._wait_started()
            except Exception as exc:  # (raised as itself below, not in the nursery's group)
                failed = exc
            nursery.cancel_scope.cancel()
        if failed is not None:
            raise failed

    async def _feed(self) -> None:
        """Writes `_unwritten` to stdin, keeping in it what is not written yet (whatever
        point it is cancelled at), and closes stdin once all of it is."""
        assert self.stdin is not None
        fd, data, done = self.stdin.fileno(), memoryview(self._unwritten), 0
        try:
            while done < len(data):
                await trio.lowlevel.wait_writable(fd)
                try:
                    done += os.write(fd, data[done : done + _READ_CHUNK])
                except BlockingIOError:
                    continue
                except OSError:  # the child closed its stdin, or ended: nothing to write
                    done = len(data)
            self.stdin.close()
        finally:
            self._unwritten = bytes(data[done:])

    async def wait(self) -> Outcome:
        """Waits until the whole tree is gone and reaped; returns the outcome.

        Also returns if the spawner goes away (its control socket closes): then
        `outcome.exited` stays false.
        """
        while not self._exit_seen.is_set():
            self._note(await self._recv())
        return self.outcome

    async def send_command(self, cmd: str) -> None:
        await self._link.send(cmd)

    async def kill(self) -> None:
        """SIGKILL the whole tree now (e.g. output over its cap); `wait` sees it reaped."""
        self.outcome.killed = True
        await self._kill_tree()

    async def _kill_tree(self) -> None:
        """SIGKILL to the tree: in pidns mode straight to the child and its reaper, through the
        pidfds that came with "started" (the reaper is the init of the tree's namespace: that
        takes all of it; the spawner sees it gone and reports as ever), which saves a round
        trip through the spawner on every timeout; else, or before "started", through the
        spawner."""
        if not self._pidfds:
            await self.send_command(protocol.KILL)
            return
        for pidfd in self._pidfds:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    async def communicate(self, stdin: bytes, max_stdout: int, stderr_tail: int) -> Outcome:
        """Writes `stdin` and closes it, reads stdout (capped: over `max_stdout` the tree is
        killed) and stderr (its last `stderr_tail` bytes kept), and waits for the exit.

        Cancelled (the caller's timeout), it leaves what it read in `outcome`; once the tree
        is gone `open_child` adds what the tree wrote while it was being terminated.
        """
        self._caps = (max_stdout, stderr_tail)
        stdin = self._unwritten + stdin
        if not stdin and self.stdin is not None:
            self.stdin.close()  # nothing to write: no task for it
        if self.collected and not stdin:
            return await self.wait()
        async with trio.open_nursery() as nursery:
            if stdin:
                nursery.start_soon(self._write_stdin, stdin)
            if not self.collected:
                nursery.start_soon(self._read_stdout, max_stdout)
                nursery.start_soon(self._read_stderr, stderr_tail)
            await self.wait()
        return self.outcome

    async def _write_stdin(self, data: bytes) -> None:
        if self.stdin is None:
            return
        # A child that exits or closes stdin without reading all of it is not an error.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            view = memoryview(data)
            for i in range(0, len(view), _READ_CHUNK):
                await self.stdin.send_all(view[i : i + _READ_CHUNK])
        await self.stdin.aclose()

    async def _read_stdout(self, cap: int) -> None:
        out = self.outcome.stdout
        while chunk := await self.stdout.receive_some(_READ_CHUNK):
            if len(out) + len(chunk) > cap:
                out.extend(chunk[: cap - len(out)])
                self.outcome.stdout_overflow = True
                self._unread.discard("stdout")
                await self.kill()
                return
            out.extend(chunk)
        self._unread.discard("stdout")

    async def _read_stderr(self, keep: int) -> None:
        tail = self.outcome.stderr_tail
        while chunk := await self.stderr.receive_some(_READ_CHUNK):
            tail.extend(chunk)
            if len(tail) > keep:
                del tail[: len(tail) - keep]
        self._unread.discard("stderr")

    async def _drain(self) -> None:
        """Reads what a cancelled `communicate` left, within its caps. Only once the tree is
        reaped: no writer is left then, so this ends at end of file (bounded all the same)."""
        if self._caps is None or not self.outcome.exited or not self._unread:
            return
        with trio.move_on_after(KILL_REPORT_BOUND):
            if "stdout" in self._unread:
                await self._read_stdout(self._caps[0])
            if "stderr" in self._unread:
                await self._read_stderr(self._caps[1])

    async def _terminate(self, grace: float) -> None:
        """SIGTERM the tree, wait up to `grace`, SIGKILL (at once when `grace` is 0), wait
        for the reap report; then
        read what output the tree left (see `communicate`)."""
        if not self._exit_seen.is_set():  # else reaped already, or never started
            await self._stop(grace)
        await self._drain()

    async def _stop(self, grace: float) -> None:
        # Also when cancelled before "started" arrived: the spawner obeys once it has started
        # the child, and `wait` reads past "started".
        self.outcome.killed = True
        if grace > 0:
            with trio.move_on_after(grace) as scope:
                await self.send_command(protocol.TERM)
                await self.wait()
            if not scope.cancelled_caught:
                return
        await self._kill_tree()
        with trio.move_on_after(KILL_REPORT_BOUND):
            await self.wait()
            return
        # The spawner side is stuck. In keeper mode kill the keeper (alive: it still holds
        # the control socket); the spawner kills its orphans. In pidns mode the child is the
        # init of its namespace, and SIGKILL from here takes the whole namespace down.
        target = self.keeper if self.keeper is not None else self.outcome.pid
        if target is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)

    @property
    def done(self) -> bool:
        """Whether the tree is gone and reaped and nothing of its output is left to read:
        `close` then does all that ending it takes."""
        return self._exit_seen.is_set() and not (self.outcome.exited and self._unread)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Closes what this side holds of the child (its streams, control socket, pidfd)."""
        for stream in (self.stdin, *(self._outputs or ()), *self.extra):
            if stream is not None:
                stream.close()
        self._link.close()
        for pidfd in self._pidfds:
            os.close(pidfd)
        self._pidfds = []
