"""`runs list` and `runs show RUN_ID`: the runs kept, and one run's frames (`runs search`
is `runsearch.py`'s, `runs verify` `runverify.py`'s).

By default both read the run history on this machine (`[history] path` in the config in
force), which `serve`, `exec` and `mcp` record to: the frames are the lines that were sent.
`--remote URL` asks a server instead, with the token as every remote command finds it:
`runs list` reads `GET /v1/runs`; `runs show` replays the run's frames from its first (the
WebSocket `/v1/runs/{runId}`), following a run still in progress to its end.
"""

from __future__ import annotations

import json

from ..core.places import shown_file
from .common import EXIT_OK, remote, remote_failed, run_async, run_id, say
from .parser import add_config_file_arguments, add_token_file_argument

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping
    from typing import Any


def add_arguments(runs: argparse.ArgumentParser) -> None:
    from ..service.remote import DEFAULT_URL

    sub = runs.add_subparsers(dest="runs_command", required=True, metavar="list|show|search|verify")
    listing = sub.add_parser(
        "list",
        help="the runs this machine's history holds (or a server's, --remote), newest first",
        epilog="example: mcpx-hooks runs list --remote ws://127.0.0.1:8765 --json",
    )
    show = sub.add_parser(
        "show",
        help="one stored run's frames, from its start (here, or a server's with --remote)",
        epilog="example: mcpx-hooks runs show 9d81129207f7fb12",
    )
    show.add_argument(
        "run_id", type=run_id, metavar="RUN_ID", help="the run's id (runs list shows them)"
    )
    show.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="say under each hook what its process used (CPU time, memory at most)",
    )
    search = sub.add_parser(
        "search",
        help="the stored frames that hold some words or phrases, newest first",
    )
    from .runsearch import add_arguments as add_search_arguments

    add_search_arguments(search)
    verify = sub.add_parser(
        "verify",
        help="check a run's frames against the hash chain their end frame holds",
        epilog="example: mcpx-hooks runs verify run.ndjson   (or a stored run's id)",
    )
    verify.add_argument(
        "target",
        type=run_id,
        metavar="FILE|RUN_ID",
        help="a file of a run's frames, one JSON line each (runs show --json), or a stored"
        " run's id",
    )
    add_config_file_arguments(verify, json=False)
    for p in (listing, show, search):
        p.add_argument(
            "--remote",
            metavar="URL",
            help=f"ask this server (e.g. {DEFAULT_URL}) rather than read the run history on this"
            " machine",
        )
        add_config_file_arguments(p, json=True)
        add_token_file_argument(p)


def run(args: argparse.Namespace) -> int:
    from ..service.access import TokenFileError
    from ..service.remoteread import RemoteError

    command = f"runs {args.runs_command}"
    if args.runs_command == "verify":
        from .runverify import verify

        return verify(args, command)
    if args.runs_command == "search":
        from .runsearch import search

        return search(args, command)
    if args.remote is None:
        return _local(args, command)
    try:
        target = remote(args)
        if args.runs_command == "list":
            runs = run_async(_list, target)
            print(json.dumps(runs) if args.json else "\n".join(table(runs, target.url)))
        else:
            run_async(_show, target, args.run_id, args.json, args.verbose)
    except (RemoteError, TokenFileError) as exc:
        return remote_failed(command, exc)
    return EXIT_OK


async def _list(target: Any) -> list[dict[str, Any]]:
    from ..service.httpclient import get_json
    from ..service.remoteread import RemoteError

    runs = await get_json(target, "/v1/runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise RemoteError("GET /v1/runs: the server's answer is not a list of runs")
    return runs


async def _show(target: Any, run_id: str, as_json: bool, verbose: bool) -> None:
    import contextlib
    from urllib.parse import quote

    from ..core.jsontext import dumps
    from ..service.remote import watched_remote
    from ..service.remoteread import messages
    from .runview import RunView

    # As `exec` shows a run: the wait for an answer, how it would exit. A run still going is
    # followed to its end, on a connection watched as `exec --remote`'s is.
    view = RunView(verbose=verbose)
    path = f"/v1/runs/{quote(run_id, safe='')}"
    async with (
        watched_remote(target, path, {"from": 0}) as ws,
        contextlib.aclosing(messages(ws, frames=True)) as frames,
    ):
        async for frame in frames:
            # `--json`: each line as the server sent it (compact, in its key order, as
            # `exec --json` prints them), so `runs verify` finds the chain its `end` holds.
            shown = dumps(frame).decode() if as_json else "\n".join(view.lines(frame))
            print(shown, flush=True)


def _local(args: argparse.Namespace, command: str) -> int:
    """`runs list` / `runs show` from the run history on this machine."""
    import sys

    from ..history.faults import HistoryFault
    from ..history.store import History
    from ..run import as_sealed, orphaned
    from .common import EXIT_FAILED
    from .runverify import history_of, no_history
    from .runview import RunView

    config, path = history_of(args)
    where = f"the run history {shown_file(str(path))}"
    if not config.history_enabled:
        print(f"mcpx-hooks {command}: [history] enabled = false: no run is kept on disk"
              " (a server's runs: --remote URL)", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    try:
        history = History.open(path, writes=False)
    except HistoryFault as exc:
        if args.runs_command == "list" and no_history(path):
            print(json.dumps([]) if args.json else f"no runs are kept in {where}")
            return EXIT_OK
        say(f"mcpx-hooks {command}: {exc}")
        return EXIT_FAILED
    try:
        if args.runs_command == "list":
            # (One more: are there older? A run a killed process left lists as its seal will.)
            runs = as_sealed(history, lambda: history.summaries(config.runs_retain + 1))
            shown = runs[: config.runs_retain]
            print(json.dumps(shown) if args.json else "\n".join(table(shown, where)))
            if len(runs) > len(shown):
                say(f"mcpx-hooks {command}: these are the newest {config.runs_retain} runs"
                    " ([runs] retain); older ones are kept too: runs show RUN_ID shows one,"
                    " runs search finds them")  # fmt: skip
            return EXIT_OK
        stored = history.lines(args.run_id)
        orphan = stored is not None and not stored[1] and orphaned(history, _running(args))
    except HistoryFault as exc:
        say(f"mcpx-hooks {command}: {exc}")
        return EXIT_FAILED
    finally:
        history.close()
    if stored is None:
        print(f"mcpx-hooks {command}: no run {args.run_id!r} is kept in {where}", file=sys.stderr)
        return EXIT_FAILED
    view = RunView(verbose=args.verbose)  # as `exec` and `runs show --remote` show a run
    for line in stored[0]:
        print(line.decode() if args.json else "\n".join(view.lines(json.loads(line))))
    if orphan:
        say(f"mcpx-hooks {command}: run {args.run_id} has not ended, and the process that ran"
            " it is gone (killed, or its machine went down): these are its frames stored so"
            " far; the next mcpx-hooks that writes this run history (a serve, an exec) ends it"
            " there")  # fmt: skip
    elif not stored[1]:  # else a view that stops reads as a run that ended there
        said = "these are its frames stored so far (runs show RUN_ID --remote URL follows it"
        say(f"mcpx-hooks {command}: run {args.run_id} has not ended: {said} on the server"
            " that runs it)")  # fmt: skip
    return EXIT_OK


def _running(args: argparse.Namespace) -> dict[str, Any]:
    """The summary of the stored run `runs show` shows, which has no `end` stored."""
    return {"runId": args.run_id, "status": "running"}


def table(runs: list[dict[str, Any]], url: str) -> list[str]:
    """The run list for a person: one line a run, newest first."""
    if not runs:
        return [
            f"no runs are kept in {url}"
            if url.startswith("the ")
            else f"no runs are retained on {url}"
        ]
    return [_line(r) for r in runs]


def _line(run: Mapping[str, Any]) -> str:
    """One run on one line: its argv as a shell would take it back (`printable.command`),
    every other field escaped (`printable.printable`)."""
    from .printable import command, printable

    code = run.get("exitCode")
    took = run.get("durationMs")
    argv = run.get("argv")
    shown = command(argv) if isinstance(argv, list) else "?"
    if isinstance(cut := run.get("argvCut"), int) and cut > 0:  # (`runs show` has it whole)
        shown += f" … ({cut} argument(s) cut in listings; runs show has them whole)"
    fields = (
        str(run.get("runId")),
        str(run.get("startedAt") or "-"),
        f"{run.get('status')}",
        "exit -" if code is None else f"exit {code}",
        ("-" if run.get("status") == "running" else "duration unknown")
        if took is None
        else f"{took} ms",
    )
    return "  ".join((*map(printable, fields), shown))
