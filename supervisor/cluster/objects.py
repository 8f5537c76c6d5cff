"""The asyncio side of the artifacts bucket: nats-py's object store, run on the bridge's
loop only (`artifacts.py` reaches each function through `Bridge.call` or `Bridge.stream`).

An object is one artifact, named `artifact_key(runId, id)`; its description holds the
artifact's name and type as its frame said them.
"""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import nats.js.errors
import orjson
from nats.js import api
from nats.js.object_store import ObjectStore

from ..core.records import Record
from .jet import API_TIMEOUT_S, NATS_FAILED, ClusterDown, Jet, said, tolerating
from .names import ARTIFACTS_BUCKET, Stream, artifact_run, every, runs_subject


@attrs.frozen(repr=False, eq=False)
class ObjectFound(Record):
    """A stored artifact: what its frame said, its size, and where its chunks are."""

    name: str
    mime: str
    size: int
    chunks_subject: str


def described(description: object, key: str) -> tuple[str, str]:
    """An object's artifact name and type from its description (what `put` wrote, or
    anything another client of the bucket did): never an error, a type always one line."""
    said: object = {}
    if isinstance(description, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            said = orjson.loads(description)
    said = said if isinstance(said, dict) else {}
    name, mime = said.get("name"), said.get("mime")
    mime = mime if isinstance(mime, str) and mime.isprintable() and mime else ""
    return (
        name if isinstance(name, str) and name else key,
        mime or "application/octet-stream",
    )


def _bucket(jet: Jet) -> ObjectStore:
    return ObjectStore(name=ARTIFACTS_BUCKET, stream=Stream.ARTIFACTS, js=jet.js)


async def put(jet: Jet, key: str, path: str, name: str, mime: str) -> None:
    """Stores the file at `path` as the object `key` (read in an executor thread)."""
    meta = api.ObjectMeta(name=key, description=orjson.dumps({"name": name, "mime": mime}).decode())
    try:
        with open(path, "rb") as file:  # noqa: ASYNC230 — nats-py reads it in an executor
            await _bucket(jet).put(key, file, meta=meta)
    except nats.js.errors.APIError as exc:
        raise ClusterDown(f"NATS refused artifact {key}: {exc.description}") from None
    except NATS_FAILED as exc:
        raise ClusterDown(f"artifact {key}: {said(exc)}") from None


async def find(jet: Jet, key: str) -> ObjectFound | None:
    """The object `key`, None when there is none (or it was deleted)."""
    try:
        info = await _bucket(jet).get_info(key)
    except (nats.js.errors.NotFoundError, nats.js.errors.ObjectNotFoundError):
        return None
    except nats.js.errors.BadObjectMetaError:
        return None
    except NATS_FAILED as exc:
        raise ClusterDown(f"artifact {key}: {said(exc)}") from None
    name, mime = described(info.description, key)
    return ObjectFound(
        name,
        mime,
        max(0, int(info.size or 0)),
        f"$O.{ARTIFACTS_BUCKET}.C.{info.nuid}" if info.size else "",  # empty: no chunks
    )


async def chunks(jet: Jet, subject: str, deliver: Any) -> None:
    """An object's chunks in order, each `deliver`ed; returns after the last one."""
    sub = await jet.js.subscribe(subject, ordered_consumer=True)
    try:
        while True:
            msg = await sub.next_msg(timeout=API_TIMEOUT_S)
            await deliver(bytes(msg.data))
            if msg.metadata.num_pending == 0:
                return
    finally:
        with tolerating(f"unsubscribe from {subject}"):
            await sub.unsubscribe()


async def prune(jet: Jet, run_id: str, need: int, budget: int) -> bool:
    """Makes room for `need` more bytes of run `run_id`'s artifacts within `budget`: the
    objects of runs the runs stream no longer retains go first, then the oldest runs'
    (never `run_id`'s own). False when they still do not fit."""
    bucket = _bucket(jet)
    try:
        try:
            objects = await bucket.list(ignore_deletes=True)
        except nats.js.errors.NotFoundError:
            objects = []
        info = await jet.js.stream_info(Stream.RUNS, subjects_filter=every(runs_subject("-")))
    except NATS_FAILED as exc:
        raise ClusterDown(f"the artifacts bucket: {said(exc)}") from None
    retained = {s.rsplit(".", 1)[-1] for s in (info.state.subjects or {})}
    runs: dict[str, list[Any]] = {}
    for obj in sorted(objects, key=lambda o: o.mtime or ""):
        runs.setdefault(artifact_run(obj.name), []).append(obj)
    held = sum(int(o.size or 0) for o in objects)
    gone = [r for r in runs if r not in retained and r != run_id]
    gone += [r for r in runs if r in retained and r != run_id]  # oldest first, by mtime
    for other in gone:
        if other in retained and held + need <= budget:
            break
        for obj in runs[other]:
            with contextlib.suppress(nats.js.errors.NotFoundError, *NATS_FAILED):
                await bucket.delete(obj.name)
                held -= int(obj.size or 0)
    return held + need <= budget
