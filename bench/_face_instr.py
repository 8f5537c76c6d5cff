"""Tool: the instructions `mcpx-hooks mcp` spends on one tool call, counted by callgrind.

    .venv/bin/python bench/_face_instr.py [--calls 20 120]

The gateway of `bench/mcp_face.py` (the example tool server behind it, no hook) runs under
`valgrind --tool=callgrind`; the SDK's stdio client makes N1 calls through it in one run and
N2 in another. What the two counts differ by, over N2 - N1, is the count per call, start-up
and shutdown taken out: a figure the machine's load does not move, for comparing two
checkouts of the gateway's call path on a busy machine. Takes a few minutes (valgrind runs
the gateway about 50 times slower). Not a row of `make bench`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).parent))
import mcp_face

TOTALS = re.compile(r"^totals: (\d+)", re.MULTILINE)


def count(calls: int, quiet: TextIO) -> int:
    """The gateway process's instruction count for a session of `calls` calls."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        anyio.run(session, calls, Path(tmp), out, quiet)
        deadline = time.monotonic() + 60  # valgrind writes its counts as the gateway exits
        while not (found := TOTALS.search(out.read_text() if out.exists() else "")):
            if time.monotonic() > deadline:
                raise SystemExit(f"no counts from callgrind in {out}")
            time.sleep(0.1)
        return int(found.group(1))


async def session(calls: int, tmp: Path, out: Path, quiet: TextIO) -> None:
    """One session through the gateway under callgrind: `calls` calls."""
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp),
        "XDG_CONFIG_HOME": str(tmp),
        "MCPX_HOOKS_NO_DISCOVERY": "1",
    }
    gateway = StdioServerParameters(
        command="valgrind",
        args=[
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "mcpx_hooks.supervisor",
            "mcp",
            "--config",
            str(mcp_face.config(tmp)),
        ],
        env=env,
        cwd=tmp,
    )
    client = stdio_client(gateway, errlog=quiet)
    async with client as (read, write), ClientSession(read, write) as client_session:
        await client_session.initialize()
        await mcp_face.timed(client_session, "words__count", calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, nargs=2, default=[20, 120], metavar=("N1", "N2"))
    first, second = parser.parse_args().calls
    with open(os.devnull, "w") as quiet:
        low, high = (count(n, quiet) for n in (first, second))
    per_call = (high - low) / (second - first)
    print(f"instructions per call: {per_call / 1e3:.0f} k ({low} for {first}, {high} for {second})")


if __name__ == "__main__":
    main()
