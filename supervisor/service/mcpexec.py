"""`mcpx_exec`, the MCP face's own tool: runs a script with its hooks exactly as the service's
`/v1/exec` does. Its arguments are an exec request (the same fields, `request_schema()`),
admitted by the same rules (`admission.Way.MCP`: the request's `cwd` inside the roots, whose
default is the directory `mcpx-hooks mcp` started in by `serve`'s rule; only `[service]
sandboxes`; the caller's environment is what it sent).

While the run goes, its frames are sent to the client as logging notifications (one per
batch of frames, `data: {"runId", "frames"}`, at level `info`), and, when the client gave a
progress token, a progress notification per batch (the frames so far). The answer is
`structuredContent: {runId, status, exitCode, result | error, advice, proposals}` with a
short text; `isError: true` when the run ended in `error`. A request that is not admitted is
answered `isError: true` with why, and nothing runs. A client that cancels the call cancels
the run (its suffix hooks and `end` still come).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

import anyio
import trio
from mcp import types
from mcp.server.context import ServerRequestContext

from ..run.journal import RunJournal
from ..run.runtime import Runtime
from ..run.scriptrun import Run
from .admission import Caller, admit
from .execrequest import parse_exec, request_schema
from .mcpcalls import send_log
from .roots import release_cwd
from .wire import WireError

#: The tool's name (`[mcp] exec = false` leaves it out).
EXEC_TOOL: Final = "mcpx_exec"
#: The logger name the run's frames are sent under.
FRAMES_LOGGER: Final = "mcpx-hooks"


def exec_tool() -> types.Tool:
    return types.Tool(
        name=EXEC_TOOL,
        description="Runs a script (an argv, or Python code or a file) with the hooks declared"
        " around it, in its sandbox, and answers its result or its error; the run's frames"
        " come as log messages while it runs.",
        input_schema=request_schema(),
        annotations=types.ToolAnnotations(destructive_hint=True, open_world_hint=False),
    )


class RunSlots(Protocol):
    """The runs in progress of the service an `mcpx_exec` run is one of (`serve`'s: its
    `maxRuns` counts it, and its stop cancels it)."""

    def check_run_cap(self) -> None:
        """Raises `WireError` when no more runs may start now."""

    def hold_run(self, run: Run) -> AbstractContextManager[None]: ...


async def run_exec(
    runtime: Runtime,
    served_from: str,
    ctx: ServerRequestContext[Any, Any],
    arguments: Mapping[str, Any],
    *,
    log_frames: bool = True,
    slots: RunSlots | None = None,
) -> types.CallToolResult:
    """One `mcpx_exec` call: admitted, run to its `end`, summed up; its frames sent as log
    messages unless `log_frames` is false (the client set its log level above `info`)."""
    try:
        request = parse_exec(arguments)
        caller = Caller.mcp(runtime.config, served_from, os.environ)
        admitted = await trio.to_thread.run_sync(admit, request, caller)
    except WireError as exc:
        # The problems the message does not already say (it often joins them all).
        said = "\n".join((exc.message, *(p for p in exc.problems if p not in exc.message)))
        return _text(f"the request was not admitted: {said}", error=True)
    try:
        if slots is not None:
            slots.check_run_cap()
        run = runtime.new_run(admitted.request)
    except WireError as exc:
        await release_cwd(admitted.request)  # the run that was to remove it will not start
        return _text(f"the request was not admitted: {exc.message}", error=True)
    try:
        with slots.hold_run(run) if slots is not None else contextlib.nullcontext():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_report, run.journal, ctx, log_frames)
                await runtime.execute(run, admitted.config)
    finally:
        await release_cwd(run.request)
    return summary(run.journal)


async def _report(journal: RunJournal, ctx: ServerRequestContext[Any, Any], log: bool) -> None:
    """The run's frames to the client, batch by batch, until its `end` (or the client is
    gone: the run goes on)."""
    meta: Mapping[str, Any] = ctx.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    session, seen = ctx.session, 0
    # (in the call's own request: over HTTP, on its response, not on a stream it may not open)
    related = None if ctx.request_id is None else str(ctx.request_id)
    try:
        async for batch in journal.follow(0):
            seen += len(batch)
            if log:
                data = {"runId": journal.run_id, "frames": batch}
                await send_log(session, "info", data, FRAMES_LOGGER, ctx.request_id)
            if isinstance(token, str | int):
                said = batch[-1]["type"]
                await session.send_progress_notification(token, seen, None, said, related)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return


def summary(journal: RunJournal) -> types.CallToolResult:
    """The ended run as a tool result."""
    outcome = journal.outcome or {"type": "error", "message": "the run ended without an outcome"}
    end = journal.decoded(len(journal) - 1)[0] if len(journal) else {}
    status = str(outcome["type"])
    out: dict[str, Any] = {
        "runId": journal.run_id,
        "status": status,
        "exitCode": end.get("exitCode"),
        "advice": list(outcome.get("advice", [])),
        "proposals": list(outcome.get("proposals", [])),
    }
    if status == "result":
        out["result"] = outcome.get("value")
        text = f"run {journal.run_id} ended in a result"
    else:
        out["error"] = {k: v for k, v in outcome.items() if k not in _ENVELOPE}
        text = f"run {journal.run_id} ended in an error: {outcome.get('message', '')}"
    result = _text(text, error=status != "result")
    return result.model_copy(update={"structured_content": out})


#: A frame's envelope, left out of the error it says.
_ENVELOPE: Final = frozenset({"type", "runId", "seq", "at", "advice", "proposals"})


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)
