"""The least a follower through NATS can cost: the floor under `cluster.py`'s follower row.

    python bench/_floor_follower.py relay NATS_URL SUBJECT
    python bench/_floor_follower.py keep NATS_URL SUBJECT
    python bench/_floor_follower.py publish NATS_URL SUBJECT FILE

nats-py and websockets on one asyncio loop, nothing else: no Trio, no thread between them,
no journal, no frame looked at. What the cluster cannot do without is kept:

- `relay` (a gateway's part): a WebSocket server on loopback (its URL, `ws://…`, is its
  first line of output). Each client gets an ordered consumer on SUBJECT, from its first
  message, and each message's payload as one WebSocket message (a batch of frames is
  already lines joined by newlines, as a follower reads them); the socket is closed after
  the message whose `Floor-End` header is set.
- `keep` (the other gateway's part: the run's exec socket is there, and read by `cluster.py`
  only after the follower, so all that gateway must do meanwhile is take the run in): an
  ordered consumer on SUBJECT, made at once (then `ready` is its line of output), each
  message's payload kept in a list, until the one with `Floor-End`.
- `publish` (a worker's part): the messages in FILE (`cluster.py` writes the run's own
  messages there, read back from the frames stream: the same payloads and headers the
  worker published) published to SUBJECT in order, up to 8 in flight, each until
  JetStream acknowledges it, the last with `Floor-End`.

The stream (file storage, as the frames stream) is `cluster.py`'s to make. Not a benchmark
itself (`run_all.py` skips files starting with `_`).
"""

from __future__ import annotations

import asyncio
import pickle
import sys

import nats
from websockets.asyncio.server import ServerConnection, serve

#: Batches in flight at most, as a worker publishes (`cluster/publish.py`).
WINDOW = 8
END = "Floor-End"


async def relay(url: str, subject: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()

    async def follow(ws: ServerConnection) -> None:
        sub = await js.subscribe(subject, ordered_consumer=True, idle_heartbeat=1.0)
        try:
            while True:
                msg = await sub.next_msg(timeout=None)
                await ws.send(msg.data.decode())
                if msg.headers and END in msg.headers:
                    return
        finally:
            await sub.unsubscribe()

    async with serve(follow, "127.0.0.1", 0, compression=None, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"ws://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()


async def keep(url: str, subject: str) -> None:
    nc = await nats.connect(url)
    sub = await nc.jetstream().subscribe(subject, ordered_consumer=True, idle_heartbeat=1.0)
    print("ready", flush=True)
    kept: list[bytes] = []
    while True:
        msg = await sub.next_msg(timeout=None)
        kept.append(msg.data)
        if msg.headers and END in msg.headers:
            break
    await nc.close()


async def publish(url: str, subject: str, messages: list[tuple[bytes, dict[str, str]]]) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    inflight: list[asyncio.Future[object]] = []
    for i, (data, headers) in enumerate(messages):
        last = {END: "1"} if i == len(messages) - 1 else {}
        inflight.append(await js.publish_async(subject, data, headers={**headers, **last} or None))
        if len(inflight) >= WINDOW:
            await inflight.pop(0)
    await asyncio.gather(*inflight)
    await nc.close()


def main() -> None:
    role, url, subject, *rest = sys.argv[1:]
    if role == "relay":
        asyncio.run(relay(url, subject))
    elif role == "keep":
        asyncio.run(keep(url, subject))
    else:
        with open(rest[0], "rb") as f:
            messages: list[tuple[bytes, dict[str, str]]] = pickle.load(f)
        asyncio.run(publish(url, subject, messages))


if __name__ == "__main__":
    main()
