"""Where a 200 ms run's time goes, client to client: `cluster.py`'s two-workers figure, each
run cut into its stages by the clocks of its own frames. Not a figure of `make bench` (its
name starts with `_`): a tool to read before cutting anything.

    .venv/bin/python bench/_cluster_timeline.py [--workers 2] [--slots 8] [--runs 96] [-n 3]
    .venv/bin/python bench/_cluster_timeline.py --plain

Parts as in `cluster.py`. Each round, `--runs` runs of `sh -c "sleep 0.2"`, 16 clients at a
time (16 more to warm up), through gateway A with `--workers` workers of `--slots` slots (or
the plain `serve`, `--plain`), and the medians over the runs of: the socket's opening; from
the request sent to its `start` frame's `at` (the queue, the take, the worker's admission);
from `start` to `end` by their `at` (the run on its worker); from each of those to the
client's receiving it; and from `end` to the socket's close. The worker and the client share
the machine's clock.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import time
from typing import Any

from cluster import started_parts
from websockets.asyncio.client import connect

SLEEPER = ["sh", "-c", "sleep 0.2"]
STAGES = ("open", "sent->start", "start seen", "start->end", "end seen", "close", "whole")


def _at(frame: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(str(frame["at"]).replace("Z", "+00:00")).timestamp()


async def _one(url: str, rows: list[dict[str, float]] | None) -> None:
    began = time.time()
    seen: list[tuple[float, dict[str, Any]]] = []
    async with connect(url + "/v1/exec", max_size=None, compression=None, proxy=None) as ws:
        opened = time.time()
        await ws.send(json.dumps({"argv": SLEEPER}))
        async for message in ws:
            now = time.time()
            seen += [(now, json.loads(line)) for line in str(message).split("\n")]
    closed = time.time()
    (start_seen, start), (end_seen, end) = seen[0], seen[-1]
    assert start["type"] == "start" and end["type"] == "end", (start, end)
    if rows is not None:
        rows.append(
            dict(
                zip(
                    STAGES,
                    (
                        opened - began,
                        _at(start) - opened,
                        start_seen - _at(start),
                        _at(end) - _at(start),
                        end_seen - _at(end),
                        closed - end_seen,
                        closed - began,
                    ),
                    strict=True,
                )
            )
        )


async def _round(url: str, runs: int) -> tuple[float, dict[str, float]]:
    slots = asyncio.Semaphore(16)
    rows: list[dict[str, float]] = []

    async def bounded() -> None:
        async with slots:
            await _one(url, rows)

    await asyncio.gather(*(_one(url, None) for _ in range(16)))
    began = time.perf_counter()
    await asyncio.gather(*(bounded() for _ in range(runs)))
    rate = runs / (time.perf_counter() - began)
    return rate, {k: statistics.median(r[k] for r in rows) * 1000 for k in STAGES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--runs", type=int, default=96)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--plain", action="store_true")
    args = ap.parse_args()
    with started_parts() as parts:
        if not args.plain:
            for _ in range(args.workers):
                flags = [*parts.flags, "--concurrency", str(args.slots)]
                parts.start(["worker", *flags], "taking runs")
        url = parts.plain_url if args.plain else parts.a_url
        for _ in range(args.n):
            rate, ms = asyncio.run(_round(url, args.runs))
            stages = "  ".join(f"{k} {v:.1f}" for k, v in ms.items())
            print(f"{rate:5.1f} runs/s  ms, medians: {stages}", flush=True)


if __name__ == "__main__":
    main()
