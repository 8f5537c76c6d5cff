"""The answering side of a run's asks, for one who follows its frames (`exec`, in process
or with `--remote`): `AskWatcher` hands each `ask` frame to a `Responder` in a task of its
own, and cancels that task once the ask's hook frame shows that the ask was settled (by
someone else, or by the deadline). Where the answer goes is the `Deliver`'s: the run's own
`Asks` in process, an `answer` message to the server otherwise.

It loads no more than the wire does: the remote client uses it without the server or runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import trio

from ..core.effects import AnsweredBy
from ..core.frames import FrameType

#: What a responder answers an `ask` frame (wire form) with, or None to let it be.
Responder = Callable[[Mapping[str, Any]], Awaitable[tuple[str, AnsweredBy] | None]]
#: Where a watcher's answer goes: `(askId, answer, by)`.
Deliver = Callable[[str, str, AnsweredBy], Awaitable[None]]


@runtime_checkable
class Prompting(Protocol):
    """A responder that holds a line of the terminal open while it asks (`exec`'s prompt):
    told, before the frame that settled its ask is shown, so that its line ends first."""

    def settled(self, ask_id: str) -> None: ...


#: The asks a watcher answers at once. A run asks at most as many at once as it runs hooks
#: together; past it (a server sending asks without end), an ask is left to its deadline.
MAX_ASKING: Final = 256


class AskWatcher:
    """Answers the `ask` frames of a stream it is shown (`see`), each in a task of the
    nursery, through `responder`; the task is cancelled when the ask's hook frame comes.
    Without a responder it answers nothing (the deadline will). A hook that asks again
    before its hook frame ends the earlier ask's task; at most `MAX_ASKING` run at once.
    A `Prompting` responder is told at once, in `see`: the caller shows the frame after."""

    def __init__(
        self, nursery: trio.Nursery, responder: Responder | None, deliver: Deliver
    ) -> None:
        self._nursery = nursery
        self._responder = responder
        self._deliver = deliver
        self._asking: dict[str, tuple[trio.CancelScope, str]] = {}  # by hook name, askId
        self._prompting = responder if isinstance(responder, Prompting) else None

    def see(self, frame: Mapping[str, Any]) -> None:
        kind = frame.get("type")
        if self._responder is None:
            return
        if kind == FrameType.ASK:
            hook = str(frame.get("hook"))
            self._settle(hook)
            if len(self._asking) < MAX_ASKING:
                scope = trio.CancelScope()
                self._asking[hook] = scope, str(frame.get("askId"))
                self._nursery.start_soon(self._respond, hook, frame, scope)
        elif kind == FrameType.HOOK:
            self._settle(str(frame.get("name")))

    def _settle(self, hook: str) -> None:
        if (asking := self._asking.pop(hook, None)) is not None:
            scope, ask_id = asking
            scope.cancel()
            if self._prompting is not None:
                self._prompting.settled(ask_id)

    async def _respond(self, hook: str, frame: Mapping[str, Any], scope: trio.CancelScope) -> None:
        assert self._responder is not None
        with scope:
            decided = await self._responder(frame)
            if decided is not None:
                await self._deliver(str(frame["askId"]), *decided)
        if (asking := self._asking.get(hook)) is not None and asking[0] is scope:
            del self._asking[hook]  # answered, or left: its hook frame has nothing to end
