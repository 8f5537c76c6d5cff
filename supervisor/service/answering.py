"""The answering side of a run's asks, for one who follows its frames (`exec`, in process
or with `--remote`): `AskWatcher` hands each `ask` frame to a `Responder` in a task of its
own, and cancels that task once the ask's hook frame shows that the ask was settled (by
someone else, or by the deadline). Where the answer goes is the `Deliver`'s: the run's own
`Asks` in process, an `answer` message to the server otherwise.

It loads no more than the wire does: the remote client uses it without the server or runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from ..core.effects import AnsweredBy
from ..core.frames import FrameType

#: What a responder answers an `ask` frame (wire form) with, or None to let it be.
Responder = Callable[[Mapping[str, Any]], Awaitable[tuple[str, AnsweredBy] | None]]
#: Where a watcher's answer goes: `(askId, answer, by)`.
Deliver = Callable[[str, str, AnsweredBy], Awaitable[None]]
#: The asks a watcher answers at once. A run asks at most as many at once as it runs hooks
#: together; past it (a server sending asks without end), an ask is left to its deadline.
MAX_ASKING: Final = 256


class AskWatcher:
    """Answers the `ask` frames of a stream it is shown (`see`), each in a task of the
    nursery, through `responder`; the task is cancelled when the ask's hook frame comes.
    Without a responder it answers nothing (the deadline will). A hook that asks again
    before its hook frame ends the earlier ask's task; at most `MAX_ASKING` run at once."""

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
            hook = str(frame.get("hook"))
            if (earlier := self._asking.pop(hook, None)) is not None:
                earlier.cancel()
            if len(self._asking) < MAX_ASKING:
                scope = self._asking[hook] = trio.CancelScope()
                self._nursery.start_soon(self._respond, hook, frame, scope)
        elif kind == FrameType.HOOK:
            settled = self._asking.pop(str(frame.get("name")), None)
            if settled is not None:
                settled.cancel()

    async def _respond(self, hook: str, frame: Mapping[str, Any], scope: trio.CancelScope) -> None:
        assert self._responder is not None
        with scope:
            decided = await self._responder(frame)
            if decided is not None:
                await self._deliver(str(frame["askId"]), *decided)
        if self._asking.get(hook) is scope:  # answered, or left: its hook frame has nothing to end
            del self._asking[hook]
