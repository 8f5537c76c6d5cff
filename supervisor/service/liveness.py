"""Whether a client's connection to the server is still alive (`exec --remote`).

A network that freezes (a proxy stopped, a cable pulled, a NAT that forgot the flow) closes
nothing: without a bound the client would wait for ever with nothing on screen. Any bytes
from the server count as life (its frames, its own pings every 30 s, a pong); after
`PING_AFTER_S` of silence the client pings, and a connection still silent `LOST_AFTER_S`
after that ping is lost. A quiet run on a healthy connection is never cut: the server
answers the ping at once, however long its script sleeps.
"""

from __future__ import annotations

import contextlib
from typing import Final

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

#: Silence from the server after which the client pings it (the server pings every 30 s).
PING_AFTER_S: Final = 30.0
#: Silence after that ping past which the connection is taken for lost.
LOST_AFTER_S: Final = 30.0


class Heard:
    """When bytes last came from the server (`at`, trio's clock), on the stream `wrap` gave."""

    def __init__(self) -> None:
        self.at = trio.current_time()

    def wrap(self, stream: trio.abc.Stream) -> trio.abc.Stream:
        return _HeardStream(stream, self)


class _HeardStream(trio.abc.Stream):
    def __init__(self, stream: trio.abc.Stream, heard: Heard) -> None:
        self.stream = stream
        self.heard = heard

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.stream.receive_some(max_bytes)
        if data:
            self.heard.at = trio.current_time()
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.stream.aclose()


async def lost(ws: WebSocketConnection, heard: Heard) -> float:
    """Returns once nothing has come from the server for `LOST_AFTER_S` after a ping sent
    past `PING_AFTER_S` of silence: the seconds it has been silent."""
    async with trio.open_nursery() as nursery:
        while True:
            await trio.sleep_until(heard.at + PING_AFTER_S)
            if trio.current_time() < heard.at + PING_AFTER_S:
                continue  # (something came meanwhile)
            pinged = trio.current_time()
            nursery.start_soon(_ping, ws)  # (its send may wait on a frozen network itself)
            await trio.sleep_until(pinged + LOST_AFTER_S)
            if heard.at < pinged:
                nursery.cancel_scope.cancel()
                return trio.current_time() - heard.at


async def _ping(ws: WebSocketConnection) -> None:
    # (the reader says how the connection ended)
    with contextlib.suppress(ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
        await ws.ping()
