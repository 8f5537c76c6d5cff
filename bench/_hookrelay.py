"""A byte relay that runs one module hook before each tool call: `mcp_face.py`'s floor of a
gateway process that hooks a call and does nothing else.

    python bench/_hookrelay.py DIRECTORY SERVER-COMMAND...

It starts the server and a spawner (`open_spawner`, as the gateway's runtime does), copies the
client's lines to the server and the server's to the client, and, for a line that is a
`tools/call` request, first runs `module_hook.py`'s hook (in DIRECTORY) through `run_hook`, the
way `mcp_face.py` times the hook alone, then relays the line as it came. Nothing is parsed but
a substring test, no frame is kept, no answer is read: what is left between it and the gateway
is the gateway's own work around its hook. It ends when its stdin ends.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import trio
from module_hook import hook_sample, module_hook

from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.process.spawner import open_spawner

CALL = b'"method":"tools/call"'


async def main(directory: str, argv: list[str]) -> None:
    hook = module_hook(directory, Profile.NONE)
    stdin = trio.lowlevel.FdStream(0)
    stdout = trio.lowlevel.FdStream(1)
    async with open_spawner() as spawner, trio.open_nursery() as nursery:
        start = functools.partial(trio.run_process, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        server = await nursery.start(start, argv)

        async def back() -> None:
            while data := await server.stdout.receive_some(65536):
                await stdout.send_all(data)

        nursery.start_soon(back)
        pending = b""
        while data := await stdin.receive_some(65536):
            pending += data
            *whole, pending = pending.split(b"\n")
            for line in whole:
                if CALL in line.replace(b" ", b""):
                    await hook_sample(spawner, hook)
                await server.stdin.send_all(line + b"\n")
        await server.stdin.aclose()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2:])
