"""The cluster's streams on JetStream: made (or updated to the config) by every gateway and
worker at start, and again after each reconnection (a restarted server may have lost those
it kept in memory), and asked how they stand (`doctor`, the frames reader). Functions of a
`Jet`, run on the bridge's loop like its methods (`link.py` reaches each).

A server without JetStream is told in one line, as `doctor` tells it, and the part does not
start; nor does one whose JetStream API does not answer (a server without it that does not
say so, or a user the server does not let use it).
"""

from __future__ import annotations

import logging
from typing import Final

import nats.errors
import nats.js.errors
from nats.js import api

from .jet import API_TIMEOUT_S, ClusterDown, ClusterRefused, Jet, said, tolerating
from .names import DUPLICATE_WINDOW_S, Storage, StreamSpec

logger = logging.getLogger("mcpx_hooks.cluster")

#: A server without JetStream, and one whose JetStream API does not answer, as told.
JETSTREAM_OFF: Final = "jetstream not enabled: start nats-server with -js"
JETSTREAM_SILENT: Final = (
    f"JetStream did not answer within {API_TIMEOUT_S:g} s: is it on (nats-server -js), and"
    " may this user use its API ($JS.API.>)?"
)


async def ensure_streams(jet: Jet, specs: tuple[StreamSpec, ...]) -> None:
    """Creates each stream, or updates one whose config differs (idempotent). A server
    without JetStream: `ClusterRefused` (it will not be otherwise); one whose JetStream does
    not answer, or refuses a stream: `ClusterDown`, saying so."""
    jet.specs = specs
    for spec in specs:
        config = _config(spec)
        try:
            try:
                await jet.js.add_stream(config)
            except nats.js.errors.BadRequestError:
                await jet.js.update_stream(config)
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            raise ClusterRefused(JETSTREAM_OFF) from None
        except nats.js.errors.APIError as exc:
            raise ClusterDown(f"JetStream refused the stream {spec.name}: {said(exc)}") from None
        except (TimeoutError, nats.errors.Error) as exc:
            raise ClusterDown(f"{JETSTREAM_SILENT} ({said(exc)})") from None


async def streams_again(jet: Jet) -> None:
    """After a reconnection: a restarted server may have lost the streams kept in memory,
    and the workers' consumer with them: both are made again (a failure is logged)."""
    jet.forget_consumer()
    try:
        with tolerating("the streams not made again", level=logging.WARNING):
            await ensure_streams(jet, jet.specs)
    except ClusterDown as exc:
        logger.warning("NATS: the streams not made again: %s", exc)


async def jetstream_on(jet: Jet) -> bool:
    try:
        await jet.js.account_info()
    except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
        return False
    return True


async def stream_state(jet: Jet, name: str) -> tuple[int, int, int] | None:
    """(messages, first seq, last seq) of a stream; None when there is no such stream."""
    try:
        info = await jet.js.stream_info(name)
    except nats.js.errors.NotFoundError:
        return None
    return (info.state.messages, info.state.first_seq, info.state.last_seq)


async def stream_made(jet: Jet, name: str) -> tuple[str, int, int]:
    """When a stream was made (JetStream's time, as text), and its first and last seq."""
    info = await jet.js.stream_info(name)
    return (str(info.created or ""), info.state.first_seq, info.state.last_seq)


def _config(spec: StreamSpec) -> api.StreamConfig:
    return api.StreamConfig(
        name=spec.name,
        description=spec.what,
        subjects=list(spec.subjects),
        retention=api.RetentionPolicy.WORK_QUEUE if spec.work_queue else api.RetentionPolicy.LIMITS,
        storage=api.StorageType.MEMORY if spec.storage is Storage.MEMORY else api.StorageType.FILE,
        max_msgs=spec.max_msgs,
        max_bytes=spec.max_bytes,
        max_msgs_per_subject=spec.max_msgs_per_subject,
        discard=api.DiscardPolicy.NEW if spec.discard_new else api.DiscardPolicy.OLD,
        duplicate_window=DUPLICATE_WINDOW_S,
        # An object store's, as nats-py's `create_object_store` makes it.
        allow_rollup_hdrs=spec.objects,
        allow_direct=True if spec.objects else None,
    )
