"""Properties (Hypothesis, stateful) of `/mcp`'s sessions at their cap (`service/mcpweb.py`
`Sessions`): any interleaving of sessions opened, requests of them started and ended (a POST
under way, a GET stream open), sessions deleted, and time passing, never leaves more than
the cap open, never ends a session with a request in flight to make room, ends the one idle
longest when it makes room, and refuses a new one only when every one open has a request in
flight.

Model-level: the SDK's transport is not driven. The `Sessions` steps are the real ones
(`_make_room`, `_settled`, `_discard`, in virtual time); what `_open_session` and `app` do
around them, in order and with no wait between, is repeated here (a transport that only
records its end, a gateway without a run): `test_mcp_http.py` drives the whole path.
"""

from __future__ import annotations

from typing import Any, cast

import attrs
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mcpx_hooks.supervisor.service.mcpweb import Sessions, _Open, _settled

CAP = 3


@attrs.define(eq=False)
class Transport:
    """What `Sessions` reads of a transport: its id, and whether it was ended."""

    mcp_session_id: str
    is_terminated: bool = False

    async def terminate(self) -> None:
        self.is_terminated = True


@attrs.define
class Gateway:
    session: None = None


class SessionsAtTheirCap(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = trio.testing.MockClock()
        self.sessions = Sessions.__new__(Sessions)
        self.sessions.max_sessions = CAP
        self.sessions._open = {}
        self.made = 0
        self.ended: set[str] = set()
        #: When each session's last request in flight ended, as seen here.
        self.idle_at: dict[str, float] = {}

    def _in_trio(self, fn: Any) -> Any:
        async def call() -> Any:
            return await fn()

        return trio.run(call, clock=self.clock)

    def _held(self) -> dict[str, _Open]:
        return self.sessions._open

    @rule()
    def open_one(self) -> None:
        sessions = self.sessions
        before = dict(self._held())

        async def opening() -> None:
            room = sessions._make_room() if len(sessions._open) >= CAP else None
            if len(sessions._open) >= CAP:
                assert all(held.in_flight for held in before.values())  # (503: none idle)
                return
            if room is not None:
                idle = [h for h in before.values() if not h.in_flight]
                assert before[cast(str, room.mcp_session_id)] in idle
                idle_at = [self.idle_at[k] for k, h in before.items() if not h.in_flight]
                assert self.idle_at[cast(str, room.mcp_session_id)] == min(idle_at)
            self.made += 1
            transport = Transport(f"s{self.made}")
            held = _Open(cast(Any, transport), cast(Any, Gateway()))
            sessions._open[transport.mcp_session_id] = held
            if room is not None:
                await sessions._discard(room)
                self.ended.add(cast(str, room.mcp_session_id))
            _settled(held)  # (its `initialize` answered)
            self.idle_at[transport.mcp_session_id] = self.clock.current_time()

        self._in_trio(opening)

    @precondition(lambda self: self._held())
    @rule(data=st.data())
    def a_request_starts(self, data: st.DataObject) -> None:
        held = self._held()[data.draw(st.sampled_from(sorted(self._held())))]
        held.in_flight += 1

    @precondition(lambda self: any(h.in_flight for h in self._held().values()))
    @rule(data=st.data())
    def a_request_ends(self, data: st.DataObject) -> None:
        busy = sorted(k for k, h in self._held().items() if h.in_flight)
        key = data.draw(st.sampled_from(busy))
        held = self._held()[key]

        async def ending() -> None:
            _settled(held)

        self._in_trio(ending)
        if not held.in_flight:
            self.idle_at[key] = self.clock.current_time()

    @precondition(lambda self: self._held())
    @rule(data=st.data())
    def deleted(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self._held())))
        transport = self._held()[key].transport

        async def deleting() -> None:
            await self.sessions._discard(transport)

        self._in_trio(deleting)
        self.ended.add(key)

    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 60.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.jump(seconds)

    @invariant()
    def within_the_cap(self) -> None:
        assert len(self._held()) <= CAP
        for key, held in self._held().items():
            assert key not in self.ended
            assert held.in_flight >= 0
            assert not held.transport.is_terminated


TestSessionsAtTheirCap = SessionsAtTheirCap.TestCase
TestSessionsAtTheirCap.settings = settings(
    max_examples=settings.default.max_examples * 2, stateful_step_count=30
)
