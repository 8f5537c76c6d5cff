"""Connecting to NATS as who we are (`access.py`): nats-py's connect options for a
`NatsAccess`, a refusal of them recognised, the probe that finds a server letting anyone in,
and the connection a `Jet` keeps. Run on the bridge's loop (`link.py`), like `jet.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import time
from typing import Any, Final

import nats
import nats.errors
from nats.aio.client import Client
from nats.protocol.parser import PERMISSIONS_ERR

from ..core.errors import HooksError
from .access import NatsAccess
from .jet import FLUSH_S, ClusterDown, ClusterRefused, Jet, said
from .jetstreams import streams_again
from .names import KEYCHECK

logger = logging.getLogger("mcpx_hooks.cluster")

#: Attempts at the first connection before the server is called unreachable.
FIRST_ATTEMPTS: Final = 3
#: Between reconnect attempts (forever: a restarted server is found again).
RECONNECT_WAIT_S: Final = 0.25
#: Distinct failures one reconnection tells at most.
TOLD_MOST: Final = 16
#: While connected, a failure said is said again at most this often (a stalled server fails
#: a follow's heartbeat check every second, for as long as it stalls).
CONNECTED_QUIET_S: Final = 60.0


class NotTls(nats.errors.Error, HooksError):
    """The server did not do TLS where TLS was asked for: no CONNECT was sent to it (a
    nats-py error, so that nats-py's connecting takes it as one)."""


class _Client(Client):
    """nats-py's client, sending its CONNECT (and the credentials in it) over TLS only when
    `tls_only`. nats-py starts TLS only when the server's INFO says `tls_required`: a server
    that does not say so, or whoever answers in its place, would be sent them in clear. So
    the connection itself is looked at where nats-py makes the CONNECT, after INFO and any
    TLS handshake, before a byte of it is written: at the first connection and at every
    reconnection. (`_connect_command` is nats-py's own; no public hook comes between INFO
    and CONNECT.)"""

    tls_only = False

    def _connect_command(self) -> bytes:
        if self.tls_only and not _encrypted(self._transport):
            raise NotTls("the server did not start TLS")
        return super()._connect_command()

    async def _process_pong(self) -> None:
        """A PONG answers the oldest PING outstanding. nats-py's own sets that ping's future
        even when a `flush` given up (its timeout, a stalled server) cancelled it: the
        `InvalidStateError` breaks its reading, and every later `flush` then takes an
        earlier ping's PONG for its own. Here such a PONG is taken and dropped."""
        if self._pongs:
            future = self._pongs.pop(0)
            if not future.done():
                future.set_result(True)
            self._pongs_received += 1
            self._pings_outstanding = 0


def _encrypted(transport: object) -> bool:
    """Whether nats-py's transport speaks TLS now (its stream writer's transport is TLS)."""
    writer = getattr(transport, "_io_writer", None)
    return writer is not None and writer.get_extra_info("ssl_object") is not None


def tls_wanted(url: str, access: NatsAccess) -> bool:
    """Whether the connection must be TLS: a `tls://` URL, or a CA given to trust."""
    return url.lower().startswith("tls://") or access.tls_ca is not None


def not_tls(url: str) -> str:
    asking = "the tls:// URL" if url.lower().startswith("tls://") else "--nats-tls-ca"
    return (
        f"NATS at {url} did not start TLS, which {asking} asks for: nothing was sent to it,"
        " credentials included. Give the server TLS (docs/cluster.md), or look for what"
        " stands between it and this machine"
    )


def _options(access: NatsAccess, *, anonymous: bool = False) -> dict[str, Any]:
    """nats-py's connect options for `access` (`anonymous`: its TLS only, no credentials)."""
    options: dict[str, Any] = {}
    if access.tls_ca:
        options["tls"] = ssl.create_default_context(cafile=access.tls_ca)
    if anonymous:
        return options
    if access.creds:
        options["user_credentials"] = access.creds
    elif access.user:
        options.update(user=access.user, password=access.password)
    elif access.token:
        options["token"] = access.token
    return options


def _refused_us(exc: BaseException) -> bool:
    """Whether nats-py's `exc` says the server refused who we are."""
    return "authorization violation" in str(exc).lower() or "authentication" in str(exc).lower()


async def lets_anyone_in(url: str, access: NatsAccess) -> bool:
    """Whether the server at `url` takes a connection that gives no credentials at all
    (found by trying, with `access`'s TLS only); False when it refuses one, or cannot be
    reached (the real connection says why). `ClusterRefused` when TLS fails (a
    certificate this side does not trust)."""
    nc = _Client()
    nc.tls_only = tls_wanted(url, access)
    try:
        await nc.connect(
            url,
            name="mcpx-hooks probe",
            # One attempt (nats-py reads 0 as "without end").
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=_seconds(RECONNECT_WAIT_S),
            connect_timeout=2,
            error_cb=_quiet,
            **_options(access, anonymous=True),
        )
    except NotTls:
        raise ClusterRefused(not_tls(url)) from None
    except ssl.SSLError as exc:
        # Told here: nats-py's connection that may reconnect would try it without end.
        raise ClusterRefused(
            f"TLS with NATS at {url} failed: {exc.reason or exc}; give --nats-tls-ca FILE,"
            " the CA that signed the server's certificate"
        ) from None
    except (TimeoutError, OSError, nats.errors.Error):
        return False
    finally:
        if nc.is_connected:
            with contextlib.suppress(TimeoutError, OSError, nats.errors.Error):
                await asyncio.wait_for(nc.close(), FLUSH_S)
        # A refused connection's socket too (nats-py leaves it open, and its `close`
        # after a failed TLS handshake waits for ever).
        _close_transport(nc)
    return True


async def connect(jet: Jet, url: str, name: str, access: NatsAccess) -> None:
    """Connects `jet` to the server at `url` as `access` says, then keeps it connected:
    a lost server is tried again without end. `ClusterRefused` if it refuses who we are,
    `ClusterDown` if it cannot be reached."""
    refused: list[Exception] = []
    # What the failed attempts of this reconnection said: each is told once, not at every
    # attempt (4 a second, for as long as the server is down).
    told: set[str] = set()
    #: While connected: when each failure was last said.
    told_at: dict[str, float] = {}

    async def error(exc: Exception) -> None:
        if jet.nc is not None:  # the first connection's failures are told once, below
            text = not_tls(url) if isinstance(exc, NotTls) else said(exc)
            if PERMISSIONS_ERR in text.lower():
                jet.denied.append(text.lower())
            down = not jet.nc.is_connected  # (an attempt is CONNECTING, not RECONNECTING)
            again = down and text in told
            if down and len(told) < TOLD_MOST:
                told.add(text)
            elif not down:  # (connected: a stalled server fails alike every second)
                now = time.monotonic()
                again = now - told_at.get(text, -math.inf) < CONNECTED_QUIET_S
                if not again and (text in told_at or len(told_at) < TOLD_MOST):
                    told_at[text] = now
            # The key check is a hint: a user not allowed its subjects is no news; nor is
            # a refusal `permits.py` asks for, which it tells itself.
            quiet = KEYCHECK in text or jet.probing or again
            logger.log(logging.DEBUG if quiet else logging.WARNING, "NATS: %s", text)
        elif _refused_us(exc) or isinstance(exc, NotTls):  # nats-py says only "no servers"
            refused.append(exc)

    async def reconnected() -> None:
        told.clear()
        told_at.clear()
        jet.reconnects += 1
        logger.warning("NATS: reconnected to %s", url)
        await streams_again(jet)

    async def disconnected() -> None:
        if not jet.closing:
            logger.warning("NATS: disconnected from %s; reconnecting", url)

    nc = _Client()
    nc.tls_only = tls_wanted(url, access)
    try:
        await nc.connect(
            url,
            name=name,
            error_cb=error,
            reconnected_cb=reconnected,
            disconnected_cb=disconnected,
            # A few tries at first (a wrong URL is told at once), then forever.
            max_reconnect_attempts=FIRST_ATTEMPTS,
            reconnect_time_wait=_seconds(RECONNECT_WAIT_S),
            connect_timeout=2,
            allow_reconnect=True,
            **_options(access),
        )
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        _close_transport(nc)
        if isinstance(exc, NotTls) or any(isinstance(e, NotTls) for e in refused):
            raise ClusterRefused(not_tls(url)) from None
        if _refused_us(exc) or refused:
            why = refused[-1] if refused else exc
            given = (
                "the credentials given"
                if access.has_credentials
                else "a connection without credentials"
            )
            raise ClusterRefused(
                f"NATS at {url} refused {given} ({why}): check --nats-creds or"
                " --nats-auth-file against the server's users"
            ) from None
        raise ClusterDown(f"cannot reach NATS at {url}: {said(exc)}") from None
    jet.nc = nc
    # Connected: from now on a lost server is tried again without end (nats-py reads
    # this option at each reconnection).
    jet.nc.options["max_reconnect_attempts"] = -1


def _seconds(seconds: float) -> int:
    """nats-py's annotation says int; it takes (and sleeps) a float of seconds."""
    return seconds  # type: ignore[return-value]


def _close_transport(nc: Client) -> None:
    transport = getattr(nc, "_transport", None)
    if transport is not None:
        with contextlib.suppress(OSError, RuntimeError):  # (a closed loop's transport)
            transport.close()


async def _quiet(exc: Exception) -> None:
    """A probe's errors are its answer, not news."""
