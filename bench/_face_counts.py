"""Tool: the Python function calls and Trio scheduler passes `mcpx-hooks mcp` spends on one
tool call, counted by cProfile.

    .venv/bin/python bench/_face_counts.py [--calls 100 400] [--hooked]

The gateway of `bench/mcp_face.py` (the example tool server behind it; with `--hooked`, its
one `before` module hook too) runs with cProfile on while it serves; the SDK's stdio client
makes N1 calls through it in one session and N2 in another. What the two sessions' counts
differ by, over N2 - N1, is the count per call, start-up and shutdown taken out. Counts, not
times: the machine's load does not move them, so two checkouts of the call path can be
compared on a busy machine in a minute (`_face_instr.py` counts instructions, ten times
slower). A scheduler pass is one turn of Trio's run loop (a poll of epoll and the tasks it
woke): each task hop or checkpoint on the call's path costs one. Not a row of `make bench`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).parent))
import mcp_face
from module_hook import HOOK_FILE, HOOK_SOURCE

#: Run as the gateway: cProfile on while its session is served, the counts written after.
PROFILED = """
import cProfile, runpy, sys
from mcpx_hooks.supervisor.service import mcpface
profile, serve, where = cProfile.Profile(), mcpface.Gateway.serve, sys.argv.pop(1)
async def profiled(self, read, write):
    profile.enable()
    try:
        await serve(self, read, write)
    finally:
        profile.disable()
        profile.create_stats()
        calls = sum(s[1] for s in profile.stats.values())
        passes = sum(s[1] for k, s in profile.stats.items() if k[2] == "unrolled_run")
        with open(where, "w") as out:
            out.write(f"{calls} {passes}")
mcpface.Gateway.serve = profiled
sys.argv[0] = "mcpx-hooks"
runpy.run_module("mcpx_hooks.supervisor", run_name="__main__")
"""


def count(calls: int, hooked: bool, quiet: TextIO) -> tuple[int, int]:
    """The gateway's function calls and scheduler passes for a session of `calls` calls."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "counts"
        anyio.run(session, calls, hooked, Path(tmp), out, quiet)  # the gateway has exited
        if not out.exists():
            raise SystemExit("the gateway wrote no counts (it did not end its session)")
        calls_made, passes = out.read_text().split()
        return int(calls_made), int(passes)


async def session(calls: int, hooked: bool, tmp: Path, out: Path, quiet: TextIO) -> None:
    (tmp / HOOK_FILE).write_text(HOOK_SOURCE)
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp),
        "XDG_CONFIG_HOME": str(tmp),
        "MCPX_HOOKS_NO_DISCOVERY": "1",
    }
    argv = ["-c", PROFILED, str(out), "mcp", "--config", str(mcp_face.config(tmp, hooked=hooked))]
    gateway = StdioServerParameters(command=sys.executable, args=argv, env=env, cwd=tmp)
    async with (
        stdio_client(gateway, errlog=quiet) as (read, write),
        ClientSession(read, write) as client_session,
    ):
        await client_session.initialize()
        await mcp_face.timed(client_session, "words__count", calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, nargs=2, default=[100, 400], metavar=("N1", "N2"))
    parser.add_argument("--hooked", action="store_true", help="with the one module hook")
    args = parser.parse_args()
    first, second = args.calls
    with open(os.devnull, "w") as quiet:
        low, high = (count(n, args.hooked, quiet) for n in (first, second))
    span = second - first
    print(
        f"per call: {(high[0] - low[0]) / span:.0f} Python function calls,"
        f" {(high[1] - low[1]) / span:.1f} scheduler passes"
    )


if __name__ == "__main__":
    main()
