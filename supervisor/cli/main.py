"""`mcpx-hooks`: the command line's entry point.

Exit codes: 0 success; 1 the thing run failed (`hook test`: the hook's status is not `ok`),
or the output could not be written (`_output_unwritable`);
2 bad input (a config error, a usage error, `validate` found problems); 3 refused by a hook.

The commands are in `parser.COMMANDS`, each in its own module, imported only when it is the
command given. `--version` and `--help` load neither trio, attrs, jsonschema nor the WebSocket
stack; `hook test` loads no server (tests/test_cli.py holds both).
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys

from ..config import codecache
from .common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, quiet_start
from .parser import NO_THREAD_CHECK, command_runner, parser, version

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None, *, own_log: bool = False) -> int:
    """The command `argv` (else the process's command line) says; `own_log`: the process is
    this command, and what a library logs (the OpenTelemetry exporter's failures, the MCP
    SDK's) goes to stderr as the command's own lines (`core/loglines.py`), not through
    `logging`'s last-resort handler, which writes a collector's or a server's words as they
    are."""
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # The usual probe, answered as the parser would, without building it (~10 ms).
        print(f"mcpx-hooks {version()}")
        return EXIT_OK
    given = list(sys.argv[1:] if argv is None else argv)
    # Text that is not UTF-8 (a file name, a surrogate from the command line) is printed
    # escaped rather than raising on the way out.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    if (empty := _empty_values(given)) is not None:
        print(f"mcpx-hooks: {empty}", file=sys.stderr)
        return EXIT_USAGE
    args = parser().parse_args(given)
    # (here: `--version` and `--help` have exited without attrs)
    if args.command != "schema" and (gone := _no_working_directory()) is not None:
        print(f"mcpx-hooks {args.command}: {gone}", file=sys.stderr)
        return EXIT_USAGE
    if args.command not in NO_THREAD_CHECK and (refused := _threads_refused()) is not None:
        return _no_thread(args.command, refused)
    from ..core.errors import ConfigError, SpawnError, SpawnModeError

    if own_log:
        from ..core.loglines import log_to_stderr

        log_to_stderr(f"mcpx-hooks {args.command}")

    try:
        return command_runner(args.command)(args)
    except ConfigError as exc:
        from .common import say

        say("mcpx-hooks: the configuration is invalid:")
        for problem in exc.problems:  # (a file's key or path is its data, as `validate` says)
            say(f"  {problem}")
        return EXIT_USAGE
    except SpawnError as exc:  # (the spawner itself could not start: one line, no traceback)
        from .common import say

        say(f"mcpx-hooks: {exc}")
        return EXIT_USAGE if isinstance(exc, SpawnModeError) else EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except RuntimeError as exc:  # (a thread refused once the command was under way)
        if not _thread_failed(exc):
            raise
        return _no_thread(args.command, None)
    except BrokenPipeError:
        return _output_closed()
    except OSError as exc:
        if not _output_failed(exc):
            raise
        return _output_unwritable(args.command, exc)
    except BaseExceptionGroup as group:  # (from within a command's Trio run: its nurseries')
        # Ctrl-C in a run with tasks (`hook test`'s spawner and servers) comes wrapped.
        if group.split(_thread_failed)[0] is not None:
            return _no_thread(args.command, None)
        ours = (KeyboardInterrupt, BrokenPipeError)
        if group.split(lambda e: isinstance(e, ours) or _output_failed(e))[1] is not None:
            raise
        if group.split(KeyboardInterrupt)[0] is not None:
            return EXIT_INTERRUPTED
        full, _ = group.split(_output_failed)
        if full is not None:
            return _output_unwritable(args.command, full.exceptions[0])
        return _output_closed()


def _threads_refused() -> str | None:
    """Why this process cannot start a thread (`runners.libc.no_thread_said`), or None."""
    from ..process import libc

    why: str | None = libc.thread_refused()
    return why


def _thread_failed(exc: BaseException) -> bool:
    """Whether `exc` is `threading`'s word for a thread the system refused to start."""
    from ..process import libc

    return isinstance(exc, RuntimeError) and str(exc) == libc.NO_THREAD


def _no_thread(command: str, why: str | None) -> int:
    """The command cannot go on without threads: said in two lines (what the system refuses,
    the way out), no traceback; exit 1."""
    from ..process import libc
    from .common import say

    say(f"mcpx-hooks {command}: {why or libc.no_thread_said()}")
    return EXIT_FAILED


#: What writing the output fails with when where it goes is full or broken (a disk, a quota,
#: a file size limit, `/dev/full`): never a file a command names (that error names it).
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _output_failed(exc: BaseException) -> bool:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return isinstance(exc, OSError) and exc.errno in _OUTPUT_ERRNOS and exc.filename is None


def _output_unwritable(command: str | None, exc: BaseException) -> int:
    """A command whose output could not be written (stdout on a full disk): said in one line
    on stderr, stdout pointed at /dev/null so that nothing flushed after fails again; exit 1."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    _output_closed()
    who = f"mcpx-hooks {command}" if command else "mcpx-hooks"
    print(f"{who}: cannot write the output: {why}", file=sys.stderr)
    return EXIT_FAILED


def _output_closed() -> int:
    """What a command ends with when the reader of its output left (`| head`): stdout
    pointed at /dev/null, so that nothing flushed after fails again, and no more said."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_INTERRUPTED


def entry() -> None:
    """The `mcpx-hooks` command: `main`, its output flushed, then out at once.

    Every command has finished its work when `main` returns: its runs ended, its processes
    reaped, its files closed. What the interpreter would still do on its way out is tear down
    the hundreds of modules and objects a run loads, about 30 ms of a 0.25 s `exec` on the
    2-core machine (`bench/startup.py`), so that is skipped. An exception `main` does not
    catch leaves as it always did, through the interpreter's own exit. The cyclic collector
    runs rarely until the command's async part starts (`common.quiet_start`), and the methods
    attrs writes for each class are compiled once and kept (`config/codecache.py`): found
    there from the next start on, and what this one compiled kept once its output is out.
    """
    # SIGTERM before a command takes it (`process/signals.py`, which gives it back after):
    # exec's first second, loading its config, ran nothing yet, and died of the signal
    # (143 to a shell) where 130 is the exit code SIGTERM is documented to give.
    signal.signal(signal.SIGTERM, _terminated)
    quiet_start()
    codecache.install(os.environ)
    try:
        code = main(own_log=True)
    except SystemExit as exc:  # argparse's usage errors and --help
        code = _status(exc.code)
    for stream in (sys.stdout, sys.stderr):
        # A reader gone, or a stream already closed: nothing more can be said on it.
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
        except OSError as exc:  # (what was left of the output: where it goes is full)
            if stream is not sys.stdout or not _output_failed(exc):
                raise
            _output_unwritable(None, exc)
            code = code or EXIT_FAILED
    codecache.save()
    from ..process import leave_scratch  # (`os._exit` runs no `atexit`)

    leave_scratch()
    os._exit(code)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM where no command takes it: out at once, as the signal's own end would be (its
    processes go as they go when it is killed), with the exit code it is documented to give."""
    os._exit(EXIT_INTERRUPTED)


def _status(code: object) -> int:
    """What `SystemExit(code)` makes the process exit with."""
    if code is None:
        return EXIT_OK
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _no_working_directory() -> str | None:
    """Why there is no working directory to find configs from, or None: one removed since
    the shell entered it (a CI checkout cleaned under a shell) made every command that
    discovers its configs end in a traceback."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return (
            "the working directory no longer exists (it was removed after this shell entered"
            " it): cd to one that exists, then run the command again"
        )
    except OSError as exc:  # (a directory on its way that may no longer be searched)
        return f"cannot tell the working directory: {exc.strerror or exc}"
    return None


def _empty_values(given: Sequence[str]) -> str | None:
    """`--flag=--` (before a lone `--`): argparse would give the flag an empty list, unchecked."""
    for arg in given:
        if arg == "--":
            return None
        flag, eq, value = arg.partition("=")
        if arg.startswith("--") and eq and value == "--":
            return f"{flag}: expected a value, got '--'"
    return None
