"""A tool call through `mcpx-hooks mcp` against the same call made straight to its server.

    .venv/bin/python bench/mcp_face.py [--rounds 10] [--per-round 50]

The server is the example tool server (`supervisor/examples/tools/wordtools.py`, tool `count`),
declared with profile `none` (what is measured is the gateway's path, not the sandbox's).
Three clients, each the official `mcp` SDK's stdio client, all kept open for the whole run:

* `direct`: the baseline, a session to the server itself, calling `count`;
* `gateway`: a session to `mcpx-hooks mcp --config` of a file declaring that server and no
  hook, calling `words__count`: the call point, the session's run and its frames, and the
  hop to the server the gateway keeps;
* `hooked`: the same with one `before` module hook on the call (`effect = "advise"`, profile
  `none`, a function answering advice).

And `hook`: that module hook's own cost, run alone in this process the way a run runs it
(`run_hook` through a spawner, as `bench/module_hook.py` times it).

Two peers, for context (printed, no row): `relay`, the same call through a byte relay
(`bench/_relay.py`: one more process on the way, two more pipe hops, nothing parsed), the floor
of a gateway as a process; and `sdk proxy`, through the `mcp` SDK's own server relaying each
call to the SDK's client (`bench/_sdkproxy.py`), a proxy written the SDK's way.

Rounds interleave the four (`--per-round` of each, in a rotating order); round 0 warms up and
is dropped. Two RESULT rows (abs, ms):
* `mcp_face_call_overhead_p50`: the gateway's p50 minus the direct p50, goal <= 1 ms;
  the baseline column is the direct p50;
* `mcp_face_hook_overhead_p50`: the hooked p50 minus the direct p50 minus the hook's own
  p50, goal <= 0.5 ms; the baseline column is the hook's own p50.
The state directory (trust, pins) is a temporary one.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 2 --per-round 2`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

import anyio
from _quick import parse_args
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from module_hook import HOOK_FILE, HOOK_SOURCE, hook_sample, module_hook

import mcpx_hooks.supervisor
from mcpx_hooks.supervisor.core.hooks import Hook, Profile
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner

GOAL_MS = 1.0
GOAL_HOOK_MS = 0.5
WORDTOOLS = Path(mcpx_hooks.supervisor.__file__).parent / "examples" / "tools" / "wordtools.py"
HERE = Path(__file__).parent
ARGS = {"text": "the quick brown fox\njumps over the lazy dog"}
#: The hooked gateway's one hook: the module hook `bench/module_hook.py` times, on the call.
HOOK = f"""
[[hooks]]
name = "bench"
on = "call"
phase = "before"
module = "{HOOK_FILE}:hook"
effect = "advise"
sandbox = "none"
"""


def config(directory: Path, *, hooked: bool = False) -> Path:
    path = directory / ("hooked.toml" if hooked else "gateway.toml")
    text = f'[servers.words]\ncommand = ["{sys.executable}", "{WORDTOOLS}"]\nsandbox = "none"\n'
    path.write_text(text + (HOOK if hooked else ""))
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


async def measure(rounds: int, per_round: int, quiet: TextIO) -> dict[str, list[float]]:
    """Each client's call times, and the hook's own, after round 0; the servers' stderr goes
    to `quiet` (the gateway's line on pinning the server at its first use is not the
    bench's)."""
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        (where / HOOK_FILE).write_text(HOOK_SOURCE)
        env = {
            **os.environ,
            "XDG_STATE_HOME": tmp,
            "XDG_CONFIG_HOME": tmp,
            "MCPX_HOOKS_NO_DISCOVERY": "1",
        }

        def gateway(path: Path) -> StdioServerParameters:
            argv = ["-m", "mcpx_hooks.supervisor", "mcp", "--config", str(path)]
            return StdioServerParameters(command=sys.executable, args=argv, env=env, cwd=tmp)

        def peer(script: str) -> StdioServerParameters:
            argv = [str(HERE / script), sys.executable, str(WORDTOOLS)]
            return StdioServerParameters(command=sys.executable, args=argv, env=env)

        clients = {
            "direct": StdioServerParameters(command=sys.executable, args=[str(WORDTOOLS)], env=env),
            "gateway": gateway(config(where)),
            "hooked": gateway(config(where, hooked=True)),
            "relay": peer("_relay.py"),
            "sdk proxy": peer("_sdkproxy.py"),
            "hook relay": StdioServerParameters(
                command=sys.executable,
                args=[str(HERE / "_hookrelay.py"), tmp, sys.executable, str(WORDTOOLS)],
                env=env,
                cwd=tmp,
            ),
        }
        async with contextlib.AsyncExitStack() as stack:
            spawner = await stack.enter_async_context(open_spawner())
            hook = module_hook(tmp, Profile.NONE)
            samplers: dict[str, Callable[[], Awaitable[list[float]]]] = {}
            for name, params in clients.items():
                read, write = await stack.enter_async_context(stdio_client(params, errlog=quiet))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tool = "words__count" if name in ("gateway", "hooked") else "count"
                samplers[name] = functools.partial(timed, session, tool, per_round)
            samplers["hook"] = functools.partial(_hook_alone, spawner, hook, per_round)
            samples: dict[str, list[float]] = {name: [] for name in samplers}
            names = list(samplers)
            for round_ in range(rounds):
                turn = round_ % len(names)
                for name in names[turn:] + names[:turn]:
                    got = await samplers[name]()
                    if round_:
                        samples[name] += got
    return samples


async def _hook_alone(spawner: Spawner, hook: Hook, count: int) -> list[float]:
    return [await hook_sample(spawner, hook) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=50)
    args = parse_args(parser, rounds=2, per_round=2)
    with open(os.devnull, "w") as quiet:
        samples = anyio.run(measure, args.rounds, args.per_round, quiet, backend="trio")
    p50 = {name: statistics.median(times) * 1e3 for name, times in samples.items()}
    over = p50["gateway"] - p50["direct"]
    hooked_over = p50["hooked"] - p50["direct"] - p50["hook"]
    print(f"{len(samples['direct'])} calls each, medians:")
    print(f"  baseline  count, straight to the server:          {p50['direct']:7.3f} ms")
    print(f"  gateway   words__count through mcpx-hooks mcp:    {p50['gateway']:7.3f} ms")
    print(f"  hooked    the same with one before module hook:   {p50['hooked']:7.3f} ms")
    print(f"  hook      that module hook alone (run_hook):      {p50['hook']:7.3f} ms")
    peers = (
        ("relay", "a byte relay"),
        ("sdk proxy", "the SDK's own proxy"),
        ("hook relay", "a relay running the hook"),
    )
    for name, what in peers:
        print(
            f"  peer      count through {what + ':':26}{p50[name]:7.3f} ms"
            f"  ({p50[name] - p50['direct']:+.3f} ms)"
        )
    print(f"  overhead  {over:7.3f} ms  ({_verdict(over, GOAL_MS)} the goal <= {GOAL_MS:g} ms)")
    print(
        f"  overhead with the hook, beyond the hook's own cost {hooked_over:7.3f} ms"
        f"  ({_verdict(hooked_over, GOAL_HOOK_MS)} the goal <= {GOAL_HOOK_MS:g} ms)"
    )
    ratio = p50["gateway"] / p50["direct"]
    print(
        f"RESULT mcp_face_call_overhead_p50 {over:.3f} {p50['direct']:.3f} {ratio:.3f}"
        f" {GOAL_MS} abs ms"
    )
    hook_ratio = p50["hooked"] / (p50["direct"] + p50["hook"])
    print(
        f"RESULT mcp_face_hook_overhead_p50 {hooked_over:.3f} {p50['hook']:.3f} {hook_ratio:.3f}"
        f" {GOAL_HOOK_MS} abs ms"
    )


def _verdict(value: float, goal: float) -> str:
    return "meets" if value <= goal else "misses"


if __name__ == "__main__":
    main()
