"""One tool server as the manager keeps it (`ServerEntry`: its state, its session, its
tools, its backoff), the errors a use of a server ends in, and the JSON shapes of a server's
state and of a tool's answer.

No MCP SDK at import: its types are named for the type checker only, and an answer is read by
its fields (the SDK is imported when a server starts, `serverproc.py`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

import attrs
import trio

from ..core.backoff import retry_wait_s
from ..core.errors import HooksError
from ..core.points import Phase
from ..core.records import Record
from ..core.redact import Redactor
from ..core.servers import BACKOFF_FIRST_S, BACKOFF_MAX_S, ServerSpec
from .hearing import hear_within

if TYPE_CHECKING:
    from mcp import types
    from mcp.client.session import ClientSession

    from ..process.egress import Lease
    from .rawchannel import RawChannel

_T = TypeVar("_T")


class LogHearer(Protocol):
    """Who hears a server's log messages while its call is in flight. Hearers with the same
    `sink` (the client they write to) hear each message once between them."""

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None: ...


class StartHooks(Protocol):
    """The `server.start` hooks a server's start runs, given to the manager by what runs hooks
    (`run/serverhooks.py`): those of `phase` for `server`, with what the phase gives them
    (`input`, `result` or `error`). Returns "refused by NAME: why" when one refused, else
    None. Never raises for a broken hook; cancellation propagates."""

    async def __call__(
        self, phase: Phase, server: str, run_id: str | None, **given: Any
    ) -> str | None: ...


class ServerFailing(HooksError):
    """A server cannot serve a use: it failed to start, crashed, is in its backoff, or was
    refused by a `server.start` hook. The message says why."""


class ToolFailed(HooksError):
    """The server answered the call with a JSON-RPC error (an unknown tool, bad arguments)."""


class AnswerTooLarge(ToolFailed):
    """The server's answer to the call is over the longest message read from a server
    (`MAX_MESSAGE_BYTES`): the call failed as soon as it passed that bound."""


@attrs.define(repr=False)
class ServerEntry(Record):
    """One server's state: `idle` (not running), `starting`, `running` (since `since`),
    `stopping` (idle, on its way down), `failing` (`reason`, until `retry_at`)."""

    spec: ServerSpec
    state: str = "idle"
    session: ClientSession | None = None
    #: Beside `session` (a server on a child's pipes): requests relayed around it.
    raw: RawChannel | None = None
    tools: tuple[types.Tool, ...] = ()
    info: Mapping[str, Any] = attrs.field(factory=dict)
    #: What the server said it serves at its `initialize` (tools, prompts, resources …).
    capabilities: types.ServerCapabilities | None = None
    #: Who hears the server's log messages now: the callers of its calls in flight that
    #: asked to (`ServerManager.call`'s `log`).
    log_hearers: list[LogHearer] = attrs.field(factory=list)
    #: Set when the server says its tools changed (`notifications/tools/list_changed`),
    #: until they are listed again (`serverlife.py`).
    relist: trio.Event = attrs.field(factory=trio.Event)
    #: Told which of the server's lists its clients should list anew (`LISTS_TOLD`): its
    #: tools each time they were listed again, its prompts or its resources when it said
    #: they changed (the manager's `relisted`).
    on_relisted: Callable[[str], None] | None = None
    #: Its prompts, resources and resource templates as listed in this life, by kind
    #: (`LISTS_OF`): a client's listing is answered from here (`listing`), with no request
    #: to the server, until it says that list changed, or its life ends (`forget_lists`).
    lists: dict[str, Any] = attrs.field(factory=dict)
    #: How many times `lists` was forgotten (a listing asked before is not kept).
    forgotten: int = 0
    #: The lists it said changed since its clients were last told (`serverlife.py`), and
    #: the event that says there are some.
    lists_changed: set[str] = attrs.field(factory=set)
    lists_said: trio.Event = attrs.field(factory=trio.Event)
    #: The server's own secrets, redacted from what it says of itself (its `info`, its
    #: tools' listing), which `servers list` shows and the trust state pins: set by each
    #: life as it starts (`serverproc.py`, `remote.py`).
    redactor: Redactor = attrs.field(factory=Redactor)

    async def notified(self, message: object) -> None:
        """What the SDK's session surfaced of the server (a notification, or a fault of its
        transport): a change of its tools is heard here."""
        method = getattr(message, "method", None)
        if method == "notifications/tools/list_changed":
            self.relist.set()
        elif isinstance(method, str) and method in LISTS_OF:
            told, kinds = LISTS_OF[method]
            self.forget_lists(kinds)
            self.lists_changed.add(told)
            self.lists_said.set()

    def forget_lists(self, kinds: tuple[str, ...] = ()) -> None:
        """Forgets the server's listings of `kinds` (every kind when none is named): the
        next client's listing asks the server again."""
        self.forgotten += 1
        for kind in kinds or tuple(self.lists):
            self.lists.pop(kind, None)

    async def listing(self, kind: str, ask: Callable[[], Awaitable[_T]], *, keep: bool) -> _T:
        """The server's listing of `kind` as it was listed before in this life, else what
        `ask` (every page of it) answers now, kept when `keep` (the server declared that it
        says when that list changes: `listChanged`) unless the server said that list changed
        (or its life ended) while it was asked. What raises is not kept."""
        kept = self.lists.get(kind)
        if kept is not None:
            return cast(_T, kept)
        forgotten = self.forgotten
        answered = await ask()
        if keep and self.forgotten == forgotten:
            self.lists[kind] = answered
        return answered

    async def heard(self, params: types.LoggingMessageNotificationParams) -> None:
        """A log message of the server, passed to each hearer (none: it is dropped), once to
        each sink: a client with several calls in flight to the server hears it once. The
        sinks are told side by side, each for at most `HEAR_WAIT_S` (`hear_within`): a
        client that does not read holds up none of the others, nor makes them miss it."""
        sinks: dict[int, LogHearer] = {}
        for hear in self.log_hearers:  # (`ClientLog`: the client it tells)
            sinks.setdefault(id(getattr(hear, "sink", hear)), hear)
        if len(sinks) == 1:  # (the usual case: no task to start)
            await hear_within(next(iter(sinks.values())), params)
            return
        async with trio.open_nursery() as nursery:
            for hear in sinks.values():
                nursery.start_soon(hear_within, hear, params)

    since: float | None = None
    reason: str = ""
    failures: int = 0
    retry_at: float = 0.0
    #: Whether its start under way follows a failure (a listing does not wait for it).
    retrying: bool = False
    #: Whether a listing left it out while it was failing (its clients are told its lists
    #: changed once it has started).
    left_out: bool = False
    in_use: int = 0
    last_used: float = 0.0
    #: The run whose use started it (its `server.start` hook events carry that run's id).
    started_by: str | None = None
    #: Its lease on the egress proxy while it runs with a `network` list (`serverproc.py`).
    egress: Lease | None = None
    ready: trio.Event = attrs.field(factory=trio.Event)
    ended: trio.Event = attrs.field(factory=trio.Event)
    #: Set when a use begins or ends (the idle wait, while a use goes on, waits for this).
    changed: trio.Event = attrs.field(factory=trio.Event)
    #: When (`time.time()`) its tools were last listed, in this life.
    listed_at: float = 0.0
    #: Set when this life is to end as soon as none of its uses is in flight (`retire`): its
    #: tools were pinned anew since it listed them (`service/mcppins.py`).
    retiring: trio.Event = attrs.field(factory=trio.Event)

    def retire(self) -> None:
        """Ends this life once none of its uses is in flight: the next use starts it afresh."""
        self.retiring.set()

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def tool(self, name: str) -> types.Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def failed(self, reason: str) -> None:
        """The server stopped or never started, for `reason`: uses fail until the backoff
        has passed."""
        self.failures += 1
        self.state, self.reason, self.session = "failing", reason, None
        self.retry_at = trio.current_time() + backoff_s(self.failures)


#: A server's notification that some of its lists changed: which its clients are told of
#: (`on_relisted`), and the kinds of listing it forgets (`ServerEntry.lists`).
LISTS_OF: Final[Mapping[str, tuple[str, tuple[str, ...]]]] = {
    "notifications/prompts/list_changed": ("prompts", ("prompts",)),
    "notifications/resources/list_changed": ("resources", ("resources", "resource templates")),
}


def backoff_s(failures: int) -> float:
    """The wait after `failures` failures in a row: 1, 2, 4 … 30 s."""
    return retry_wait_s(failures, BACKOFF_FIRST_S, BACKOFF_MAX_S)


def entry_json(entry: ServerEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"name": entry.spec.name, "state": entry.state}
    if entry.state == "running" and entry.since is not None:
        out["since"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(entry.since))
    if entry.state == "failing":
        out["reason"] = entry.reason
    if entry.info:
        out["server"] = dict(entry.info)
    out["tools"] = [tool_json(t) for t in entry.tools]
    return out


def tool_json(tool: types.Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    if tool.annotations is not None:
        out["annotations"] = tool.annotations.model_dump(by_alias=True, exclude_none=True)
    return out


def answer_text(result: types.CallToolResult) -> str:
    """What a tool's answer is read as: its structured content as JSON, else its text."""
    if result.structured_content is not None:
        return json.dumps(result.structured_content)
    # By its `type`, not its class: the SDK is not imported until a server starts.
    return "".join(getattr(c, "text", "") for c in result.content if c.type == "text")


def where_json(spec: ServerSpec) -> dict[str, Any]:
    """How a server is reached, as `servers list` shows it: its `url`, or its `command`."""
    return {"url": spec.url} if spec.url is not None else {"command": list(spec.command)}
