"""The command line's parser: one table of commands, each one's arguments added only when it
is the command given.

Start-up is part of every command's cost, so this module imports nothing but argparse and
importlib: a command's module is imported when it is the command parsed (`_Command`) or run
(`command_runner`), never for `--help` or another command.
"""

from __future__ import annotations

import argparse
import importlib

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final, NoReturn

#: The commands, in the order `--help` lists them: its name, its help line, where its
#: arguments are added (`module:function` in this package, called with its parser; None: it
#: takes none) and where it runs (called with the parsed arguments, returns the exit code).
COMMANDS: Final = (
    ("hook", "work with one hook", "hooks:add_hook_arguments", "hooks:hook_test"),
    (
        "exec",
        "run a script with its hooks; stream its frames",
        "exec:add_arguments",
        "exec:run",
    ),
    ("hooks", "the hooks in force", "hooks:add_hooks_arguments", "hooks:hooks_list"),
    (
        "serve",
        "serve runs, events and hooks over WebSocket",
        "serveflags:add_arguments",
        "serve:run",
    ),
    (
        "worker",
        "run a cluster's runs, taken from NATS JetStream",
        "worker:add_arguments",
        "worker:run",
    ),
    ("events", "follow a server's event bus", "events:add_arguments", "events:run"),
    (
        "runs",
        "stored runs, here or a server's: list, show, search, verify",
        "runs:add_arguments",
        "runs:run",
    ),
    (
        "console",
        "the browser console's address for a server, with its token",
        "console:add_arguments",
        "console:run",
    ),
    (
        "validate",
        "validate config files; every problem, with pointers",
        "validate:add_validate_arguments",
        "validate:validate",
    ),
    (
        "schema",
        "print a JSON Schema (or list them)",
        "validate:add_schema_arguments",
        "validate:schema",
    ),
    (
        "trust",
        "trust project config files by SHA-256 (or list those trusted)",
        "trust:add_trust_arguments",
        "trust:trust",
    ),
    (
        "untrust",
        "forget a project config file's trust",
        "trust:add_untrust_arguments",
        "trust:untrust",
    ),
    (
        "init",
        "write a commented starter .mcpx-hooks.toml here, or convert a pre-commit or lefthook"
        " file (never overwrites)",
        "init:add_arguments",
        "init:run",
    ),
    (
        "prompts",
        "cached prompt answers: list, show, promote to a run hook, clear",
        "prompts:add_arguments",
        "prompts:run",
    ),
    (
        "servers",
        "the tool servers declared: start each, its state and tools",
        "servers:add_arguments",
        "servers:run",
    ),
    (
        "mcp",
        "serve the tool servers' tools over MCP (stdio), each call through the hooks",
        "mcp:add_arguments",
        "mcp:run",
    ),
    ("demo", "the main job in miniature, on a built-in example", None, "demo:run"),
    (
        "doctor",
        "what enforces each sandbox profile on this machine",
        "doctor:add_arguments",
        "doctor:run",
    ),
)

#: The commands not refused at once where the system refuses threads (`runners.libc`'s
#: `no_thread_said`, what every other command says and exits 1 with): these start none of
#: their own (one that meets a refusal under way, a `--remote` name looked up, says the
#: same), and `doctor` says it as one of its checks.
# fmt: off
NO_THREAD_CHECK: Final = frozenset({
    "validate", "schema", "trust", "untrust", "init", "prompts", "hooks", "runs", "console",
    "events", "doctor",
})
# fmt: on

#: One example command line per command, and per sub-command (`"hook test"`), shown at the
#: end of its `--help` (tests/test_cli_help.py: every command has one, and it parses).
EXAMPLES: Final[dict[str, str]] = {
    "hook": "mcpx-hooks hook test deps --event payload.json",
    "hook test": 'mcpx-hooks hook test --hook \'{"run": ["./check.sh"]}\' --phase before --json',
    "exec": "mcpx-hooks exec --yes --artifacts out -- python3 -m pytest -q",
    "hooks": "mcpx-hooks hooks list --json",
    "hooks list": "mcpx-hooks hooks list --remote ws://127.0.0.1:8765",
    "serve": "mcpx-hooks serve --port 0 --config ci.toml",
    "events": "mcpx-hooks events --kinds run,hook --json",
    "runs": "mcpx-hooks runs list",
    "runs list": "mcpx-hooks runs list --remote ws://127.0.0.1:8765 --json",
    "runs show": "mcpx-hooks runs show 9d81129207f7fb12 --json",
    "runs search": "mcpx-hooks runs search '\"connection refused\" db' --limit 10",
    "runs verify": "mcpx-hooks runs verify run.ndjson",
    "validate": "mcpx-hooks validate --json",
    "schema": "mcpx-hooks schema hook-output",
    "trust": "mcpx-hooks trust .mcpx-hooks.toml",
    "untrust": "mcpx-hooks untrust .mcpx-hooks.toml",
    "init": "mcpx-hooks init --from .pre-commit-config.yaml",
    "demo": "mcpx-hooks demo",
    "doctor": "mcpx-hooks doctor",
    "console": "mcpx-hooks console --open",
    "prompts": "mcpx-hooks prompts list",
    "prompts list": "mcpx-hooks prompts list --json",
    "prompts show": "mcpx-hooks prompts show 3f9a1c07",
    "prompts promote": "mcpx-hooks prompts promote 3f9a1c07 --to ci.toml",
    "prompts clear": "mcpx-hooks prompts clear",
    "worker": "mcpx-hooks worker --cluster nats://127.0.0.1:4222 --concurrency 8"
    " --nats-auth-file nats-worker.toml --cluster-key-file cluster.key",
    "servers": "mcpx-hooks servers list --json",
    "servers list": "mcpx-hooks servers list --remote ws://127.0.0.1:8765",
    "mcp": "mcpx-hooks mcp --config ~/agent-hooks.toml",
    "servers diff": "mcpx-hooks servers diff words --config ~/agent-hooks.toml",
}

#: What a command's `--help` says after its example (`module:function` in this package,
#: returning the text), imported only when that command's help is shown.
HELP_EPILOGS: Final[dict[str, str]] = {"exec": "common:exit_code_help"}


def parser() -> argparse.ArgumentParser:
    top = _Top(prog="mcpx-hooks", description="Run scripts with the hooks declared around them.")
    top.add_argument("--version", action="version", version=f"mcpx-hooks {version()}")
    sub = top.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Command
    )
    # Each command's parser, and those its arguments add (`hook test`), is a `_Command`.
    for name, summary, arguments, _ in COMMANDS:
        sub.add_parser(name, help=summary, arguments=arguments)
    return top


def command_runner(command: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs `command` (a name of `COMMANDS`), its module imported now."""
    run: Callable[[argparse.Namespace], int] = next(
        _entry(entry) for name, _, _, entry in COMMANDS if name == command
    )
    return run


def _entry(spec: str) -> Any:
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(f".{module}", __package__), function)


class _Top(argparse.ArgumentParser):
    """A parser whose "invalid choice" of a command names the command meant, when one is
    near: `exce` → `exec`, `hook list` → `hooks list`, `server` → `servers`."""

    def error(self, message: str) -> NoReturn:
        import re

        wrong = re.search(r"invalid choice: '([^']*)'", message)
        if wrong is not None and (meant := _meant(command_name(self.prog), wrong[1])):
            message += f"; did you mean `mcpx-hooks {meant}`?"
        super().error(message)


#: Commands other hook runners have, and ours that does the same (`pre-commit run`,
#: `lefthook run`: `run` is near `runs`, which only lists runs).
OTHER_RUNNERS: Final = {"run": "exec"}


def _meant(here: str, word: str) -> str | None:
    """The command `word`, given after the command `here` ("" at the top), was meant to be:
    one of `here`'s whose name is near `word`, else one of the same name under a command
    whose name is near `here`'s last word."""
    import difflib

    if not here and word in OTHER_RUNNERS:
        return OTHER_RUNNERS[word]
    depth = len(here.split()) if here else 0
    names = [name.split() for name in EXAMPLES]
    under = [n[depth] for n in names if len(n) == depth + 1 and " ".join(n[:depth]) == here]
    if near := difflib.get_close_matches(word, under, n=1):
        return " ".join([*here.split(), near[0]])
    parent = here.split()[-1:]
    for name in names if depth else ():  # (`hook list` for `hooks list`)
        same = len(name) == depth + 1 and name[depth] == word
        if same and difflib.get_close_matches(parent[0], [name[depth - 1]], n=1):
            return " ".join(name)
    return None


class _Command(_Top):
    """A command's parser that adds its arguments (its `COMMANDS` entry) only when it parses,
    that is, when it is the command given: the others' choices and defaults are never
    imported."""

    def __init__(self, *args: Any, arguments: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self._arguments = arguments
        self._complete = False

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        self.complete()
        given = args[0] if args else kwargs.get("args")
        self._given = [str(a) for a in given or ()]
        namespace, extras = super().parse_known_args(*args, **kwargs)
        if extras:  # said by this command, with its usage: not by the top parser, with its own
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str) -> NoReturn:
        """As argparse's, and where a word that begins with `-` is no option of the command
        (`runs search -x`), says to put `--` before it to give it as text."""
        known = {o for action in self._actions for o in action.option_strings}
        given = getattr(self, "_given", [])
        before = given[: given.index("--")] if "--" in given else given
        stray = [a for a in before if a.startswith("-") and a.split("=")[0] not in known]
        if stray and "arguments are required" in message:
            name = command_name(self.prog)
            message += (
                f"; {stray[0]} is no option of {name}: to give it as text, put -- before it"
                f" (mcpx-hooks {name} -- {stray[0]})"
            )
        super().error(message)

    def complete(self) -> None:
        """Add this command's arguments and the end of its help (its example, and for `exec`
        its exit codes), once: when it parses, or when the reference page is rendered."""
        if self._complete:
            return
        self._complete = True
        if self._arguments is not None:
            _entry(self._arguments)(self)
        name = command_name(self.prog)
        parts = []
        if name in EXAMPLES:
            parts.append(f"example:\n  {EXAMPLES[name]}")
        if name in HELP_EPILOGS:
            parts.append(_entry(HELP_EPILOGS[name])())
        if parts:
            self.epilog = "\n\n".join(parts)


def command_name(prog: str) -> str:
    """`mcpx-hooks hook test` (a parser's prog) → `hook test`, the key of `EXAMPLES`."""
    return prog.partition(" ")[2]


def version() -> str:
    # The package root's `__version__` (a test holds it equal to the installed metadata):
    # `importlib.metadata.version` would scan every installed distribution, ~100 ms. By name,
    # because mypy checks this folder as `supervisor`, not as part of `mcpx_hooks`.
    return str(importlib.import_module("mcpx_hooks").__version__)


def add_config_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`--config F` (repeatable) and `--json`: the flags of a command that reads the config."""
    add_config_file_arguments(p, json=True)
    return p


def add_config_file_arguments(p: argparse.ArgumentParser, *, json: bool = False) -> None:
    """`--config F` (repeatable), with `json` `--json`, and `--trust-project`: how a command
    is told which config files to read."""
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="F",
        help="a config file, applied after the discovered ones (repeatable)",
    )
    if json:
        p.add_argument("--json", action="store_true", help="machine-readable output")
    add_trust_project_argument(p)


def add_trust_project_argument(p: argparse.ArgumentParser) -> None:
    """`--trust-project`: this command applies the project files of the directory chain
    without their trust being recorded (as `MCPX_HOOKS_TRUST=all` does)."""
    p.add_argument(
        "--trust-project",
        action="store_true",
        help="apply the project config files found here for this command, trusted or not"
        " (as MCPX_HOOKS_TRUST=all)",
    )


def add_token_file_argument(p: argparse.ArgumentParser) -> None:
    """`--token-file F`: a client's way to the server's token."""
    p.add_argument(
        "--token-file",
        metavar="F",
        help="the server's token (else $MCPX_HOOKS_TOKEN, else the file serve writes)",
    )
