"""Tool: the CPU time each process spends on one tool call through `mcpx-hooks mcp`, with
and without its one `before` module hook, and the wall time per call beside it.

    .venv/bin/python bench/_face_cpu.py [--calls 1000]

The gateway of `bench/mcp_face.py` (the example tool server behind it; then the same with
its module hook) serves the SDK's stdio client, which makes 100 calls to warm up, then
`--calls` one after another. Around those, each process's user + system seconds (psutil):
the client (this process), the gateway, its spawner and the processes the spawner reaped
(the hooks' forks), the tool server. On a 2-core machine a call whose processes together
spend more CPU than its wall time has cores is bound by CPU, not by any one process's
path: that is what this tells apart. Not a row of `make bench`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import anyio
import psutil
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).parent))
import mcp_face
from module_hook import HOOK_FILE, HOOK_SOURCE

#: Each process's (own, reaped children's) CPU seconds, by a name for it.
Times = dict[str, tuple[float, float]]


def _times() -> Times:
    me = psutil.Process()
    got: Times = {}
    for proc in me.children(recursive=True):
        try:
            cmd, cpu = proc.cmdline(), proc.cpu_times()
        except psutil.Error:
            continue
        name = "spawner" if "-I" in cmd else Path(cmd[-1]).name if "-m" not in cmd else "gateway"
        got[f"{name} ({proc.pid})"] = (
            cpu.user + cpu.system,
            cpu.children_user + cpu.children_system,
        )
    cpu = me.cpu_times()
    got["client"] = (cpu.user + cpu.system, 0.0)
    return got


async def measure(hooked: bool, calls: int, quiet: TextIO) -> tuple[float, Times, Times]:
    """Wall seconds for `calls` calls, and each process's CPU before and after them (the
    gateway's stderr goes to `quiet`)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / HOOK_FILE).write_text(HOOK_SOURCE)
        env = {
            **os.environ,
            "XDG_STATE_HOME": tmp,
            "XDG_CONFIG_HOME": tmp,
            "MCPX_HOOKS_NO_DISCOVERY": "1",
        }
        config = mcp_face.config(Path(tmp), hooked=hooked)
        argv = ["-m", "mcpx_hooks.supervisor", "mcp", "--config", str(config)]
        params = StdioServerParameters(command=sys.executable, args=argv, env=env, cwd=tmp)
        async with (
            stdio_client(params, errlog=quiet) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await mcp_face.timed(session, "words__count", 100)
            before, start = _times(), time.perf_counter()
            await mcp_face.timed(session, "words__count", calls)
            wall = time.perf_counter() - start
            after = _times()
    return wall, before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    for hooked in (False, True):
        with open(os.devnull, "w") as quiet:
            wall, before, after = anyio.run(measure, hooked, args.calls, quiet)
        per = 1e6 / args.calls
        print(f"{'one module hook' if hooked else 'no hook'}: wall {wall * per:.0f} us a call")
        total = 0.0
        for name, (own, reaped) in after.items():
            if name in before:
                own_us = (own - before[name][0]) * per
                reaped_us = (reaped - before[name][1]) * per
                total += own_us + reaped_us
                print(f"  {name:<28} {own_us:6.0f} us CPU a call, reaped {reaped_us:6.0f} us")
        print(f"  all of them: {total:.0f} us CPU a call")


if __name__ == "__main__":
    main()
