"""Properties (Hypothesis) of the liveness bound of `exec --remote` (`service/liveness.py`),
under virtual time: for any pattern of arrivals (bytes from the server after gaps Hypothesis
draws, through `Heard`'s stream), `lost` never says the connection is lost while bytes came
within the bound, and always says it once the silence passes `PING_AFTER_S + LOST_AFTER_S`:
at that moment, with that silence. Pings are sent only after `PING_AFTER_S` of silence.

The server's side is a trio memory stream (nothing answers a ping: a frozen network but for
the arrivals drawn); `lost` pings through a stand-in with the one method it calls.
"""

from __future__ import annotations

import itertools
from typing import Any, cast

import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mcpx_hooks.supervisor.service.liveness import LOST_AFTER_S, PING_AFTER_S, Heard, lost

BOUND = PING_AFTER_S + LOST_AFTER_S
#: How far past the last arrival a run may go: the bound, and a little more to see it kept.
HORIZON = BOUND + 5


class Pings:
    """What `lost` needs of a WebSocket connection: `ping`, noted, never answered."""

    def __init__(self, heard: Heard) -> None:
        self.heard = heard
        self.sent: list[tuple[float, float]] = []  # (when, silent for)

    async def ping(self) -> None:
        now = trio.current_time()
        self.sent.append((now, now - self.heard.at))
        await trio.sleep_forever()


async def arrivals_then_silence(gaps: list[float]) -> tuple[float, float | None, Pings, float]:
    heard = Heard()
    start = heard.at
    pings = Pings(heard)
    ours, theirs = trio.testing.memory_stream_pair()
    stream = heard.wrap(ours)
    said: float | None = None
    ended = start
    last = start

    async def read() -> None:
        while await stream.receive_some(1024):
            pass

    async def send() -> None:
        nonlocal last
        for gap in gaps:
            await trio.sleep(gap)
            await theirs.send_all(b"x")
            last = trio.current_time()
        await trio.sleep_forever()

    async def watch() -> None:
        nonlocal said, ended
        said = await lost(cast(Any, pings), heard)
        ended = trio.current_time()
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        nursery.start_soon(send)
        nursery.start_soon(watch)
        await trio.sleep(sum(gaps) + HORIZON)
        nursery.cancel_scope.cancel()
    return ended - start, said, pings, last - start


#: A gap of silence; not the bound itself, where an arrival and the check that finds the
#: connection lost fall on one instant, and either may come first.
gap = st.one_of(
    st.floats(0, 2 * BOUND, allow_nan=False).filter(lambda g: abs(g - BOUND) > 1e-6),
    st.sampled_from([PING_AFTER_S, PING_AFTER_S - 1e-9, BOUND - 1e-3, BOUND + 1e-3]),
)


@settings(deadline=None)
@example(gaps=[PING_AFTER_S + 1, 1.0])
@example(gaps=[PING_AFTER_S, LOST_AFTER_S - 1e-6])
@given(gaps=st.lists(gap, max_size=12))
def test_lost_only_and_always_after_the_bound_of_silence(gaps: list[float]) -> None:
    ended, said, pings, last = trio.run(
        arrivals_then_silence, gaps, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    times = [0.0, *(sum(gaps[: i + 1]) for i in range(len(gaps)))]
    silences = [b - a for a, b in itertools.pairwise(times)]
    if any(s >= BOUND + 1e-6 for s in silences):  # lost during the arrivals, not after
        assert said is not None
        first = next(i for i, s in enumerate(silences) if s >= BOUND + 1e-6)
        assert abs(ended - (times[first] + BOUND)) < 1e-6, (ended, times[first])
    else:
        assert said is not None, "never said lost after the arrivals ended"
        assert abs(ended - (last + BOUND)) < 1e-6, (ended, last)
    assert abs(said - BOUND) < 1e-6, said
    # Never lost while bytes came within the bound: no arrival in the BOUND before it said so.
    assert not any(ended - BOUND + 1e-6 < t <= ended for t in times[1:]), (ended, times)
    assert all(silent >= PING_AFTER_S - 1e-6 for _, silent in pings.sent), pings.sent
