"""`mcpx-hooks`: the command line.

Exit codes: 0 success; 1 the thing run failed (`hook test`: the hook's status is not `ok`);
2 bad input (a config error, a usage error, `validate` found problems).

Start-up is part of every command's cost, so nothing heavy is imported at module level: each
command's arguments are added only when it is the command given (`_Command`), and each
function imports what it uses. `--version` and `--help` load neither trio, attrs, jsonschema
nor the WebSocket stack; `hook test` loads no server (tests/test_cli.py holds both).
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import math
import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, Final

    import trio

    from ..core.frames import HookFrame
    from ..core.hooks import Config, Hook
    from ..core.points import Phase
    from ..run.execute import Run, RunRequest
    from ..run.hookcontext import HookContext
    from ..service.remote import Remote

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="mcpx-hooks", description="Run scripts with the hooks declared around them."
    )
    top.add_argument("--version", action="version", version=f"mcpx-hooks {_version()}")
    sub = top.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Command
    )
    sub.add_parser("hook", help="work with one hook", arguments=_hook_arguments)
    sub.add_parser(
        "exec",
        help="run a script with its hooks; stream its frames",
        arguments=_exec_arguments,
    )
    sub.add_parser("hooks", help="the hooks in force", arguments=_hooks_arguments)
    sub.add_parser(
        "serve",
        help="serve runs, events and hooks over WebSocket",
        arguments=_serve_arguments,
    )
    sub.add_parser("events", help="follow a server's event bus", arguments=_events_arguments)
    sub.add_parser(
        "validate",
        help="validate config files; every problem, with pointers",
        arguments=_validate_arguments,
    )
    sub.add_parser("schema", help="print a JSON Schema (or list them)", arguments=_schema_arguments)
    sub.add_parser("demo", help="the main job in miniature, on a built-in example")
    sub.add_parser("doctor", help="what enforces each sandbox profile on this machine")
    return top


class _Command(argparse.ArgumentParser):
    """A command's parser that adds its arguments (`arguments(self)`) only when it parses, that
    is, when it is the command given: the others' choices and defaults are never imported."""

    def __init__(
        self,
        *args: Any,
        arguments: Callable[[argparse.ArgumentParser], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._arguments = arguments

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        if self._arguments is not None:
            arguments, self._arguments = self._arguments, None
            arguments(self)
        return super().parse_known_args(*args, **kwargs)


def _version() -> str:
    # The package root's `__version__` (a test holds it equal to the installed metadata):
    # `importlib.metadata.version` would scan every installed distribution, ~100 ms. By name,
    # because mypy checks this folder as `supervisor`, not as part of `mcpx_hooks`.
    return str(importlib.import_module("mcpx_hooks").__version__)


def _configured(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="F",
        help="a config file, applied after the discovered ones (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def _hook_arguments(hook: argparse.ArgumentParser) -> None:
    from ..core.points import Phase

    test = _configured(hook).add_subparsers(dest="hook_command", required=True, metavar="test")
    t = _configured(test.add_parser("test", help="run one hook against a mock payload"))
    t.add_argument("name", nargs="?", help="a hook in force, by name")
    t.add_argument("--hook", dest="hook_json", metavar="JSON", help="a hook given inline")
    t.add_argument("--phase", required=True, choices=[p.value for p in Phase])
    t.add_argument(
        "--event",
        metavar="FILE",
        help="a JSON object merged over the generated input (result, error, input or event)",
    )


def _exec_arguments(x: argparse.ArgumentParser) -> None:
    from ..core.effects import Effect
    from ..core.hooks import DEFAULT_RUN_SANDBOX, Profile

    _configured(x)
    x.add_argument(
        "--hook",
        dest="hooks",
        action="append",
        default=[],
        metavar="JSON",
        help="a hook for this run (repeatable)",
    )
    for flag, phase in _source_flags().items():
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
    x.add_argument("--timeout", type=float, metavar="S", help="the script's timeout, seconds")
    x.add_argument("--input", metavar="JSON", help="the run's input, a JSON value")
    x.add_argument("--stdin", metavar="FILE", help="the script's stdin (- for this one's)")
    x.add_argument("--remote", metavar="URL", help="run on a server (ws://…)")
    _token_file(x)
    what = x.add_mutually_exclusive_group()
    what.add_argument("--python", metavar="FILE", help="a Python script")
    what.add_argument("-c", dest="code", metavar="CODE", help="Python code")
    x.add_argument("argv", nargs=argparse.REMAINDER, help="-- ARGV…")


def _hooks_arguments(hooks: argparse.ArgumentParser) -> None:
    h = _configured(
        hooks.add_subparsers(dest="hooks_command", required=True, metavar="list").add_parser(
            "list", help="list the hooks in force and where they came from"
        )
    )
    h.add_argument("--remote", metavar="URL", help="the hooks in force on a server (ws://…)")
    _token_file(h)


def _serve_arguments(srv: argparse.ArgumentParser) -> None:
    from ..service.server import Limits
    from ..service.wire import DEFAULT_HOST, DEFAULT_PORT

    srv.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="F",
        help="a config file, applied after the discovered ones (repeatable)",
    )
    srv.add_argument(
        "--host",
        default=DEFAULT_HOST,
        metavar="H",
        help=f"the address to listen on: an IP address or a host name; default {DEFAULT_HOST}",
    )
    limits = Limits()
    for bound in _SERVE_NUMBERS:
        default = DEFAULT_PORT if bound is _PORT else getattr(limits, bound.field)
        srv.add_argument(
            bound.flag,
            dest=bound.field,
            metavar=bound.metavar,
            help=f"{bound.help} ({bound.range}; default {_number(default)})",
        )
    srv.add_argument(
        "--token-file",
        metavar="F",
        help="where to write the token (default $XDG_STATE_HOME/mcpx-hooks/token)",
    )
    srv.add_argument("--no-auth", action="store_true", help="ask no token (loopback use only)")
    srv.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an Origin besides the server's own that may connect: scheme://host[:port]"
        " (repeatable)",
    )


def _events_arguments(ev: argparse.ArgumentParser) -> None:
    from ..service.remote import DEFAULT_URL

    ev.add_argument("--remote", metavar="URL", default=DEFAULT_URL, help=f"default {DEFAULT_URL}")
    ev.add_argument("--kinds", metavar="K", help="kind prefixes, comma-separated (hook,run)")
    ev.add_argument("--since", type=int, metavar="N", help="replay the retained events from seq N")
    ev.add_argument("--json", action="store_true", help="one event per line (NDJSON)")
    _token_file(ev)


def _validate_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("files", nargs="+", metavar="FILE")


def _schema_arguments(s: argparse.ArgumentParser) -> None:
    from ..config.schemas import SCHEMA_NAMES

    s.add_argument("name", nargs="?", choices=SCHEMA_NAMES)


def _token_file(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token-file",
        metavar="F",
        help="the server's token (else $MCPX_HOOKS_TOKEN, else the file serve writes)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # The usual probe, answered as the parser would, without building it (~10 ms).
        print(f"mcpx-hooks {_version()}")
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
    args = _parser().parse_args(given)
    from ..core.errors import (
        ConfigError,  # here: `--version` and `--help` have exited without attrs
    )

    try:
        if args.command == "hook":
            return _hook_test(args)
        if args.command == "exec":
            return _exec(args)
        if args.command == "hooks":
            return _hooks_list(args)
        if args.command == "validate":
            return _validate(args.files)
        if args.command == "schema":
            return _schema(args.name)
        if args.command == "serve":
            return _serve(args)
        if args.command == "events":
            return _events(args)
        if args.command == "doctor":
            from .doctor import main as doctor

            return doctor()
        if args.command == "demo":
            import trio

            from .demo import run_demo

            return trio.run(run_demo)
    except ConfigError as exc:
        print("mcpx-hooks: the configuration is invalid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    raise AssertionError(args.command)


def _empty_values(given: Sequence[str]) -> str | None:
    """`--flag=--` (before a lone `--`): argparse would give the flag an empty list, unchecked."""
    for arg in given:
        if arg == "--":
            return None
        flag, eq, value = arg.partition("=")
        if arg.startswith("--") and eq and value == "--":
            return f"{flag}: expected a value, got '--'"
    return None


def _timeout_ms(args: argparse.Namespace) -> int | None:
    """`--timeout S` in ms: a finite number of seconds above 0, at most a year."""
    if args.timeout is None:
        return None
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= _MAX_TIMEOUT_S):
        raise _Usage(
            f"--timeout: expected seconds above 0 and at most {_MAX_TIMEOUT_S}, got {args.timeout}"
        )
    seconds: float = args.timeout
    return max(1, round(seconds * 1000))


_MAX_TIMEOUT_S = 365 * 24 * 3600


def _load(args: argparse.Namespace, hooks: Sequence[str] = ()) -> Config:
    from ..config.loading import load_config

    return load_config(
        args.config,
        cwd=Path.cwd(),
        environ=os.environ,
        command_line_hooks=hooks,
    )


def _hooks_list(args: argparse.Namespace) -> int:
    from .view import hook_table

    if args.remote:
        if args.config:
            return _usage("hooks list", "--config is the server's; --remote lists what it has")
        import trio

        from ..service import remote
        from ..service.access import TokenFileError

        try:
            found = trio.run(remote.list_hooks, _remote(args))
        except (remote.RemoteError, TokenFileError) as exc:
            return _remote_failed("hooks list", exc)
        if args.json:
            print(json.dumps(found, indent=2))
        elif not found:
            print("no hooks in force")
        else:
            print("\n".join(hook_table(found)))
        return EXIT_OK
    config = _load(args)
    if args.json:
        print(json.dumps([h.to_json() for h in config.hooks], indent=2))
    elif not config.hooks:
        print("no hooks in force")
    else:
        print("\n".join(hook_table(h.to_json() for h in config.hooks)))
    return EXIT_OK


def _usage(command: str, message: str) -> int:
    print(f"mcpx-hooks {command}: {message}", file=sys.stderr)
    return EXIT_USAGE


def _remote(args: argparse.Namespace) -> Remote:
    from ..service.access import client_token
    from ..service.remote import Remote

    return Remote(args.remote, client_token(args.token_file, os.environ))


def _remote_failed(command: str, exc: Exception) -> int:
    from ..service.access import TokenFileError

    print(f"mcpx-hooks {command}: {exc}", file=sys.stderr)
    if isinstance(exc, TokenFileError) or getattr(exc, "bad_input", False):
        return EXIT_USAGE
    return EXIT_FAILED


def _validate(files: Sequence[str]) -> int:
    from ..config.loading import validate_files

    problems = validate_files(files)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return EXIT_USAGE
    print(f"ok: {len(files)} file(s) valid")
    return EXIT_OK


def _schema(name: str | None) -> int:
    from ..config.schemas import SCHEMA_NAMES, schema_text

    if name is None:
        print("\n".join(SCHEMA_NAMES))
    else:
        sys.stdout.write(schema_text(name))
    return EXIT_OK


def _pick_hook(args: argparse.Namespace) -> tuple[Config, Hook]:
    from ..core.hooks import SourceKind

    if args.hook_json is not None:
        from ..core.jsontext import JsonError, loads

        try:
            decl = loads(args.hook_json)
        except JsonError:
            decl = None  # load_config reports it with file and position
        if isinstance(decl, dict):
            decl.setdefault("on", "script")
            decl.setdefault("phase", args.phase)
            args.hook_json = json.dumps(decl)
        config = _load(args, [args.hook_json])
        hook = next(h for h in config.hooks if h.source.kind is SourceKind.COMMAND_LINE)
        return config, hook
    config = _load(args)
    if args.name is None:
        raise _Usage("hook test needs a hook NAME or --hook JSON")
    found = config.find(args.name)
    if found is None:
        names = ", ".join(h.name for h in config.hooks) or "none"
        raise _Usage(f"no hook named {args.name!r} is in force (hooks in force: {names})")
    return config, found


class _Usage(Exception):
    pass


def _source_flags() -> dict[str, Phase]:
    from ..core.points import Phase

    return {
        "--before": Phase.BEFORE,
        "--prefix": Phase.PREFIX,
        "--on-success": Phase.ON_SUCCESS,
        "--on-error": Phase.ON_ERROR,
        "--suffix": Phase.SUFFIX,
    }


def _json_flag(flag: str, text: str) -> Any:
    """The JSON value a flag or file gives, or `_Usage` naming it and why not."""
    from ..core.jsontext import JsonError, loads

    try:
        return loads(text)
    except JsonError as exc:
        raise _Usage(f"{flag}: invalid JSON: {exc}") from None


def _exec_argv(args: argparse.Namespace) -> list[str]:
    argv: list[str] = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if sum(x is not None and x != [] for x in (args.python, args.code, argv or None)) != 1:
        raise _Usage("exec needs exactly one of -- ARGV…, --python FILE, -c CODE")
    from ..core.spawntext import argv_problems

    # An argument that is not UTF-8 arrives as lone surrogates: said here, not by the spawner.
    problems = argv_problems(argv, "argv") + argv_problems(
        [x for x in (args.python, args.code) if x is not None], "--python/-c"
    )
    if argv[:1] == [""]:
        problems.append("argv[0]: the program is empty")
    if problems:
        raise _Usage("; ".join(problems))
    return argv


def _script_lines(args: argparse.Namespace) -> dict[str, list[str | None]]:
    """The source flags as a per-call `script` layer: appended to the config's lines."""
    return {
        phase.value: [None, *getattr(args, f"src_{phase}")]
        for phase in _source_flags().values()
        if getattr(args, f"src_{phase}")
    }


def _stdin_bytes(args: argparse.Namespace) -> bytes:
    if args.stdin == "-":
        return sys.stdin.buffer.read()
    if args.stdin:
        return Path(args.stdin).read_bytes()
    return b""


def _exec_request(args: argparse.Namespace) -> tuple[Config, RunRequest]:
    from ..config.loading import load_config
    from ..core.effects import Effect
    from ..core.hooks import Profile
    from ..core.points import Phase
    from ..core.scripts import Script
    from ..run.execute import DEFAULT_SCRIPT_TIMEOUT_MS, RunRequest

    argv = _exec_argv(args)
    script_lines = _script_lines(args)
    config = load_config(
        args.config,
        cwd=Path.cwd(),
        environ=os.environ,
        command_line_hooks=args.hooks,
        script=script_lines or None,
    )
    stdin = _stdin_bytes(args)
    request = RunRequest(
        script=Script(tuple(argv) or None, args.python, args.code),
        cwd=str(Path.cwd()),
        stdin=stdin,
        input=(_json_flag("--input", args.input),) if args.input is not None else None,
        timeout_ms=_timeout_ms(args) or DEFAULT_SCRIPT_TIMEOUT_MS,
        autonomy=Effect.parse(args.autonomy) if args.autonomy else None,
        sandbox=Profile(args.sandbox) if args.sandbox else None,
        sources={Phase(k): tuple(v) for k, v in config.script.items()},
    )
    return config, request


def _remote_exec_request(args: argparse.Namespace) -> dict[str, Any]:
    """The `/v1/exec` request for the same run `exec` would make in process."""
    argv = _exec_argv(args)
    if args.config:
        raise _Usage(
            "--config names the server's files (serve --config); with --remote, give this"
            " run's hooks with --hook"
        )
    request: dict[str, Any]
    if argv:
        request = {"argv": argv}
    elif args.python is not None:
        request = {"file": args.python}
    else:
        request = {"python": args.code}
    request["cwd"] = str(Path.cwd())
    hooks = []
    for number, text in enumerate(args.hooks, start=1):
        hooks.append(_json_flag(f"--hook #{number}", text))
    if hooks:
        request["hooks"] = hooks
    if lines := _script_lines(args):
        request["script"] = lines
    stdin = _stdin_bytes(args)
    if stdin:
        try:
            request["stdin"] = stdin.decode()
        except UnicodeDecodeError:
            raise _Usage(
                "--stdin: with --remote, stdin is sent as text and must be UTF-8"
            ) from None
    if args.input is not None:
        request["input"] = _json_flag("--input", args.input)
    if (timeout_ms := _timeout_ms(args)) is not None:
        request["timeoutMs"] = timeout_ms
    if args.autonomy:
        request["autonomy"] = args.autonomy
    if args.sandbox:
        request["sandbox"] = args.sandbox
    # Like an in-process run, which ends with its `exec`: a vanished client stops its run.
    request["cancelOnDisconnect"] = True
    return request


def _exec_remote(args: argparse.Namespace) -> int:
    import trio

    from ..service import remote
    from ..service.access import TokenFileError
    from .view import frame_lines

    try:
        request = _remote_exec_request(args)
        target = _remote(args)
    except (_Usage, OSError, json.JSONDecodeError, TokenFileError) as exc:
        print(f"mcpx-hooks exec: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def show(frame: dict[str, Any]) -> None:
        line = json.dumps(frame) if args.json else "\n".join(frame_lines(frame))
        print(line, flush=True)

    try:
        frames = trio.run(remote.exec_remote, target, request, show)
    except remote.RemoteError as exc:
        return _remote_failed("exec", exc)
    if not any(f.get("type") in ("result", "error") for f in frames):
        print("mcpx-hooks exec: the stream ended before the run's outcome", file=sys.stderr)
        return EXIT_FAILED
    return exit_code(frames)


def _exec(args: argparse.Namespace) -> int:
    if args.remote:
        return _exec_remote(args)
    try:
        config, request = _exec_request(args)
    except (_Usage, OSError, json.JSONDecodeError) as exc:
        print(f"mcpx-hooks exec: {exc}", file=sys.stderr)
        return EXIT_USAGE
    import trio

    frames = trio.run(_exec_run, config, request, args.json)
    return exit_code(frames)


def exit_code(frames: Sequence[Mapping[str, Any]]) -> int:
    """`exec`'s exit code: 0 for a result; the script's own non-zero exit code for an error
    it caused; 1 for an error for any other reason (refused, timed out, cancelled…)."""
    outcome = next(f for f in frames if f["type"] in ("result", "error"))
    if outcome["type"] == "result":
        return EXIT_OK
    code = outcome.get("exitCode")
    return code if isinstance(code, int) and 0 < code < 256 else EXIT_FAILED


async def _exec_run(config: Config, request: RunRequest, as_json: bool) -> list[dict[str, Any]]:
    """Runs in process, printing each frame as it happens. The first Ctrl-C cancels the run
    (its suffix hooks and `end` still come); a second one stops at once."""
    import trio

    from ..run.runtime import open_runtime
    from .view import frame_lines

    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        run = runtime.new_run(request)
        nursery.start_soon(_cancel_on_interrupt, run, nursery.cancel_scope)
        async with trio.open_nursery() as running:
            running.start_soon(runtime.execute, run)
            async for batch in run.journal.follow(0):
                for frame in batch:
                    line = json.dumps(frame) if as_json else "\n".join(frame_lines(frame))
                    print(line, flush=True)
        nursery.cancel_scope.cancel()
    return run.journal.frames


async def _cancel_on_interrupt(run: Run, everything: trio.CancelScope) -> None:
    import signal

    import trio

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if run.cancel_scope.cancel_called:
                everything.cancel()
                return
            run.cancel()


# ---- `serve`: its flags, checked before anything is touched ------------------------------


class _Bound:
    """A numeric `serve` flag: the field it sets (of `Limits`; `port` of `ServiceOptions`),
    its type, and its range, inclusive (`low` excluded when `above`)."""

    def __init__(
        self,
        flag: str,
        field: str,
        kind: type[int] | type[float],
        low: int,
        high: int,
        *,
        help: str,
        above: bool = False,
        metavar: str | None = None,
    ) -> None:
        self.flag, self.field, self.kind = flag, field, kind
        self.low, self.high, self.above = low, high, above
        self.help = help
        self.metavar = metavar or ("N" if kind is int else "S")

    @property
    def range(self) -> str:
        if self.above:
            return f"over {self.low} and at most {self.high}"
        return f"from {self.low} to {self.high}"

    @property
    def expected(self) -> str:
        what = "an integer" if self.kind is int else "a number of seconds"
        return f"{what} {self.range}"

    def parse(self, text: str) -> int | float:
        """The value `text` gives; ValueError saying what was expected when it is not one."""
        import math

        try:
            value = self.kind(text)
        except ValueError:
            raise ValueError(f"expected {self.expected}, got {_shown(text)}") from None
        low_ok = value > self.low if self.above else value >= self.low
        if not (math.isfinite(value) and low_ok and value <= self.high):
            raise ValueError(f"expected {self.expected}, got {_shown(text.strip(), quote=False)}")
        return value


#: The largest count and time a flag takes: past these nothing is a limit any more, and
#: below them nothing overflows a C integer or a deadline.
_COUNT: Final = 2**31 - 1
_DAY: Final = 86_400

_PORT: Final = _Bound("--port", "port", int, 0, 65_535, metavar="P", help="the TCP port, 0: any")

#: The flags that set a `Limits` field, one row each: a new budget is one more row.
_LIMIT_FLAGS: Final = (
    _Bound("--max-connections", "max_connections", int, 1, _COUNT, help="admitted sockets"),
    _Bound("--max-pending", "max_pending", int, 1, _COUNT, help="sockets in their handshake"),
    _Bound("--max-idle", "max_idle", int, 1, _COUNT, help="admitted sockets with no run"),
    _Bound("--max-runs", "max_runs", int, 1, _COUNT, help="runs in progress"),
    _Bound("--max-message-bytes", "max_message_bytes", int, 1, _COUNT, help="bytes per message"),
    _Bound("--ping-interval", "ping_s", float, 0, _DAY, above=True, help="seconds between pings"),
    _Bound("--grace", "grace_s", float, 0, _DAY, help="runs' time to end at SIGTERM"),
)
_SERVE_NUMBERS: Final = (_PORT, *_LIMIT_FLAGS)


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _shown(text: str, *, quote: bool = True) -> str:
    """A value as given, for a message: cut short when long, quoted unless a number."""
    short = text if len(text) <= 40 else text[:40] + "…"
    return repr(short) if quote else short


def _host_problem(host: str) -> str | None:
    """Why `--host` cannot be listened on, as far as can be told before trying; None if it
    can be tried: an IP address, or a host name that resolves."""
    import socket

    if _is_ip(host):
        return None
    if host.startswith("[") and host.endswith("]") and _is_ip(host[1:-1]):
        return f"expected an IP address without brackets, got {_shown(host)}"
    if not _is_host_name(host):
        return f"expected an IP address or a host name, got {_shown(host)}"
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    return None


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_host_name(name: str) -> bool:
    """Letters, digits, hyphens (and underscores, which resolvers take) in dot-separated
    labels; a last label that is all digits is a mistyped IPv4 address, not a name."""
    import re

    labels = (name[:-1] if name.endswith(".") else name).split(".")
    label = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
    return (
        0 < len(name) <= 253
        and all(label.fullmatch(part) for part in labels)
        and not labels[-1].isdigit()
    )


def _origin_problem(origin: str) -> str | None:
    """Why `--allow-origin` is not an origin (`scheme://host[:port]`, as a browser sends
    it); None if it is one."""
    import re
    from urllib.parse import urlsplit

    wrong = f"expected scheme://host[:port], got {_shown(origin)}"
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:  # a port that is not one, or a bracket left open
        return wrong
    host = parts.hostname or ""
    if not (_is_ip(host) or _is_host_name(host)):
        return wrong
    host = f"[{host}]" if ":" in host else host
    netloc = host if port is None else f"{host}:{port}"
    if (
        not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme)
        or parts.netloc.lower() != netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "?" in origin
        or "#" in origin
    ):
        return wrong
    return None


def _serve_problems(args: argparse.Namespace) -> list[str]:
    """Every flag of `serve` that is wrong, one line each naming it. The numeric ones are
    parsed in place (None: not given)."""
    problems = []
    for bound in _SERVE_NUMBERS:
        text = getattr(args, bound.field)
        if text is not None:
            try:
                setattr(args, bound.field, bound.parse(text))
            except ValueError as exc:
                problems.append(f"{bound.flag}: {exc}")
    if (problem := _host_problem(args.host)) is not None:
        problems.append(f"--host: {problem}")
    for origin in args.allow_origin:
        if (problem := _origin_problem(origin)) is not None:
            problems.append(f"--allow-origin: {problem}")
    return problems


class _TokenNotWritten(Exception):
    """The token file could not be put in place once listening: `serve` stops."""


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _serve(args: argparse.Namespace) -> int:
    """`serve`. Nothing is touched before the flags and the config are known good, and the
    token file only once the socket is bound: a `serve` that cannot listen (the port is
    another server's) exits 2 and leaves that server's token file as it was."""
    import gc
    import logging

    import attrs
    import trio

    from ..service.access import create_token_file, default_token_path, remove_token_file
    from ..service.server import Limits, Listening, ServiceOptions, run_service
    from ..service.wire import DEFAULT_PORT

    problems = _serve_problems(args)
    for problem in problems:
        _usage("serve", problem)
    if problems:
        return EXIT_USAGE
    config = _load(args)
    port: int = DEFAULT_PORT if args.port is None else args.port
    address = f"[{args.host}]:{port}" if ":" in args.host else f"{args.host}:{port}"
    token: str | None = None
    token_path: Path | None = None
    # The token waits in a private file beside its place, to be renamed there once the
    # socket is bound (the same rename `create_token_file` makes: never seen partial).
    pending: Path | None = None
    if not args.no_auth:
        token_path = Path(args.token_file) if args.token_file else default_token_path(os.environ)
        pending = token_path.with_name(f".{token_path.name}.{os.getpid()}.pending")
        try:
            token = create_token_file(pending)
        except OSError as exc:
            return _usage("serve", f"cannot write the token file {token_path}: {exc}")
    given = {b.field: getattr(args, b.field) for b in _LIMIT_FLAGS}
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
        access = f"token file {token_path}" if token_path else "no auth (--no-auth)"
        print(f"mcpx-hooks serve: listening on {at.url}; {access}", flush=True)
        # Everything allocated so far lives as long as the server: keep it out of the
        # collector's way (about 1.3x frames/s at 500 clients).
        gc.collect()
        gc.freeze()

    from ..core.errors import DEBUG_ENV

    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="mcpx-hooks serve: %(message)s",
        stream=sys.stderr,
    )
    failure: str | None = None
    code = EXIT_OK
    try:
        trio.run(run_service, config, options, ready)
    except* _TokenNotWritten as group:
        failure, code = str(_innermost(group)), EXIT_USAGE
    except* OSError as group:
        leaf = _innermost(group)
        reason = getattr(leaf, "strerror", None) or str(leaf)
        if listening:
            failure, code = f"stopped: {reason}", EXIT_FAILED
        else:  # bind or resolve: the address in use, not this machine's, no permission
            failure, code = f"cannot listen on {address}: {reason}", EXIT_USAGE
    finally:
        if token is not None:
            for path in (pending, token_path):
                if path is not None:
                    remove_token_file(path, token)  # only where it still holds this token
    if failure is not None:
        print(f"mcpx-hooks serve: {failure}", file=sys.stderr)
        return code
    print("mcpx-hooks serve: stopped", file=sys.stderr)
    return EXIT_OK


def _events(args: argparse.Namespace) -> int:
    import trio

    from ..service import remote
    from ..service.access import TokenFileError

    def show(event: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(event), flush=True)
        else:
            print(remote.event_line(event), flush=True)

    try:
        trio.run(remote.follow_events, _remote(args), args.kinds, args.since, show)
    except (remote.RemoteError, TokenFileError) as exc:
        return _remote_failed("events", exc)
    return EXIT_OK


def mock_context(config: Config, phase: Phase, event: dict[str, Any]) -> HookContext:
    """The generated input of `hook test`, with the `--event` object merged over it."""
    from ..core.frames import now_rfc3339
    from ..core.points import Phase
    from ..run.hookcontext import HookContext, RunInfo, new_run_id

    run = RunInfo(f"test-{new_run_id()}", ("true",), str(Path.cwd()), now_rfc3339())
    error = event.get("error")
    if error is None and phase is Phase.ON_ERROR:
        error = {"message": "mock failure", "exitCode": 1}
    result = event.get("result")
    if result is None and phase is Phase.ON_SUCCESS:
        result = {"value": None}
    outcome = None
    if phase is Phase.SUFFIX:
        outcome = "error" if error is not None else "success"
    mock_event = event.get("event")
    if mock_event is None and phase is Phase.OBSERVE:
        mock_event = {"seq": 0, "kind": "run.finished", "at": now_rfc3339(), "data": {}}
    return HookContext(
        run=run,
        caller_autonomy=config.autonomy_hooks,
        supervisor_max=config.autonomy_max,
        input=(event.get("input", {}),) if phase is Phase.BEFORE else None,
        result=result,
        error=error,
        event=mock_event,
        outcome=outcome,
    )


def _hook_test(args: argparse.Namespace) -> int:
    import attrs
    import trio

    from ..core.convert import to_json
    from ..core.frames import HookStatus
    from ..core.points import Phase
    from .view import hook_frame_lines

    try:
        config, hook = _pick_hook(args)
        event: dict[str, Any] = {}
        if args.event:
            event = _json_flag(args.event, Path(args.event).read_text())
            if not isinstance(event, dict):
                raise _Usage(f"{args.event}: expected a JSON object")
    except (_Usage, OSError, json.JSONDecodeError) as exc:
        print(f"mcpx-hooks hook test: {exc}", file=sys.stderr)
        return EXIT_USAGE
    phase = Phase(args.phase)
    hook = attrs.evolve(hook, phase=phase)
    frame = trio.run(_run_one, hook, mock_context(config, phase, event))
    if args.json:
        print(json.dumps(to_json(frame)))
    else:
        print("\n".join(hook_frame_lines(to_json(frame))))
    return EXIT_OK if frame.status is HookStatus.OK else EXIT_FAILED


async def _run_one(hook: Hook, ctx: HookContext) -> HookFrame:
    from ..core.frames import stamp
    from ..process.spawner import open_spawner
    from ..run.hookrun import run_hook

    async with open_spawner() as spawner:
        return stamp((await run_hook(spawner, hook, ctx)).frame, ctx.run_id, 0)
