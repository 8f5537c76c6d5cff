"""A run ended by a gateway rather than its worker: `publish_lost` ends a run whose worker
was lost: one `error{message: "worker lost"}` (a `warning` saying so when the run has its
outcome already, which stands) and `end`, each a publish that JetStream takes only if the
run's subject is still where this gateway saw it (`Nats-Expected-Last-Subject-Sequence`)
and only once (`Nats-Msg-Id`): two gateways that see the same lapse publish them once
between them (the first to have one taken publishes the rest; the other stops there), and
nothing of the lost worker's can follow. `publish_ending` ends any run so (a request lost,
or refused). Its `end` carries the chain of the lines before it, as a worker's `end` does.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from ..core.chain import extend
from ..core.convert import to_json
from ..core.frames import (
    EndFrame,
    ErrorCause,
    ErrorFrame,
    FrameType,
    StartFrame,
    WarningFrame,
    blank,
    stamp,
)
from ..core.scripts import listed_argv
from .jet import WRONG_LAST_SEQUENCE, ClusterDown
from .link import Cluster
from .mirror import MirrorJournal
from .names import Header, events_subject, frames_subject, runs_subject

WORKER_LOST: Final = "worker lost"
#: Said after `message` when the run had its outcome: what the worker had left is not done.
AFTER_OUTCOME: Final = (
    "after the run's {outcome}, which stands; what it had not yet done (suffix hooks still"
    " running) is not done"
)


async def publish_lost(cluster: Cluster, journal: MirrorJournal, started_ms: int) -> bool:
    """Ends a run whose worker's lease lapsed (see the module docstring). False when the run's
    subject moved meanwhile (its worker is back, or another gateway ended it)."""
    if journal.finished or journal.refusal is not None or not len(journal):
        return True
    return await publish_ending(cluster, journal, started_ms, WORKER_LOST)


async def publish_ending(
    cluster: Cluster,
    journal: MirrorJournal,
    started_ms: int,
    message: str,
    *,
    cause: ErrorCause | None = None,
    start: StartFrame | None = None,
) -> bool:
    """Publishes `error{message, cause}` (a `warning` when the run has its outcome) and `end`
    after what `journal` holds (after `start` when it holds nothing), as `publish_lost` says;
    False when the subject moved meanwhile. The `end` carries the chain of every line
    before it, those `journal` holds and those published here (`core/chain.py`), as a
    worker's `end` does: `runs verify` passes on the run."""
    run_id = journal.run_id
    subject = frames_subject(run_id)
    seq, expected = len(journal), journal.last_stream_seq
    frames: list[Any] = [start] if start is not None and not seq else []
    if journal.outcome is None:
        frames.append(blank(ErrorFrame, message=message, cause=cause))
    else:
        outcome = journal.outcome.get("type", FrameType.RESULT.value)
        said = AFTER_OUTCOME.format(outcome=outcome)
        frames.append(blank(WarningFrame, message=f"{message} {said}"))
    chain = await journal.chain()
    wires = [to_json(stamp(frame, run_id, at)) for at, frame in enumerate(frames, seq)]
    lines = [orjson.dumps(wire) for wire in wires]
    end = blank(EndFrame, exit_code=None, duration_ms=started_ms, chain=extend(chain, lines).hex())
    wires.append(to_json(stamp(end, run_id, seq + len(lines))))
    lines.append(orjson.dumps(wires[-1]))
    first, wire = wires[0], wires[-1]
    for line in lines:
        headers: dict[str, str] = {
            Header.SEQ: str(seq),
            Header.MSG_ID: f"{run_id}.lost.{seq}",
            Header.LAST_SUBJECT_SEQ: str(expected),
        }
        try:
            published = await cluster.publish(subject, line, headers)
        except ClusterDown as exc:
            if getattr(exc, "code", None) == WRONG_LAST_SEQUENCE:
                return False
            raise
        if published.duplicate:  # another gateway's frame is there: its ending, not ours
            return False
        expected, seq = published.sequence, seq + 1
    summary = {
        **journal.summary(),
        "status": FrameType.ERROR.value,  # unless it had its outcome (below)
        "exitCode": None,
        "durationMs": started_ms,
    }
    if frames and frames[0] is start:
        summary.update(listed_argv(first["argv"]), cwd=first["cwd"], startedAt=first["at"])
    if journal.outcome is not None:
        summary["status"] = journal.outcome.get("type", FrameType.ERROR.value)
    ids: dict[str, str] = {Header.MSG_ID: f"{run_id}.lost.summary"}
    await cluster.publish(runs_subject(run_id), orjson.dumps(summary), ids)
    event = {
        "seq": 0,
        "kind": "run.finished",
        "at": wire["at"],
        "runId": run_id,
        "data": {
            "outcome": summary["status"],
            "exitCode": None,
            "durationMs": started_ms,
            "message": message,
        },
    }
    ids = {Header.MSG_ID: f"{run_id}.lost.event"}
    await cluster.publish(events_subject(), orjson.dumps(event), ids)
    return True
