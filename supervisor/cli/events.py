"""`events`: a server's event bus followed until it closes or Ctrl-C, one event a line."""

from __future__ import annotations

import json

from .common import EXIT_OK, remote, remote_failed, run_async
from .parser import add_token_file_argument
from .printable import printable

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from typing import Any


def add_arguments(ev: argparse.ArgumentParser) -> None:
    from ..service.remote import DEFAULT_URL

    ev.add_argument("--remote", metavar="URL", default=DEFAULT_URL, help=f"default {DEFAULT_URL}")
    ev.add_argument("--kinds", metavar="K", help="kind prefixes, comma-separated (hook,run)")
    ev.add_argument("--since", type=int, metavar="N", help="replay the retained events from seq N")
    ev.add_argument("--json", action="store_true", help="one event per line (NDJSON)")
    add_token_file_argument(ev)


def run(args: argparse.Namespace) -> int:
    from ..service import remote as client
    from ..service.access import TokenFileError
    from ..service.remoteread import RemoteError

    replaying: list[int] = [] if args.since is None else [args.since]

    def show(event: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(event), flush=True)
        else:  # (only the first message can be the replay's gap)
            print(printable(client.event_line(event, *replaying)), flush=True)
        replaying.clear()

    try:
        run_async(client.follow_events, remote(args), args.kinds, args.since, show)
    except (RemoteError, TokenFileError) as exc:
        return remote_failed("events", exc)
    return EXIT_OK
