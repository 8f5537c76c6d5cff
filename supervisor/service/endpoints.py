"""The service's WebSocket endpoints: what each does once its socket is admitted.

`/v1/hooks` lists the hooks in force; `/v1/exec` reads one request and streams its run;
`/v1/runs/{runId}` replays and follows a retained run; `/v1/events` streams the bus. An exec
request is admitted as every run is (`admission.admit`, a `Caller.client`). Each
returns how its socket closes (a `WireError`; NORMAL when complete) or None when the client
is gone; a bad request or query raises `WireError`. The lifecycle, which sockets are let in,
and the runs themselves are the `Service`'s (`server.py`), which is an `Endpoints`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Final

import trio

from ..core.hooks import Config
from ..run.journals import UnknownRun
from ..run.runtime import Runtime
from ..run.scriptrun import Run
from ..run.storedrun import StoredRun
from .admission import Caller, admit
from .connection import ServerConnection
from .execrequest import parse_exec
from .hooksanswer import HooksAnswers
from .options import Limits, ServiceOptions
from .roots import release_cwd
from .streams import Streams, Wake, complete
from .targets import Endpoint, Target, check_from, check_query, parse_events, parse_from, shown_seq
from .wire import Close, WireError

logger = logging.getLogger("mcpx_hooks.server")

SHUTTING_DOWN: Final = "the server is shutting down"
#: Why a run whose client asked `cancelOnDisconnect` is cancelled when it goes.
CLIENT_GONE: Final = "its client disconnected (cancelOnDisconnect)"


class Endpoints:
    """The endpoint handlers of a `Service`, apart from its lifecycle. What they use of it
    is declared here; the `Service` sets it and starts the runs (`_start_run`)."""

    runtime: Runtime
    options: ServiceOptions
    limits: Limits
    streams: Streams
    stopping: bool
    _active: dict[str, Run]
    _runs_changed: trio.Event
    #: `/v1/hooks`' message under the config it was built for (`answer_at_upgrade`).
    hooks_answers: HooksAnswers

    def _start_run(self, run: Run, config: Config) -> None:
        raise NotImplementedError

    def _runs_counted(self) -> int:
        """The runs `maxRuns` counts now: those in progress (a cluster gateway's: and those
        waiting for a worker)."""
        return len(self._active)

    def check_run_cap(self) -> None:
        """Raises `WireError` (TRY_AGAIN) when `maxRuns` runs are in progress."""
        if self._runs_counted() >= self.limits.max_runs:
            raise WireError(
                Close.TRY_AGAIN,
                f"too many runs in progress (the cap is {self.limits.max_runs}); try again later",
            )

    @contextlib.contextmanager
    def hold_run(self, run: Run) -> Iterator[None]:
        """A run this service did not start itself (an MCP client's `mcpx_exec`) among its
        runs in progress while the block runs: counted against `maxRuns`, cancelled and
        waited for when the service stops, its asks answerable from `/v1/runs/{runId}`;
        and a cluster gateway's run on a worker while its exec socket streams it."""
        self._active[run.journal.run_id] = run
        try:
            yield
        finally:
            self._forget_run(run)

    def _leave_going(self, wakes: list[Wake], going: WireError, waited_s: float) -> None:
        """Once a stop has waited `waited_s` for the runs it cancelled: those still going (a
        gateway's, whose worker or NATS did not answer) are left to end on their own, said
        in the log; and every socket streaming a run still going gets `going` now, not after
        the drain, which is for streams' last frames (such a run has none to send)."""
        if self._active:
            logger.warning(
                "%d run(s) did not end within %g s of their cancel (their worker or NATS did"
                " not answer): left to finish on their own; their clients get 1001",
                *(len(self._active), waited_s),
            )
        for wake in wakes:
            journal = wake.journal
            if journal is not None and not journal.finished and journal.broken is None:
                wake.set(going)

    def _forget_run(self, run: Run) -> None:
        del self._active[run.journal.run_id]
        self._runs_changed.set()
        self._runs_changed = trio.Event()

    async def answer_at_upgrade(self, target: Target) -> bytes | None:
        """The whole answer of an endpoint that has one message, known at the upgrade, as
        its text frame: `/v1/hooks`' (it goes with the 101, then 1000: what the client sends
        is never read, so its answer is the same whenever a stray message lands). Built once
        per config, in a worker thread, and shared by every socket (`hooksanswer.py`). None
        for any other endpoint, and for a bad query (refused once upgraded, 4400)."""
        if target.endpoint is not Endpoint.HOOKS:
            return None
        try:
            check_query(target)
        except WireError:
            return None
        config = self.runtime.config
        answer = await self.hooks_answers.of(config)
        # The tool servers declared, each as it is now (`servers list --remote`).
        servers = self.runtime.servers
        return answer.frame(servers.states(config.servers.values()) if servers else [])

    async def _hooks(self, conn: ServerConnection, target: Target) -> WireError:
        """`/v1/hooks`: its message and close went with the 101 (`answer_at_upgrade`);
        here only a bad query is refused."""
        check_query(target)
        return complete()

    async def _request_message(
        self, conn: ServerConnection, target: Target, wake: Wake
    ) -> str | bytes | WireError:
        """An exec socket's one request message, within `request_s` of the upgrade (or why
        there is none)."""
        check_query(target)
        with wake.waiting(), trio.move_on_after(self.limits.request_s) as timer:
            text = await conn.get_message()
        if wake.reason is not None:
            return wake.reason
        if timer.cancelled_caught:
            return WireError(
                Close.TIMEOUT, f"no request within {self.limits.request_s:g} s of the upgrade"
            )
        return text

    async def _exec(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        text = await self._request_message(conn, target, wake)
        if isinstance(text, WireError):
            return text
        request = await trio.to_thread.run_sync(parse_exec, text)  # (up to 1 MiB of JSON)
        if self.stopping:
            return WireError(Close.GOING_AWAY, f"{SHUTTING_DOWN}; no new runs")
        caller = Caller.client(self.runtime.config, self.options.cwd, self.options.environ)
        admitted = await trio.to_thread.run_sync(admit, request, caller)
        try:
            self.check_run_cap()
            run = self.runtime.new_run(admitted.request)
        except BaseException:
            await release_cwd(admitted.request)  # the run that was to remove it will not start
            raise
        self._start_run(run, admitted.config)
        wake.idle = False
        ending = await self.streams.stream_run(conn, run.journal, 0, wake, run=run, cancels=True)
        if request.cancel_on_disconnect and not run.journal.finished:
            run.cancel(CLIENT_GONE)
        return ending

    async def _follow(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        start = parse_from(target)
        assert target.run_id is not None
        try:
            journal = await self.runtime.journals.download(target.run_id)
        except UnknownRun:
            kept = "; its run history has no such run" if self.runtime.journals.history else ""
            raise WireError(
                Close.NOT_FOUND,
                f"no run {target.run_id!r} is retained (the server keeps the last "
                f"{self.runtime.journals.retain} runs in memory{kept})",
            ) from None
        if isinstance(journal, StoredRun):  # (read as it is sent, never restored whole)
            return await self.streams.stream_stored(conn, journal, start, wake)
        check_from(start, len(journal))
        # While the run runs, this socket may answer its asks too.
        run = self._active.get(target.run_id)
        return await self.streams.stream_run(conn, journal, start, wake, run=run)

    async def _events(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        kinds, since = parse_events(target)
        bus = self.runtime.bus
        if since is not None and since > bus.next_seq:
            raise WireError(
                Close.OUT_OF_RANGE,
                f"{shown_seq('since', since)} was never published here"
                f" (the next seq is {bus.next_seq})",
            )
        async with bus.subscribe(kinds=kinds, since=since) as sub:
            return await self.streams.stream_events(conn, sub, wake, self.limits.coalesce_events)
