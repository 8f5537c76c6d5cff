"""`runs search QUERY`: the stored frames that hold some words or "quoted phrases".

By default it reads the run history on this machine (`[history] path` in the config in
force); `--remote URL` asks a server's `GET /v1/search` instead, with the token as every
remote command finds it. Either way each match is `{runId, seq, type, snippet}`, newest run
first: `--json` prints them as one JSON list, else one line each (the run, the frame's seq
and type, the snippet), and `runs show RUN_ID` shows the run they are in. An empty or blank
query is a usage error (exit 2): it asks for nothing, where one with no letter or digit
(`*`, a stray quote) is text that matches nothing.
"""

from __future__ import annotations

import json
import sys

from .common import EXIT_FAILED, EXIT_OK, remote, remote_failed, run_async, run_id, say, usage

#: What an empty or blank query is told (exit 2): it asks for nothing.
NOTHING_TO_FIND = 'nothing to search for: give words or "quoted phrases" to find'

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from ..history.store import History


def add_arguments(search: argparse.ArgumentParser) -> None:
    """The sub-command's own arguments (`runs.py` adds `--remote`, `--config`, `--json`)."""
    from ..history.search import MATCHES, MAX_MATCHES

    search.add_argument(
        "query",
        metavar="QUERY",
        help='words and "quoted phrases" to find, all of them (never a search syntax: any'
        " text is searched as it is)",
    )
    search.add_argument("--run", type=run_id, metavar="ID", help="search this run only")
    search.add_argument(
        "--limit",
        type=_limit,
        default=MATCHES,
        metavar="N",
        help=f"the most matches shown (default {MATCHES}; at most {MAX_MATCHES})",
    )


def _limit(text: str) -> int:
    import argparse

    from ..history.search import MAX_MATCHES

    if not (text.isascii() and text.isdecimal() and int(text[:12]) > 0):
        raise argparse.ArgumentTypeError(f"expected a whole number from 1, got {text!r}")
    return min(int(text[:12]), MAX_MATCHES)  # (its first 12 digits: past the most either way)


def search(args: argparse.Namespace, command: str) -> int:
    from ..service.access import TokenFileError
    from ..service.remoteread import RemoteError

    if not args.query.strip():  # (`*` or a stray quote is text, and matches nothing)
        return usage(command, NOTHING_TO_FIND)
    if args.remote is None:
        return _local(args, command)
    try:
        found = run_async(_remote, remote(args), args.query, args.run, args.limit)
    except (RemoteError, TokenFileError) as exc:
        return remote_failed(command, exc)
    _print(found, args.json)
    return EXIT_OK


async def _remote(target: Any, query: str, run_id: str | None, limit: int) -> list[dict[str, Any]]:
    from ..service.httpclient import get_json
    from ..service.remoteread import RemoteError

    asked = {"q": query, "run": run_id, "limit": limit}
    found = await get_json(target, "/v1/search", asked)
    if not isinstance(found, list) or not all(isinstance(m, dict) for m in found):
        raise RemoteError("GET /v1/search: the server's answer is not a list of matches")
    return found


def _local(args: argparse.Namespace, command: str) -> int:
    from ..core.places import shown_file
    from ..history.faults import HistoryFault
    from .runverify import history_of, no_history

    config, path = history_of(args)
    # (`runs show`'s words: a mistyped --run finds nothing, and is not "no frame matches")
    where = f"the run history {shown_file(str(path))}"
    unknown = f"mcpx-hooks {command}: no run {args.run!r} is kept in {where}"
    if not config.history_enabled:
        print(f"mcpx-hooks {command}: [history] enabled = false: no run is kept on disk"
              " (a server's runs: --remote URL)", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    if no_history(path):
        if args.run is not None:
            say(unknown)
            return EXIT_FAILED
        _print([], args.json)
        return EXIT_OK
    try:
        history, unwritable = _opened(path)
        try:
            found = _searched(history, args, command, unwritable)
            kept = bool(found) or args.run is None or history.extent(args.run) is not None
        finally:
            history.close()
    except HistoryFault as exc:
        say(f"mcpx-hooks {command}: {exc}")
        return EXIT_FAILED
    if not kept:
        say(unknown)
        return EXIT_FAILED
    _print(found, args.json)
    return EXIT_OK


def _searched(
    history: History, args: argparse.Namespace, command: str, unwritable: Exception | None
) -> list[dict[str, Any]]:
    """The matches, the index first brought up to date; when the disk takes no more writes
    (full; `unwritable` says why it could not be opened to write), in what is indexed
    already, and stderr says that lines stored since are not searched."""
    from ..history.faults import HistoryFault

    try:
        found = history.search(args.query, run_id=args.run, limit=args.limit)
    except HistoryFault as exc:
        if not history.writes:
            raise
        found = history.search(args.query, run_id=args.run, limit=args.limit, index=False)
        unwritable = exc
    else:
        if unwritable is None or not history.lags():
            return found
    say(f"mcpx-hooks {command}: {unwritable}; searched what was indexed before, so the lines"
        " stored since are not searched")  # fmt: skip
    return found


def _opened(path: Path) -> tuple[History, Exception | None]:
    """The history to search: to write where it can be, so that the search first indexes
    what the processes that recorded it left behind; else to read (what is indexed), with
    the reason it could not be written."""
    from ..history.faults import HistoryFault
    from ..history.store import History

    try:
        return History.open(path), None
    except HistoryFault as exc:
        return History.open(path, writes=False), exc


def _print(found: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(found))
    elif not found:
        print("no stored frame matches")
    else:
        print("\n".join(line(m) for m in found))


def line(match: Mapping[str, Any]) -> str:
    """One match for a person: its run, `@seq`, the frame's type, the snippet. The snippet's
    tabs are printed as tabs, as `runs show` prints the line (a tab only moves the cursor on,
    in the line); its other control characters, and the rest's, are escaped."""
    from .printable import printable

    where = printable(f"{match.get('runId')}@{match.get('seq')}  {match.get('type')}")
    snippet = "\t".join(printable(part) for part in str(match.get("snippet")).split("\t"))
    return f"{where}  {snippet}{_piece(match)}"


def _piece(match: Mapping[str, Any]) -> str:
    """What a match in a piece of a line over 64 KiB adds: which piece, and which frames of
    its stream hold the line (joined, they are the line as written)."""
    from ..core.frames import MAX_OUTPUT_LINE

    line = match.get("line")
    if not isinstance(line, dict) or not all(
        isinstance(line.get(k), int) for k in ("from", "to", "piece", "pieces")
    ):
        return ""
    return (
        f"  [piece {line['piece']} of {line['pieces']} of a line over"
        f" {MAX_OUTPUT_LINE // 1024} KiB: the {match.get('type')} frames {line['from']} to"
        f" {line['to']} joined]"
    )
