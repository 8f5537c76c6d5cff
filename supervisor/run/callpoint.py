"""The `call` point: one tool call with its hooks around it, the same for every way a call
comes in (a script's calls channel, `calls.py`; an MCP client of `mcpx-hooks mcp`).

`fire_call` puts in the run's stream `hook{on: call, phase: before}`…, one `call` frame (the
SHA-256 of the arguments sent, never the arguments or the answer), the `onSuccess` or
`onError` hooks, then the `suffix` hooks, and returns what the caller gets: the value (or
the error), and the server's own answer when no hook replaced it. A `before` refusal sends
nothing to the server. The call is bounded by its server's `callTimeoutMs`, and cancelled on
the server past it or when the caller's scope is cancelled.

No MCP SDK at import: a script's run that makes no call never loads it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..core.frames import blank
from ..core.hooks import Config, Hook
from ..core.points import Phase
from ..core.records import Record
from ..core.servers import CALL_CANCELLED, CALL_SESSION_ENDED, offline_note, undeclared
from ..core.when import tool_mismatch
from ..core.whenindex import call_hooks
from ..process.egresschild import refusal
from ..tools.hearing import Progress
from ..tools.serverentry import LogHearer, ServerFailing, ToolFailed, answer_text
from .hookcontext import HookContext
from .journal import RunJournal
from .phases import PhaseHooks, RunState, together_groups

if TYPE_CHECKING:
    from mcp import types

    from ..core.hookframes import Frame
    from ..process.egress import Lease
    from ..tools.serverentry import ServerEntry


#: The phases a call's hooks run in.
CALL_PHASES: Final = (Phase.BEFORE, Phase.ON_SUCCESS, Phase.ON_ERROR, Phase.SUFFIX)
#: A server's lease on the egress proxy and how many refusals it had logged (`egress_mark`).
EgressMark = tuple["Lease | None", int]


def args_sha256(args: Any) -> str:
    """The SHA-256 of the arguments as JSON with sorted keys and no spaces."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@attrs.frozen(repr=False, eq=False)
class Call(Record):
    """One tool call as it comes in: its id in the run's `call` frame, `server.tool`, its
    arguments, the MCP client making it (None for a script's call), where the server's
    progress on it goes (None: nowhere, and the server is not asked for any) and its log
    messages while it is in flight (None: nowhere), the client's own keys of its
    request's `_meta` (not its progress token), sent on with the call as they came, and
    whether a cancellation of the call is the client's (`by_client`: its `call` frame then
    says so; None, as for a script's call cut short by the script's end: no frame)."""

    id: Any
    server: str
    tool: str
    args: Mapping[str, Any]
    client: str | None = None
    progress: Progress | None = None
    log: LogHearer | None = None
    meta: Mapping[str, Any] = attrs.Factory(dict)
    by_client: Callable[[], bool] | None = None


@attrs.frozen(repr=False, eq=False)
class CallOutcome(Record):
    """What a call ends in: `value` (ok) or `error`, who refused it, and `result`, the
    server's own answer, kept when it came and no hook replaced it; `cancelled`: the client
    cancelled it before its answer (it got none)."""

    ok: bool
    value: Any = None
    error: str = ""
    refused_by: str | None = None
    result: types.CallToolResult | None = None
    cancelled: bool = False


#: What a client cancelled, before its answer, ends in (its `call` frame's `error`).
CANCELLED: Final = CallOutcome(False, error=CALL_CANCELLED, cancelled=True)
#: What a call in flight when its MCP session ended ends in.
ENDED: Final = CallOutcome(False, error=CALL_SESSION_ENDED, cancelled=True)


def call_frame(
    call: Call,
    args: Any,
    answer: CallOutcome,
    destructive: bool | None,
    started: float,
    *,
    note: str | None = None,
) -> Frame:
    """The `call` frame of `call`, sent with `args`, begun at `started` (`perf_counter`);
    `note`: `CallPoint.note`."""
    from ..core.hookframes import CallFrame  # built with a run's first tool call

    return blank(
        CallFrame,
        id=call.id,
        server=call.server,
        tool=call.tool,
        args_sha256=args_sha256(args),
        duration_ms=round((time.perf_counter() - started) * 1000),
        ok=answer.ok,
        error=None if answer.ok else answer.error,
        destructive_hint=destructive,
        refused_by=answer.refused_by,
        note=note,
    )


def answer_outcome(result: types.CallToolResult) -> CallOutcome:
    """What a call the server answered with `result` ends in (no hook replacing it)."""
    if result.is_error:
        return CallOutcome(False, error=answer_text(result)[:4096] or "isError", result=result)
    value = result.structured_content
    value = value if value is not None else answer_text(result)
    return CallOutcome(True, value, result=result)


def destructive_hint(entry: ServerEntry, tool: str) -> bool | None:
    """The `destructiveHint` of `tool` as `entry`'s server listed it."""
    listed = entry.tool(tool)
    return listed.annotations.destructive_hint if listed and listed.annotations else None


def too_slow(timeout_ms: int) -> str:
    """What a call fails with past its server's `callTimeoutMs`."""
    return (
        f"the call took longer than callTimeoutMs ({timeout_ms} ms); it was cancelled on the server"
    )


@attrs.frozen(repr=False, eq=False)
class CallPoint(Record):
    """What firing the `call` point needs from the run it belongs to."""

    config: Config
    hooks: PhaseHooks
    ctx: HookContext
    journal: RunJournal

    def hooks_of(self, phase: Phase, call: Call) -> list[Hook]:
        """The `call` hooks of `phase` that fire for `call` (their `when` matching): only
        those whose `when.tool` or `when.server` may match are checked (`whenindex.py`)."""
        index = call_hooks(self.config).get(phase)
        if index is None:
            return []
        return [
            h
            for h in index.candidates(call.server, call.tool)
            if not h.when or tool_mismatch(h.when, call.server, call.tool, call.client) is None
        ]

    def hooked(self, call: Call) -> bool:
        """Whether any `call` hook fires for `call` (else its one frame is its `call`)."""
        return any(self.hooks_of(phase, call) for phase in CALL_PHASES)

    async def fire(self, call: Call) -> CallOutcome:
        """The call with its hooks, frames in the run's stream; never raises for what a hook
        or a server does (cancellation propagates: one the client made before the `call`
        frame, `by_client`, writes it, saying so)."""
        started = time.perf_counter()
        sent = [call.args]  # the arguments as they stand (a `before` hook's `apply`)
        try:
            answer, destructive, state = await self._make(call, sent)
        except trio.Cancelled:
            if call.by_client is not None and call.by_client() and not self.journal.finished:
                hint = self.known_hint(call.server, call.tool)
                self.journal.append(call_frame(call, sent[0], CANCELLED, hint, started))
            raise
        note = self.note(call.server, answer)
        self.journal.append(call_frame(call, sent[0], answer, destructive, started, note=note))
        return await self._land(state, call, answer)

    async def _make(self, call: Call, sent: list[Any]) -> tuple[CallOutcome, bool | None, RunState]:
        """`fire`'s `before` hooks and the call they let through (or refuse): what it ends
        in, its `destructiveHint`, the hooks' state; `sent[0]`, the arguments as they stand
        (a hook's `apply`)."""
        facts = {"server": call.server, "tool": call.tool, "args": call.args}
        state = RunState(attrs.evolve(self.ctx, input=(facts,), result=None, error=None))
        for group in together_groups(self.hooks_of(Phase.BEFORE, call)):
            await self.hooks.run_hooks(group, Phase.BEFORE, state)
            assert state.ctx.input is not None
            if state.ctx.input[0] is not facts:  # an `apply`: its value is the new args
                facts = {**facts, "args": state.ctx.input[0]}
                state.ctx = attrs.evolve(state.ctx, input=(facts,))
                sent[0] = facts["args"]
            if state.refused_by is not None:
                break
        args = facts["args"]
        if state.refused_by is not None:
            answer = CallOutcome(False, error=state.message, refused_by=state.refused_by)
            destructive = self.known_hint(call.server, call.tool)
        elif not isinstance(args, dict):
            why = "a before hook applied arguments that are not an object; the call was not sent"
            answer, destructive = CallOutcome(False, error=why), None
        else:
            mark = self.egress_mark(call.server)
            answer, destructive = await self._call(call, args)
            self.egress_frames(call.server, mark)
        return answer, destructive, state

    async def fire_unhooked(self, call: Call) -> tuple[CallOutcome, Frame]:
        """`fire` for a call no hook fires for (`hooked`): what it ends in, and its `call`
        frame, for the caller to write."""
        started = time.perf_counter()
        mark = self.egress_mark(call.server)
        answer, destructive = await self._call(call, call.args)
        self.egress_frames(call.server, mark)
        note = self.note(call.server, answer)
        return answer, call_frame(call, call.args, answer, destructive, started, note=note)

    def note(self, server: str, answer: CallOutcome) -> str | None:
        """What the `call` frame of a call to `server` that the server answered with a
        failure (not a refusal) notes (`core/servers.py`'s `offline_note`); costs nothing
        for a call that succeeded."""
        if answer.ok or answer.refused_by is not None or answer.cancelled:
            return None
        servers = self.ctx.servers
        spec = servers.specs.get(server) if servers is not None else None
        return None if spec is None else offline_note(spec, answer.error)

    def _entry(self, server: str) -> ServerEntry | None:
        servers = self.ctx.servers
        spec = servers.specs.get(server) if servers is not None else None
        return servers.manager.entries.get(spec) if servers and spec else None

    def egress_mark(self, server: str) -> EgressMark:
        """The server's lease on the egress proxy and its refusals so far."""
        entry = self._entry(server)
        lease = entry.egress if entry is not None else None
        return lease, 0 if lease is None else lease.logged

    def egress_frames(self, server: str, mark: EgressMark) -> None:
        """An `egress` frame for each host the proxy refused the server while it served the
        call (from its start, if the call started it) that no frame of the run has named."""
        entry = self._entry(server)
        lease = entry.egress if entry is not None else None
        if lease is None:
            return
        said = self.hooks.egress_said
        for host, port in lease.since(mark[1] if lease is mark[0] else 0):
            if said.take(host):
                from ..core.hookframes import EgressFrame

                why = refusal(host, port, lease, f"[servers.{server}] network")
                self.journal.append(
                    blank(EgressFrame, host=host, port=port, server=server, why=why)
                )

    def known_hint(self, server: str, tool: str) -> bool | None:
        """The tool's `destructiveHint` if its server has listed it already (a refused call
        starts no server to learn it)."""
        entry = self._entry(server)
        listed = entry.tool(tool) if entry is not None else None
        return listed.annotations.destructive_hint if listed and listed.annotations else None

    async def _call(self, call: Call, args: Any) -> tuple[CallOutcome, bool | None]:
        server, tool = call.server, call.tool
        servers = self.ctx.servers
        if servers is None:  # (a runtime has no manager where its config declares no server)
            why = "no tool servers where this script runs"
            if not self.config.servers:
                why = undeclared(server, ())
            return CallOutcome(False, error=why), None
        try:
            spec = servers.spec(server)
            with trio.fail_after(spec.call_timeout_ms / 1000):
                result, entry = await servers.manager.call(
                    spec,
                    tool,
                    args,
                    run_id=self.ctx.run_id,
                    progress=call.progress,
                    log=call.log,
                    meta=call.meta,
                )
        except (ServerFailing, ToolFailed) as exc:
            return CallOutcome(False, error=str(exc)), None
        except trio.TooSlowError:
            return CallOutcome(False, error=too_slow(spec.call_timeout_ms)), None
        return answer_outcome(result), destructive_hint(entry, tool)

    async def _land(self, state: RunState, call: Call, answer: CallOutcome) -> CallOutcome:
        """The `onSuccess` or `onError` hooks (an `apply` replaces the answer, and the
        server's own is no longer what the caller gets), then `suffix`."""
        called = {"server": call.server, "tool": call.tool}  # which call, beside its answer
        if answer.ok:
            state.value = (answer.value,)
            state.ctx = attrs.evolve(state.ctx, result={"value": answer.value, **called})
        else:
            state.value, state.message = None, answer.error
            state.ctx = attrs.evolve(state.ctx, error={"message": answer.error, **called})
        landed = state.value
        landing = Phase.ON_SUCCESS if answer.ok else Phase.ON_ERROR
        await self.hooks.run_hooks(self.hooks_of(landing, call), landing, state)
        if state.value is not None:
            kept = answer.result if state.value is landed else None
            final = CallOutcome(True, state.value[0], result=kept)
        elif state.refused_by is not None or answer.refused_by is not None:
            final = CallOutcome(False, error=state.message, refused_by=state.refused_by)
        else:
            final = attrs.evolve(answer, error=state.message)
        outcome = "success" if final.ok else "error"
        state.ctx = attrs.evolve(state.ctx, outcome=outcome)
        await self.hooks.run_hooks(self.hooks_of(Phase.SUFFIX, call), Phase.SUFFIX, state)
        return final
