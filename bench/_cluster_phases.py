"""Where a latency-bound run's time goes, seen from its client: `cluster.py`'s runs/s of
`sh -c "sleep 0.2"`, with each run's time from the request to its `start` frame, from
`start` to `end`, and from `end` to the socket's close. Not a figure of `make bench` (its
name starts with `_`): a tool to read before cutting anything.

    .venv/bin/python bench/_cluster_phases.py [--runs 96] [--clients 16] [--slots 8]

Parts as in `cluster.py`. Three rows, each from idle parts: the plain `serve`; gateway A
with one worker of `--slots`; then with a second one like it. Medians over the runs (the
first `--clients` runs warm up and are not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from cluster import quiet, started_parts
from websockets.asyncio.client import connect

SLEEPER = ["sh", "-c", "sleep 0.2"]


async def _one(url: str, out: list[tuple[float, float, float]]) -> None:
    began = time.perf_counter()
    started = ended = 0.0
    async with connect(url + "/v1/exec", max_size=None, compression=None, proxy=None) as ws:
        await ws.send(json.dumps({"argv": SLEEPER}))
        async for message in ws:
            for line in str(message).split("\n"):
                kind = json.loads(line)["type"]
                if kind == "start":
                    started = time.perf_counter()
                elif kind == "end":
                    ended = time.perf_counter()
    closed = time.perf_counter()
    out.append(((started - began) * 1e3, (ended - started) * 1e3, (closed - ended) * 1e3))


async def _phases(url: str, runs: int, clients: int) -> str:
    out: list[tuple[float, float, float]] = []
    slots = asyncio.Semaphore(clients)

    async def bounded() -> None:
        async with slots:
            await _one(url, out)

    await asyncio.gather(*(bounded() for _ in range(clients)))  # warm
    out.clear()
    began = time.perf_counter()
    await asyncio.gather(*(bounded() for _ in range(runs)))
    rate = runs / (time.perf_counter() - began)
    to_start, to_end, to_close = (statistics.median(column) for column in zip(*out, strict=True))
    return (
        f"{rate:6.1f} runs/s   to start {to_start:6.1f} ms   start to end {to_end:6.1f} ms"
        f"   end to close {to_close:5.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=96)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--slots", type=int, default=8)
    args = ap.parse_args()
    with started_parts() as parts:
        worker = ["worker", *parts.flags, "--concurrency", str(args.slots)]

        async def rows() -> None:
            await quiet(parts.procs)
            print("plain serve        ", await _phases(parts.plain_url, args.runs, args.clients))
            for workers in (1, 2):
                parts.start(worker, "taking runs")
                await quiet(parts.procs)
                row = await _phases(parts.a_url, args.runs, args.clients)
                print(f"{workers} worker(s) of {args.slots:<2} ", row, flush=True)

        asyncio.run(rows())


if __name__ == "__main__":
    main()
