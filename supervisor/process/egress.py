"""The egress proxy: what a sandboxed child with a `network` list reaches, and nothing else.

One `EgressProxy` per supervisor (the spawner's, `Spawner.egress`). Each child gets a lease
(`open_lease`). The spawner makes the child's network namespace with only `lo` up, opens a
TCP socket listening at 127.0.0.1:`LOOPBACK_PORT` in it, and hands the socket's fd over
before anything else it says of the child (`runners/loopback.py`); the lease serves it
(`Lease.serve`) while it is open: a socket keeps its namespace, so it accepts the child's
connections from the supervisor's own. Whatever arrives there is judged against that
lease's allow-list (`core/egress.py`) alone: an HTTP `CONNECT host:port` (a tunnel,
HTTPS), or a plain HTTP request in absolute form (one a connection, its body as its head
frames it, nothing after it: `egresshttp.py`). The proxy resolves the name itself (the child
has no resolver to ask) and connects; a host not allowed gets `403` with "blocked: HOST not
in network" and is kept, once per host, in the lease's `refused`.

A lease's connections run in its own nursery: closing the lease (the child has been reaped)
cancels them. A child has at most `CONNECTIONS_MAX` connections served at once; the one past
them is answered `503` once its head is read, kept as a refusal of its host (so its run hears
of the bound), and past `HELD_MAX` held in all the proxy stops accepting
until one ends (the rest wait in the child's own queue, in its own namespace): a child
opening connections without end holds a bounded number of the supervisor's descriptors, and
no other child's. All children together hold at most a quarter of the open-files limit in
connections (`TOTAL_SHARE`), past which each waits the same way. A connection has
`HEAD_TIMEOUT_S` to send its request's head (`408`), and
`HEAD_BYTES` for it (`431`); a refusal is followed by reading what the client still sends
(`LINGER_S`, `LINGER_BYTES`), so that it reads the answer, not a reset. `accept` finding no
descriptor left is waited out and tried again. An exchange with an upstream in which no bytes
pass either way for `http.IDLE_S` is ended (`504` if no answer was sent yet), kept as a
refusal of its host: a stalled upstream holds a connection no longer.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import socket
import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..core import CAPACITY_ERRNOS, ROUTINE_ACCEPT_ERRNOS, egress
from ..core.backoff import retry_wait_s
from ..core.errors import HooksError
from ..core.records import Record
from . import egresshttp as http

if TYPE_CHECKING:
    from .egressca import RunCA

#: The loopback port the child's proxy variables name, in its own network namespace (where
#: the spawner listens for it: `runners/loopback.py` `PROXY_PORT`).
LOOPBACK_PORT: Final = 3128
#: The most refusals a lease keeps in order (`Lease.log`).
LOG_MAX: Final = 256
#: How long the proxy tries to connect to an upstream host.
CONNECT_TIMEOUT_S: Final = 10.0
#: The most connections one child has served through the proxy at once: past them, a new one
#: is answered `503` (by default npm opens 15 to a host at most, uv 50 downloads at once).
CONNECTIONS_MAX: Final = 64
#: The most connections of one child the proxy holds at once, those it is refusing with them:
#: past them it accepts no more until one ends (two descriptors at most for each served one,
#: one for each refused).
HELD_MAX: Final = CONNECTIONS_MAX + 16
#: The share of the supervisor's open-files limit its children's connections may hold in all:
#: at most `soft limit // TOTAL_SHARE` connections (two descriptors each at most: half the
#: table) at once, past which the proxy accepts no child's next one until one ends, so that
#: children flooding together cannot leave the supervisor without descriptors.
TOTAL_SHARE: Final = 4
#: How long a connection has to send its request's head (a `CONNECT`, and, in a tunnel whose
#: TLS the proxy reads, the handshake and the request's head there): past it, `408`.
HEAD_TIMEOUT_S: Final = 10.0
#: After a refusal, how long (and how many bytes) the proxy reads what the client still sends
#: before it closes: closed with unread bytes, a connection is reset, and the client reads the
#: reset in place of the answer.
LINGER_S: Final = 2.0
LINGER_BYTES: Final = 1 << 20
#: The first and the longest wait before accepting again when there is no descriptor left.
ACCEPT_RETRY_S: Final = 0.1
ACCEPT_RETRY_MAX_S: Final = 2.0
#: The reason phrase of each status the proxy answers itself.
_REASONS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Too Large",
    502: "Bad Gateway",
    503: "Too Many Connections",
    504: "Gateway Timeout",
}
_CHUNK: Final = 64 * 1024
_ESTABLISHED: Final = b"HTTP/1.1 200 Connection Established\r\n\r\n"
_ENDS: Final = http.ENDS  # (what ends a connection, said or not)


class _Refused(HooksError):
    """The connection was answered and ends (control flow inside a connection, never
    raised out of the proxy)."""


@attrs.define(repr=False)
class Lease(Record):
    """One child's access to the proxy: its allow-list, and the hosts it was refused, in
    order, once each (host, port)."""

    rules: tuple[egress.HostRule, ...]
    refused: dict[str, int] = attrs.field(factory=dict)
    #: What a hook frame says of a refused host, where not "blocked: HOST not in network".
    notes: dict[str, str] = attrs.field(factory=dict)
    #: Secrets with hosts: each placeholder the child has, its name, real value and hosts.
    secrets: dict[str, tuple[str, str, tuple[egress.HostRule, ...]]] = attrs.field(factory=dict)
    #: With secrets: the CA the child trusts alone, and how upstream hosts are verified.
    ca: RunCA | None = None
    upstream: ssl.SSLContext | None = None
    #: Where its sockets are served, while the lease is open (`EgressProxy.open_lease`).
    nursery: trio.Nursery | None = None
    #: Every refusal, in order (the last `LOG_MAX`), and how many there were: what a tool
    #: server's callers read around each call (`since`), its child serving many runs.
    log: list[tuple[str, int]] = attrs.field(factory=list)
    logged: int = 0
    #: Refusals of hosts past the `HOSTS_SAID_MAX` kept in `refused`: counted only.
    unkept: int = 0
    #: Its connections served now, and those held in all (`CONNECTIONS_MAX`, `HELD_MAX`).
    serving: int = 0
    held: trio.Semaphore = attrs.field(factory=lambda: trio.Semaphore(HELD_MAX))
    #: The connections every child holds through the proxy (`EgressProxy.held`).
    total: trio.Semaphore = attrs.field(factory=lambda: trio.Semaphore(HELD_MAX))

    def since(self, mark: int) -> list[tuple[str, int]]:
        """The refusals after the first `mark` (as far as the log keeps them)."""
        return self.log[max(0, len(self.log) - (self.logged - mark)) :]

    def serve(self, fd: int) -> None:
        """Serves the child's proxy socket (`fd`, listening in its network namespace, from
        the spawner: `ChildSpec.on_listener`) until the lease ends, which closes it."""
        listener = trio.socket.from_stdlib_socket(socket.socket(fileno=fd))
        try:
            assert self.nursery is not None
            self.nursery.start_soon(_serve, listener, self, self.nursery)
        except (AssertionError, RuntimeError):  # (the lease is over: nothing to serve)
            listener.close()

    def refuse(self, host: str, port: int, note: str | None = None) -> str:
        """Keeps `host` refused (its first port, its note) and says why."""
        # (Bounded: a child may try any number of hosts; past the bound, none is kept.)
        kept = host in self.refused or len(self.refused) < egress.HOSTS_SAID_MAX
        if kept:
            self.refused.setdefault(host, port)
        else:
            self.unkept += 1
        self.logged += 1
        self.log.append((host, port))
        del self.log[:-LOG_MAX]
        if note is not None and kept:
            self.notes.setdefault(host, note)
        return note or egress.blocked_message(host)

    def swapped(self, head: bytes, host: str, port: int) -> bytes | str:
        """`head` with each placeholder of a secret whose hosts hold `host:port` replaced by
        its value; a refusal (why) when it holds one whose hosts do not."""
        for placeholder, (name, value, hosts) in self.secrets.items():
            if placeholder.encode() not in head:
                continue
            if not egress.allows(hosts, host, port):  # (its port said: `localhost` may be
                where = egress.host_item(host, port)  # among its hosts on another port)
                return self.refuse(host, port, f"blocked: secret {name} sent to {where}")
            head = head.replace(placeholder.encode(), value.encode())
        return head

    def add_secret(self, name: str, value: str, hosts: tuple[str, ...]) -> str:
        """The placeholder the child gets for the secret `name` (its CA made now)."""
        placeholder = egress.placeholder(name, secrets.token_hex(8))
        self.secrets[placeholder] = (name, value, egress.rules(hosts))
        if self.ca is None:  # (`cryptography` loaded only for a child that has such secrets)
            from .egressca import RunCA, upstream_context

            self.ca, self.upstream = RunCA(), upstream_context()
        return placeholder

    def environment(self) -> dict[str, str]:
        """The variables that point the child at its proxy socket."""
        url = f"http://127.0.0.1:{LOOPBACK_PORT}"
        env = {name: url for name in egress.PROXY_VARIABLES}
        env |= {name.lower(): url for name in egress.PROXY_VARIABLES}
        env["NO_PROXY"] = env["no_proxy"] = ""
        return env


class EgressProxy:
    """The supervisor's proxy; it holds no task of its own: each lease serves its socket
    for as long as it is open."""

    def __init__(self) -> None:
        #: Leases served so far (for `doctor` and the tests).
        self.leases = 0
        #: The connections all its children may have held at once (`TOTAL_SHARE`).
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.held = trio.Semaphore(max(HELD_MAX, soft // TOTAL_SHARE))

    @contextlib.asynccontextmanager
    async def open_lease(self, network: tuple[str, ...]) -> AsyncIterator[Lease]:
        """A lease for a child allowed `network`, serving the sockets handed to it
        (`Lease.serve`) until the block ends; then they and their connections are closed."""
        lease = Lease(egress.rules(network), total=self.held)
        self.leases += 1
        async with trio.open_nursery() as nursery:
            lease.nursery = nursery
            try:
                yield lease
            finally:
                lease.nursery = None
                nursery.cancel_scope.cancel()


async def _serve(listener: trio.socket.SocketType, lease: Lease, nursery: trio.Nursery) -> None:
    """Accepts the child's connections until the lease ends (or the socket is shut down: its
    child's tree is gone), each served in `nursery` while it holds one of `lease.held`."""
    failures = 0
    with listener:
        while True:
            await lease.held.acquire()
            # (all children's places are taken by connections, never by a socket waiting)
            await trio.lowlevel.wait_readable(listener)
            await lease.total.acquire()
            try:
                conn, _ = await listener.accept()
            except OSError as exc:
                lease.total.release()
                lease.held.release()
                if exc.errno in ROUTINE_ACCEPT_ERRNOS:
                    continue
                if exc.errno not in CAPACITY_ERRNOS:
                    return
                failures += 1  # (no descriptor left: the supervisor's, not the child's doing)
                await trio.sleep(retry_wait_s(failures, ACCEPT_RETRY_S, ACCEPT_RETRY_MAX_S))
                continue
            failures = 0
            if not (crowded := lease.serving >= CONNECTIONS_MAX):
                lease.serving += 1
            nursery.start_soon(_connection, trio.SocketStream(conn), lease, crowded)


async def _connection(stream: trio.SocketStream, lease: Lease, crowded: bool) -> None:
    try:
        async with stream:
            try:
                await _handle(http.Wire(stream), lease, crowded)
            except _Refused:
                await _linger(stream)
            except _ENDS:
                return
    finally:
        if not crowded:
            lease.serving -= 1
        lease.total.release()
        lease.held.release()


def _idle_text(host: str, port: int) -> str:
    return (
        f"nothing passed to or from {egress.host_item(host, port)} for {http.IDLE_S:g} s:"
        " the proxy ended the connection"
    )


def _crowded_text() -> str:
    return (
        f"too many connections at once: this child has {CONNECTIONS_MAX} connections open"
        " through the proxy, the most it may; close one, or open fewer at once"
    )


async def _linger(stream: trio.SocketStream) -> None:
    """Ends the sending side of a refused connection and reads what the client still sends
    (at most `LINGER_BYTES`, for at most `LINGER_S`): closed with unread bytes, the
    connection would be reset, and the client read the reset, not the refusal."""
    with trio.move_on_after(LINGER_S), contextlib.suppress(*_ENDS):
        await stream.send_eof()
        left = LINGER_BYTES
        while left > 0 and (data := await stream.receive_some(_CHUNK)):
            left -= len(data)


async def _head(wire: http.Wire) -> bytes:
    """The request's head, within `HEAD_TIMEOUT_S` and `HEAD_BYTES` (else answered)."""
    with trio.move_on_after(HEAD_TIMEOUT_S):
        try:
            return await wire.until(b"\r\n\r\n", http.HEAD_BYTES)
        except http.TooLarge:
            await _answer(wire, 431, f"request head over {http.HEAD_BYTES} bytes")
    await _answer(wire, 408, f"no request head within {HEAD_TIMEOUT_S:g} s")
    raise AssertionError("unreachable")  # (`_answer` raises)


async def _answer(stream: trio.abc.Stream, status: int, text: str) -> None:
    """Answers the child with `status` and `text`, and ends the connection."""
    body = (text + "\n").encode()
    await stream.send_all(
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    raise _Refused


async def _handle(wire: http.Wire, lease: Lease, crowded: bool) -> None:
    head = await _head(wire)
    target = http.target(head)
    if target is None:
        await _answer(wire, 400, "expected CONNECT host:port or an absolute http:// URL")
        return
    method, host, port, upstream_head = target  # (the host as written: a secret in it is
    # redacted from its frame as it is, where its lower case would be recognised by nothing)
    if not egress.host_name(host):
        await _answer(wire, 400, "expected a host name or an IP address")
        return
    if not egress.allows(lease.rules, host, port):
        await _answer(wire, 403, lease.refuse(host, port))
        return
    if crowded:  # (a refusal of the host, said as its note: the run hears of the bound)
        await _answer(wire, 503, lease.refuse(host, port, _crowded_text()))
        return
    client, tls = wire, None
    length: int | None = 0
    # A plain tunnel is established once its upstream is connected: a host that cannot be
    # reached is answered 502, which the child reads as the proxy's answer (sent after a
    # 200, it would be read as the tunnel's first bytes: a TLS client's "wrong version").
    tunnel = method == "CONNECT" and lease.ca is None
    if method == "CONNECT" and lease.ca is not None:  # the child trusts the run's CA alone:
        await wire.send_all(_ESTABLISHED)  # its request is read
        ssl_stream = trio.SSLStream(wire, lease.ca.server_context(host), server_side=True)
        with trio.fail_after(HEAD_TIMEOUT_S):  # (no answer it could read: it just ends)
            await ssl_stream.do_handshake()
        client, tls = http.Wire(ssl_stream), lease.upstream
        head = await _head(client)
        upstream_head = http.origin_head(head, host, port) or b""
        if not upstream_head:
            await _answer(client, 400, f"expected a request for a path on {host}")
    if upstream_head:
        checked = lease.swapped(upstream_head, host, port)
        if isinstance(checked, str):
            await _answer(client, 403, checked)
            return
        upstream_head = checked
        try:
            length = http.body_length(head, answer=False)
        except http.BadFraming:
            await _answer(client, 400, "expected one Content-Length, or chunked alone")
            return
    upstream: trio.abc.Stream | None = None
    try:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            upstream = await trio.open_tcp_stream(host, port)
            if tls is not None:
                upstream = trio.SSLStream(upstream, tls, server_hostname=host)
                await upstream.do_handshake()
    except (OSError, ValueError, trio.TooSlowError, trio.BrokenResourceError) as exc:
        if upstream is not None:
            await trio.aclose_forcefully(upstream)
        why = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
        await _answer(client, 502, f"cannot reach {host}:{port}: {why or exc}")
        return
    async with upstream:
        if tunnel:
            await wire.send_all(_ESTABLISHED)
        with trio.CancelScope() as idle:  # (put off at each read: `http.IDLE_S`)
            client.watch(idle)
            await http.exchange(client, http.Wire(upstream, idle), upstream_head, head, length)
    if idle.cancelled_caught:  # (a refusal of the host: the run hears why its request ended)
        said = lease.refuse(host, port, _idle_text(host, port))
        if upstream_head and not client.answered:
            await _answer(client, 504, said)
    elif client is not wire:  # (its TLS ends with a close_notify: a body read to the end of
        with trio.move_on_after(LINGER_S), contextlib.suppress(*_ENDS):  # the connection is
            await client.stream.aclose()  # whole, and the child's TLS says so)


def doctor_lines(netns: bool | str) -> list[str]:
    """What `doctor` says of the proxy (`netns`: the spawner's netns mechanism, True or why
    it is missing)."""
    from .egressca import TRUST_ENV

    trust = os.environ.get(TRUST_ENV)
    where = "missing netns: `network` fails" if netns is not True else "strict and workspace"
    reach = (
        f"  children reach it at 127.0.0.1:{LOOPBACK_PORT} on a loopback of their own, where"
        " the spawner listens for it (no process beside the child)"
        if netns is True
        else "  no child reaches it: each would need a network namespace of its own"
    )
    return [
        "egress (`network` lists, docs/egress.md):",
        f"  proxy    in the supervisor, one for all its children ({where})",
        reach,
        "  upstream TLS verified against "
        + (f"{trust} ({TRUST_ENV})" if trust else "the system's certificate store"),
    ]
