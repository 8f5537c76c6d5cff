"""`serve`: the service in the foreground until SIGINT or SIGTERM. A token file already there
is kept (`--new-token` replaces it, once the socket is bound); where there is none, a new one
is put there before the bind, never over one another `serve` put there meanwhile (that one is
served), and taken back if the bind fails. It stays when the server stops, so clients keep
working across a restart."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.errors import HooksError
from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, load, run_async, say, usage
from .serveflags import LIMIT_FLAGS, serve_problems

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse

    from ..service.options import Listening


class _TokenNotWritten(HooksError):
    """The token file could not be put in place once listening: `serve` stops."""


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _console_line(at: Listening, token: str | None) -> str:
    """Where the browser console is. The address with its token only on a terminal (a person
    reading it): stdout sent to a file or a log says how to open it instead."""
    page = "http" + at.url.removeprefix("ws") + "/"
    if token is None:
        return f"console {page}"
    if sys.stdout.isatty():
        return f"console {page}?token={token}"
    return f"console {page} (mcpx-hooks console --open opens it with the token)"


def _cluster_down() -> type[Exception]:
    """The cluster's refusal, when the cluster is loaded (else one nothing raises)."""
    cluster = sys.modules.get("mcpx_hooks.supervisor.cluster.jet")
    return cluster.ClusterDown if cluster is not None else _TokenNotWritten


def run(args: argparse.Namespace) -> int:
    """`serve`. Nothing is touched before the flags and the config are known good, and a
    token file there only once the socket is bound: a `serve` that cannot listen (the port
    is another server's) exits 2 and leaves that server's token file as it was. A token file
    that cannot be kept (another user's, open to others) is refused: exit 2."""
    import gc

    import attrs

    from ..config.statefiles import checkout_holding, denied_said, exposed
    from ..process.denied import deny_own_files
    from ..service.access import (
        TokenFileError,
        create_token_file,
        default_token_path,
        first_token,
        kept_token,
        remove_token_file,
    )
    from ..service.options import Limits, ServiceOptions
    from ..service.server import run_service
    from ..service.wire import DEFAULT_PORT

    problems = serve_problems(args)
    for problem in problems:
        usage("serve", problem)
    if problems:
        return EXIT_USAGE
    config = load(args)
    port: int = DEFAULT_PORT if args.port is None else args.port
    address = f"[{args.host}]:{port}" if ":" in args.host else f"{args.host}:{port}"
    token: str | None = None
    token_path: Path | None = None
    # The token waits in a private file beside its place, to be renamed there once the
    # socket is bound (the same rename `create_token_file` makes: never seen partial).
    pending: Path | None = None
    if not args.no_auth:
        token_path = Path(args.token_file) if args.token_file else default_token_path(os.environ)
        # (One found in the checkout `serve` runs in may have come with it: anyone who read
        # the repository would know it. Never kept there: a new one at each start.)
        shipped = not args.token_file and checkout_holding(token_path.parent, ".")
        # (Nor one in a state directory where another user could have put it, or could
        # replace it. A --token-file is where its owner chose, /tmp's sticky bit and all.)
        if not args.token_file and (holder := exposed(token_path.parent)) is not None:
            return usage(
                "serve",
                f"the token file {token_path} is in {holder}, so another user could have put it"
                " there or could replace it: keep it in a directory of yours alone"
                " (XDG_STATE_HOME, or --token-file)",
            )
        try:
            # One already there is kept: clients and open consoles go on working.
            token = None if args.new_token or shipped else kept_token(token_path)
        except TokenFileError as exc:
            return usage("serve", str(exc))
    placed = False  # (a first token put in place before the bind: gone if it fails)
    if token_path is not None and token is None:
        pending = token_path.with_name(f".{token_path.name}.{os.getpid()}.pending")
        try:
            token = fresh = create_token_file(pending)
            if not (args.new_token or shipped):
                # None was there. Two `serve`s started together on one state directory each
                # found none: the first to put its token there is served by both.
                token, placed = first_token(pending, token_path, fresh)
        except OSError as exc:
            said = denied_said(exc, token_path.parent)
            return usage("serve", f"cannot write the token file {token_path}: {said}")
        except TokenFileError as exc:
            remove_token_file(pending, fresh)
            return usage("serve", str(exc))
        if not os.path.lexists(pending):
            pending = None
    given = {b.field: getattr(args, b.field) for b in LIMIT_FLAGS}
    options = ServiceOptions(
        host=args.host,
        port=port,
        token=token,
        allow_origins=tuple(args.allow_origin),
        limits=attrs.evolve(Limits(), **{k: v for k, v in given.items() if v is not None}),
        cwd=str(Path.cwd()),
        environ=dict(os.environ),
    )
    listening: list[Listening] = []

    def ready(at: Listening) -> None:
        if pending is not None and token_path is not None:
            try:
                os.replace(pending, token_path)
            except OSError as exc:
                raise _TokenNotWritten(f"cannot write the token file {token_path}: {exc}") from exc
        listening.append(at)
        kept = " (kept)" if pending is None and not placed else ""
        access = f"token file {token_path}{kept}" if token_path else "no auth (--no-auth)"
        print(f"mcpx-hooks serve: listening on {at.url}; {access}", flush=True)
        print(f"mcpx-hooks serve: {_console_line(at, token)}", flush=True)
        # Everything allocated so far lives as long as the server: keep it out of the
        # collector's way (about 1.3x frames/s at 500 clients).
        gc.collect()
        gc.freeze()

    from ..core.loglines import log_to_stderr

    log_to_stderr("mcpx-hooks serve")
    if token_path is not None:  # the server's own: no sandbox reads it, wherever it lies
        deny_own_files([str(token_path), str(pending or token_path)])
    if args.cluster is not None:  # the cluster's key and credentials: the gateway's own
        from .clusterflags import own_secret_files

        deny_own_files(own_secret_files(args))
    failure: str | None = None
    code = EXIT_OK
    try:
        if args.cluster is not None:  # a gateway: nats-py is imported only then
            from ..cluster.gateway import run_gateway

            run_async(run_gateway, config, options, args.cluster_settings, ready)
        else:
            run_async(run_service, config, options, ready)
    except* _TokenNotWritten as group:
        failure, code = str(_innermost(group)), EXIT_USAGE
    except* _cluster_down() as group:
        # 1: NATS cannot be reached now; 2: it refused who we are, or lets anyone in.
        leaf = _innermost(group)
        failure, code = str(leaf), getattr(leaf, "exit_code", EXIT_FAILED)
    except* OSError as group:
        leaf = _innermost(group)
        reason = getattr(leaf, "strerror", None) or str(leaf)
        if listening:
            failure, code = f"stopped: {reason}", EXIT_FAILED
        else:  # bind or resolve: the address in use, not this machine's, no permission
            failure, code = f"cannot listen on {address}: {reason}", EXIT_USAGE
    finally:
        # The token file stays for the next start; only a pending one (never renamed into
        # place: the socket was not bound) goes, and only while it holds this token.
        if token is not None and pending is not None:
            remove_token_file(pending, token)
        if token is not None and token_path is not None and placed and not listening:
            remove_token_file(token_path, token)
    if failure is not None:
        say(f"mcpx-hooks serve: {failure}")
        return code
    print("mcpx-hooks serve: stopped", file=sys.stderr)
    return EXIT_OK
