"""A run on a worker, as a gateway's socket acts on it: its asks answered and its cancel
sent to the worker running it, over the run's control subject (core NATS: a worker that is
gone misses nothing it could act on)."""

from __future__ import annotations

import logging
from typing import Any, Final

import orjson
import trio

from ..core.effects import ANSWERS, AnsweredBy
from ..core.frames import Control
from .jet import ClusterDown
from .link import Cluster
from .mirror import MirrorJournal
from .names import control_subject

logger = logging.getLogger("mcpx_hooks.cluster")

#: A control message to a worker gets this long to go out.
CONTROL_S: Final = 5.0


class RemoteAsks:
    """A run's asks as a gateway answers them: to the worker running it, the first answer a
    client of this gateway gives to each ask (the worker keeps the first it gets)."""

    def __init__(self, run: RemoteRun) -> None:
        self._run = run
        self._answered: dict[str, str] = {}

    def answer(self, ask_id: str, answer: str, by: AnsweredBy) -> str | None:
        if answer not in ANSWERS:
            return f"an answer is {' or '.join(ANSWERS)}, not {answer!r}"
        if ask_id in self._answered:
            given = self._answered[ask_id]
            return f"{ask_id} was already answered {given} (by {by}); the first counts"
        if ask_id not in self._run.journal.ask_ids():
            return f"no ask {ask_id!r} in this run"
        self._answered[ask_id] = answer
        self._run.send({"type": Control.ANSWER, "askId": ask_id, "answer": answer})
        return None


class RemoteRun:
    """A run on a worker, as a stream's socket may act on it: answer its asks, cancel it."""

    def __init__(self, journal: MirrorJournal, cluster: Cluster, nursery: trio.Nursery) -> None:
        self.journal = journal
        self.asks = RemoteAsks(self)
        self._cluster = cluster
        self._nursery = nursery

    def cancel(self, why: str | None = None) -> None:
        """Cancels the run on its worker; `why`, said in its `error` (`Run.cancel`)."""
        self.send({"type": Control.CANCEL} if why is None else {"type": Control.CANCEL, "why": why})

    def send(self, message: dict[str, Any]) -> None:
        self._nursery.start_soon(self._send, orjson.dumps(message))

    async def _send(self, data: bytes) -> None:
        with trio.move_on_after(CONTROL_S):
            try:
                await self._cluster.core_publish(control_subject(self.journal.run_id), data)
            except ClusterDown as exc:
                logger.warning("run %s: %s", self.journal.run_id, exc)
