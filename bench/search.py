"""Search across stored runs: how long `runs search` / `GET /v1/search` take to answer over a
history of many runs (the store's own search, in process, on a database on disk).

    .venv/bin/python bench/search.py [--runs 1000] [--lines 1000] [--queries 200]

The corpus is written straight through the store's writer API (`History.write`, one
transaction per 50 runs, each run's lines as `exec --json` sends them: a `start` frame with
its argv, then stdout lines of about 24 bytes), indexed in full, then the database is closed
and opened again as a reader (`runs search` opens it read-only). Each of `--runs` runs holds
one line `needle-<n> …` at a random seq; a query is one of those needles (one match in the
whole history, found and its snippet cut from its stored chunk), `--queries` of them in a
shuffled order. Printed for context: the same with the run filter (`--run`), a word every
line holds (`line`: the first 50 matches of a million), and a phrase.

RESULT `search_p50_abs`: the needle query's p50, in ms (`abs`); goal < 100 ms. The baseline
printed beside it is the p50 of reading one stored run's first 50 frames back (`runs show`'s
read), for context.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--runs 20 --lines 100 --queries 20`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from _quick import parse_args
from _timing import result

from mcpx_hooks.supervisor.history.store import History, Written

GOAL_MS = 100.0
PER_WRITE = 50


def run_lines(run_id: str, lines: int, needle_at: int, needle: str) -> list[bytes]:
    at = "2026-12-03T03:30:33.488Z"
    sent = [
        orjson.dumps(
            {"runId": run_id, "seq": 0, "at": at, "type": "start", "argv": ["sh", "build.sh"]}
        )
    ]
    for seq in range(1, lines):
        text = needle if seq == needle_at else f"line {seq:>18}"
        sent.append(
            orjson.dumps({"runId": run_id, "seq": seq, "at": at, "text": text, "type": "stdout"})
        )
    return sent


def build(path: Path, runs: int, lines: int, rng: random.Random) -> list[tuple[str, str]]:
    """Writes the corpus; (run id, needle) of each run."""
    history = History.open(path)
    made: list[tuple[str, str]] = []
    try:
        pending: list[Written] = []
        for n in range(runs):
            run_id = f"{n:016x}"
            needle = f"needle-{n} found in step {rng.randrange(1000)}"
            sent = run_lines(run_id, lines, rng.randrange(1, lines), needle)
            pending.append(Written(run_id, 0, sent, {"runId": run_id}, float(n), True))
            made.append((run_id, f"needle-{n}"))
            if len(pending) == PER_WRITE or n == runs - 1:
                history.write(pending)
                pending = []
    finally:
        history.close()
    return made


def p50_ms(call: Callable[[], Any], arguments: list[Any]) -> float:
    times = []
    for argument in arguments:
        started = time.perf_counter()
        call(argument)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    args = parse_args(parser, runs=20, lines=100, queries=20)
    rng = random.Random(42)
    with tempfile.TemporaryDirectory(prefix="mcpx-bench-search-") as tmp:
        path = Path(tmp) / "history.db"
        started = time.perf_counter()
        made = build(path, args.runs, args.lines, rng)
        size = sum(p.stat().st_size for p in path.parent.glob("history.db*"))
        print(
            f"corpus: {args.runs} runs of {args.lines} lines written and indexed in"
            f" {time.perf_counter() - started:.1f} s; {size / 1e6:.1f} MB on disk"
        )
        history = History.open(path, writes=False)
        try:
            asked = [rng.choice(made) for _ in range(args.queries)]
            for run_id, needle in asked[:5]:
                (found,) = history.search(needle)  # one match, in its run
                assert found["runId"] == run_id and needle in found["snippet"], found
            needle_ms = p50_ms(lambda q: history.search(q[1]), asked)
            run_ms = p50_ms(lambda q: history.search(q[1], run_id=q[0]), asked)
            common_ms = p50_ms(lambda q: history.search("line"), asked)
            phrase_ms = p50_ms(lambda q: history.search(f'"{q[1]} found"'), asked)
            read_ms = p50_ms(lambda q: history.lines(q[0], args.lines - 50), asked)
        finally:
            history.close()
    print(
        f"search p50: a needle {needle_ms:.2f} ms, the same in its run only {run_ms:.2f} ms,"
        f" `line` (50 of {args.runs * (args.lines - 1):,}) {common_ms:.2f} ms, a phrase"
        f" {phrase_ms:.2f} ms; reading 50 stored frames back {read_ms:.2f} ms"
    )
    ratio = needle_ms / read_ms if read_ms else float("inf")
    print(result("search_p50_abs", needle_ms, read_ms, ratio, GOAL_MS, direction="abs", unit="ms"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
