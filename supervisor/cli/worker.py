"""`worker --cluster nats://HOST:PORT [--concurrency N]`: runs the cluster's exec requests with
this machine's config, until SIGINT or SIGTERM (docs/cluster.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, load, run_async, say, usage

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse

#: The most runs one worker takes at once.
MAX_CONCURRENCY = 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .parser import add_config_file_arguments

    p.add_argument(
        "--cluster", required=True, metavar="URL", help="the NATS server: nats://HOST:PORT"
    )
    p.add_argument(
        "--concurrency", metavar="N", default="4", help="runs at once (1 to 1024; default 4)"
    )
    p.add_argument(
        "--lease",
        metavar="S",
        default="30",
        help="seconds a run's lease lasts unrenewed: a worker silent that long is lost"
        " (1 to 3600; default 30)",
    )
    add_config_file_arguments(p)
    from .clusterflags import add_access_arguments

    add_access_arguments(p)


def _number(flag: str, text: str, kind: type[int] | type[float], high: int) -> int | float:
    import math

    try:
        value = kind(text)
    except ValueError:
        value = -1
    if not (math.isfinite(value) and 1 <= value <= high):
        raise ValueError(f"{flag}: expected a number from 1 to {high}, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """`worker`: 0 once stopped by a signal; 1 if NATS cannot be reached or goes away for
    good; 2 for a wrong flag, config or key file, or a NATS server that refuses the
    credentials or lets anyone in (without `--nats-insecure`)."""

    from .serveflags import cluster_problem

    problems = []
    if (problem := cluster_problem(args.cluster)) is not None:
        problems.append(f"--cluster: {problem}")
    try:
        concurrency = int(_number("--concurrency", args.concurrency, int, MAX_CONCURRENCY))
        lease = float(_number("--lease", args.lease, float, 3600))
    except ValueError as exc:
        problems.append(str(exc))
    from .clusterflags import cluster_settings

    settings, found = cluster_settings(args)
    problems += found
    for problem in problems:
        usage("worker", problem)
    if problems or settings is None:
        return EXIT_USAGE
    config = load(args)
    from ..process.denied import deny_own_files
    from .clusterflags import own_secret_files

    deny_own_files(own_secret_files(args))  # (the key and credentials: never a run's)

    from ..cluster.jet import ClusterDown
    from ..cluster.worker import WorkerOptions, run_worker
    from ..core.loglines import log_to_stderr

    log_to_stderr("mcpx-hooks worker")
    options = WorkerOptions(
        url=args.cluster,
        key=settings.key,
        access=settings.access,
        concurrency=concurrency,
        lease_s=lease,
        cwd=str(Path.cwd()),
        environ=dict(os.environ),
    )

    def ready() -> None:
        print(
            f"mcpx-hooks worker: taking runs from {args.cluster} ({concurrency} at once)",
            flush=True,
        )

    failure: BaseException | None = None
    try:
        run_async(run_worker, config, options, ready)
    except* ClusterDown as group:
        failure = group
        while isinstance(failure, BaseExceptionGroup):
            failure = failure.exceptions[0]
    if failure is not None:
        say(f"mcpx-hooks worker: {failure}")
        # 1: NATS cannot be reached now; 2: it refused who we are, or lets anyone in.
        return int(getattr(failure, "exit_code", EXIT_FAILED))
    print("mcpx-hooks worker: stopped", file=sys.stderr)
    return EXIT_OK
