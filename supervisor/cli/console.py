"""`console`: the browser console's address for a server, with the token that lets a browser
in, once the server has answered with that token (`GET /v1/runs`: it is up, and the token is
its own). `--open` opens the address in this machine's browser (Python's `webbrowser`, so
`$BROWSER` chooses it).

The token is found as every remote command finds it (`--token-file`, `$MCPX_HOOKS_TOKEN`, the
file `serve` writes) and printed in the address, for the person who asked for it: the browser
trades it for a cookie on its first visit, and the address bar loses it.
"""

from __future__ import annotations

import sys

from .common import EXIT_FAILED, EXIT_OK, remote, remote_failed, run_async
from .parser import add_token_file_argument

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..service.remote import DEFAULT_URL

    p.add_argument(
        "--remote", metavar="URL", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})"
    )
    p.add_argument("--open", action="store_true", help="open the console in this machine's browser")
    add_token_file_argument(p)
    p.epilog = "example: mcpx-hooks console --open"


def page_address(url: str, token: str | None) -> str:
    """The console's address for a server's `ws://` or `wss://` URL, with `?token=` if any."""
    from urllib.parse import quote, urlsplit, urlunsplit

    parts = urlsplit(url)
    scheme = "https" if parts.scheme == "wss" else "http"
    query = f"token={quote(token, safe='')}" if token is not None else ""
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/", query, ""))


def run(args: argparse.Namespace) -> int:
    from ..service.access import TokenFileError
    from ..service.httpclient import get_json
    from ..service.remoteread import RemoteError

    try:
        target = remote(args)
        target.endpoint("/")  # a bad --remote is said before anything is asked
        run_async(get_json, target, "/v1/runs")
    except (RemoteError, TokenFileError) as exc:
        return remote_failed("console", exc)
    address = page_address(target.url, target.token)
    print(address, flush=True)
    if args.open:
        import webbrowser

        if not webbrowser.open(address):
            print(
                "mcpx-hooks console: no browser could be started here; open the address above",
                file=sys.stderr,
            )
            return EXIT_FAILED
    return EXIT_OK
