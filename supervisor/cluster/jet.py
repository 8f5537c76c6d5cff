"""The asyncio side of the cluster: every call into nats-py, run on the bridge's loop and
nowhere else (`link.py` reaches each through `Bridge.call` or `Bridge.stream`). Each method
is one JetStream or core NATS operation; what they mean to a run is `link.py`'s and above.
Connecting, as who we are, is `natsconnect.py`'s; making the streams, `jetstreams.py`'s.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

import attrs
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from ..core.errors import HooksError, bug_summary
from ..core.records import Record
from .names import (
    WORKERS_CONSUMER,
    Header,
    Stream,
    StreamSpec,
    stream_of,
)

logger = logging.getLogger("mcpx_hooks.cluster")

#: What a call into nats-py raises when NATS fails it: its own errors (JetStream's refusals
#: among them), a bound passed (`asyncio.wait_for`, nats-py's timeouts), the socket's.
NATS_FAILED: Final = (TimeoutError, OSError, nats.errors.Error)


def said(exc: BaseException) -> str:
    """What `exc` says, or its type's name when it says nothing (nats-py's timeouts)."""
    return str(exc) or type(exc).__name__


#: A JetStream call's own bound; the Trio caller may bound it further.
API_TIMEOUT_S: Final = 5.0
#: What is still buffered at exit gets this long to go out.
FLUSH_S: Final = 2.0
#: JetStream's error code for a publish whose expected last subject sequence is not so.
WRONG_LAST_SEQUENCE: Final = 10071
STREAM_NOT_FOUND: Final = 10059
#: Messages handed to Trio in one batch at most.
FOLLOW_BATCH: Final = 512
#: An ordered consumer's heartbeat: two missed and it is made anew (a restarted server).
FOLLOW_HEARTBEAT_S: Final = 1.0
#: The server forgets a follow's consumer this long after its subscriber goes (its default,
#: 5 s, left a few hundred at once at 60 runs a second, each costing the server CPU).
FOLLOW_LINGER_S: Final = 0.5
#: Questions waiting for an answer (`answer`); past it NATS drops them (a slow consumer).
ANSWERS_PENDING: Final = 64


class ClusterDown(HooksError):
    """NATS or JetStream cannot be reached or refused what was asked; says why, in words."""

    #: `serve` and `worker` exit so (1: try again later; 2: the operator must fix something).
    exit_code = 1


class ClusterRefused(ClusterDown):
    """NATS refused who we are, would let anyone in, or has no JetStream: a part does not
    start."""

    exit_code = 2


@attrs.frozen(repr=False, eq=False)
class Stored(Record):
    """One message of a stream: its bytes, headers and stream sequence; `pending` is what
    the consumer had yet to deliver after it (0: caught up)."""

    data: bytes
    headers: dict[str, str]
    sequence: int
    pending: int = 0
    subject: str = ""


@attrs.frozen(repr=False, eq=False)
class Taken(Record):
    """A request a worker took: the message (to renew or settle), its bytes, how often it
    was delivered (1: never to another worker), and its headers; read where it arrived."""

    msg: Any
    data: bytes
    delivered: int
    headers: dict[str, str]


@attrs.frozen(repr=False, eq=False)
class Published(Record):
    sequence: int
    duplicate: bool


@contextlib.contextmanager
def tolerating(what: str, *, level: int = logging.DEBUG) -> Iterator[None]:
    """Around a call whose failure the caller goes on without (a close, an unsubscribe, an
    ack that JetStream delivers again if lost): NATS failing it is logged at `level`, and
    anything else is a bug, logged as one with its traceback at DEBUG. Neither is raised:
    these run in a `finally`, at exit, or in nats-py's own callbacks, where an exception
    would hide the one on its way out or end nats-py's reconnecting."""
    try:
        yield
    except NATS_FAILED as exc:
        logger.log(level, "NATS: %s: %s", what, said(exc))
    except Exception as exc:  # a bug, told as one (see above for why it goes no further)
        logger.error("NATS: %s: %s", what, bug_summary(exc))
        logger.debug("NATS: %s", what, exc_info=exc)


class Jet:
    """One NATS connection and its JetStream context. Methods run on the bridge's loop."""

    def __init__(self) -> None:
        self.nc: Client | None = None
        self.reconnects = 0
        self.specs: tuple[StreamSpec, ...] = ()
        self._workers: Any = None
        self._js: Any = None
        self.closing = False
        #: The server's last permission refusals, lowercased (`permits.py` reads them).
        self.denied: collections.deque[str] = collections.deque(maxlen=32)
        self.probing = False

    @property
    def js(self) -> Any:
        """The one JetStream context (its reply inbox for pipelined publishes is made once)."""
        if self._js is None:
            assert self.nc is not None
            self._js = self.nc.jetstream(timeout=API_TIMEOUT_S)
        return self._js

    async def max_payload(self) -> int:
        assert self.nc is not None
        return int(self.nc.max_payload)

    async def status(self, probe_s: float = 0.0) -> tuple[bool, int]:
        """Whether connected (with `probe_s`: and JetStream answering within it); reconnections."""
        up = self.nc is not None and self.nc.is_connected
        if up and probe_s and self.nc is not None:
            try:  # (JetStream itself answering, as the runs need, not only the server)
                await self.nc.jetstream(timeout=probe_s).account_info()
            except NATS_FAILED:  # (a server stalled, its connection up: silent)
                up = False
        return (up, self.reconnects)

    async def close(self) -> None:
        """Sends what is still buffered (bounded), then closes."""
        self.closing = True
        if self.nc is not None and not self.nc.is_closed:
            with tolerating("flush at exit"):
                await asyncio.wait_for(self.nc.flush(), FLUSH_S)
            with tolerating("close"):
                await self.nc.close()

    def forget_consumer(self) -> None:
        """The workers' consumer is made anew at the next `take` (a restarted server lost it)."""
        self._workers = None

    # ---- publishing ------------------------------------------------------------------------

    async def publish(
        self, subject: str, data: bytes, headers: Mapping[str, str] | None = None
    ) -> Published:
        """One acknowledged publish to a stream. `ClusterDown` when it is refused (its code in
        `.code`): an expected sequence not so, the stream full or absent."""
        try:
            ack = await self.js.publish(subject, data, headers=dict(headers or {}) or None)
        except nats.js.errors.APIError as exc:
            down = ClusterDown(f"NATS refused the publish to {subject}: {exc.description}")
            down.code = exc.err_code  # type: ignore[attr-defined]
            raise down from None
        except (TimeoutError, nats.errors.Error) as exc:
            raise ClusterDown(f"publish to {subject}: {said(exc)}") from None
        return Published(ack.seq, bool(ack.duplicate))

    async def publish_many(self, items: list[tuple[str, bytes, dict[str, str]]]) -> int:
        """Publishes in order, pipelined, and waits for every ack; the last one's sequence."""
        return await self.acked(await self.send_many(items))

    async def send_many(self, items: list[tuple[str, bytes, dict[str, str]]]) -> list[Any]:
        """Publishes in order without waiting: the acks' futures, for `acked` or `drop`."""
        futures: list[asyncio.Future[Any]] = []
        try:
            for subject, data, headers in items:
                futures.append(await self.js.publish_async(subject, data, headers=headers or None))
        except BaseException as exc:  # (cancelled too: no future is left behind)
            await self.drop(futures)
            if isinstance(exc, nats.errors.Error | OSError):
                raise ClusterDown(f"publish: {said(exc)}") from None
            raise
        return futures

    async def acked(self, futures: list[Any]) -> int:
        """Waits for every ack of a `send_many`; the last one's sequence. `ClusterDown` (with
        its code) if one is refused, were nats-py to say so: its handler of the acks raises
        JetStream's refusal rather than fail the future (nats-py 2.16), so a refused publish
        is only ever not acknowledged. A publish that may be refused goes by `publish`."""
        last = 0
        try:
            for future in futures:
                last = (await future).seq
        except nats.js.errors.APIError as exc:
            down = ClusterDown(f"NATS refused a publish: {exc.description}")
            down.code = exc.err_code  # type: ignore[attr-defined]
            raise down from None
        except (nats.errors.Error, OSError) as exc:
            raise ClusterDown(f"publish: {said(exc)}") from None
        finally:
            await self.drop(futures)
        return last

    async def drop(self, futures: list[Any]) -> None:
        """Stops waiting for acks (those still pending free their place at once)."""
        for future in futures:
            future.cancel()

    async def core_publish(self, subject: str, data: bytes) -> None:
        assert self.nc is not None
        await self.nc.publish(subject, data)

    # ---- reading ---------------------------------------------------------------------------

    async def last(self, stream: Stream, subject: str) -> Stored | None:
        """The last message on `subject`, None when it has none."""
        try:
            raw = await self.js.get_last_msg(stream, subject)
        except nats.js.errors.NotFoundError:
            return None
        return Stored(raw.data or b"", dict(raw.headers or {}), int(raw.seq or 0))

    async def follow(
        self,
        subject: str,
        start_seq: int | None,
        deliver: Callable[[list[Stored]], Awaitable[None]],
    ) -> None:
        """Every message on `subject` (from stream seq `start_seq`, or the first), forever,
        through an ordered consumer: in order, without a gap, made anew after a lost
        connection or a restarted server; delivered in batches of what has arrived."""
        policy = api.DeliverPolicy.BY_START_SEQUENCE if start_seq else api.DeliverPolicy.ALL
        config = api.ConsumerConfig(deliver_policy=policy, opt_start_seq=start_seq or None)
        config.inactive_threshold = FOLLOW_LINGER_S
        sub = await self.js.subscribe(
            subject,
            stream=stream_of(subject),  # (None: nats-py asks the server which)
            ordered_consumer=True,
            config=config,
            idle_heartbeat=FOLLOW_HEARTBEAT_S,
        )
        try:
            while True:
                # What has arrived goes over as one batch: one hop to Trio for many messages.
                batch = [_stored(await sub.next_msg(timeout=None))]
                while sub.pending_msgs and len(batch) < FOLLOW_BATCH:
                    batch.append(_stored(await sub.next_msg(timeout=None)))
                await deliver(batch)
        finally:
            with tolerating(f"unsubscribe from {subject}"):
                await sub.unsubscribe()

    async def listen(self, subject: str, deliver: Callable[[Msg], Awaitable[None]]) -> None:
        """Core NATS messages on `subject` (wildcards allowed), forever."""
        assert self.nc is not None
        sub = await self.nc.subscribe(subject)
        try:
            while True:
                await deliver(await sub.next_msg(timeout=None))
        finally:
            with tolerating(f"unsubscribe from {subject}"):
                await sub.unsubscribe()

    async def reply(self, msg: Msg, data: bytes) -> None:
        with tolerating("a reply not sent"):
            await msg.respond(data)

    async def answer(
        self, subject: str, respond: Callable[[bytes], tuple[str, bytes] | None]
    ) -> None:
        """From now on, for the connection's life, each core NATS message on `subject` is
        answered as `respond(data)` says: a message to publish (its subject, its bytes), or
        None. Returns once the server holds the subscription. `respond` runs on this loop:
        it must be quick and must not block."""
        nc = self.nc
        assert nc is not None

        async def reply(msg: Msg) -> None:
            with tolerating(f"an answer on {subject} not sent"):
                answer = respond(msg.data)
                if answer is not None:
                    await nc.publish(*answer)

        await nc.subscribe(subject, cb=reply, pending_msgs_limit=ANSWERS_PENDING)
        await nc.flush(int(API_TIMEOUT_S))

    async def gather(
        self, subject: str, asked: tuple[str, bytes], wait_s: float, most: int
    ) -> list[bytes]:
        """Listens on `subject`, publishes `asked` (its subject, its bytes) and returns what
        arrives on `subject` within `wait_s`, `most` messages at most."""
        assert self.nc is not None
        sub = await self.nc.subscribe(subject, pending_msgs_limit=most)
        got: list[bytes] = []
        try:
            await self.nc.flush(int(API_TIMEOUT_S))  # (listening before anyone can answer)
            await self.nc.publish(*asked)
            deadline = asyncio.get_running_loop().time() + wait_s
            while len(got) < most:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    got.append(bytes((await sub.next_msg(timeout=left)).data))
                except TimeoutError:  # (nats-py's too)
                    break
        finally:
            with tolerating(f"unsubscribe from {subject}"):
                await sub.unsubscribe()
        return got

    # ---- the workers' requests -------------------------------------------------------------

    async def take(self, subject: str, lease_s: float, wait_s: float) -> list[Taken]:
        """Up to one request, waiting at most `wait_s` for it; none when none came.
        `ClusterDown` when NATS fails the take."""
        if self._workers is None:
            config = api.ConsumerConfig(
                ack_policy=api.AckPolicy.EXPLICIT, ack_wait=lease_s, max_ack_pending=-1
            )
            try:
                self._workers = await self.js.pull_subscribe(
                    subject, durable=WORKERS_CONSUMER, stream=Stream.REQUESTS, config=config
                )
            except NATS_FAILED as exc:
                raise ClusterDown(f"the workers' consumer: {said(exc)}") from None
        try:
            msgs: list[Msg] = await self._workers.fetch(1, timeout=wait_s)
        except (TimeoutError, nats.errors.TimeoutError):
            return []
        except nats.js.errors.NotFoundError:
            self._workers = None  # the consumer went with a restarted server: made again
            return []
        except NATS_FAILED as exc:
            raise ClusterDown(f"taking a request: {said(exc)}") from None
        return [
            Taken(msg, bytes(msg.data), msg.metadata.num_delivered, dict(msg.headers or {}))
            for msg in msgs
        ]

    async def renew(self, msg: Msg) -> None:
        with tolerating("a lease not renewed"):
            await msg.in_progress()

    async def settle(self, msg: Msg) -> None:
        """Acknowledges a request for good: done, or not to be run again."""
        with tolerating("an ack not sent"):
            await msg.ack()

    async def request_held(self, seq: int, run_id: str) -> bool:
        """Whether the requests stream still holds run `run_id`'s request at `seq` (a
        restarted server's stream, made anew, may hold another request there)."""
        try:
            raw = await self.js.get_msg(Stream.REQUESTS, seq)
        except nats.js.errors.NotFoundError:
            return False
        except (TimeoutError, nats.errors.Error) as exc:
            raise ClusterDown(f"the requests stream: {said(exc)}") from None
        return dict(raw.headers or {}).get(Header.MSG_ID) == run_id


def _stored(msg: Msg) -> Stored:
    meta, data, headers = msg.metadata, bytes(msg.data), dict(msg.headers or {})
    return Stored(data, headers, meta.sequence.stream, meta.num_pending, msg.subject)


__all__ = [
    "NATS_FAILED",
    "WRONG_LAST_SEQUENCE",
    "ClusterDown",
    "ClusterRefused",
    "Header",
    "Jet",
    "Published",
    "Stored",
    "Taken",
    "said",
    "tolerating",
]
