"""What a service is started with: its bounds (`Limits`), its address and access
(`ServiceOptions`), and where it listens once it does (`Listening`). Pure data."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from ..core.records import Record
from .wire import DEFAULT_HOST, DEFAULT_PORT


@attrs.frozen(repr=False, eq=False)
class Limits(Record):
    """Every bound the service keeps; each is a `serve` flag or a named default."""

    #: A client message larger than this is refused (1009).
    max_message_bytes: int = 1024 * 1024
    #: What all clients together may hold of messages and `/mcp` bodies still coming in (past
    #: each one's first `unfinished.OWN_BYTES`); a message past it is refused (1013, 503).
    max_unfinished_bytes: int = 64 * 1024 * 1024
    #: Admitted connections: WebSockets (handshake done, token checked) and plain HTTP requests
    #: being answered; past it the upgrade or the request is refused (503).
    max_connections: int = 1024
    #: Sockets still in their handshake, not yet admitted. A new one past it drops the oldest,
    #: so stalled handshakes can never keep a client that completes its own out.
    max_pending: int = 512
    #: Admitted sockets that carry no run: `/v1/events`, `/v1/hooks`. Past it such an upgrade
    #: is refused (503): runs and their followers always have room.
    max_idle: int = 256
    #: Every WebSocket is pinged this often; one that has not answered within as long of its
    #: ping going out is gone, and is aborted.
    ping_s: float = 30.0
    #: Runs in progress; past it a request is refused (1013, try again later).
    max_runs: int = 64
    #: A stream must complete its WebSocket handshake within this.
    handshake_s: float = 5.0
    #: An exec socket must send its request within this (4408).
    request_s: float = 30.0
    #: A client's message must come whole within this of its first frame (4408).
    message_s: float = 30.0
    #: One message taking longer than this to send: the client is gone (aborted).
    send_stall_s: float = 60.0
    #: Shutdown: runs in progress may finish within this before they are cancelled.
    grace_s: float = 10.0
    #: Shutdown: once runs have ended, streams may send their last frames within this.
    drain_s: float = 5.0
    #: A message from the server holds frames up to about this many bytes (at least one).
    coalesce_bytes: int = 256 * 1024
    #: Events sent in one message at most.
    coalesce_events: int = 256
    #: Messages a second the streams of the whole service aim to stay under. A stream gets
    #: its next message no sooner than `streams / send_rate` seconds after its last one
    #: began, so what arrives meanwhile goes out together (see `Streams`). A message costs
    #: the server ~15 µs of write(2) here and a local client several times that to read.
    send_rate: float = 12_500.0


@attrs.frozen(repr=False, eq=False)
class ServiceOptions(Record):
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: None: no token is asked for (`--no-auth`).
    token: str | None = None
    allow_origins: tuple[str, ...] = ()
    limits: Limits = Limits()
    #: The working directory of `serve`: the default `cwd` of a run.
    cwd: str = attrs.field(factory=os.getcwd)
    environ: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))


@attrs.frozen(repr=False, eq=False)
class Listening(Record):
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"
