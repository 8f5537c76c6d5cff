"""What an MCP client is told on its calls' way (a tool server's progress on a call, its log
messages while the call is in flight), queued for the client and sent by a task of its own.

It is told from the reading of the tool server's output, which every session with a call to
that server shares: were it sent there, a client that does not read (its HTTP response left
unread, its socket's buffers full) would hold up every other session's answers from the
server for as long as it sends, a second a message. Queued here, the reading goes on at
once; the client's own task waits for it, each message for at most `HEAR_WAIT_S`, and a
client with `OUTBOX_SIZE` messages waiting misses the next ones until it reads (over stdio,
where the client is alone in hearing its servers, the reading waits for room instead, a
message at most `HEAR_WAIT_S`: a server's burst of messages is not cut to the queue's
size while the client reads). A call's
answer waits until what was told before it has gone (`wait_told`), so that the client hears
a call's progress and log messages before its answer, as the server sent them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import trio

from ..tools.hearing import HEAR_WAIT_S, hear_within

#: How many messages may wait for one client that is slow to read; past that, it misses them.
OUTBOX_SIZE: Final = 64

Telling = Callable[[], Awaitable[None]]


class Outbox:
    """One client's queue of messages (`tell`), sent in order by `serve_outbox`."""

    def __init__(self) -> None:
        #: Whether a message told while `OUTBOX_SIZE` wait waits for room (at most
        #: `HEAR_WAIT_S`) rather than being missed: for a client that is alone in hearing the
        #: servers it uses (`mcpx-hooks mcp` over stdio), whose relayed calls' progress waits
        #: so too; never where sessions share servers (over HTTP).
        self.patient = False
        self._send, self._receive = trio.open_memory_channel[Telling](OUTBOX_SIZE)
        self._told = 0  # queued so far
        self._gone = 0  # sent (or given up) so far
        self._moved = trio.Event()

    async def tell(self, send: Telling) -> None:
        """Queues `send` (what sends one message to the client); never waits, unless
        `patient`. A client with `OUTBOX_SIZE` messages waiting misses this one (a patient
        one, when none of them goes within `HEAR_WAIT_S`)."""
        try:
            self._send.send_nowait(send)
        except trio.WouldBlock:
            if not self.patient:
                return
            with trio.move_on_after(HEAR_WAIT_S) as waited:
                try:
                    await self._send.send(send)
                except trio.ClosedResourceError:
                    return
            if waited.cancelled_caught:
                return
        except trio.ClosedResourceError:
            return
        self._told += 1

    async def wait_told(self) -> None:
        """Returns once every message queued before this call has gone (sent, or given up
        after `HEAR_WAIT_S`)."""
        mark = self._told
        while self._gone < mark:
            await self._moved.wait()

    async def serve_outbox(self) -> None:
        """Sends the queued messages in order, each for at most `HEAR_WAIT_S`, until
        cancelled."""
        async for send in self._receive:
            await hear_within(_send_it, send)
            self._gone += 1
            self._moved.set()
            self._moved = trio.Event()


async def _send_it(send: Telling) -> None:
    await send()
