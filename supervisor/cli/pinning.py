"""`trust --servers [NAME…]` and `servers diff NAME`: the tool lists of tool servers, pinned
in the trust state (`tools/pins.py`). Each starts the servers it names (all declared ones for
`trust --servers` without NAME) as a run would, reads their tools, and stops them.

`trust --servers` pins each server's tools as they are now (what `mcpx-hooks mcp` then holds
it to); exit 0, 1 when a server could not start or a pin could not be written, 2 for a name
no config declares or no state directory. `servers diff NAME` prints what differs between
the pin and the tools now (tools added, removed, changed and which of their keys); exit 0
when nothing does, 1 when something does or the server could not start, 2 for a bad name.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from .common import EXIT_FAILED, EXIT_OK, load, run_async, say, usage

if TYPE_CHECKING:
    import argparse

    from ..core.hooks import Config


async def _listings(config: Config, names: list[str]) -> dict[str, list[dict[str, Any]] | str]:
    """Each named server's tools as pinned (`pins.listing`), or why it could not start."""
    from ..process.spawner import open_spawner
    from ..run.bus import Bus
    from ..run.serverhooks import open_servers
    from ..tools.pins import listing
    from ..tools.serverentry import ServerFailing

    found: dict[str, list[dict[str, Any]] | str] = {}
    async with open_spawner() as spawner, open_servers(spawner, Bus(), config) as manager:
        for name in names:
            try:
                found[name] = listing(await manager.open(config.servers[name]))
            except ServerFailing as exc:
                found[name] = str(exc)
    return found


def _named(config: Config, names: list[str], command: str) -> list[str] | int:
    unknown = [n for n in names if n not in config.servers]
    if unknown:
        known = ", ".join(sorted(config.servers)) or "none"
        return usage(command, f"no tool server named {unknown[0]!r} (declared: {known})")
    return names or list(config.servers)


def pin_servers(args: argparse.Namespace) -> int:
    from ..config.statefiles import StateError
    from ..tools.pins import pin, seen_changes

    config = load(args)
    names = _named(config, list(args.files), "trust --servers")
    if isinstance(names, int):
        return names
    code = EXIT_OK
    for name, listed in run_async(_listings, config, names).items():
        if isinstance(listed, str):
            say(f"mcpx-hooks trust: {listed}")
            code = EXIT_FAILED
            continue
        try:
            pin(config.servers[name], listed, os.environ)
        except StateError as exc:
            say(f"mcpx-hooks trust: {exc}")
            code = EXIT_FAILED
            continue
        print(f"pinned {name}: {len(listed)} tool{'s' * (len(listed) != 1)}")
        with contextlib.suppress(StateError):
            if (running := seen_changes(config.servers[name], listed, os.environ)) is not None:
                say(
                    f"mcpx-hooks trust: note: while it ran, at {running[0]}, {name} listed"
                    f" other tools (`mcpx-hooks servers diff {name}` shows them); a"
                    " process running it starts it afresh at its next listing or call, once"
                    " its calls in flight have ended"
                )
    return code


def servers_diff(args: argparse.Namespace) -> int:
    import json

    from ..config.statefiles import StateError
    from ..tools.pins import change_items, change_line, seen_changes
    from .printable import continued_lines

    config = load(args)
    names = _named(config, [args.name], "servers diff")
    if isinstance(names, int):
        return names
    listed = run_async(_listings, config, names)[args.name]
    if isinstance(listed, str):
        say(f"mcpx-hooks servers diff: {listed}")
        return EXIT_FAILED
    spec = config.servers[args.name]
    try:
        items = change_items(spec, listed, os.environ)
        running = seen_changes(spec, listed, os.environ)
    except StateError as exc:
        say(f"mcpx-hooks servers diff: {exc}")
        return EXIT_FAILED
    with contextlib.suppress(BrokenPipeError):
        if args.json:
            seen = None if running is None else {"seenAt": running[0], "changes": running[1]}
            doc = {"server": args.name, "changes": items, "whileRunning": seen}
            print(json.dumps(doc, indent=2))
        else:
            # (what the server lists is its data)
            lines = continued_lines(change_line(spec, item) for item in items)
            print("\n".join(lines) if lines else f"{args.name}: its tools are as pinned")
            if running is not None:
                print(f"while it ran, at {running[0]}, it listed other tools:")
                shown = continued_lines(change_line(spec, item) for item in running[1])
                print("\n".join("  " + line for line in shown))
    return EXIT_FAILED if items or running else EXIT_OK
