"""`mcpx-hooks`: the command line (SPEC §9).

Exit codes: 0 success; 1 the thing run failed (`hook test`: the hook's status is not `ok`);
2 bad input (a config error, a usage error, `validate` found problems).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from . import schemas
from .config import load_config, validate_files
from .effects import Effect
from .errors import ConfigError
from .frames import HookFrame, HookStatus, now_rfc3339, to_json
from .hookrun import HookContext, RunInfo, new_run_id, run_hook
from .hooks import Config, Hook, SourceKind
from .points import Phase
from .run import DEFAULT_SCRIPT_TIMEOUT_MS, Run, RunRequest
from .runtime import open_runtime
from .script import Script
from .spawn import open_spawner
from .view import frame_lines, hook_frame_lines, hook_table

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="mcpx-hooks", description=__doc__.splitlines()[0])
    top.add_argument(
        "--version", action="version", version=f"mcpx-hooks {metadata.version('mcpx-hooks')}"
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def configured(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--config",
            action="append",
            default=[],
            metavar="F",
            help="a config file, applied after the discovered ones (repeatable)",
        )
        p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    test = configured(sub.add_parser("hook", help="work with one hook")).add_subparsers(
        dest="hook_command", required=True, metavar="test"
    )
    t = configured(test.add_parser("test", help="run one hook against a mock payload"))
    t.add_argument("name", nargs="?", help="a hook in force, by name")
    t.add_argument("--hook", dest="hook_json", metavar="JSON", help="a hook given inline")
    t.add_argument("--phase", required=True, choices=[p.value for p in Phase])
    t.add_argument(
        "--event",
        metavar="FILE",
        help="a JSON object merged over the generated input (result, error, input or event)",
    )

    x = configured(sub.add_parser("exec", help="run a script with its hooks; stream its frames"))
    x.add_argument(
        "--hook",
        dest="hooks",
        action="append",
        default=[],
        metavar="JSON",
        help="a hook for this run (repeatable)",
    )
    for flag, phase in _SOURCE_FLAGS.items():
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
    x.add_argument("--timeout", type=float, metavar="S", help="the script's timeout, seconds")
    x.add_argument("--input", metavar="JSON", help="the run's input, a JSON value")
    x.add_argument("--stdin", metavar="FILE", help="the script's stdin (- for this one's)")
    x.add_argument("--remote", metavar="URL", help="run on a server (ws://…)")
    what = x.add_mutually_exclusive_group()
    what.add_argument("--python", metavar="FILE", help="a Python script")
    what.add_argument("-c", dest="code", metavar="CODE", help="Python code")
    x.add_argument("argv", nargs=argparse.REMAINDER, help="-- ARGV…")

    hooks = sub.add_parser("hooks", help="the hooks in force").add_subparsers(
        dest="hooks_command", required=True, metavar="list"
    )
    configured(hooks.add_parser("list", help="list the hooks in force and where they came from"))

    v = sub.add_parser("validate", help="validate config files; every problem, with pointers")
    v.add_argument("files", nargs="+", metavar="FILE")

    s = sub.add_parser("schema", help="print a JSON Schema (or list them)")
    s.add_argument("name", nargs="?", choices=schemas.SCHEMA_NAMES)

    sub.add_parser("demo", help="the main job in miniature, on a built-in example")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
        if args.command == "demo":
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


def _load(args: argparse.Namespace, hooks: Sequence[str] = ()) -> Config:
    return load_config(
        args.config,
        cwd=Path.cwd(),
        environ=os.environ,
        command_line_hooks=hooks,
    )


def _hooks_list(args: argparse.Namespace) -> int:
    config = _load(args)
    if args.json:
        print(json.dumps([h.to_json() for h in config.hooks], indent=2))
    elif not config.hooks:
        print("no hooks in force")
    else:
        print("\n".join(hook_table(config.hooks)))
    return EXIT_OK


def _validate(files: Sequence[str]) -> int:
    problems = validate_files(files)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return EXIT_USAGE
    print(f"ok: {len(files)} file(s) valid")
    return EXIT_OK


def _schema(name: str | None) -> int:
    if name is None:
        print("\n".join(schemas.SCHEMA_NAMES))
    else:
        sys.stdout.write(schemas.schema_text(name))
    return EXIT_OK


def _pick_hook(args: argparse.Namespace) -> tuple[Config, Hook]:
    if args.hook_json is not None:
        try:
            decl = json.loads(args.hook_json)
        except json.JSONDecodeError:
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


_SOURCE_FLAGS: Final = {
    "--before": Phase.BEFORE,
    "--prefix": Phase.PREFIX,
    "--on-success": Phase.ON_SUCCESS,
    "--on-error": Phase.ON_ERROR,
    "--suffix": Phase.SUFFIX,
}


def _exec_request(args: argparse.Namespace) -> tuple[Config, RunRequest]:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if sum(x is not None and x != [] for x in (args.python, args.code, argv or None)) != 1:
        raise _Usage("exec needs exactly one of -- ARGV…, --python FILE, -c CODE")
    if args.remote:
        raise _Usage("--remote needs the WebSocket service, which is not part of this build yet")
    script_lines = {
        phase.value: [None, *getattr(args, f"src_{phase}")]
        for phase in _SOURCE_FLAGS.values()
        if getattr(args, f"src_{phase}")
    }
    config = load_config(
        args.config,
        cwd=Path.cwd(),
        environ=os.environ,
        command_line_hooks=args.hooks,
        script=script_lines or None,
    )
    stdin = b""
    if args.stdin == "-":
        stdin = sys.stdin.buffer.read()
    elif args.stdin:
        stdin = Path(args.stdin).read_bytes()
    request = RunRequest(
        script=Script(tuple(argv) or None, args.python, args.code),
        cwd=str(Path.cwd()),
        stdin=stdin,
        input=(json.loads(args.input),) if args.input is not None else None,
        timeout_ms=round(args.timeout * 1000) if args.timeout else DEFAULT_SCRIPT_TIMEOUT_MS,
        autonomy=Effect.parse(args.autonomy) if args.autonomy else None,
        sources={Phase(k): tuple(v) for k, v in config.script.items()},
    )
    return config, request


def _exec(args: argparse.Namespace) -> int:
    try:
        config, request = _exec_request(args)
    except (_Usage, OSError, json.JSONDecodeError) as exc:
        print(f"mcpx-hooks exec: {exc}", file=sys.stderr)
        return EXIT_USAGE
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
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if run.cancel_scope.cancel_called:
                everything.cancel()
                return
            run.cancel()


def mock_context(config: Config, phase: Phase, event: dict[str, Any]) -> HookContext:
    """The generated input of `hook test`, with the `--event` object merged over it."""
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
    try:
        config, hook = _pick_hook(args)
        event: dict[str, Any] = {}
        if args.event:
            event = json.loads(Path(args.event).read_text())
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
    async with open_spawner() as spawner:
        return (await run_hook(spawner, hook, ctx)).frame
