"""`mcpx-hooks mcp`: the supervisor as an MCP server over stdio, for an MCP client (an agent,
an IDE, a desktop app) that starts it: the tool servers' tools, each call through the `call`
point's hooks, the session one run. Ends when the client closes stdin, or on SIGINT/SIGTERM;
exits 0 then, 2 for a config error.

stdin and stdout are the client's: the messages are read and written on private copies of
them, and descriptors 0 and 1 themselves are pointed at /dev/null and stderr, so nothing
else in this process or its children (the spawner, hooks, servers) can write to the wire.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .common import EXIT_OK, load, run_async
from .parser import add_config_file_arguments

if TYPE_CHECKING:
    import argparse


def add_arguments(mcp: argparse.ArgumentParser) -> None:
    add_config_file_arguments(mcp)


def _take_stdio() -> tuple[int, int]:
    """Private copies of stdin and stdout (the wire), with 0 and 1 diverted."""
    read_fd, write_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return read_fd, write_fd


def run(args: argparse.Namespace) -> int:
    from ..core.loglines import log_to_stderr
    from ..service.mcpface import serve_stdio

    config = load(args)
    log_to_stderr("mcpx-hooks mcp")
    read_fd, write_fd = _take_stdio()
    run_async(serve_stdio, config, read_fd, write_fd)
    return EXIT_OK
