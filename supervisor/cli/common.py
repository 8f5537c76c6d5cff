"""What the commands share: exit codes, the usage error, a flag's JSON, the config, the way to
a server. Nothing heavy at module level: each function imports what it uses."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

from ..core.errors import HooksError
from ..core.places import shown_file

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from typing import Any, Final, TypeVar, TypeVarTuple

    from ..core.hooks import Config
    from ..service.remote import Remote

    T = TypeVar("T")
    Ts = TypeVarTuple("Ts")

EXIT_OK: Final = 0
#: The thing run failed (`hook test`: the hook's status is not `ok`).
EXIT_FAILED: Final = 1
#: Bad input: a config error, a usage error, `validate` found problems.
EXIT_USAGE: Final = 2
#: Refused by a hook (`exec`: a `before` refusal, an ask unanswered or answered no, a
#: fail-closed failure; `hook test`: the hook refused).
EXIT_REFUSED: Final = 3
#: `exec`: the script's own timeout passed (as `timeout(1)` says).
EXIT_TIMEOUT: Final = 124
#: Cancelled, or interrupted before a command took its signals (128 + SIGINT, as shells say).
EXIT_INTERRUPTED: Final = 130

#: The exit codes every command shares: (code, when). `exec` has its own table, below.
EXIT_CODES: Final = (
    (EXIT_OK, "success"),
    (
        EXIT_FAILED,
        "the thing run failed (`hook test`: the hook's status is not `ok`), or the output"
        " could not be written (a full disk: said in one line on stderr), or the system"
        " refuses the threads the command needs (said, with the likely cause)",
    ),
    (EXIT_USAGE, "bad input: a usage error, a config error, `validate` found problems"),
    (EXIT_REFUSED, "refused by a hook (`exec`, `hook test`)"),
    (
        EXIT_INTERRUPTED,
        "interrupted (Ctrl-C or SIGTERM), or the output closed (a reader such as `head` stopped"
        " reading)",
    ),
)

#: The codes a command gives beyond "0: success", where they say more than `EXIT_CODES`:
#: (code, when) by command name (`exec`'s are `EXEC_EXIT_CODES`). The reference shows them.
COMMAND_EXIT_CODES: Final = {
    "hook test": (
        (EXIT_FAILED, "the hook failed (its status is not `ok`) and did not refuse"),
        (EXIT_USAGE, "bad input: no such hook, a wrong `--phase`, an invalid `--event` or config"),
        (EXIT_REFUSED, "the hook refused (a fail-closed failure refuses too)"),
    ),
    "validate": ((EXIT_USAGE, "any problem, schema or rule, in any file checked"),),
    "serve": (
        (EXIT_FAILED, "it failed once listening"),
        (
            EXIT_USAGE,
            "a bad flag, an invalid config, an unusable token file, or an address it cannot"
            " listen on (a server already there is left as it was)",
        ),
    ),
    "runs list": (
        (EXIT_FAILED, "the server refused or could not be reached"),
        (EXIT_USAGE, "the token file cannot be read"),
    ),
    "runs show": (
        (EXIT_FAILED, "the server does not retain the run, refused, or could not be reached"),
        (EXIT_USAGE, "the token file cannot be read"),
    ),
    "runs verify": (
        (
            EXIT_FAILED,
            "the frames are CHANGED (a byte, a line missing or added, cut short), or the file"
            " or run cannot be found or read",
        ),
    ),
    "trust": (
        (
            EXIT_FAILED,
            "the trust state cannot be written; with `--servers`, a server that cannot be"
            " started or listed",
        ),
        (
            EXIT_USAGE,
            "a name that is not a project config file, a file that does not validate (not"
            " trusted; each problem named with its file and pointer), no project file in the"
            " chain, or a state file that cannot be believed",
        ),
    ),
    "untrust": (
        (EXIT_FAILED, "the trust state cannot be written"),
        (EXIT_USAGE, "a file that is not trusted, or a state file that cannot be believed"),
    ),
    "servers list": (
        (EXIT_FAILED, "a server failed to start; the service refused or could not be reached"),
        (
            EXIT_USAGE,
            "an invalid config, an unreadable token file, `--config` or `--no-start` with"
            " `--remote`",
        ),
    ),
    "servers diff": (
        (EXIT_FAILED, "its tools differ from their pin, or it cannot be listed or its pin read"),
        (EXIT_USAGE, "an invalid config, or a server the config does not declare"),
    ),
    "init": (
        (EXIT_FAILED, "the project config file cannot be written (nothing is left behind)"),
        (EXIT_USAGE, "a project config file is already there (it is never overwritten)"),
    ),
    "doctor": ((EXIT_FAILED, "a profile but `none` cannot be enforced on this machine"),),
}

#: `exec`'s exit codes, the one table: (code, when). The code None is the script's own.
#: `exec.exit_code` reads the run's outcome by it; docs/ci.md and the generated reference show
#: it, and `exec --help` ends with it (tests/test_docs.py, tests/test_cli_help.py).
EXEC_EXIT_CODES: Final = (
    (EXIT_OK, "the run ended in `result`"),
    (None, "the script ran, exited non-zero, and nothing turned that into a result"),
    (
        EXIT_FAILED,
        "`error` for any other reason (the script could not start, was killed by a"
        " signal, a secret was not set, the stream ended early)",
    ),
    (EXIT_USAGE, "usage or config error: nothing ran"),
    (
        EXIT_REFUSED,
        'refused by a hook (a `before` refusal, an unanswered or "no" `ask`, a'
        " fail-closed failure)",
    ),
    (EXIT_TIMEOUT, "the script's own timeout passed"),
    (
        EXIT_INTERRUPTED,
        "cancelled (Ctrl-C or SIGTERM, `cancel` from the remote client, or the"
        " output closed: a reader such as `head` stopped reading)",
    ),
)
#: How the table says "the script's own exit code".
SCRIPTS_OWN: Final = "the script's own"


def cause_exit_codes() -> dict[str, int]:
    """The error frame's causes (`core.frames.ErrorCause`) that have an exit code of their
    own in `EXEC_EXIT_CODES`."""
    from ..core.frames import ErrorCause

    return {
        ErrorCause.REFUSED: EXIT_REFUSED,
        ErrorCause.TIMEOUT: EXIT_TIMEOUT,
        ErrorCause.CANCELLED: EXIT_INTERRUPTED,
    }


def outcome_exit_code(outcome: Mapping[str, Any] | None) -> int:
    """`exec`'s exit code for a run's `result` or `error` frame (None: neither came), by
    `EXEC_EXIT_CODES`: 0 for a result; 3, 124 or 130 for an error the hooks, the timeout or a
    cancellation caused; the script's own non-zero exit code for an error it caused; 1 for any
    other error or none at all."""
    if outcome is None:
        return EXIT_FAILED
    if outcome.get("type") == "result":
        return EXIT_OK
    if (own := cause_exit_codes().get(outcome.get("cause", ""))) is not None:
        return own
    code = outcome.get("exitCode")
    return code if isinstance(code, int) and 0 < code < 256 else EXIT_FAILED


def exit_code_table() -> str:
    """`EXEC_EXIT_CODES` as the Markdown table the docs show."""
    rows = ["| code | when |", "| --- | --- |"]
    for code, when in EXEC_EXIT_CODES:
        shown = SCRIPTS_OWN if code is None else str(code)
        rows.append(f"| {shown} | {when} |")
    return "\n".join(rows) + "\n"


def exit_code_help() -> str:
    """`EXEC_EXIT_CODES` as the end of `exec --help` says them."""
    import textwrap

    width = max(len(SCRIPTS_OWN if c is None else str(c)) for c, _ in EXEC_EXIT_CODES)
    lines = ["exit codes:"]
    for code, when in EXEC_EXIT_CODES:
        shown = (SCRIPTS_OWN if code is None else str(code)).ljust(width)
        text = when.replace("`", "")
        lines.extend(
            textwrap.wrap(
                text,
                width=79,
                break_on_hyphens=False,
                initial_indent=f"  {shown}  ",
                subsequent_indent=" " * (width + 4),
            )
        )
    return "\n".join(lines)


#: The cyclic collector's first threshold while a command starts (its default is 700).
#: Loading a command's modules allocates some 200,000 objects that live as long as the
#: process, and at the default the collector walked them some 60 times during `exec`'s
#: start, about 12 ms of a 0.3 s `exec -- /bin/true` on the 2-core machine.
START_THRESHOLD: Final = 50_000
#: The collector's thresholds as the interpreter set them.
_THRESHOLDS: Final = gc.get_threshold()


def quiet_start() -> None:
    """The collector runs rarely while the command loads what it uses (`START_THRESHOLD`);
    `run_async` sets it back. Only the command line's entry point calls this: a command run
    in another program's process (a test's) leaves that program's collector alone."""
    gc.set_threshold(START_THRESHOLD, *_THRESHOLDS[1:])


def run_async(fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
    """`trio.run(fn, *args)`, the way every command runs its async part. Once a command is
    there, its modules are loaded: after `quiet_start`, the collector is set back to its
    thresholds, and what is alive now (modules, classes, tables: they live as long as the
    process) is moved out of its walks (`gc.freeze`), so that a long command, `serve` or
    `mcp`, never walks them again."""
    import trio

    if gc.get_threshold()[0] == START_THRESHOLD:  # (set by `quiet_start` alone)
        gc.set_threshold(*_THRESHOLDS)
        gc.freeze()
    return trio.run(fn, *args)


def run_id(text: str) -> str:
    """A run id given on the command line (`runs show`, `runs search --run`, `runs verify`):
    an empty or blank one names no run, and is a usage error rather than "no run"."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError(f"a run's id cannot be empty, got {text!r}")
    return text


class Usage(HooksError):
    """The command line asks for something that cannot be: said, and exit 2."""


def usage(command: str, message: str) -> int:
    say(f"mcpx-hooks {command}: {message}")
    return EXIT_USAGE


def say(line: str, *, out: bool = False) -> None:
    """Prints `line` (on stderr; `out`: stdout), which may hold data (a path, a server's
    words): nothing in it moves the cursor or starts a line that reads as one of ours
    (`printable.continued`)."""
    from .printable import continued

    print(continued(line), file=sys.stdout if out else sys.stderr)


def read_bounded(flag: str, name: str, limit: int, why: str) -> bytes:
    """What the file `name` (`-`: this process's stdin) given to `flag` holds, at most `limit`
    bytes: `Usage` past them (`why` says why there is a bound), and where it cannot be read.
    Read no further than that: `/dev/zero` or a pipe that never ends is refused, not held."""
    try:
        if name == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(name, "rb") as f:
                data = f.read(limit + 1)
    except OSError as exc:
        raise Usage(f"{flag} {shown_file(name)}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise Usage(f"{flag} {shown_file(name)}: over {limit} bytes ({why})")
    return data


def json_flag(flag: str, text: str | bytes) -> Any:
    """The JSON value a flag or file gives (text, or a file's bytes: UTF-8, a byte order mark
    ignored as everywhere), or `Usage` naming it and why not. A key an object gives twice is
    refused too, at its pointer, as in a JSON config file (JSON keeps the last one without a
    word: `hook test --event` would test, and `exec --input` run with, an input that is not
    the one written)."""
    import json

    from ..config import pointer
    from ..core.jsontext import JsonError, duplicate_keys, loads

    try:
        value = loads(text)
    except JsonError as exc:
        raise Usage(f"{flag}: invalid JSON: {exc}") from None
    if twice := duplicate_keys(text):
        key = json.dumps(str(twice[0][-1]), ensure_ascii=False)
        more = f" (and {len(twice) - 1} more)" if len(twice) > 1 else ""
        raise Usage(f"{flag}:{pointer(twice[0])}: the key {key} is given more than once{more}")
    return value


def load(
    args: argparse.Namespace,
    hooks: Sequence[str] = (),
    script: Mapping[str, Sequence[str | None]] | None = None,
    *,
    say: bool = True,
) -> Config:
    """The config in force: the discovered files, then `--config`, then `hooks` (JSON) and
    `script` lines. What loading says (a project file skipped as not trusted, a ceiling a
    nearer file tried to raise) is printed on stderr, each line once; not with `say` false,
    for a run whose stream says it (a `warning` frame each: said once, there)."""
    from ..config.loading import load_config

    config = load_config(
        args.config,
        cwd=Path.cwd(),
        environ=os.environ,
        command_line_hooks=hooks,
        script=script,
        trust_project=getattr(args, "trust_project", False),
    )
    if say:
        say_warnings(config)
    return config


def say_warnings(config: Config, *, but_skipped: bool = False) -> None:
    """What loading said, on stderr; with `but_skipped`, not what it said of a project file
    it skipped (a command that says that in its own way, or to which it is nothing)."""
    for warning in other_warnings(config) if but_skipped else config.warnings:
        say(f"mcpx-hooks: warning: {warning}")


def other_warnings(config: Config) -> list[str]:
    """The config's warnings but those said of a project file it skipped."""
    skipped = {file.said for file in config.skipped}
    return [warning for warning in config.warnings if warning not in skipped]


def remote(args: argparse.Namespace) -> Remote:
    """The server `--remote` names, with the token `--token-file` or the environment gives."""
    from ..service.access import client_token
    from ..service.remote import Remote

    return Remote(args.remote, client_token(args.token_file, os.environ))


def remote_failed(command: str, exc: Exception) -> int:
    """Says why a call to a server failed: exit 2 when the request was wrong, else 1."""
    from ..service.access import TokenFileError

    say(f"mcpx-hooks {command}: {exc}")
    if isinstance(exc, TokenFileError) or getattr(exc, "bad_input", False):
        return EXIT_USAGE
    return EXIT_FAILED
