"""The tool calls a script makes, with the `call` point's hooks around each.

A script writes `{"type": "call", "id": n, "tool": "server.tool", "args": {...}}` on its
frames channel and reads one JSON line per call from `MCPX_CALLS_FD`: `{"id": n, "ok": true,
"value": V}` or `{"id": n, "ok": false, "error": "..."}`. Calls are served one at a time, in
the order they came; each puts in the run's stream `hook{on: call, phase: before}`…, one
`call` frame (the SHA-256 of the arguments sent, never the arguments or the answer), the
`onSuccess` or `onError` hooks, then the `suffix` hooks.

Hostile lines cost bounded memory and get an answer: a line that is not a call object, a
`tool` that is not `server.tool`, arguments over `MAX_ARGS_BYTES`, more than `MAX_PENDING`
calls waiting. Answers wait in a channel of `MAX_ANSWERS`; a script that never reads them
loses the rest (counted, with one warning frame), never blocking the run. Each call is
bounded by its server's `callTimeoutMs` (the call is then cancelled on the server).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any, Final

import attrs
import trio

from ..core.frames import WarningFrame, blank
from ..core.hooks import Config
from ..core.points import Phase
from ..core.records import Record
from ..core.servers import split_tool
from ..core.when import tool_mismatch
from ..tools.serverentry import ServerFailing, ToolFailed, answer_text
from .hookcontext import HookContext
from .journal import RunJournal
from .phases import PhaseHooks, RunState

#: Calls waiting to be served; past it a call is answered at once with an error.
MAX_PENDING: Final = 64
#: Answers waiting for the script to read them.
MAX_ANSWERS: Final = 256
#: The largest `args` (as JSON) a call may send: what waits is at most `MAX_PENDING` of them.
MAX_ARGS_BYTES: Final = 1024 * 1024
#: The longest `id` (as text) and `tool` a call may name.
MAX_NAME_CHARS: Final = 256


def args_sha256(args: Any) -> str:
    """The SHA-256 of the arguments as JSON with sorted keys and no spaces."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@attrs.define(repr=False)
class _Answer(Record):
    ok: bool
    value: Any = None
    error: str = ""
    refused_by: str | None = None


class ScriptCalls:
    """One script's calls: `submit` from the frames channel, `serve` while it runs."""

    def __init__(
        self, *, config: Config, hooks: PhaseHooks, ctx: HookContext, journal: RunJournal
    ) -> None:
        self.config = config
        self.hooks = hooks
        self.ctx = ctx
        self.journal = journal
        self._calls, self._pending = trio.open_memory_channel[Mapping[str, Any]](MAX_PENDING)
        self._answers, self._to_write = trio.open_memory_channel[bytes](MAX_ANSWERS)
        self.dropped_answers = 0

    def submit(self, msg: Mapping[str, Any]) -> None:
        """Takes one `call` line (never blocks): queued, or answered at once with why not."""
        call_id = msg.get("id")
        tool, args = msg.get("tool"), msg.get("args", {})
        if (
            not isinstance(call_id, int | str)
            or isinstance(call_id, bool)
            or len(str(call_id)) > MAX_NAME_CHARS
        ):
            why = f"a call needs an `id` (an integer or a string of at most {MAX_NAME_CHARS})"
            self._answer(None, _Answer(False, error=why))
        elif not isinstance(tool, str) or len(tool) > MAX_NAME_CHARS or not all(split_tool(tool)):
            why = f'`tool` must be "server.tool", at most {MAX_NAME_CHARS} characters'
            self._answer(call_id, _Answer(False, error=why))
        elif not isinstance(args, dict):
            self._answer(call_id, _Answer(False, error="`args` must be an object"))
        elif len(json.dumps(args)) > MAX_ARGS_BYTES:
            self._answer(call_id, _Answer(False, error=f"`args` over {MAX_ARGS_BYTES} bytes"))
        else:
            try:
                self._calls.send_nowait(msg)
            except trio.WouldBlock:
                why = f"more than {MAX_PENDING} calls waiting; wait for answers before sending more"
                self._answer(call_id, _Answer(False, error=why))

    def _answer(self, call_id: Any, answer: _Answer) -> None:
        line: dict[str, Any] = {"id": call_id, "ok": answer.ok}
        if answer.ok:
            line["value"] = answer.value
        else:
            line["error"] = answer.error
        try:
            text = json.dumps(line, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:  # NaN from a server, say
            text = json.dumps(
                {"id": call_id, "ok": False, "error": f"the answer is not JSON: {exc}"}
            )
        try:
            self._answers.send_nowait(text.encode() + b"\n")
        except trio.WouldBlock:
            self.dropped_answers += 1
            if self.dropped_answers == 1:
                self.journal.append(
                    blank(
                        WarningFrame,
                        message=f"calls channel: the script reads no answers; more than"
                        f" {MAX_ANSWERS} waiting, later ones are dropped",
                    )
                )

    async def serve(self, answers: trio.abc.SendStream) -> None:
        """Serves the calls and writes their answers until cancelled (the script ended)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write, answers)
            async for msg in self._pending:
                self._answer(msg["id"], await self._one(msg))

    async def _write(self, answers: trio.abc.SendStream) -> None:
        async for line in self._to_write:
            try:
                await answers.send_all(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the script closed its end: it wants no more answers

    def _hooks(self, phase: Phase, server: str, tool: str) -> list[Any]:
        return [
            h
            for h in self.config.hooks
            if h.on == "call"
            and h.phase is phase
            and h.enabled
            and (not h.when or tool_mismatch(h.when, server, tool) is None)
        ]

    async def _one(self, msg: Mapping[str, Any]) -> _Answer:
        server, tool = split_tool(str(msg["tool"]))
        started = time.perf_counter()
        facts = {"server": server, "tool": tool, "args": msg.get("args", {})}
        state = RunState(attrs.evolve(self.ctx, input=(facts,), result=None, error=None))
        for hook in self._hooks(Phase.BEFORE, server, tool):
            await self.hooks.run_hooks([hook], Phase.BEFORE, state)
            assert state.ctx.input is not None
            if state.ctx.input[0] is not facts:  # an `apply`: its value is the new args
                facts = {**facts, "args": state.ctx.input[0]}
                state.ctx = attrs.evolve(state.ctx, input=(facts,))
            if state.refused_by is not None:
                break
        args = facts["args"]
        if state.refused_by is not None:
            answer = _Answer(False, error=state.message, refused_by=state.refused_by)
            destructive = self._known_hint(server, tool)
        elif not isinstance(args, dict):
            why = "a before hook applied arguments that are not an object; the call was not sent"
            answer, destructive = _Answer(False, error=why), None
        else:
            answer, destructive = await self._call(server, tool, args)
        ms = round((time.perf_counter() - started) * 1000)
        from ..core.hookframes import CallFrame  # built with a run's first tool call

        self.journal.append(
            blank(
                CallFrame,
                id=msg["id"],
                server=server,
                tool=tool,
                args_sha256=args_sha256(args),
                duration_ms=ms,
                ok=answer.ok,
                error=None if answer.ok else answer.error,
                destructive_hint=destructive,
                refused_by=answer.refused_by,
            )
        )
        return await self._land(state, answer)

    def _known_hint(self, server: str, tool: str) -> bool | None:
        """The tool's `destructiveHint` if its server has listed it already (a refused call
        starts no server to learn it)."""
        servers = self.ctx.servers
        spec = servers.specs.get(server) if servers is not None else None
        entry = servers.manager.entries.get(spec) if servers and spec else None
        listed = entry.tool(tool) if entry is not None else None
        return listed.annotations.destructive_hint if listed and listed.annotations else None

    async def _call(self, server: str, tool: str, args: Any) -> tuple[_Answer, bool | None]:
        servers = self.ctx.servers
        if servers is None:
            return _Answer(False, error="no tool servers where this script runs"), None
        try:
            spec = servers.spec(server)
            with trio.fail_after(spec.call_timeout_ms / 1000):
                result, entry = await servers.manager.call(spec, tool, args, run_id=self.ctx.run_id)
        except (ServerFailing, ToolFailed) as exc:
            return _Answer(False, error=str(exc)), None
        except trio.TooSlowError:
            why = (
                f"the call took longer than callTimeoutMs ({spec.call_timeout_ms} ms); it was"
                " cancelled on the server"
            )
            return _Answer(False, error=why), None
        listed = entry.tool(tool)
        hint = listed.annotations.destructive_hint if listed and listed.annotations else None
        if result.is_error:
            return _Answer(False, error=answer_text(result)[:4096] or "isError"), hint
        value = result.structured_content
        return _Answer(True, value if value is not None else answer_text(result)), hint

    async def _land(self, state: RunState, answer: _Answer) -> _Answer:
        """The `onSuccess` or `onError` hooks (an `apply` replaces the answer), then
        `suffix`."""
        facts = state.ctx.input[0] if state.ctx.input else {}
        server, tool = facts.get("server", ""), facts.get("tool", "")
        if answer.ok:
            state.value = (answer.value,)
            called = {"server": server, "tool": tool}  # which call, beside its answer
            state.ctx = attrs.evolve(state.ctx, result={"value": answer.value, **called})
        else:
            state.value, state.message = None, answer.error
            called = {"server": server, "tool": tool}
            state.ctx = attrs.evolve(state.ctx, error={"message": answer.error, **called})
        landing = Phase.ON_SUCCESS if answer.ok else Phase.ON_ERROR
        await self.hooks.run_hooks(self._hooks(landing, server, tool), landing, state)
        if state.value is not None:
            final = _Answer(True, state.value[0])
        else:
            final = _Answer(False, error=state.message, refused_by=state.refused_by)
        outcome = "success" if final.ok else "error"
        state.ctx = attrs.evolve(state.ctx, outcome=outcome)
        await self.hooks.run_hooks(self._hooks(Phase.SUFFIX, server, tool), Phase.SUFFIX, state)
        return final
