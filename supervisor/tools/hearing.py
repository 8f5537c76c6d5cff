"""How a server's notification reaches who hears it (a client's progress or log message):
for a bounded time, a hearer's failure its own, so that the reading of a shared server's
output is held up by no one client (`rawchannel.py`, `ServerEntry.heard`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

import anyio
import trio

#: How long the reading of a server's stdout waits for a hearer of one of its notifications
#: (a client slow to read its progress or log messages), in seconds.
HEAR_WAIT_S: Final = 1.0
#: What a send to a client that is gone raises (the SDK's streams, or our pipes).
GONE: Final = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
)
_Heard = TypeVar("_Heard")
logger = logging.getLogger("mcpx_hooks.mcp")


async def hear_within(hear: Callable[[_Heard], Awaitable[None]], said: _Heard) -> bool:
    """`hear(said)`, a notification to its hearer, for at most `HEAR_WAIT_S`: whether it was
    heard. A hearer whose client is gone misses it; one that fails otherwise is logged.
    Neither ends the reading of the server's stdout (the server's other uses go on)."""
    with trio.move_on_after(HEAR_WAIT_S):
        try:
            await hear(said)
        except GONE:
            return False
        except Exception as exc:  # (a hearer's failure is its own, as in the SDK's client)
            logger.warning(
                "a server's notification was not passed on: %s: %s", type(exc).__name__, exc
            )
            return False
        return True
    return False


class Progress(Protocol):
    """What hears a call's progress as the server reports it: its numbers, and `written`,
    the notification's params as the server wrote them (None where the SDK's client read
    them: its callback is given the numbers alone)."""

    async def __call__(
        self,
        progress: float,
        total: float | None,
        message: str | None,
        written: Mapping[str, Any] | None = None,
    ) -> None: ...
