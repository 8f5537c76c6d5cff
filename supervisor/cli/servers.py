"""`mcpx-hooks servers list`: the tool servers the config declares, each started here the
way a run would start it (its sandbox, its `server.start` hooks, its `startTimeoutMs`), with
its state (running since …, or failing: why) and its tools with their annotations; then
stopped. `--no-start` lists them without starting any (state idle); `--remote URL` shows a
running service's servers as they are (idle, running since …, failing: why), starting none.
Exit 0 when none is failing, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from .common import EXIT_FAILED, EXIT_OK, load, run_async
from .parser import add_config_arguments, add_token_file_argument

if TYPE_CHECKING:
    import argparse

    from ..core.hooks import Config


def add_arguments(servers: argparse.ArgumentParser) -> None:
    sub = servers.add_subparsers(dest="servers_command", required=True, metavar="list|diff")
    listing = add_config_arguments(
        sub.add_parser(
            "list",
            help="start each declared tool server; its state and tools",
            epilog="example: mcpx-hooks servers list --json",
        )
    )
    listing.add_argument(
        "--no-start", action="store_true", help="list the servers without starting them"
    )
    listing.add_argument(
        "--remote", metavar="URL", help="the servers of a running service (ws://…), as they are"
    )
    add_token_file_argument(listing)
    diff = add_config_arguments(
        sub.add_parser(
            "diff",
            help="what changed in a server's tools since they were pinned",
            epilog="example: mcpx-hooks servers diff words",
        )
    )
    diff.add_argument("name", metavar="NAME", help="the tool server")


async def server_states(config: Config, *, start: bool = True) -> list[dict[str, Any]]:
    """Each declared server's state (`entry_json`'s shape, with its `command`), after a
    start here when `start`; every server stopped again before this returns."""
    from ..process.spawner import open_spawner
    from ..run.bus import Bus
    from ..run.serverhooks import open_servers
    from ..tools.serverentry import ServerEntry, ServerFailing, entry_json, where_json

    specs = list(config.servers.values())
    if not start:
        return [{**entry_json(ServerEntry(s)), **where_json(s)} for s in specs]
    async with open_spawner() as spawner, open_servers(spawner, Bus(), config) as manager:
        for spec in specs:
            with contextlib.suppress(ServerFailing):  # its state says why
                await manager.open(spec)
        return manager.states(specs)


def state_line(server: dict[str, Any]) -> str:
    """The server's state; a failing one's reason as it came, line breaks kept (its stderr's
    end): the caller shows it through `printable.continued`, one line a line."""
    from .view import cell

    state = server.get("state")
    if state == "running":
        return f"running since {cell(server.get('since', '?'))}"
    if state == "failing":
        reason = server.get("reason", "")
        return f"failing: {reason if isinstance(reason, str) else cell(reason)}"
    return cell(state)


def server_lines(servers: list[dict[str, Any]]) -> list[str]:
    """The readable view: a server per block, its tools indented with their annotations. A
    server's entry may lack a field or hold one of another type: what is there is shown."""
    from .printable import command as shell_command
    from .printable import continued_lines
    from .view import cell

    lines = []
    for server in servers:
        shown = server.get("server")
        about = (
            f" ({cell(shown.get('name'))} {cell(shown.get('version'))})"
            if isinstance(shown, dict) and shown
            else ""
        )
        lines.append(f"{cell(server.get('name'))}{about}: {state_line(server)}")
        command = server.get("command")
        if "url" in server:
            lines.append(f"  url: {cell(server['url'])}")
        elif isinstance(command, list) and all(isinstance(arg, str) for arg in command):
            lines.append(f"  command: {shell_command(command)}")  # (as a shell takes it back)
        elif isinstance(command, list):
            lines.append(f"  command: {' '.join(map(cell, command))}")
        else:
            lines.append(f"  command: {cell(command)}")
        tools = server.get("tools")
        for listed in tools if isinstance(tools, list) else ():
            tool = listed if isinstance(listed, dict) else {"name": listed}
            notes = tool.get("annotations")
            hints = (
                ", ".join(f"{k}={v}" for k, v in notes.items()) if isinstance(notes, dict) else ""
            )
            lines.append(f"  - {cell(tool.get('name'))}" + (f"  [{hints}]" if hints else ""))
    return continued_lines(lines)  # (a server's tools and annotations are its data)


def run(args: argparse.Namespace) -> int:
    if args.servers_command == "diff":
        from .pinning import servers_diff

        return servers_diff(args)

    if args.remote:
        from ..service import remote as client
        from ..service.access import TokenFileError
        from ..service.remoteread import RemoteError
        from .common import remote, remote_failed, usage

        if args.config or args.no_start:
            return usage("servers list", "--config and --no-start are local; --remote asks")
        try:
            servers = run_async(client.list_servers, remote(args))
        except (RemoteError, TokenFileError) as exc:
            return remote_failed("servers list", exc)
    else:
        config = load(args)
        servers = run_async(lambda: server_states(config, start=not args.no_start))
    if args.json:
        print(json.dumps(servers, indent=2))
    elif not servers:
        print("no tool servers declared ([servers.<name>] in a config file)")
    else:
        print("\n".join(server_lines(servers)))
    return EXIT_FAILED if any(s.get("state") == "failing" for s in servers) else EXIT_OK
