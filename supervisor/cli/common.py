"""What the commands share: exit codes, the usage error, a flag's JSON, the config, the way to
a server. Nothing heavy at module level: each function imports what it uses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence
    from typing import Any, Final

    from ..core.hooks import Config
    from ..service.remote import Remote

EXIT_OK: Final = 0
#: The thing run failed (`hook test`: the hook's status is not `ok`).
EXIT_FAILED: Final = 1
#: Bad input: a config error, a usage error, `validate` found problems.
EXIT_USAGE: Final = 2
#: Refused by a hook (`exec`: a `before` refusal, an ask unanswered or answered no, a
#: fail-closed failure; `hook test`: the hook refused).
EXIT_REFUSED: Final = 3
#: Interrupted before a command took its signals (128 + SIGINT, as shells say).
EXIT_INTERRUPTED: Final = 130


class Usage(Exception):
    """The command line asks for something that cannot be: said, and exit 2."""


def usage(command: str, message: str) -> int:
    print(f"mcpx-hooks {command}: {message}", file=sys.stderr)
    return EXIT_USAGE


def json_flag(flag: str, text: str) -> Any:
    """The JSON value a flag or file gives, or `Usage` naming it and why not."""
    from ..core.jsontext import JsonError, loads

    try:
        return loads(text)
    except JsonError as exc:
        raise Usage(f"{flag}: invalid JSON: {exc}") from None


def load(
    args: argparse.Namespace,
    hooks: Sequence[str] = (),
    script: Mapping[str, Sequence[str | None]] | None = None,
) -> Config:
    """The config in force: the discovered files, then `--config`, then `hooks` (JSON) and
    `script` lines. What loading says (a project file skipped as not trusted, a ceiling a
    nearer file tried to raise) is printed on stderr, each line once."""
    from ..config.loading import load_config

    config = load_config(
        args.config,
        cwd=Path.cwd(),
        environ=os.environ,
        command_line_hooks=hooks,
        script=script,
        trust_project=getattr(args, "trust_project", False),
    )
    say_warnings(config)
    return config


def say_warnings(config: Config) -> None:
    for warning in config.warnings:
        print(f"mcpx-hooks: warning: {warning}", file=sys.stderr)


def remote(args: argparse.Namespace) -> Remote:
    """The server `--remote` names, with the token `--token-file` or the environment gives."""
    from ..service.access import client_token
    from ..service.remote import Remote

    return Remote(args.remote, client_token(args.token_file, os.environ))


def remote_failed(command: str, exc: Exception) -> int:
    """Says why a call to a server failed: exit 2 when the request was wrong, else 1."""
    from ..service.access import TokenFileError

    print(f"mcpx-hooks {command}: {exc}", file=sys.stderr)
    if isinstance(exc, TokenFileError) or getattr(exc, "bad_input", False):
        return EXIT_USAGE
    return EXIT_FAILED
