"""Properties (Hypothesis) of an MCP client's outbox (`service/mcpoutbox.py`): the queue of
progress and log messages on their way to one client, bounded in bytes, with the client told
how many it missed. Any sequence of messages told (any sizes, patient or not), of pauses, of
waits for what was told (`wait_told`, as a call's answer does), against a client that reads
each message at any pace (at once, slowly, never within `HEAR_WAIT_S`, or gone), in virtual
time:

- the messages the client gets are in the order told, none twice;
- before each message it gets, it was told of every earlier one it did not get (the `MISSED`
  notes it got before it count them);
- each message told is got, or counted in a `MISSED` note the client got (one it did not
  read in time has its count told again, in the next);
- the bytes held never pass `OUTBOX_BYTES`, but for one message into an empty queue;
- `wait_told` returns, and by then every message told before it is got or counted.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from mcpx_hooks.supervisor.service.mcpoutbox import MISSED, OUTBOX_BYTES, Outbox, Telling
from mcpx_hooks.supervisor.tools.hearing import HEAR_WAIT_S

#: Pure Python in virtual time: four times the profile's examples.
FAST = settings(max_examples=4 * settings.default.max_examples)
_COUNT = re.compile(re.escape(MISSED).replace(r"\{n\}", r"(\d+)"))

#: How long the client takes to read one message (s): at once, slowly, past `HEAR_WAIT_S`
#: (given up), or it is gone ("gone": its stream closed).
pace = st.sampled_from([0.0, 0.0, 0.01, 0.3, 0.9, HEAR_WAIT_S + 0.5, 30.0, "gone"])
size = st.integers(0, OUTBOX_BYTES // 3) | st.sampled_from(
    [0, OUTBOX_BYTES // 2, OUTBOX_BYTES - 1, OUTBOX_BYTES, OUTBOX_BYTES + 1]
)
step = st.one_of(
    st.tuples(st.just("tell"), size),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 0.1, 0.5, HEAR_WAIT_S, 5.0])),
    st.tuples(st.just("wait_told"), st.none()),
)


@attrs.define
class Client:
    """What the client got, in order: ("message", n) or ("missed", count)."""

    paces: list[Any]
    got: list[tuple[str, int]] = attrs.Factory(list)
    reads: int = 0

    async def read(self, what: tuple[str, int]) -> None:
        wait = self.paces[self.reads % len(self.paces)]
        self.reads += 1
        if wait == "gone":
            raise trio.ClosedResourceError
        await trio.sleep(wait)
        self.got.append(what)

    def message(self, n: int) -> Telling:
        return lambda: self.read(("message", n))

    def warn(self, words: str) -> Telling:
        found = _COUNT.fullmatch(words)
        assert found is not None, words
        count = int(found[1])
        assert count > 0
        return lambda: self.read(("missed", count))


def check_order(got: list[tuple[str, int]]) -> None:
    """Messages in order, none twice; each one preceded by notes counting every earlier one
    the client did not get."""
    missed_said = got_before = 0
    last = -1
    for kind, n in got:
        if kind == "missed":
            missed_said += n
            continue
        assert n > last, got
        # Every earlier message: got, or counted by a note got before this one.
        assert got_before + missed_said >= n, (n, got)
        got_before += 1
        last = n


def run_outbox(steps: list[tuple[str, Any]], paces: list[Any], patient: bool) -> None:
    client = Client(paces)
    outbox = Outbox()
    outbox.patient = patient
    told = largest = 0

    def held_within_bound() -> None:
        # (past the bound only by one message, into an empty queue: at most the largest)
        assert 0 <= outbox._held <= max(OUTBOX_BYTES, largest), outbox._held

    async def main() -> None:
        nonlocal told, largest
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.serve_outbox)
            for kind, arg in steps:
                if kind == "tell":
                    largest = max(largest, arg)
                    await outbox.tell(client.message(told), arg, client.warn)
                    told += 1
                elif kind == "pause":
                    await trio.sleep(arg)
                else:
                    mark = told
                    with trio.fail_after(3600):
                        await outbox.wait_told()
                    # (a note given up: its count is to go with the next one)
                    got = sum(1 for k, n in client.got if k == "message" and n < mark)
                    said = sum(n for k, n in client.got if k == "missed")
                    assert got + said + outbox._missed >= mark, (mark, client.got)
                held_within_bound()
            client.paces = [0.0]  # (the client reads again: everything told reaches it)
            with trio.fail_after(3600):
                await outbox.wait_told()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    note(f"got: {client.got}")
    check_order(client.got)
    got = sum(1 for k, _ in client.got if k == "message")
    said = sum(n for k, n in client.got if k == "missed")
    assert got + said == told, (got, said, told)
    assert outbox._held == 0


@FAST
# A client that read nothing for a second, then read again: the message was given up, and
# the `MISSED` note telling of it too; its count was lost, and the next message reached the
# client with no word of the one before it.
@example([("tell", 0), ("wait_told", None), ("tell", 0)], [HEAR_WAIT_S + 0.5], False)
@given(st.lists(step, max_size=40), st.lists(pace, min_size=1, max_size=8), st.booleans())
def test_an_outbox_delivers_in_order_and_counts_what_it_drops(
    steps: list[tuple[str, Any]], paces: list[Any], patient: bool
) -> None:
    run_outbox(steps, paces, patient)
