"""`mcpx-hooks`: the command line's entry point.

Exit codes: 0 success; 1 the thing run failed (`hook test`: the hook's status is not `ok`);
2 bad input (a config error, a usage error, `validate` found problems); 3 refused by a hook.

The commands are in `parser.COMMANDS`, each in its own module, imported only when it is the
command given. `--version` and `--help` load neither trio, attrs, jsonschema nor the WebSocket
stack; `hook test` loads no server (tests/test_cli.py holds both).
"""

from __future__ import annotations

import io
import sys

from .common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from .parser import command_runner, parser, version

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
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
    from ..core.errors import (
        ConfigError,  # here: `--version` and `--help` have exited without attrs
    )

    try:
        return command_runner(args.command)(args)
    except ConfigError as exc:
        print("mcpx-hooks: the configuration is invalid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _empty_values(given: Sequence[str]) -> str | None:
    """`--flag=--` (before a lone `--`): argparse would give the flag an empty list, unchecked."""
    for arg in given:
        if arg == "--":
            return None
        flag, eq, value = arg.partition("=")
        if arg.startswith("--") and eq and value == "--":
            return f"{flag}: expected a value, got '--'"
    return None
