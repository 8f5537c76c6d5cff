"""The NATS client (nats-py, an asyncio library) under Trio: one asyncio loop in a thread of
its own, reached through two doors.

- `Bridge.call(fn, *args)`: runs the coroutine `fn(*args)` on the loop and waits for it
  without blocking Trio (the loop's future wakes the Trio task through its token).
  Cancelling the Trio task cancels the asyncio task.
- `Bridge.stream(producer)`: runs `producer(deliver)` on the loop, each item it `deliver`s
  going into a bounded Trio memory channel. That is the backpressure: while the channel is
  full, `deliver` waits (in an executor thread, never on the loop), so the producer stops
  pulling from NATS and the server's flow control holds the rest. Leaving the block cancels
  the producer and waits for it.

Why a thread, not trio-asyncio: nats-py keeps its reconnect loop, pings and flushers as
asyncio tasks that must keep running while Trio waits elsewhere; one loop in one thread
runs them as nats-py expects, the Trio side only ever waits on futures, and no Trio
callback runs inside asyncio. The thread is started and joined by `open_bridge`: nothing
outlives the block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import trio

from ..core.errors import HooksError, bug_summary
from .jet import NATS_FAILED, said

T = TypeVar("T")
Deliver = Callable[[Any], Awaitable[None]]

logger = logging.getLogger("mcpx_hooks.cluster")

#: Items waiting between a producer on the loop and its Trio reader.
CHANNEL_BOUND: Final = 256
#: How long closing the client and stopping the loop may take at exit.
CLOSE_S: Final = 5.0
#: While the bridge is open, a thread waiting for the GIL gets it within this (Python's
#: default is 5 ms). Every hop between Trio and the loop is a thread waking the other; with
#: a few runs at once, both threads busy, each hop waited up to the default, and a run makes
#: a dozen hops. Measured: 200 ms runs, 16 at once through a gateway, ~7% more runs/s.
SWITCH_S: Final = 0.0005


class ChannelClosed(HooksError):
    """The Trio reader of a stream has gone: the producer stops."""


class Bridge:
    """One asyncio loop in a thread, and the Trio run that reaches it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, token: trio.lowlevel.TrioToken) -> None:
        self.loop = loop
        self.token = token

    async def call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """`await fn(*args)` on the loop; its result or exception, here."""
        future = asyncio.run_coroutine_threadsafe(fn(*args), self.loop)
        return await self._wait(future)

    async def _wait(self, future: concurrent.futures.Future[T]) -> T:
        done = trio.Event()
        token = self.token

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        try:
            await done.wait()
        except trio.Cancelled:
            future.cancel()
            raise
        return future.result()

    @contextlib.asynccontextmanager
    async def stream(
        self,
        producer: Callable[[Deliver], Coroutine[Any, Any, None]],
        bound: int = CHANNEL_BOUND,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[Any]]:
        """The items `producer` delivers, in order, in a channel of `bound`; an exception
        the producer raises comes out of the channel's reader when it reaches the end."""
        send, receive = trio.open_memory_channel[Any](bound)
        token, loop = self.token, self.loop
        # Items go over one way, each a callback on the Trio thread, run in order: the
        # producer hands over as many as the channel had room for when it last asked (asked
        # behind the items put before, so never more than fit), and asks again only then.
        room = 0
        gone = False  # the reader has gone (set on the Trio thread)

        def put(item: Any) -> None:
            nonlocal gone
            try:
                send.send_nowait(item)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                gone = True

        def ask(settled: asyncio.Future[int | None]) -> None:
            free = None if gone else bound - send.statistics().current_buffer_used
            loop.call_soon_threadsafe(_settle, settled, free)

        async def deliver(item: Any) -> None:
            nonlocal room
            if not room:
                settled: asyncio.Future[int | None] = loop.create_future()
                token.run_sync_soon(ask, settled)
                free = await settled
                if free is None:
                    raise ChannelClosed
                if not free:  # full: wait for room in a thread, the loop runs on
                    blocking = functools.partial(
                        trio.from_thread.run, send.send, item, trio_token=token
                    )
                    try:
                        await loop.run_in_executor(None, blocking)
                    except (
                        trio.BrokenResourceError,
                        trio.ClosedResourceError,
                        trio.RunFinishedError,
                    ):
                        raise ChannelClosed from None
                    return
                room = free
            if gone:
                raise ChannelClosed
            room -= 1
            token.run_sync_soon(put, item)

        async def run() -> None:
            try:
                await producer(deliver)
            except ChannelClosed:
                pass
            except NATS_FAILED as exc:  # the reader sees its channel end (and follows again)
                logger.warning("NATS: %s", said(exc))
                raise
            except Exception as exc:  # a bug: the reader sees only the end, so it is told here
                logger.error("NATS: %s", bug_summary(exc))
                logger.debug("NATS: a producer failed", exc_info=exc)
                raise
            finally:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(send.close)

        # The task's own end (run, or cancelled before it began) is what the exit waits
        # for: the producer never outlives the block.
        ended = trio.Event()
        tasks: list[asyncio.Task[None]] = []

        def finished(task: asyncio.Task[None]) -> None:
            if not task.cancelled():
                task.exception()  # retrieved: logged above, never printed by asyncio
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(ended.set)

        def begin() -> None:
            task = loop.create_task(run())
            task.add_done_callback(finished)
            tasks.append(task)

        def cancel() -> None:
            for task in tasks:
                task.cancel()

        loop.call_soon_threadsafe(begin)
        try:
            async with receive:
                yield receive
        finally:
            with contextlib.suppress(RuntimeError):  # the loop has stopped: nothing runs
                loop.call_soon_threadsafe(cancel)  # after `begin`: callbacks keep their order
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_S):
                await ended.wait()


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What asyncio would print with a traceback (a task of nats-py's that failed as the
    connection closed) is a debug line: no traceback ever reaches a person."""
    logger.debug("NATS: %s", context.get("exception") or context.get("message"))


def _serve_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.set_exception_handler(_quiet)
    try:
        loop.run_forever()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


@contextlib.asynccontextmanager
async def open_bridge() -> AsyncIterator[Bridge]:
    """An asyncio loop in its own thread for the block; stopped and joined at exit."""
    loop = asyncio.new_event_loop()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, SWITCH_S))
    thread = threading.Thread(target=_serve_loop, args=(loop,), name="mcpx-nats", daemon=True)
    thread.start()
    try:
        yield Bridge(loop, trio.lowlevel.current_trio_token())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(thread.join, CLOSE_S)
        sys.setswitchinterval(switch)
