"""`exec`: one script run with its hooks, in process or on a server (`--remote`), its frames
printed as they happen; the exit code says how it ended (`exit_code`)."""

from __future__ import annotations

import argparse
import json
import sys

from . import answering
from .common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Usage,
    outcome_exit_code,
    remote,
    remote_failed,
    run_async,
    say,
)
from .execrequest import local_request, remote_request, run_argv, source_flags, source_lines
from .parser import add_config_arguments, add_token_file_argument

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from ..core.hooks import Config
    from ..run.journal import RunJournal
    from ..run.scriptrun import RunRequest
    from ..service.answering import AskWatcher, Responder
    from ..service.remoteread import RemoteError
    from .execview import Output


def add_arguments(x: argparse.ArgumentParser) -> None:
    from ..core.effects import Effect
    from ..core.hooks import DEFAULT_RUN_SANDBOX, Profile

    add_config_arguments(x)
    x.add_argument(
        "--hook",
        dest="hooks",
        action="append",
        default=[],
        metavar="JSON",
        help="a hook for this run (repeatable)",
    )
    for flag, phase in source_flags().items():
        x.add_argument(
            flag,
            dest=f"src_{phase}",
            action="append",
            default=[],
            metavar="SRC",
            help=f"a Python line for the {phase} source phase (repeatable)",
        )
    x.add_argument(
        "--autonomy",
        choices=[e.word for e in Effect],
        help="the caller's hooks.autonomy (can only lower the config's)",
    )
    x.add_argument(
        "--sandbox",
        choices=[p.value for p in Profile],
        help="the script's sandbox profile, never its hooks' (default: [script] sandbox,"
        f" else {DEFAULT_RUN_SANDBOX.value})",
    )
    x.add_argument(
        "--env",
        dest="env",
        action="append",
        default=[],
        metavar="K=V",
        help="a variable for the script, a literal value (repeatable)",
    )
    x.add_argument(
        "--pass-env",
        dest="pass_env",
        action="append",
        default=[],
        metavar="NAME",
        help="copy variables (a name or a glob) from this environment to the script (repeatable)",
    )
    x.add_argument(
        "--secret",
        dest="secrets",
        action="append",
        default=[],
        metavar="NAME",
        help="copy a variable to the script as a secret: its value is redacted as"
        " [secret NAME] in every frame and event; unset, the run fails (repeatable)",
    )
    x.add_argument(
        "--network",
        action="append",
        default=[],
        metavar="HOST",
        help="a host (glob, optional :PORT) the script reaches through the proxy, under strict"
        " or workspace (repeatable; within [script] network when the config sets it;"
        " docs/egress.md)",
    )
    x.add_argument(
        "--placeholder",
        dest="placeholders",
        action="append",
        default=[],
        metavar="K=V",
        help="a value for the prompt hooks' placeholder @K (a name of their vars), sent to the"
        " model as data (repeatable)",
    )
    x.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="NAME",
        help="leave the hook NAME out of this run (repeatable; a locked hook cannot be left"
        " out; also MCPX_HOOKS_SKIP=a,b)",
    )
    x.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the hooks named (repeatable; every locked hook must be named too)",
    )
    x.add_argument(
        "--files-from",
        metavar="FILE",
        help="the changed files when.files matches, one path per line from the top of the"
        " repository (- for stdin), instead of asking git",
    )
    x.add_argument("--timeout", type=float, metavar="S", help="the script's timeout, seconds")
    x.add_argument("--input", metavar="JSON", help="the run's input, a JSON value")
    x.add_argument("--stdin", metavar="FILE", help="the script's stdin (- for this one's)")
    x.add_argument("--remote", metavar="URL", help="run on a server (ws://…)")
    x.add_argument(
        "--explain",
        action="store_true",
        help="print which hooks would run, in order, and why each other will not; run nothing",
    )
    x.add_argument(
        "--tool",
        metavar="SERVER.TOOL",
        help="with --explain: explain the call and server.start hooks for a call the script"
        " would make to this tool",
    )
    answering.add_arguments(x)
    x.add_argument(
        "--artifacts",
        metavar="DIR",
        help="copy the run's artifacts into DIR when it ends (made if missing)",
    )
    add_token_file_argument(x)
    what = x.add_mutually_exclusive_group()
    what.add_argument("--python", metavar="FILE", help="a Python script")
    what.add_argument("-c", dest="code", metavar="CODE", help="Python code")
    x.add_argument("argv", nargs=argparse.REMAINDER, help="-- ARGV…")


def run(args: argparse.Namespace) -> int:
    if args.explain:
        return _explain(args)
    if args.tool is not None:
        say("mcpx-hooks exec: --tool explains a call's hooks; it goes with --explain")
        return EXIT_USAGE
    if args.artifacts:
        from .artifacts import directory_problem

        if problem := directory_problem(args.artifacts):
            say(f"mcpx-hooks exec: {problem}")
            return EXIT_USAGE
    if args.remote:
        return _run_remote(args)
    from ..process import prestarted

    with prestarted():  # the spawner's start overlaps the config's loading and the imports
        return _run_local(args)


def _run_local(args: argparse.Namespace) -> int:
    try:
        config, request = local_request(args)
    except (Usage, OSError, json.JSONDecodeError) as exc:
        say(f"mcpx-hooks exec: {exc}")
        return EXIT_USAGE

    frames, copied = run_async(
        _run_here, config, request, args.json, answering.responder(args), args.artifacts
    )
    if args.artifacts is None:
        return exit_code(frames)
    from .artifacts import with_artifacts

    return with_artifacts(exit_code(frames), copied)


def _not_ended(run_id: str, url: str, exc: RemoteError) -> str:
    """What became of a run begun whose socket ended before its outcome came."""
    show = f"mcpx-hooks runs show {run_id} --remote {url} (or another gateway) says how it ended"
    if exc.shutting_down:  # (a serve ends its runs before it closes: a gateway's run is on)
        return (
            f"run {run_id} had not ended when the server shut down: a cluster gateway that"
            f" could not cancel it on its worker (its worker or NATS did not answer) leaves it"
            f" to finish there: {show}"
        )
    return (
        f"run {run_id} had not ended; a serve cancels it once it finds this connection gone"
        " (exec asks it to), within a minute; a cluster's worker runs it on to its end when"
        f" it was the gateway that was lost: {show}"
    )


def _explain(args: argparse.Namespace) -> int:
    from . import explain

    try:
        if args.remote:
            raise Usage("--explain shows what a run here would fire; it takes no --remote")
        return explain.run(args, run_argv(args), source_lines(args))
    except Usage as exc:
        say(f"mcpx-hooks exec: {exc}")
        return EXIT_USAGE


def exit_code(frames: Sequence[Mapping[str, Any]]) -> int:
    """`exec`'s exit code for a run's frames (`common.outcome_exit_code`)."""
    return outcome_exit_code(_outcome(frames))


def _outcome(frames: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The frame that says how the run ended (its `result` or `error`), if it came."""
    from ..core.frames import FrameType

    return next((f for f in frames if f.get("type") in (FrameType.RESULT, FrameType.ERROR)), None)


async def _run_here(
    config: Config,
    request: RunRequest,
    as_json: bool,
    responder: Responder | None,
    artifacts: str | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Runs in process, printing each frame as it happens, `responder` answering its asks.
    The first Ctrl-C (or SIGTERM), or stdout closing, cancels the run (its suffix hooks and
    `end` still come); a second stops printing and says which suffix hooks it still waits
    for; a third kills them (`execstop.py`). After `end`, observe hooks get
    `[observe] drainMs`; those that failed or were cut short are said on stderr. With
    `artifacts`, the run's artifacts are copied there; whether all of them were."""
    from functools import partial

    import trio

    from ..run.runtime import open_runtime
    from ..service.answering import AskWatcher
    from .execstop import Stopping
    from .execview import Output, observer_lines, serve_still_running

    copied = True
    async with open_runtime(config) as runtime, trio.open_nursery() as signals:
        run = runtime.new_run(request)
        out = Output(on_closed=run.cancel)
        stopping = Stopping(run, config, say)
        await signals.start(stopping.serve, runtime.bus)
        with stopping.stop:  # (the second Ctrl-C cancels it: the run, and its printing)
            async with trio.open_nursery() as nursery:
                if not as_json:
                    await nursery.start(
                        partial(serve_still_running, asking=out.view.waiting_for_answer),
                        runtime.bus,
                        request.run_id,
                        out.line,
                    )
                async with trio.open_nursery() as running, trio.open_nursery() as asking:
                    running.start_soon(runtime.execute, run)
                    watcher = AskWatcher(asking, responder, answering.local(run))
                    if as_json:
                        await _print_encoded(run.journal, out, watcher if responder else None)
                    else:
                        see = watcher.see if responder else None
                        async for batch in run.journal.follow(0).encoded():
                            out.readable(batch, see)
                    asking.cancel_scope.cancel()  # nothing is left to answer once the run has ended
                if artifacts is not None:  # while the runtime, and so its artifact store, is up
                    from .artifacts import copy_local

                    copied = await trio.to_thread.run_sync(copy_local, run.journal, artifacts)
                nursery.cancel_scope.cancel()
        signals.cancel_scope.cancel()
    for line in observer_lines(runtime.observers, config.observe_drain_ms):
        print(line, file=sys.stderr)
    if runtime.recorder is not None and request.run_id in runtime.recorder.unsaid:
        print(f"mcpx-hooks exec: {runtime.recorder.unsaid[request.run_id]}", file=sys.stderr)
    outcome = run.journal.outcome
    return ([] if outcome is None else [outcome]), copied


async def _print_encoded(journal: RunJournal, out: Output, watcher: AskWatcher | None) -> None:
    """`exec --json`: the journal's lines as they are, a batch at a time; the frames an ask
    watcher looks at (all but output) decoded for it, if there is one (a responder)."""
    from ..core.frames import STREAM_ENDS
    from ..core.jsontext import wire_loads

    output_ends = tuple(STREAM_ENDS.values())
    async for batch in journal.follow(0).encoded():
        if watcher is not None:
            for line in batch:
                # An output frame's line ends with its type (`RunJournal.offer_output`): only
                # the outermost object can close right after it.
                if not line.endswith(output_ends):
                    watcher.see(wire_loads(line))  # (first: a prompt it settles ends its line)
        out.encoded(batch)


def _run_remote(args: argparse.Namespace) -> int:
    from functools import partial

    from ..service import remote as client
    from ..service.access import TokenFileError
    from ..service.remoteread import RemoteError
    from .execstop import RemoteStopping
    from .execview import Output, OutputClosed, raise_closed
    from .remoteview import exec_remote_viewed

    try:
        target = remote(args)
        request = remote_request(args, lambda: run_async(client.config_files, target))
    except (Usage, OSError, json.JSONDecodeError, TokenFileError) as exc:
        say(f"mcpx-hooks exec: {exc}")
        return EXIT_USAGE
    except RemoteError as exc:
        return remote_failed("exec", exc)
    out = Output(on_closed=raise_closed)
    stopping = RemoteStopping(say)
    stopping.url = target.url
    closed = False
    try:
        try:
            viewed = partial(exec_remote_viewed, stopping=stopping)
            frames = run_async(viewed, target, request, out, args.json, answering.responder(args))
        except RemoteError as exc:
            failed = remote_failed("exec", exc)
            if stopping.run_id:  # (begun, and its socket lost: not the run, maybe)
                say(f"mcpx-hooks exec: {_not_ended(stopping.run_id, target.url, exc)}")
            return failed
    except* OutputClosed:
        closed = True  # the request asked cancelOnDisconnect: leaving cancels the run
    if closed or (stopping.left and _outcome(frames) is None):
        return EXIT_INTERRUPTED
    if _outcome(frames) is None:
        print("mcpx-hooks exec: the stream ended before the run's outcome", file=sys.stderr)
        return EXIT_FAILED
    if args.artifacts:
        from .artifacts import copy_remote, with_artifacts

        copied = run_async(copy_remote, target, frames, args.artifacts)
        return with_artifacts(exit_code(frames), copied)
    return exit_code(frames)
