"""The requests a tool server's pipe carries beside the SDK's client session
(`mcpclient.py`): written as the SDK's client would write them, with ids of this channel's
own (`mcpx-<kind>-<n>`, strings, where the SDK's client numbers its requests), and their
answers, progress notifications and the server's log messages while they wait handed to
their routes by the session's reading task, in the order the server wrote them.

A tool call through the manager (`servers.py`) is one (`RawChannel.call_tool`); so is a call
an MCP client makes that no hook can touch, relayed by the gateway (`service/mcpraw.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

import pydantic
import trio
from mcp import types
from mcp.client.session import LoggingFnT

from .hearing import Progress, hear_within
from .jsonlines import json_line
from .wireresult import WrittenLog


class RawRoute(Protocol):
    """Where what the server says about one request of a `RawChannel` goes."""

    async def answered(self, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
        """Its answer (or the error made for one too large or unreadable)."""

    async def progress(self, params: dict[str, Any]) -> None:
        """A `notifications/progress` whose token is the request's id."""

    def gone(self) -> None:
        """The server's stdout ended before the answer came."""


class Lines(Protocol):
    """Where a `RawChannel` writes its messages, each one line: a server's stdin
    (`jsonlines.LineWriter`), or the SDK's HTTP transport to a `url` server (`remote.py`)."""

    def send_nowait(self, line: bytes) -> bool:
        """Writes `line` whole at once, or nothing (False)."""

    async def send(self, line: bytes) -> None:
        """Writes `line`; raises `trio.BrokenResourceError` or `trio.ClosedResourceError`
        when the server is gone."""


class RawChannel:
    """Requests written to the server beside the session, each with an id of the channel's
    (`new_id`), and where their answers go (`routes`, by that id). A cancellation that cannot
    be written at once is written by a task in `nursery`."""

    def __init__(
        self,
        lines: Lines,
        in_flight: set[types.RequestId],
        nursery: trio.Nursery,
        heard: LoggingFnT | None = None,
    ) -> None:
        self._lines = lines
        self._in_flight = in_flight
        self._nursery = nursery
        self._heard = heard
        self._count = 0
        self.routes: dict[str, RawRoute] = {}
        self.open = True

    def new_id(self, kind: str) -> str:
        """An id no request on the pipe has had: `mcpx-<kind>-<n>` (the SDK's are numbers)."""
        self._count += 1
        return f"mcpx-{kind}-{self._count}"

    async def call_tool(
        self,
        tool: str,
        args: dict[str, Any],
        progress: Progress | None,
        meta: Mapping[str, Any] | None = None,
    ) -> types.JSONRPCResponse | types.JSONRPCError | None:
        """Calls `tool` as the SDK's client does on a handshake-era connection, and returns
        the server's answer, or None when its stdout ended first (`request`). The server's
        progress on the call goes to `progress` (then it is asked for), with its params as
        written. `meta` goes in the request's `_meta`, beside the progress token. Raises
        `ValueError`, having sent nothing, when `args` or `meta` are not strict JSON in
        UTF-8 (NaN, a lone surrogate)."""
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if meta:
            params["_meta"] = dict(meta)
        return await self.request("call", "tools/call", params, progress)

    async def request(
        self, kind: str, method: str, params: dict[str, Any], progress: Progress | None = None
    ) -> types.JSONRPCResponse | types.JSONRPCError | None:
        """Sends the request `method` with `params` (an id `mcpx-<kind>-<n>`; asking for
        progress, to `progress`, when it is given) and returns the server's answer, as
        written, or None when its stdout ended first. Cancelled, the server is told
        (`notifications/cancelled`). Raises `ValueError`, having sent nothing, when `params`
        are not strict JSON in UTF-8."""
        rid = self.new_id(kind)
        if progress is not None:
            params = {**params, "_meta": {**params.get("_meta", {}), "progressToken": rid}}
        line = json_line({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        if line is None:
            raise ValueError("the params are not strict JSON in UTF-8")
        if not self.open:
            return None
        waiter = _Waiter(progress)
        self.routes[rid] = waiter
        self._in_flight.add(rid)
        try:
            if not self._lines.send_nowait(line):
                await self._lines.send(line)
            await waiter.done.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.forget(rid)
            return None  # the server closed its stdin
        except BaseException:  # cancelled: the server is told, its answer dropped
            if not waiter.done.is_set():
                self.forget(rid)
                self._cancel(rid)
            raise
        return waiter.message

    def _cancel(self, rid: str) -> None:
        line = cancellation(rid)
        if self.open and not self.notify_nowait(line):
            self._nursery.start_soon(self.notify, line)

    def send_nowait(self, rid: str, line: bytes, route: RawRoute) -> bool:
        """Writes the request `line` (id `rid`, a string) whole at once and routes its answer
        to `route`; or writes nothing and returns False (`Lines.send_nowait`)."""
        if not self.open or not self._lines.send_nowait(line):
            return False
        self._in_flight.add(rid)
        self.routes[rid] = route
        return True

    def forget(self, rid: str) -> None:
        """The request `rid` given up: whatever the server says of it now is dropped."""
        self.routes.pop(rid, None)
        self._in_flight.discard(rid)

    def cancel(self, rid: str) -> None:
        """The request `rid` given up (`forget`), and the server told so: at once when its
        stdin has room, else by a task of the channel's. Never waits: a server that reads
        nothing more holds up no caller (the reading of a client's lines, say)."""
        self.forget(rid)
        self._cancel(rid)

    async def notify(self, line: bytes) -> None:
        """Writes the notification `line` (a cancellation); a server gone is no error."""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            if not self.notify_nowait(line):
                await self._lines.send(line)

    def notify_nowait(self, line: bytes) -> bool:
        """Writes the notification `line` at once, or nothing (False)."""
        return self.open and self._lines.send_nowait(line)

    async def divert(self, message: types.JSONRPCMessage) -> bool:
        """Whether `message` was the routes' (then handed to its route): an answer to one of
        their requests, a progress notification for one, or a log message while they wait
        (heard here, in order, before the answer after it; heard by every use in flight), each
        kept as the server wrote it (`WrittenLog`, the progress's params).
        A notification's hearer gets at most `HEAR_WAIT_S` (then it misses that one): the
        server's other uses, other clients' among them, wait for nothing longer."""
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            route = self.routes.pop(message.id, None) if isinstance(message.id, str) else None
            if route is not None:
                await route.answered(message)
            return route is not None
        if not isinstance(message, types.JSONRPCNotification):
            return False
        if message.method == "notifications/progress" and isinstance(message.params, dict):
            token = message.params.get("progressToken")
            route = self.routes.get(token) if isinstance(token, str) else None
            if route is not None:
                await hear_within(route.progress, message.params)
            return route is not None
        if message.method == "notifications/message" and self._heard is not None:
            try:
                params = WrittenLog.read(message.params or {})
            except pydantic.ValidationError:
                return False  # the session's to drop
            await hear_within(self._heard, params)
            return True
        return False

    def close(self) -> None:
        """The server's stdout ended: each route still waiting is told."""
        self.open = False
        routes, self.routes = self.routes, {}
        for route in routes.values():
            route.gone()


class _Waiter:
    """A `RawRoute` for a call its caller awaits: `done` once answered (`message`) or gone
    (`message` None)."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self.done = trio.Event()
        self.message: types.JSONRPCResponse | types.JSONRPCError | None = None

    async def answered(self, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
        self.message = message
        self.done.set()

    async def progress(self, params: dict[str, Any]) -> None:
        said, total, message = params.get("progress"), params.get("total"), params.get("message")
        if self._progress is None or isinstance(said, bool) or not isinstance(said, int | float):
            return
        total = float(total) if isinstance(total, int | float) else None
        said_message = message if isinstance(message, str) else None
        await self._progress(float(said), total, said_message, written=params)

    def gone(self) -> None:
        self.done.set()


def cancellation(rid: str) -> bytes:
    """The line telling a server the request `rid` is given up."""
    line = json_line(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}
    )
    assert line is not None  # (an id of the channel's own is plain text)
    return line
