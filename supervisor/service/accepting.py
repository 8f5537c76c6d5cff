"""Accepting the service's connections, and what it does when it has no descriptor left.

`trio.serve_listeners` meets a full descriptor table (EMFILE, ENFILE, ENOBUFS, ENOMEM) by
logging the error with its traceback and trying again every 0.1 s: ten lines a second for as
long as it lasts, each called a bug in the service's log, while the sockets that hold the
descriptors, handshakes stalled on purpose among them, keep them until their own timeout and
every new client waits behind them. A process whose open-files limit is below what the
service's caps add up to (`--max-pending` and `--max-connections`, 1,536 by default) meets it
before its caps do.

`serve_accepting` asks the service to make room instead (`make_room`: it drops its oldest
socket still in its handshake, as it does when `--max-pending` is reached, and returns once
that socket is closed), and tries again at once; only with nothing to drop does it wait
`RETRY_S`. It says so in one warning line, naming the limit, then at most once a `QUIET_S`
with how many times it happened meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import math
import os
import resource
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Final

import trio

from ..core import CAPACITY_ERRNOS, ROUTINE_ACCEPT_ERRNOS

logger = logging.getLogger("mcpx_hooks.server")

#: Connections taken from the listener's queue in one go, before the other tasks run. One
#: at a time, a client that opens and closes sockets flat out filled the queue faster than
#: it was taken, and every other client's connection waited in it behind thousands of
#: those (a second and more); taken in batches, the queue empties as it fills, and the
#: handshakes under way stay bounded by `--max-pending` (past it the oldest is dropped).
ACCEPT_BATCH: Final = 64
#: How long to wait before trying again when there is no handshake to drop.
RETRY_S: Final = 0.1
#: The shortest time between two warnings of a full descriptor table.
QUIET_S: Final = 60.0


class Pending:
    """One handshake: the scope that ends it (dropped, or past its time), and whether it
    was dropped."""

    __slots__ = ("dropped", "scope")

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        self.dropped = False


class Handshakes:
    """The sockets still in their handshake, oldest first, each with the scope that ends it:
    at most `most`, past which the oldest is dropped (a client that completes its handshake
    is never kept out by ones that stall)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._scopes: dict[int, Pending] = {}

    @contextlib.contextmanager
    def pending(self, number: int, within_s: float) -> Iterator[Pending]:
        """Connection `number`'s handshake (`number`: its place in the order the connections
        were accepted), in the block, for at most `within_s` (one scope for both ends: a
        scope costs every connection): dropped, its scope is cancelled. Past `most`, the
        oldest accepted is dropped, which may be this one: the handlers of one batch of
        connections start in no set order."""
        with trio.move_on_after(within_s) as scope:
            self._scopes[number] = pending = Pending(scope)
            if len(self._scopes) > self.most:
                self.drop_oldest()
            try:
                yield pending
            finally:
                self._scopes.pop(number, None)

    def __len__(self) -> int:
        return len(self._scopes)

    def drop_oldest(self) -> bool:
        """Ends the oldest pending handshake; False when there is none."""
        if not self._scopes:
            return False
        pending = self._scopes.pop(min(self._scopes))  # (at most `most`: the first accepted)
        pending.dropped = True
        pending.scope.cancel()
        return True

    async def make_room(self, ended: trio.Event) -> bool:
        """For `serve_accepting`: drops the oldest pending handshake and returns once a
        connection has ended (`ended` is set; at most `RETRY_S`). False when none is
        pending."""
        if not self.drop_oldest():
            return False
        with trio.move_on_after(RETRY_S):
            await ended.wait()
        return True


class _Warning:
    """The warning of a full descriptor table: the first time, then at most once a
    `QUIET_S`, with the count of the times since the last line."""

    def __init__(self) -> None:
        self._said_at = -math.inf
        self._unsaid = 0

    def met(self, exc: OSError, dropped: bool) -> None:
        self._unsaid += 1
        now = trio.current_time()
        if now - self._said_at < QUIET_S:
            return
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        times = f" ({self._unsaid} times since the last line)" if self._said_at > -math.inf else ""
        what = (
            "the oldest connection still in its handshake is dropped to make room"
            if dropped
            else f"new connections wait (retrying every {RETRY_S:g} s)"
        )
        logger.warning(
            "cannot accept a connection: %s (this process may open %d files)%s; %s",
            exc.strerror or errno.errorcode.get(exc.errno or 0, "?"),
            soft,
            times,
            what,
        )
        self._said_at, self._unsaid = now, 0


async def serve_accepting(
    listeners: Sequence[trio.SocketListener],
    handler: Callable[[trio.SocketStream, int], Awaitable[None]],
    handlers: trio.Nursery,
    make_room: Callable[[], Awaitable[bool]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accepts on every listener until cancelled, each connection's `handler` started in
    `handlers` with the connection's number, in the order they were accepted (1, 2, …);
    on a full descriptor table, `make_room` (False: nothing to drop). Reports started once
    accepting; the listeners are closed on the way out."""
    warning = _Warning()
    numbers = itertools.count(1)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            accept = functools.partial(_accept, warning=warning, numbers=numbers)
            nursery.start_soon(accept, listener, handler, handlers, make_room)
        task_status.started()


@contextlib.contextmanager
def _taking(listener: trio.SocketListener) -> Iterator[Callable[[], Iterator[trio.SocketStream]]]:
    """What takes the connections waiting in `listener`'s queue now, without waiting, up to
    `ACCEPT_BATCH`, through a duplicate of its descriptor (trio's `accept` yields after each
    one). A connection its client has closed already, before sending a byte (a reset, or its
    end), is closed at once: it has nothing to answer, and no task is started for it. Raises
    what `accept(2)` raises but for routine errors (trio's `SocketListener.accept` too)."""
    sock = listener.socket
    taker = socket.socket(sock.family, sock.type, sock.proto, fileno=os.dup(sock.fileno()))
    taker.setblocking(False)

    def take() -> Iterator[trio.SocketStream]:
        for _ in range(ACCEPT_BATCH):
            try:
                accepted, _ = taker.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in ROUTINE_ACCEPT_ERRNOS:
                    continue
                raise
            try:
                gone = not accepted.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                gone = False  # (nothing sent yet)
            except OSError:
                gone = True
            if gone:
                accepted.close()
                continue
            yield trio.SocketStream(trio.socket.from_stdlib_socket(accepted))

    with taker:
        yield take


async def _accept(
    listener: trio.SocketListener,
    handler: Callable[[trio.SocketStream, int], Awaitable[None]],
    handlers: trio.Nursery,
    make_room: Callable[[], Awaitable[bool]],
    *,
    warning: _Warning,
    numbers: Iterator[int],
) -> None:
    async with listener:
        with _taking(listener) as take:
            while True:
                await trio.lowlevel.wait_readable(listener.socket)
                try:
                    for stream in take():
                        handlers.start_soon(_handled, stream, handler, next(numbers))
                except OSError as exc:
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    dropped = await make_room()
                    warning.met(exc, dropped)
                    if not dropped:
                        await trio.sleep(RETRY_S)
                    continue
                await trio.lowlevel.checkpoint()  # (the others run between two batches)


async def _handled(
    stream: trio.SocketStream,
    handler: Callable[[trio.SocketStream, int], Awaitable[None]],
    number: int,
) -> None:
    try:
        await handler(stream, number)
    finally:
        stream.socket.close()  # (idempotent; `aclose_forcefully` raises and catches a Cancelled)
