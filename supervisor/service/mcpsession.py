"""One MCP client's session of `mcpx-hooks mcp` as a run: `start` with `argv = ["mcp",
<the client's clientInfo.name>]`, then each tool call through the `call` point (its hook
frames and its `call` frame, as a script's call puts them), and when the session closes one
`result` `{"calls": n, "refused": n, "failed": n}` and `end`.

A call no hook fires for is served at once, beside any others: its one frame, `call`, is
written whole when it ends. Those with hooks are served one at a time, in the order they
came, so each one's frames stay together in the run's stream. While such a call is served,
the `ask` frames its hooks put in the stream go to the call's `responder` (the client, asked
in that call's own request), and its answer settles the ask, unless the deadline comes
first. Closing (the client went, or
the command was stopped) writes `result` and `end`; nothing is written after them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..core.effects import AnsweredBy, Effect
from ..core.events import EventKind
from ..core.frames import EndFrame, ResultFrame, StartFrame, WarningFrame, blank, now_rfc3339
from ..core.hooks import caller_autonomy
from ..core.records import Record
from ..core.redact import Redactor
from ..core.servers import SESSION_ARGV0, server_secrets
from ..run.asking import Asks
from ..run.callpoint import (
    CALL_PHASES,
    CANCELLED,
    ENDED,
    Call,
    CallOutcome,
    CallPoint,
    EgressMark,
    call_frame,
)
from ..run.hookcontext import HookContext, RunInfo, hook_secrets, new_run_id
from ..run.journal import RunJournal
from ..run.phases import PhaseHooks
from ..run.runtime import Runtime
from ..tools.hearing import Progress
from ..tools.serverentry import LogHearer
from ..tools.servers import ToolServers
from .answering import AskWatcher, Responder

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from ..core.hookframes import Frame


@attrs.define(repr=False)
class SessionCounts(Record):
    """The session's calls so far: all of them (those the client cancelled before their
    answer too), those a hook refused, those that failed otherwise (the client got
    `isError`)."""

    calls: int = 0
    refused: int = 0
    failed: int = 0

    def take(self, outcome: CallOutcome) -> None:
        self.calls += 1
        if outcome.cancelled:
            return
        if outcome.refused_by is not None:
            self.refused += 1
        elif not outcome.ok or (outcome.result is not None and outcome.result.is_error):
            self.failed += 1


class SessionRun:
    """The run of one MCP session: opened with the client's name, closed once."""

    def __init__(self, runtime: Runtime, client: str, *, cwd: str | None = None) -> None:
        self.runtime = runtime
        self.client = client
        self.counts = SessionCounts()
        config = runtime.config
        self.run_id = new_run_id()
        self.journal = runtime.journals.open(self.run_id)
        self._started = time.perf_counter()
        self._lock = trio.Lock()
        #: The frames of calls without hooks that ended while a hooked call held the stream.
        self._held: list[Frame] = []
        #: (server, tool): whether a `call` hook fires, and whether one may ask.
        self._hooked: dict[tuple[str, str], tuple[bool, bool]] = {}
        self._closed = False
        #: The client's calls not yet answered, by `id` of their `Call`: (it, when it began).
        self._open: dict[int, tuple[Call, float]] = {}
        secrets = {**hook_secrets(config.hooks, None, os.environ)}
        secrets.update(server_secrets(config.servers.values(), os.environ))
        self._redacting = runtime.bus.redacting(self.run_id, Redactor(secrets))
        redactor = self._redacting.__enter__()
        self.journal.redactor = redactor
        argv = (SESSION_ARGV0, client)
        info = RunInfo(self.run_id, argv, cwd or os.getcwd(), now_rfc3339())
        servers = runtime.servers
        ctx = HookContext(
            info,
            caller_autonomy(config, None),
            config.autonomy_max,
            withheld=config.models.key_names,
            redactor=redactor,
            servers=None if servers is None else ToolServers(servers, config.servers),
        )
        self.asks = Asks()
        hooks = PhaseHooks(
            config,
            runtime.spawner,
            runtime.bus,
            journal=self.journal,
            run_id=self.run_id,
            asks=self.asks,
        )
        self._point = CallPoint(config, hooks, ctx, self.journal)
        # No script runs: `sandbox` is the one its hooks' and servers' own profiles sit under.
        start = blank(StartFrame, argv=argv, cwd=info.cwd, sandbox=config.script_sandbox.value)
        self.journal.append(start)
        started = {"argv": list(argv), "cwd": info.cwd}
        runtime.bus.publish(EventKind.RUN_STARTED, started, run_id=self.run_id)
        for warning in config.warnings:  # a project file skipped, a ceiling a file tried to raise
            self.journal.append(blank(WarningFrame, message=warning))

    async def call(
        self,
        call_id: Any,
        server: str,
        tool: str,
        args: dict[str, Any],
        *,
        progress: Progress | None = None,
        log: LogHearer | None = None,
        responder: Responder | None = None,
        meta: Mapping[str, Any] | None = None,
        by_client: Callable[[], bool] | None = None,
    ) -> CallOutcome:
        """One call of the client through the `call` point (after the hooked calls before it,
        when hooks fire for it); the server's progress on it goes to `progress`, its log
        messages to `log`, its hooks' questions to `responder`; `meta`, the client's own
        keys of its request's `_meta`, goes on to the server with it. Cancelled, and
        `by_client` saying the client cancelled it, it has a `call` frame saying so (before
        its answer), and counts among the calls; cut short by the session's end, the same
        (`_ended`, or `close` for one still open then)."""
        call = Call(
            call_id, server, tool, args, self.client, progress, log, dict(meta or {}), by_client
        )
        key, started = id(call), time.perf_counter()
        self._open[key] = (call, started)
        try:
            if not self.hooked(server, tool):
                return await self._unhooked_call(call, started)
            return await self._hooked_call(call, responder)
        except trio.Cancelled:
            if by_client is None or not by_client():  # the session is ending
                self._ended(key)
            raise
        finally:
            self._open.pop(key, None)

    async def _unhooked_call(self, call: Call, started: float) -> CallOutcome:
        try:
            outcome, frame = await self._point.fire_unhooked(call)
        except trio.Cancelled:
            if call.by_client is not None and call.by_client():
                self.cancelled(call, started)
            raise
        self._unhooked(outcome, frame)
        return outcome

    async def _hooked_call(self, call: Call, responder: Responder | None) -> CallOutcome:
        async with self._lock:
            try:
                if responder is None:
                    outcome = await self._point.fire(call)
                else:
                    async with trio.open_nursery() as nursery:
                        watcher = AskWatcher(nursery, responder, self._deliver)
                        nursery.start_soon(_watch, self.journal, len(self.journal), watcher)
                        outcome = await self._point.fire(call)
                        nursery.cancel_scope.cancel()
            except trio.Cancelled:
                if call.by_client is not None and call.by_client():  # (the point wrote its frame)
                    self.counts.take(CANCELLED)
                raise
            finally:
                self._write_held()
            self.counts.take(outcome)
            return outcome

    def hooked(self, server: str, tool: str) -> bool:
        """Whether a `call` hook fires for this client's calls of `tool` on `server`."""
        return self._hooks_of(server, tool)[0]

    def may_ask(self, server: str, tool: str) -> bool:
        """Whether a `call` hook that fires for this client's calls of `tool` on `server` has
        an effect that lets it ask a question."""
        return self._hooks_of(server, tool)[1]

    def _hooks_of(self, server: str, tool: str) -> tuple[bool, bool]:
        known = self._hooked.get((server, tool))
        if known is None:
            call = Call(None, server, tool, {}, self.client)
            hooks = [h for phase in CALL_PHASES for h in self._point.hooks_of(phase, call)]
            known = bool(hooks), any(h.effect >= Effect.ASK for h in hooks)
            self._hooked[server, tool] = known
        return known

    def egress_mark(self, server: str) -> EgressMark:
        """Where `server`'s egress refusals stand, before a call relayed around the call
        point (`mcpraw.py`)."""
        return self._point.egress_mark(server)

    def relayed(
        self,
        call: Call,
        outcome: CallOutcome,
        destructive: bool | None,
        started: float,
        mark: EgressMark,
    ) -> None:
        """A call no hook fires for, relayed around the call point (`mcpraw.py`), begun at
        `started` (`perf_counter`): its frames, as `call` writes an unhooked call's."""
        if self._closed:
            return
        self._point.egress_frames(call.server, mark)
        note = self._point.note(call.server, outcome)
        frame = call_frame(call, call.args, outcome, destructive, started, note=note)
        self._unhooked(outcome, frame)

    def cancelled(
        self, call: Call, started: float, destructive: bool | None = None, *, ended: bool = False
    ) -> None:
        """A call no hook fires for, begun at `started` (`perf_counter`), that the client
        cancelled before its answer (or, `ended`, that the session's end cut short): its
        `call` frame says so, and it counts among the calls."""
        outcome = ENDED if ended else CANCELLED
        self._unhooked(outcome, call_frame(call, call.args, outcome, destructive, started))

    def _ended(self, key: int) -> None:
        """The call `key` (of `_open`), cut short by the session's end before `close`: its
        frame, if `close` has not written it."""
        found = self._open.pop(key, None)
        if found is not None:
            call, started = found
            hint = self._point.known_hint(call.server, call.tool)
            self.cancelled(call, started, hint, ended=True)

    def _unhooked(self, outcome: CallOutcome, frame: Frame) -> None:
        if self._closed:  # (nothing after `end`)
            return
        if self._lock.locked():  # not inside a hooked call's frames: after them
            self._held.append(frame)
        else:
            self.journal.append(frame)
        self.counts.take(outcome)

    def _write_held(self) -> None:
        """The `call` frames of calls without hooks that ended during a hooked call."""
        held, self._held = self._held, []
        for frame in held:
            self.journal.append(frame)

    def not_made(self, why: str) -> CallOutcome:
        """A call past a limit, not made: a `warning` frame says why (a `call` frame would
        have to wait for the calls before it), and it counts as failed."""
        self.journal.append(blank(WarningFrame, message=f"a call was not made: {why}"))
        outcome = CallOutcome(False, error=why)
        self.counts.take(outcome)
        return outcome

    async def _deliver(self, ask_id: str, answer: str, by: AnsweredBy) -> None:
        self.asks.answer(ask_id, answer, by)  # too late (the deadline came): nothing to do

    def close(self) -> None:
        """`result` with the counts, then `end`; once (later closes do nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._write_held()
            for call, started in self._open.values():  # the session's end cut them short
                hint = self._point.known_hint(call.server, call.tool)
                self.journal.append(call_frame(call, call.args, ENDED, hint, started))
                self.counts.take(ENDED)
            self._open.clear()
            counts = self.counts
            value = {"calls": counts.calls, "refused": counts.refused, "failed": counts.failed}
            self.journal.append(blank(ResultFrame, value=value))
            duration = round((time.perf_counter() - self._started) * 1000)
            self.journal.append(blank(EndFrame, exit_code=None, duration_ms=duration))
            self.runtime.bus.publish(
                EventKind.RUN_FINISHED,
                {"outcome": "result", "exitCode": None, "durationMs": duration},
                run_id=self.run_id,
            )
        finally:
            self._redacting.__exit__(None, None, None)


async def _watch(journal: RunJournal, start: int, watcher: AskWatcher) -> None:
    """Shows `watcher` the run's frames from `start` on, until cancelled."""
    async for batch in journal.follow(start):
        for frame in batch:
            watcher.see(frame)


#: The longest client name a session's run keeps (the rest is cut).
MAX_CLIENT_CHARS: Final = 256


def client_name(ctx: ServerRequestContext[Any, Any]) -> str:
    """The client's `clientInfo.name`: from the handshake, or the request's own envelope."""
    known = ctx.session.client_params
    name: Any = known.client_info.name if known is not None else None
    if name is None and ctx.method == "initialize" and isinstance(ctx.params, Mapping):
        info = ctx.params.get("clientInfo")
        name = info.get("name") if isinstance(info, Mapping) else None
    return name[:MAX_CLIENT_CHARS] if isinstance(name, str) else ""
