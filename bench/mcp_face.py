"""A tool call through `mcpx-hooks mcp` against the same call made straight to its server.

    .venv/bin/python bench/mcp_face.py [--rounds 10] [--per-round 50]

The server is the example tool server (`supervisor/examples/tools/wordtools.py`, tool `count`),
declared with profile `none` (what is measured is the gateway's path, not the sandbox's). Two
clients, both the official `mcp` SDK's stdio client, both kept open for the whole run:

* `direct`: the baseline, a session to the server itself, calling `count`;
* `gateway`: a session to `mcpx-hooks mcp --config` of a file declaring that server and no
  hook, calling `words__count`: the call point, the session's run and its frames, and the
  hop to the server the gateway keeps.

Rounds interleave the two (`--per-round` calls of each); round 0 warms up and is dropped.
RESULT `mcp_face_call_overhead_p50` (abs): the gateway's p50 minus the direct p50, goal
<= 1 ms; the baseline column is the direct p50. The state directory (trust, pins) is a
temporary one.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 2 --per-round 2`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import anyio
from _quick import parse_args
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import mcpx_hooks.supervisor

GOAL_MS = 1.0
WORDTOOLS = Path(mcpx_hooks.supervisor.__file__).parent / "examples" / "tools" / "wordtools.py"
ARGS = {"text": "the quick brown fox\njumps over the lazy dog"}


def config(directory: Path) -> Path:
    path = directory / "gateway.toml"
    path.write_text(
        f'[servers.words]\ncommand = ["{sys.executable}", "{WORDTOOLS}"]\nsandbox = "none"\n'
    )
    return path


async def timed(session: ClientSession, tool: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        result = await session.call_tool(tool, ARGS)
        times.append(time.perf_counter() - start)
        if result.is_error:
            raise SystemExit(f"{tool} failed: {result.content}")
    return times


async def measure(rounds: int, per_round: int, quiet: TextIO) -> tuple[list[float], list[float]]:
    """The two clients' call times after round 0; the servers' stderr goes to `quiet` (the
    gateway's line on pinning the server at its first use is not the bench's)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "XDG_STATE_HOME": tmp,
            "XDG_CONFIG_HOME": tmp,
            "MCPX_HOOKS_NO_DISCOVERY": "1",
        }
        direct = StdioServerParameters(command=sys.executable, args=[str(WORDTOOLS)], env=env)
        gateway = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcpx_hooks.supervisor", "mcp", "--config", str(config(Path(tmp)))],
            env=env,
            cwd=tmp,
        )
        async with contextlib.AsyncExitStack() as stack:
            sessions = []
            for params in (direct, gateway):
                client = stdio_client(params, errlog=quiet)
                read, write = await stack.enter_async_context(client)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                sessions.append(session)
            ours: list[float] = []
            base: list[float] = []
            for round_ in range(rounds):
                b = await timed(sessions[0], "count", per_round)
                o = await timed(sessions[1], "words__count", per_round)
                if round_:
                    base += b
                    ours += o
    return ours, base


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=50)
    args = parse_args(parser, rounds=2, per_round=2)
    with open(os.devnull, "w") as quiet:
        ours, base = anyio.run(measure, args.rounds, args.per_round, quiet)
    o, b = statistics.median(ours) * 1e3, statistics.median(base) * 1e3
    over = o - b
    verdict = "meets" if over <= GOAL_MS else "misses"
    print(f"{len(ours)} calls each, medians:")
    print(f"  baseline  count, straight to the server:        {b:7.3f} ms")
    print(f"  gateway   words__count through mcpx-hooks mcp:  {o:7.3f} ms")
    print(f"  overhead  {over:7.3f} ms  ({verdict} the goal <= {GOAL_MS:g} ms)")
    print(f"RESULT mcp_face_call_overhead_p50 {over:.3f} {b:.3f} {o / b:.3f} {GOAL_MS} abs ms")


if __name__ == "__main__":
    main()
