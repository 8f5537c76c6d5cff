"""A gateway's indexing of the frames stream, beneath NATS: the stream's messages as a
gateway reads them (`Stored`) go into a real history through the runtime's recorder, line
for line; a gateway started again takes a run up where its history stops; a run whose
start the stream no longer holds is not recorded; a run two processes record is stored
once. (tests/test_cluster_history.py does the same with every real part.)"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest
import trio

from mcpx_hooks.supervisor.cluster.indexing import StreamIndexer
from mcpx_hooks.supervisor.cluster.jet import Stored
from mcpx_hooks.supervisor.core.frames import FrameType
from mcpx_hooks.supervisor.history.store import History, Written
from mcpx_hooks.supervisor.run.recording import Recorder
from mcpx_hooks.supervisor.run.telemetry import Telemetry


def lines(run_id: str, count: int) -> list[bytes]:
    """A run's lines: `start`, a hook, output, `end` at `count - 1`."""
    made = [{"argv": ["sh"], "cwd": "/", "type": "start"}]
    made.append({"name": "h", "on": "script", "phase": "before", "status": "ok", "type": "hook"})
    made += [{"text": f"out {n}", "type": "stdout"} for n in range(count - 3)]
    made.append({"exitCode": 0, "durationMs": 1, "type": "end"})
    return [
        orjson.dumps({"runId": run_id, "seq": seq, "at": "2026-12-03T05:00:00Z", **frame})
        for seq, frame in enumerate(made)
    ]


def message(run_id: str, frames: list[bytes], first: int, sequence: int) -> Stored:
    headers = {"Mcpx-Seq": str(first), "Mcpx-Seq-Last": str(first + len(frames) - 1)}
    return Stored(b"\n".join(frames), headers, sequence, subject=f"mcpx.frames.{run_id}")


async def indexed(path: Path, batches: list[list[Stored]]) -> Telemetry:
    """The batches read by a gateway whose history is at `path`, written, then closed."""
    history = History.open(path)
    recorder, telemetry = Recorder(history), Telemetry()
    indexer = StreamIndexer(recorder, telemetry, 1 << 20)
    indexer.mark = "MCPX_FRAMES@test"
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.serve)
        for batch in batches:
            await indexer.take(batch)
        await recorder.wait_idle()
        nursery.cancel_scope.cancel()
    history.close()
    return telemetry


async def test_the_stream_is_recorded_and_taken_up_again(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    run = lines("r1", 8)
    telemetry = await indexed(path, [[message("r1", run[:3], 0, 1)], [message("r2", [], 5, 2)]])
    assert 'point="script",phase="before"} 1' in telemetry.meters.prometheus_text()
    # Started again: the run goes on from where its history stops (a batch read twice too).
    again = [message("r1", run[2:5], 2, 3), message("r1", run[5:], 5, 4)]
    telemetry = await indexed(path, [again])
    assert 'phase="before"} 1' not in telemetry.meters.prometheus_text()  # counted once
    history = History.open(path, writes=False)
    assert history.lines("r1") == (run, True)
    assert history.mark("MCPX_FRAMES@test") == 4
    # A run whose start the stream had already dropped is not in it.
    assert history.lines("r2") is None
    summary = history.summaries(10)[0]
    assert (summary["runId"], summary["status"], summary["startedAt"]) == (
        "r1",
        "error",  # no outcome frame: an end without one
        "2026-12-03T05:00:00Z",
    )
    history.close()


def test_a_run_two_processes_record_is_stored_once(tmp_path: Path) -> None:
    run = lines("r1", 6)
    history = History.open(tmp_path / "history.db")

    def written(first: int, upto: int) -> Written:
        return Written("r1", first, run[first:upto], {"runId": "r1"}, 0.0, upto == len(run))

    history.write([written(0, 3)])
    history.write([written(0, 4)])  # the other one's, from the start: only its new line
    history.write([written(5, 6)])  # a gap: nothing of it
    assert history.lines("r1") == (run[:4], False)
    history.write([written(2, 6)])
    assert history.lines("r1") == (run, True)
    history.close()


async def test_a_history_that_cannot_be_kept_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(None, "opening the run history x: file is not a database")
    indexer = StreamIndexer(recorder, Telemetry(), 1 << 20)
    with caplog.at_level(logging.WARNING, "mcpx_hooks.cluster"):
        indexer.tell_fault()
        await indexer.take([message("r1", lines("r1", 4), 0, 1)])
    told = [r.getMessage() for r in caplog.records]
    assert told == [
        "the run history is not being kept (opening the run history x: file is not a"
        " database); this gateway serves runs from the cluster's streams only (mcpx-hooks"
        " doctor says more)"
    ]
    assert 'phase="before"} 1' in indexer.telemetry.meters.prometheus_text()  # counted still


async def test_a_bug_in_taking_one_message_loses_that_message_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug while one message is taken (here: the metrics failing on a hook frame) is logged
    in one line; the gateway's reader goes on with the messages after it."""

    def broken(self: Telemetry, kind: FrameType, wire: object) -> None:
        if kind is FrameType.HOOK:
            raise RuntimeError("a bug in counting")

    monkeypatch.setattr(Telemetry, "count", broken)
    path = tmp_path / "history.db"
    r2 = lines("r2", 4)
    with caplog.at_level(logging.ERROR, "mcpx_hooks.cluster"):
        await indexed(path, [[message("r1", lines("r1", 4), 0, 1), message("r2", r2, 0, 2)]])
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 2, told  # r1's message, and r2's: each a hook frame
    assert all("RuntimeError: a bug in counting (a bug:" in t for t in told), told
    history = History.open(path, writes=False)
    assert history.lines("r2") == (r2[:2], False)  # (its hook frame held, not counted)
    history.close()
