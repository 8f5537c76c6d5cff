"""`validate` (config files, every problem with its pointer) and `schema` (the JSON Schemas
they are checked against)."""

from __future__ import annotations

import sys

from .common import EXIT_OK, EXIT_USAGE

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse


def add_validate_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("files", nargs="+", metavar="FILE")


def add_schema_arguments(s: argparse.ArgumentParser) -> None:
    from ..config.schemas import SCHEMA_NAMES

    s.add_argument("name", nargs="?", choices=SCHEMA_NAMES)


def validate(args: argparse.Namespace) -> int:
    from ..config.loading import validate_files

    problems = validate_files(args.files)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return EXIT_USAGE
    print(f"ok: {len(args.files)} file(s) valid")
    return EXIT_OK


def schema(args: argparse.Namespace) -> int:
    from ..config.schemas import SCHEMA_NAMES, schema_text

    if args.name is None:
        print("\n".join(SCHEMA_NAMES))
    else:
        sys.stdout.write(schema_text(args.name))
    return EXIT_OK
