"""The tool calls a script makes, with the `call` point's hooks around each.

A script writes `{"type": "call", "id": n, "tool": "server.tool", "args": {...}}` on its
frames channel and reads one JSON line per call from `MCPX_CALLS_FD`: `{"id": n, "ok": true,
"value": V}` or `{"id": n, "ok": false, "error": "..."}`. Calls are served one at a time, in
the order they came, each through the `call` point (`callpoint.py`, where its hooks and its
frames are).

Hostile lines cost bounded memory and get an answer: a line that is not a call object, a
`tool` that is not `server.tool`, arguments over `MAX_ARGS_BYTES`, more than `MAX_PENDING`
calls waiting. Answers wait in a channel of `MAX_ANSWERS`; a script that never reads them
loses the rest (counted, with one warning frame), never blocking the run. Each call is
bounded by its server's `callTimeoutMs` (the call is then cancelled on the server).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..core.frames import WarningFrame, blank
from ..core.hooks import Config
from ..core.records import Record
from ..core.servers import split_tool
from .hookcontext import HookContext
from .journal import RunJournal
from .phases import PhaseHooks

if TYPE_CHECKING:
    from .callpoint import CallPoint

#: Calls waiting to be served; past it a call is answered at once with an error.
MAX_PENDING: Final = 64
#: Answers waiting for the script to read them.
MAX_ANSWERS: Final = 256
#: The largest `args` (as JSON) a call may send: what waits is at most `MAX_PENDING` of them.
MAX_ARGS_BYTES: Final = 1024 * 1024
#: The longest `id` (as text) and `tool` a call may name.
MAX_NAME_CHARS: Final = 256


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
        self._point: CallPoint | None = None  # made at the first call (most scripts make none)
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

    async def _one(self, msg: Mapping[str, Any]) -> _Answer:
        server, tool = split_tool(str(msg["tool"]))
        from .callpoint import Call, CallPoint  # (a run whose script calls no tool never loads it)

        if self._point is None:
            self._point = CallPoint(self.config, self.hooks, self.ctx, self.journal)
        outcome = await self._point.fire(Call(msg["id"], server, tool, msg.get("args", {})))
        return _Answer(outcome.ok, outcome.value, outcome.error, outcome.refused_by)
