"""Asking: an `ask` frame, the run waiting for an answer, the first answer counting, the
deadline's default; the board and the watcher in virtual time, runs with real hooks."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from test_run import answer, argv_request, config, hook, of, outcome, run_to_end

from mcpx_hooks.supervisor.core.effects import AnsweredBy
from mcpx_hooks.supervisor.core.order import OrderError, check_order
from mcpx_hooks.supervisor.run.asking import Asks, Settled
from mcpx_hooks.supervisor.run.runtime import Runtime
from mcpx_hooks.supervisor.run.scriptrun import Run
from mcpx_hooks.supervisor.service.answering import MAX_ASKING, AskWatcher

ASK = {"ask": {"question": "deploy?", "default": "no", "deadlineMs": 60_000}}


async def test_the_first_answer_counts_and_later_ones_are_told_why(
    autojump_clock: trio.abc.Clock,
) -> None:
    asks = Asks()
    ask_id = asks.new_id()
    got: list[Settled] = []

    async def wait() -> None:
        got.append(await asks.wait(ask_id, "no", 30))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1)
        assert asks.open == (ask_id,)
        assert (
            asks.answer(ask_id, "maybe", AnsweredBy.CLIENT) == "an answer is yes or no, not 'maybe'"
        )
        assert asks.answer(ask_id, "yes", AnsweredBy.CLIENT) is None
        said = asks.answer(ask_id, "no", AnsweredBy.TERMINAL)
        assert said == "ask-1 was already answered yes (by client); the first counts"
    assert got == [Settled("yes", AnsweredBy.CLIENT)]
    assert trio.current_time() == pytest.approx(1)  # no waiting out the deadline
    assert asks.answer("ask-9", "yes", AnsweredBy.CLIENT) == (
        "no ask 'ask-9' in this run (open now: none)"
    )


async def test_unanswered_the_default_applies_at_the_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    asks = Asks()
    ask_id = asks.new_id()
    assert await asks.wait(ask_id, "yes", 30) == Settled("yes", AnsweredBy.DEADLINE)
    assert trio.current_time() == pytest.approx(30)
    said = asks.answer(ask_id, "no", AnsweredBy.CLIENT)
    assert said == "ask-1 is closed: its deadline passed (default yes applied)"


async def test_a_cancelled_wait_closes_the_ask(autojump_clock: trio.abc.Clock) -> None:
    asks = Asks()
    ask_id = asks.new_id()
    with trio.move_on_after(5):
        await asks.wait(ask_id, "no", 30)
    assert asks.open == ()
    assert "the run was cancelled" in (asks.answer(ask_id, "yes", AnsweredBy.CLIENT) or "")


async def test_the_watcher_answers_and_stops_when_the_hook_frame_comes(
    autojump_clock: trio.abc.Clock,
) -> None:
    delivered: list[tuple[str, str, AnsweredBy]] = []
    started: list[str] = []

    async def slow(frame: Mapping[str, Any]) -> tuple[str, AnsweredBy] | None:
        started.append(frame["askId"])
        if frame["hook"] == "slow":
            await trio.sleep_forever()
        return ("yes", AnsweredBy.FLAG)

    async def deliver(ask_id: str, word: str, by: AnsweredBy) -> None:
        delivered.append((ask_id, word, by))

    async with trio.open_nursery() as nursery:
        watcher = AskWatcher(nursery, slow, deliver)
        watcher.see({"type": "ask", "askId": "ask-1", "hook": "slow"})
        watcher.see({"type": "ask", "askId": "ask-2", "hook": "quick"})
        await trio.sleep(1)
        watcher.see({"type": "hook", "name": "slow"})  # settled elsewhere: the task ends
    assert sorted(started) == ["ask-1", "ask-2"]
    assert delivered == [("ask-2", "yes", AnsweredBy.FLAG)]


async def test_a_watcher_runs_a_bounded_number_of_asks(autojump_clock: trio.abc.Clock) -> None:
    """A server sending asks without end (new hooks, or one hook again and again) never has
    more than `MAX_ASKING` of them waiting on the person at once."""
    running: list[str] = []
    most = 0

    async def forever(frame: Mapping[str, Any]) -> tuple[str, AnsweredBy] | None:
        nonlocal most
        running.append(frame["askId"])
        most = max(most, len(running))
        try:
            await trio.sleep_forever()
        finally:
            running.remove(frame["askId"])
        return None  # pragma: no cover

    async def deliver(ask_id: str, word: str, by: AnsweredBy) -> None:
        raise AssertionError("nothing is answered")  # pragma: no cover

    async with trio.open_nursery() as nursery:
        watcher = AskWatcher(nursery, forever, deliver)
        for n in range(3 * MAX_ASKING):
            watcher.see({"type": "ask", "askId": f"again-{n}", "hook": "again"})
            await trio.lowlevel.checkpoint()
        await trio.sleep(1)
        assert running == [f"again-{3 * MAX_ASKING - 1}"]  # the latest ask of the hook
        for n in range(3 * MAX_ASKING):
            watcher.see({"type": "ask", "askId": f"new-{n}", "hook": f"hook-{n}"})
        await trio.sleep(1)
        assert len(running) == MAX_ASKING
        watcher.see({"type": "hook", "name": "hook-0"})  # one settled: room for one more
        await trio.sleep(1)
        watcher.see({"type": "ask", "askId": "late", "hook": "late"})
        await trio.sleep(1)
        assert len(running) == MAX_ASKING and "late" in running
        nursery.cancel_scope.cancel()
    assert most == MAX_ASKING


def test_the_frame_order_places_an_ask_before_its_hook_frame() -> None:
    def frames(*kinds: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"type": t, "runId": "r", "seq": i, **f} for i, (t, f) in enumerate(kinds)]

    before = {"phase": "before", "name": "gate"}
    good = frames(
        ("start", {}),
        ("ask", {"hook": "gate"}),
        ("hook", before),
        ("error", {}),
        ("end", {}),
    )
    check_order(good)
    with pytest.raises(OrderError, match="the ask of gate has no hook frame"):
        check_order(frames(("start", {}), ("ask", {"hook": "gate"}), ("error", {}), ("end", {})))
    with pytest.raises(OrderError, match="a run starts with start"):
        check_order(frames(("ask", {"hook": "gate"}), ("start", {})))
    with pytest.raises(OrderError, match="an ask after the outcome"):
        check_order(frames(("start", {}), ("result", {}), ("ask", {"hook": "x"}), ("end", {})))


async def _answering(word: str) -> Any:
    """A `while_running` that answers the run's first ask as a client would."""

    async def answer_first(runtime: Runtime, run: Run) -> None:
        async for batch in run.journal.follow(0):
            for frame in batch:
                if frame["type"] == "ask":
                    assert run.asks.answer(frame["askId"], word, AnsweredBy.CLIENT) is None
                    return

    return answer_first


@pytest.mark.parametrize("word", ["yes", "no"])
async def test_a_run_waits_for_the_answer(tmp_path: Path, word: str) -> None:
    touched = tmp_path / "ran"
    cfg = config(tmp_path, hook("gate", "before", answer(ASK), effect="ask"))
    request = argv_request(tmp_path, "touch", str(touched))
    with trio.fail_after(30):  # far less than the ask's minute: the answer ends the wait
        frames = await run_to_end(cfg, request, while_running=await _answering(word))
    (ask,) = of(frames, "ask")
    assert ask == {
        **ask,
        "askId": "ask-1",
        "hook": "gate",
        "question": "deploy?",
        "default": "no",
        "deadlineMs": 60_000,
    }
    (gate,) = of(frames, "hook")
    assert gate["asked"] == {"question": "deploy?", "answer": word, "by": "client"}
    assert frames.index(ask) + 1 == frames.index(gate)
    if word == "yes":
        assert gate["refused"] is None and touched.exists()
        assert outcome(frames)["type"] == "result"
    else:
        assert not touched.exists()
        assert outcome(frames)["refusedBy"] == "gate"
        assert outcome(frames)["message"] == "refused by gate: deploy? (answered no by the client)"


async def test_an_ask_below_its_effect_is_dropped_and_asks_nothing(tmp_path: Path) -> None:
    cfg = config(tmp_path, hook("gate", "before", answer(ASK), effect="advise"))
    frames = await run_to_end(cfg, argv_request(tmp_path, "true"))
    assert of(frames, "ask") == []
    (gate,) = of(frames, "hook")
    assert "asked" not in gate and [d["key"] for d in gate["dropped"]] == ["ask"]


async def test_a_run_cancelled_while_it_waits_for_an_answer(tmp_path: Path) -> None:
    cfg = config(tmp_path, hook("gate", "before", answer(ASK), effect="ask"))
    runs: list[Run] = []

    async def cancel_at_the_ask(runtime: Runtime, run: Run) -> None:
        runs.append(run)
        async for batch in run.journal.follow(0):
            if any(f["type"] == "ask" for f in batch):
                run.cancel()
                return

    with trio.fail_after(30):
        frames = await run_to_end(
            cfg, argv_request(tmp_path, "true"), while_running=cancel_at_the_ask
        )
    (gate,) = of(frames, "hook")
    assert gate["status"] == "ok" and gate["asked"] == {"question": "deploy?"}
    assert gate["reason"] == "the run was cancelled while the question waited for an answer"
    assert outcome(frames)["message"] == "cancelled"
    said = runs[0].asks.answer("ask-1", "yes", AnsweredBy.CLIENT)
    assert said == "ask-1 is closed: the run was cancelled while it waited"
