"""`validate` (config files, every problem with its pointer) and `schema` (the JSON Schemas
they are checked against)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .common import EXIT_OK, EXIT_USAGE, say, say_warnings

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse

    from ..config import Alone
    from ..core.errors import Problem


def add_validate_arguments(v: argparse.ArgumentParser) -> None:
    from .parser import add_trust_project_argument

    v.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="files to check, each on its own (default: the files found from here, layered)",
    )
    v.add_argument(
        "--json", action="store_true", help="the problems as a JSON array (file, pointer, message)"
    )
    add_trust_project_argument(v)


def add_schema_arguments(s: argparse.ArgumentParser) -> None:
    from ..config.schemas import SCHEMA_NAMES

    s.add_argument("name", nargs="?", choices=SCHEMA_NAMES)


def validate(args: argparse.Namespace) -> int:
    """Exit 0, or every problem (schema and rules alike, in one pass) and exit 2. With no
    FILE, the layers `exec` would apply here, and the project files not trusted too, layered
    as if they were (validating is not applying: nothing runs); the ones not trusted are
    said to be, as every command says it, and one that cannot be read is a problem."""
    from ..config import check_files

    skipped = ""
    alone: list[Alone] = []
    if args.files:
        (problems, alone), checked = check_files(args.files), len(args.files)
    else:
        problems, checked, count = _discovered(args)
        if count:
            them = "it" if count == 1 else "them"
            skipped = f" ({count} not trusted yet: `mcpx-hooks trust` applies {them})"
    if args.json:
        fields = [{"file": p.file, "pointer": p.pointer, "message": p.message} for p in problems]
        print(json.dumps(fields, indent=2))
    else:
        for problem in problems:
            say(str(problem), out=True)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return EXIT_USAGE
    if args.files:
        from .promptview import files_model_warnings

        files_model_warnings(args, args.files, alone)
    if not args.json:
        print(f"ok: {checked} file(s) valid{skipped}")
    return EXIT_OK


def _discovered(args: argparse.Namespace) -> tuple[list[Problem], int, int]:
    """The problems of the layers discovered from the working directory, the project files
    not trusted layered in as if they were (one load: `check_untrusted`); how many files were
    checked and how many of them are not trusted. A project file that cannot be read (a
    directory, a loop, a file its user may not read) is a problem here, where `exec` skips it
    with a warning: an "ok" would say it was checked. What the load warns of (a file not
    trusted among it) is said whether or not it found problems."""
    from ..config.loading import load_config
    from ..core.errors import ConfigError

    try:
        config = load_config(
            cwd=Path.cwd(),
            environ=os.environ,
            trust_project=args.trust_project,
            salvage=True,
            check_untrusted=True,
        )
    except ConfigError as exc:
        for warning in exc.warnings:
            say(f"mcpx-hooks: warning: {warning}")
        return exc.problems, 0, sum(1 for s in exc.skipped if s.trust_command)
    say_warnings(config)
    untrusted = [s for s in config.skipped if s.trust_command]
    from ..config import withheld_warnings
    from .promptview import say_model_warnings

    say_model_warnings(config.hooks)
    for warning in withheld_warnings(config, config.hooks, config.servers):
        say(f"mcpx-hooks: warning: {warning}")
    return [], len(config.files), len(untrusted)


def schema(args: argparse.Namespace) -> int:
    from ..config.schemas import SCHEMA_NAMES, schema_text

    if args.name is None:
        print("\n".join(SCHEMA_NAMES))
    else:
        sys.stdout.write(schema_text(args.name))
    return EXIT_OK
