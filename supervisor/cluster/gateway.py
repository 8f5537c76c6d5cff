"""`serve --cluster nats://…`: a gateway. The same WebSocket and HTTP API as a single
`serve` (it is a `Service`), but an exec request goes onto the requests stream for a worker
instead of running here, and every run and the events are read from the streams:

- `/v1/exec`: the request, checked as a single `serve` checks it, is queued with a run id
  made here; the socket then streams the run's mirror (`mirror.py`) from seq 0, and its
  `cancel` and `answer` messages go to the worker running it;
- `/v1/runs/{runId}?from=N`: any run the cluster retains, from seq N, then live;
- `/v1/events?since=N`: the events stream, `seq` being the stream's sequence;
- `GET /v1/runs`: the runs stream's summaries (`watch.RunsIndex`), newest first, then the
  older runs of the gateway's own history;
- `GET /v1/runs/{runId}/artifacts/{id}`: from the artifacts bucket (`artifacts.py`);
- `/v1/search`, the downloads and `/metrics`: from the gateway's own history, which holds
  every run of the frames stream (`indexing.py`), and its metrics.

A gateway also watches the workers' leases and ends the runs of a lost worker (`watch.py`),
and ends a run whose request a restarted NATS lost before any worker took it, or that its
client cancelled before one did (`queued.py`). At start, it asks whether the other parts
hold its cluster key (`keycheck.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, cast

import trio

from ..core.frames import Control, StartFrame
from ..core.hooks import Config
from ..run.hookcontext import new_run_id
from ..run.journal import RunJournal
from ..run.runtime import Runtime
from ..run.scriptrun import Run
from ..run.storedrun import StoredRun
from ..service.admission import run_profile
from ..service.connection import ServerConnection
from ..service.endpoints import CLIENT_GONE
from ..service.execrequest import ExecRequest, parse_exec
from ..service.logredact import open_logged_runtime
from ..service.options import Listening, ServiceOptions
from ..service.server import Service
from ..service.streams import Wake
from ..service.targets import Target, check_from, parse_events, parse_from, shown_seq
from ..service.wire import Close, ConnectionClosed, WireError, parse_control, parse_json_object
from .access import INSECURE_WARNING, ClusterSettings
from .artifacts import ClusterRoutes
from .events import EventFeed, forward_events
from .indexing import StreamIndexer, serve_indexing
from .jet import ClusterDown
from .keycheck import Part, check_key
from .link import Cluster, open_cluster
from .mirror import MirrorJournal, Mirrors
from .names import (
    HEADROOM,
    RUN_ID,
    Stream,
    events_subject,
    frames_subject,
    requests_subject,
    stream_specs,
)
from .queued import Queued, end_cancelled, serve_queued
from .remote import RemoteRun
from .sealing import ClusterKey, pack_request
from .watch import RunsIndex, serve_index

logger = logging.getLogger("mcpx_hooks.server")


#: A stopping gateway waits this long for the runs it cancelled to end on their workers.
CANCELLED_S: Final = 30.0
#: A request this large (its JSON) is read, sealed and signed in a worker thread: a
#: megabyte takes milliseconds, in which the loop would serve nobody else. A smaller one
#: costs less on the loop than a thread's two hops (measured: `cluster.py`'s runs per
#: second of a gateway fell from 0.87x to 0.72x a plain `serve` with every request's
#: hops).
OFF_LOOP_BYTES: Final = 64 * 1024


def _read_request(text: str | bytes) -> tuple[dict[str, Any], ExecRequest]:
    """The client's exec request as the JSON object it sent and as read (else `WireError`)."""
    message = parse_json_object(text, "the exec request")
    return message, parse_exec(message)


class Gateway(Service):
    """A `Service` whose runs are the cluster's."""

    cancelled_s = CANCELLED_S
    after_grace = (
        f"their workers run their suffix hooks; this gateway waits at most {CANCELLED_S:g} s"
        " for their end; a second signal stops it now"
    )

    def __init__(
        self,
        runtime: Runtime,
        options: ServiceOptions,
        *,
        cluster: Cluster,
        mirrors: Mirrors,
        index: RunsIndex,
        nursery: trio.Nursery,
        key: ClusterKey,
        queued: Queued | None = None,
        max_payload: int = 1 << 20,
    ) -> None:
        super().__init__(runtime, options)
        self.cluster = cluster
        self.key = key
        self.mirrors = mirrors
        self.index = index
        self.queued = queued or Queued()
        self.routes = ClusterRoutes(index, cluster, runtime.journals, mirrors)
        self.route_state = self.routes
        self._control = nursery
        #: The largest message the NATS server takes (read at start, as a worker does).
        self.max_payload = max_payload
        #: Runs admitted that no worker has begun yet (counted against `--max-runs`).
        self._waiting = 0

    def _down(self, exc: ClusterDown) -> WireError:
        return WireError(Close.TRY_AGAIN, f"the cluster cannot be reached: {exc}; try again later")

    async def _exec(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        text = await self._request_message(conn, target, wake)
        if isinstance(text, WireError):
            return text
        # Refused here at once, as a single `serve` refuses it; admitted by the worker. A
        # large one is read in a worker thread (up to a NATS message of JSON).
        off_loop = len(text) >= OFF_LOOP_BYTES
        if off_loop:
            message, request = await trio.to_thread.run_sync(_read_request, text)
        else:
            message, request = _read_request(text)
        if self.stopping:
            return WireError(Close.GOING_AWAY, "the server is shutting down; no new runs")
        # Counted against `--max-runs` from here, as a single `serve` counts a run from its
        # admission: to its client, a run waiting for a worker is in progress already.
        self.check_run_cap()
        self._waiting += 1
        try:
            begun = await self._queue(conn, message, request, wake, off_loop=off_loop)
        finally:
            self._waiting -= 1  # (then held at once, below: no run goes uncounted)
        if not isinstance(begun, tuple):
            return begun
        journal, cancelled = begun
        remote = RemoteRun(journal, self.cluster, self._control)
        if cancelled:
            remote.cancel()
        # Among the service's runs in progress while its socket streams it: a stop lets it
        # finish within `--grace`, then cancels it on its worker and sends its `end`.
        with self.hold_run(cast(Run, remote)):
            ending = await self.streams.stream_run(
                conn, journal, 0, wake, run=cast(Run, remote), cancels=True
            )
        if request.cancel_on_disconnect and not journal.finished:
            remote.cancel(CLIENT_GONE)
        return ending

    def _runs_counted(self) -> int:
        return len(self._active) + self._waiting

    async def _queue(
        self,
        conn: ServerConnection,
        message: dict[str, Any],
        request: ExecRequest,
        wake: Wake,
        *,
        off_loop: bool,
    ) -> tuple[MirrorJournal, bool] | WireError | None:
        """Publishes the request and waits for its worker to begin it: its journal, and
        whether its client cancelled it meanwhile; or how the socket ends (the request
        too large, the cluster down, the client gone, the worker's refusal)."""
        run_id = new_run_id()
        # Signed, its caller's environment sealed: a worker runs only what a gateway
        # admitted, and JetStream never holds a secret in the clear (`sealing.py`).
        # A large one in a worker thread (`OFF_LOOP_BYTES`): a request of a megabyte takes
        # milliseconds to seal and sign, in which the gateway's loop would serve nobody else.
        if off_loop:
            packed = await trio.to_thread.run_sync(pack_request, self.key, run_id, message)
        else:
            packed = pack_request(self.key, run_id, message)
        payload, headers = packed
        if len(payload) > self.max_payload - HEADROOM:
            # Refused here: NATS would not take it, and a message past its max_payload with
            # its headers has the server close this gateway's connection for good.
            return WireError(
                Close.TOO_BIG,
                f"the request is {len(payload)} bytes as the cluster carries it (signed, its"
                " caller's environment sealed); the cluster's NATS server takes"
                f" {self.max_payload - HEADROOM} at most (its max_payload, less room for"
                " headers): send less (stdin, input, env), or give nats-server a larger"
                " max_payload",
            )
        try:
            # Down now: said at once, not after the publish's 5 s, in which the client would
            # guess at a queue with no worker.
            self.cluster.require_connected()
            journal = await self.mirrors.open(run_id, fresh=True)
            published = await self.cluster.publish(requests_subject(), payload, headers)
        except ClusterDown as exc:
            self.mirrors.drop(run_id)
            return self._down(exc)
        wake.idle = False
        # Ended if a restarted NATS loses it before a worker takes it (`queued.py`).
        sandbox = run_profile(request, self.runtime.config)
        start = self.queued.add(run_id, published.sequence, request, self.options.cwd, sandbox)
        try:
            cancelled = await self._wait_begun(conn, journal, wake, start)
        finally:
            self.queued.discard(run_id)
        if wake.ended:
            if request.cancel_on_disconnect:
                self._control.start_soon(self._end_queued, journal, start, True)
            self.mirrors.drop(run_id)  # gone before a worker took it: not followed here
            return wake.reason
        if journal.refusal is not None:
            return journal.refusal
        return journal, cancelled

    async def _wait_begun(
        self, conn: ServerConnection, journal: MirrorJournal, wake: Wake, start: StartFrame
    ) -> bool:
        """Waits for the run's first frame (or the worker's refusal, or a break in its record,
        which `stream_run` then tells the client) while listening to the client: gone, it
        ends the wait; a `cancel` ends the run (`_end_queued`), and is kept for once the run
        has begun (a worker that began it meanwhile)."""
        cancelled = False

        async def listen() -> None:
            nonlocal cancelled
            while True:
                try:
                    message = parse_control(await conn.get_message())
                except ConnectionClosed:
                    wake.client_gone()
                    return
                except WireError as exc:
                    wake.set(exc)
                    return
                if message is Control.CANCEL and not cancelled:
                    cancelled = True
                    self._control.start_soon(self._end_queued, journal, start, False)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            with wake.waiting():
                await journal.begun.wait()
            nursery.cancel_scope.cancel()
        return cancelled

    async def _end_queued(self, journal: MirrorJournal, start: StartFrame, worker: bool) -> None:
        """Ends a run cancelled while it waited for a worker (`queued.end_cancelled`), in the
        gateway's nursery (the socket may be gone); one a worker began meanwhile is
        cancelled on the `worker` when asked (else the socket does it once begun)."""
        try:
            ended = not journal.begun.is_set() and await end_cancelled(self.cluster, journal, start)
        except ClusterDown as exc:
            logger.warning("run %s: cancelled while queued; not ended: %s", journal.run_id, exc)
            return
        if not ended and worker:
            RemoteRun(journal, self.cluster, self._control).cancel()

    async def _follow(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        start = parse_from(target)
        run_id = target.run_id or ""
        missing = WireError(
            Close.NOT_FOUND,
            f"no run {run_id!r} is retained (the cluster keeps the last {self.index.retain} runs)",
        )
        if not RUN_ID.fullmatch(run_id):
            raise missing
        # A run that ended is served from this gateway's history when it holds it (no
        # consumer made on the stream), and when the stream no longer does.
        found = None if run_id in self.mirrors else await self.routes.stored(run_id)
        stored = found[0] if found is not None else None
        journal: RunJournal | StoredRun | None = stored if found and found[1] else None
        try:
            if journal is None and run_id not in self.mirrors and not self.index.known(run_id):
                self.cluster.require_connected()
                last = await self.cluster.last(Stream.FRAMES, frames_subject(run_id))
                journal = stored if last is None else None
                if last is None and stored is None:
                    raise missing
            journal = journal or await self.mirrors.open(run_id)
        except ClusterDown as exc:
            if stored is None:
                return self._down(exc)
            journal = stored
        if isinstance(journal, StoredRun):  # (read as it is sent, never restored whole)
            return await self.streams.stream_stored(conn, journal, start, wake)
        refused = isinstance(journal, MirrorJournal) and journal.refusal is not None
        # (A run broken before its first frame has a record all the same: it is told why.)
        if refused or (not len(journal) and journal.broken is None):
            raise missing
        check_from(start, len(journal))
        remote = None
        if isinstance(journal, MirrorJournal) and not journal.finished:
            remote = RemoteRun(journal, self.cluster, self._control)
        return await self.streams.stream_run(conn, journal, start, wake, run=cast(Run, remote))

    async def _events(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        kinds, since = parse_events(target)
        try:
            self.cluster.require_connected()
            state = await self.cluster.stream_state(Stream.EVENTS)
        except ClusterDown as exc:
            return self._down(exc)
        _, first, last = state or (0, 0, 0)
        if since is not None and since > last + 1:
            raise WireError(
                Close.OUT_OF_RANGE,
                f"{shown_seq('since', since)} was never published here"
                f" (the next seq is {last + 1})",
            )
        # The stream's sequences start at 1: a `since` before what it still holds is a gap.
        lost_from = max(since or 0, 1)
        gap = (lost_from, first - 1) if since is not None and first and lost_from < first else None
        # Without `since`, the events from the stream's state just read: a client whose
        # socket is open hears every event published after that, however long the
        # consumer then takes to be made (under load, long enough to miss a run's start).
        start = max(since, first) if since is not None else last + 1
        async with self.cluster.follow(events_subject(), start) as got:
            feed = EventFeed(got, kinds, gap, self.index.caught_up, live_from=last + 1)
            try:
                return await self.streams.stream_events(
                    conn,
                    feed,  # type: ignore[arg-type]
                    wake,
                    self.limits.coalesce_events,
                )
            except StopAsyncIteration:
                return WireError(
                    Close.TRY_AGAIN,
                    "the cluster's events stream was cut short; resume with since= the next seq",
                )


async def run_gateway(
    config: Config,
    options: ServiceOptions,
    settings: ClusterSettings,
    ready: Callable[[Listening], Any],
) -> None:
    """`serve --cluster URL`: as `run_service`, with the cluster under the service.
    `ClusterRefused` before anything listens when NATS refuses `settings.access`, or lets
    anyone in without `--nats-insecure`."""
    key = ClusterKey(settings.key)
    async with (
        open_logged_runtime(config) as runtime,
        open_cluster(settings.url, "mcpx-hooks gateway", settings.access) as cluster,
    ):
        await cluster.ensure_streams(stream_specs(config))
        await cluster.check_permissions(Part.GATEWAY, settings.access.user)
        if settings.access.insecure:  # (once it starts: a refusal above is its one line)
            logger.warning("%s", INSECURE_WARNING)
        async with trio.open_nursery() as nursery:
            mirrors = Mirrors(
                cluster,
                nursery,
                config.runs_retain,
                config.runs_run_bytes,
                config.runs_retain_bytes,
            )
            index = RunsIndex(config.runs_retain)
            # Every run of the cluster into this gateway's own history (`indexing.py`).
            indexer = StreamIndexer(
                runtime.recorder, runtime.journals.telemetry, config.runs_run_bytes
            )
            mirrors.feed = indexer  # (the runs it is reading, and those made here)
            await nursery.start(serve_indexing, cluster, indexer)
            await nursery.start(serve_index, cluster, index, mirrors)
            await nursery.start(forward_events, cluster, runtime.bus)
            await nursery.start(check_key, cluster, key, Part.GATEWAY)
            queued = Queued()
            await nursery.start(serve_queued, cluster, queued, mirrors)
            service = Gateway(
                runtime,
                options,
                cluster=cluster,
                mirrors=mirrors,
                index=index,
                nursery=nursery,
                key=key,
                queued=queued,
                max_payload=await cluster.max_payload(),
            )
            await service.serve_until_signalled(nursery, ready)
