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
import logging
import math
import resource
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Final

import trio

logger = logging.getLogger("mcpx_hooks.server")

#: What `accept(2)` says when the process or the system has no descriptor (or buffer) left.
CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: How long to wait before trying again when there is no handshake to drop.
RETRY_S: Final = 0.1
#: The shortest time between two warnings of a full descriptor table.
QUIET_S: Final = 60.0


class Handshakes:
    """The sockets still in their handshake, oldest first, each with the scope that ends it:
    at most `most`, past which the oldest is dropped (a client that completes its handshake
    is never kept out by ones that stall)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._scopes: dict[int, trio.CancelScope] = {}

    @contextlib.contextmanager
    def pending(self, number: int) -> Iterator[trio.CancelScope]:
        """Connection `number`'s handshake, in the block: dropped, its scope is cancelled."""
        if len(self._scopes) >= self.most:
            self.drop_oldest()
        with trio.CancelScope() as scope:
            self._scopes[number] = scope
            try:
                yield scope
            finally:
                self._scopes.pop(number, None)

    def __len__(self) -> int:
        return len(self._scopes)

    def drop_oldest(self) -> bool:
        """Ends the oldest pending handshake; False when there is none."""
        if not self._scopes:
            return False
        self._scopes.pop(next(iter(self._scopes))).cancel()
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
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    handlers: trio.Nursery,
    make_room: Callable[[], Awaitable[bool]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accepts on every listener until cancelled, each connection's `handler` started in
    `handlers`; on a full descriptor table, `make_room` (False: nothing to drop). Reports
    started once accepting; the listeners are closed on the way out."""
    warning = _Warning()
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept, listener, handler, handlers, make_room, warning)
        task_status.started()


async def _accept(
    listener: trio.SocketListener,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    handlers: trio.Nursery,
    make_room: Callable[[], Awaitable[bool]],
    warning: _Warning,
) -> None:
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                dropped = await make_room()
                warning.met(exc, dropped)
                if not dropped:
                    await trio.sleep(RETRY_S)
                continue
            handlers.start_soon(_handled, stream, handler)


async def _handled(
    stream: trio.SocketStream, handler: Callable[[trio.SocketStream], Awaitable[None]]
) -> None:
    try:
        await handler(stream)
    finally:
        await trio.aclose_forcefully(stream)
