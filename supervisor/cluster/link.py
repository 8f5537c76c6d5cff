"""The cluster as the Trio side sees it: `open_cluster(url)` connects (through the bridge's
asyncio thread) and gives a `Cluster` whose methods are the operations gateways and workers
need, each awaited without blocking Trio. Frames, summaries and events are bytes here,
encoded once where they are made."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final, TypeVar

import trio

from ..core.backoff import retry_wait_s
from . import jetstreams, natsconnect, objects, permits
from .access import NatsAccess
from .bridge import Bridge, Deliver, open_bridge
from .jet import NATS_FAILED, ClusterDown, ClusterRefused, Jet, Published, Stored, Taken, said
from .names import Stream, StreamSpec

__all__ = [
    "Cluster",
    "ClusterDown",
    "ClusterRefused",
    "Published",
    "Stored",
    "open_cluster",
    "retry_s",
]

T = TypeVar("T")

#: After a failure NATS is tried again this soon; each failure in a row doubles the wait, up
#: to `RETRY_MAX_S` (a server down for long is not asked ever more often).
RETRY_FIRST_S: Final = 0.5
RETRY_MAX_S: Final = 5.0


def retry_s(failures: int) -> float:
    """The wait before trying NATS again after `failures` failures in a row."""
    return retry_wait_s(failures, RETRY_FIRST_S, RETRY_MAX_S)


class Cluster:
    """One connection to NATS JetStream, for the Trio side."""

    def __init__(self, bridge: Bridge, jet: Jet, url: str, *, open_to_anyone: bool = False) -> None:
        self.bridge = bridge
        self.jet = jet
        self.url = url
        #: The server let a connection without credentials in (accepted with `--nats-insecure`).
        self.open_to_anyone = open_to_anyone

    def connected(self) -> bool:
        """Whether the connection is up now, read here without a hop to NATS's thread (a
        flag that thread sets: a moment stale at most), for a check on every run's way."""
        nc = self.jet.nc
        return nc is not None and nc.is_connected

    def require_connected(self) -> None:
        """`ClusterDown` at once while the connection is down (NATS stopped, this part
        reconnecting): for what a person waits on, said now rather than after the JetStream
        API's timeout (`API_TIMEOUT_S`), in which nothing but that answer could come."""
        if not self.connected():
            raise ClusterDown("NATS is not connected (the gateway is reconnecting to it)")

    async def _call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """`bridge.call`, NATS failing it (a timeout while it is down) raised as the
        `ClusterDown` every caller here answers (a gateway: "the cluster cannot be
        reached"), whichever call it is."""
        try:
            return await self.bridge.call(fn, *args)
        except NATS_FAILED as exc:
            raise ClusterDown(said(exc)) from None

    async def ensure_streams(self, specs: tuple[StreamSpec, ...]) -> None:
        await self._call(jetstreams.ensure_streams, self.jet, specs)

    async def check_permissions(self, part: str, user: str | None) -> None:
        """`ClusterRefused` when NATS does not let this user do what a `part` cannot do
        without on core NATS (`permits.py`)."""
        refused = await self._call(permits.denied, self.jet, permits.NEEDS[part])
        if refused:
            raise ClusterRefused(permits.refusal(self.url, part, user, refused))

    async def jetstream_on(self) -> bool:
        return await self._call(jetstreams.jetstream_on, self.jet)

    async def stream_state(self, stream: Stream) -> tuple[int, int, int] | None:
        return await self._call(jetstreams.stream_state, self.jet, stream)

    async def stream_made(self, stream: Stream) -> tuple[str, int, int]:
        """When the stream was made (as text), and its first and last seq."""
        return await self._call(jetstreams.stream_made, self.jet, stream)

    async def max_payload(self) -> int:
        """The largest message the server takes, in bytes."""
        return await self._call(self.jet.max_payload)

    async def status(self, probe_s: float = 0.0) -> tuple[bool, int]:
        return await self._call(self.jet.status, probe_s)

    async def publish(
        self, subject: str, data: bytes, headers: dict[str, str] | None = None
    ) -> Published:
        return await self._call(self.jet.publish, subject, data, headers)

    async def publish_many(self, items: list[tuple[str, bytes, dict[str, str]]]) -> int:
        return await self._call(self.jet.publish_many, items)

    async def send_many(self, items: list[tuple[str, bytes, dict[str, str]]]) -> list[Any]:
        """Publishes in order, acks not awaited: their handles for `acked` or `drop`."""
        return await self._call(self.jet.send_many, items)

    async def acked(self, handles: list[Any]) -> None:
        await self._call(self.jet.acked, handles)

    async def drop(self, handles: list[Any]) -> None:
        await self._call(self.jet.drop, handles)

    async def core_publish(self, subject: str, data: bytes) -> None:
        await self._call(self.jet.core_publish, subject, data)

    async def last(self, stream: Stream, subject: str) -> Stored | None:
        return await self._call(self.jet.last, stream, subject)

    def follow(
        self, subject: str, start_seq: int | None = None
    ) -> contextlib.AbstractAsyncContextManager[trio.MemoryReceiveChannel[list[Stored]]]:
        """`async with cluster.follow(subject) as batches`: the subject's stream messages
        in order, in batches of what had arrived, at the reader's pace (the channel is
        bounded)."""

        async def producer(deliver: Deliver) -> None:
            await self.jet.follow(subject, start_seq, deliver)

        return self.bridge.stream(producer)

    def listen(
        self, subject: str
    ) -> contextlib.AbstractAsyncContextManager[trio.MemoryReceiveChannel[Any]]:
        """Core NATS messages on `subject` (`nats.aio.msg.Msg`; reply with `reply`)."""

        async def producer(deliver: Deliver) -> None:
            await self.jet.listen(subject, deliver)

        return self.bridge.stream(producer)

    async def reply(self, msg: Any, data: bytes) -> None:
        await self._call(self.jet.reply, msg, data)

    async def answer(
        self, subject: str, respond: Callable[[bytes], tuple[str, bytes] | None]
    ) -> None:
        """Answers every core NATS message on `subject` from now on, as `respond` says (run
        on the bridge's loop: quick and pure); returns once the server has the subscription."""
        await self._call(self.jet.answer, subject, respond)

    async def gather(
        self, subject: str, asked: tuple[str, bytes], wait_s: float, most: int
    ) -> list[bytes]:
        """Publishes `asked` and returns what arrives on `subject` within `wait_s` (at most
        `most` messages)."""
        return await self._call(self.jet.gather, subject, asked, wait_s, most)

    async def take(self, subject: str, lease_s: float, wait_s: float) -> list[Taken]:
        """Up to one request (`Taken`: its message, bytes, deliveries and headers)."""
        return await self._call(self.jet.take, subject, lease_s, wait_s)

    async def request_held(self, seq: int, run_id: str) -> bool:
        return await self._call(self.jet.request_held, seq, run_id)

    async def renew(self, msg: Any) -> None:
        await self._call(self.jet.renew, msg)

    async def settle(self, msg: Any) -> None:
        await self._call(self.jet.settle, msg)

    # ---- the artifacts bucket (`objects.py`) -------------------------------------------------

    async def put_artifact(self, key: str, path: str, name: str, mime: str) -> None:
        await self._call(objects.put, self.jet, key, path, name, mime)

    async def find_artifact(self, key: str) -> objects.ObjectFound | None:
        return await self._call(objects.find, self.jet, key)

    async def prune_artifacts(self, run_id: str, need: int, budget: int) -> bool:
        return await self._call(objects.prune, self.jet, run_id, need, budget)

    def artifact_chunks(
        self, subject: str
    ) -> contextlib.AbstractAsyncContextManager[trio.MemoryReceiveChannel[bytes]]:
        """An object's chunks in order, a few at a time (the channel holds 4 at most)."""

        async def producer(deliver: Deliver) -> None:
            await objects.chunks(self.jet, subject, deliver)

        return self.bridge.stream(producer, bound=4)


def open_refusal(url: str) -> str:
    return (
        f"the NATS server at {url} lets anyone in without credentials: whoever reaches it"
        " could read every run and queue requests. Give it users and permissions"
        " (docs/cluster.md), or start with --nats-insecure to accept it anyway"
    )


@contextlib.asynccontextmanager
async def open_cluster(url: str, name: str, access: NatsAccess) -> AsyncIterator[Cluster]:
    """Connected for the block with `access`'s credentials; drained and closed, and the
    asyncio thread joined, at exit. `ClusterDown` if NATS cannot be reached;
    `ClusterRefused` if it refuses the credentials, or lets a connection without any in
    and `access` is not `insecure` (found by trying one first)."""
    async with open_bridge() as bridge:
        jet = Jet()
        anyone = await bridge.call(natsconnect.lets_anyone_in, url, access)
        if anyone and not access.insecure:
            raise ClusterRefused(open_refusal(url))
        await bridge.call(natsconnect.connect, jet, url, name, access)
        try:
            yield Cluster(bridge, jet, url, open_to_anyone=anyone)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(6):
                await bridge.call(jet.close)
