"""The answering side of a run's asks, for one who follows its frames (`exec`, in process
or with `--remote`): `AskWatcher` hands each `ask` frame to a `Responder` in a task of its
own, and cancels that task once the ask's hook frame shows that the ask was settled (by
someone else, or by the deadline). Where the answer goes is the `Deliver`'s: the run's own
`Asks` in process, an `answer` message to the server otherwise.

It loads no more than the wire does: the remote client uses it without the server or runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ..core.effects import AnsweredBy
from ..core.frames import FrameType

#: What a responder answers an `ask` frame (wire form) with, or None to let it be.
Responder = Callable[[Mapping[str, Any]], Awaitable[tuple[str, AnsweredBy] | None]]
#: Where a watcher's answer goes: `(askId, answer, by)`.
Deliver = Callable[[str, str, AnsweredBy], Awaitable[None]]


class AskWatcher:
    """Answers the `ask` frames of a stream it is shown (`see`), each in a task of the
    nursery, through `responder`; the task is cancelled when the ask's hook frame comes.
    Without a responder it answers nothing (the deadline will)."""

    def __init__(
        self, nursery: trio.Nursery, responder: Responder | None, deliver: Deliver
    ) -> None:
        self._nursery = nursery
        self._responder = responder
        self._deliver = deliver
        self._asking: dict[str, trio.CancelScope] = {}  # by hook name

    def see(self, frame: Mapping[str, Any]) -> None:
        kind = frame.get("type")
        if self._responder is None:
            return
        if kind == FrameType.ASK:
            scope = trio.CancelScope()
            self._asking[str(frame.get("hook"))] = scope
            self._nursery.start_soon(self._respond, frame, scope)
        elif kind == FrameType.HOOK:
            settled = self._asking.pop(str(frame.get("name")), None)
            if settled is not None:
                settled.cancel()

    async def _respond(self, frame: Mapping[str, Any], scope: trio.CancelScope) -> None:
        assert self._responder is not None
        with scope:
            decided = await self._responder(frame)
            if decided is not None:
                await self._deliver(str(frame["askId"]), *decided)
