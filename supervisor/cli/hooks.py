"""`hook test` (one hook against a mock payload) and `hooks list` (the hooks in force, here or
on a server)."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.places import shown_file
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    Usage,
    json_flag,
    load,
    read_bounded,
    remote,
    remote_failed,
    run_async,
    say,
    say_warnings,
    usage,
)
from .parser import add_config_arguments, add_token_file_argument

#: The most `hook test --event` reads (a hook's whole input, as a service's message may be
#: many times over).
MAX_EVENT_BYTES = 16 * 1024 * 1024

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any, Final

    from ..core.hookframes import HookFrame
    from ..core.hooks import Config, Hook, SkippedFile
    from ..core.points import Phase
    from ..run.hookcontext import HookContext


def add_hook_arguments(hook: argparse.ArgumentParser) -> None:
    from ..core.points import Phase

    # (The flags go on `test` only: on `hook` too, `hook --json test` parsed, and the
    # subcommand's defaults then undid them.)
    test = hook.add_subparsers(dest="hook_command", required=True, metavar="test")
    t = add_config_arguments(test.add_parser("test", help="run one hook against a mock payload"))
    t.add_argument("name", nargs="?", help="a hook in force, by name")
    t.add_argument("--hook", dest="hook_json", metavar="JSON", help="a hook given inline")
    t.add_argument(
        "--phase",
        choices=[p.value for p in Phase],
        help="the phase to run it at (default: the named hook's own; another is an error)",
    )
    t.add_argument(
        "--event",
        metavar="FILE",
        help="a JSON object merged over the generated input (result, error, input or event);"
        " - reads it from stdin",
    )
    t.add_argument(
        "--show-request",
        action="store_true",
        help="a prompt hook: print the request it would send (its API key never shown) and"
        " send nothing",
    )


def add_hooks_arguments(hooks: argparse.ArgumentParser) -> None:
    h = add_config_arguments(
        hooks.add_subparsers(dest="hooks_command", required=True, metavar="list").add_parser(
            "list", help="list the hooks in force and where they came from"
        )
    )
    h.add_argument("--remote", metavar="URL", help="the hooks in force on a server (ws://…)")
    add_token_file_argument(h)


def hooks_list(args: argparse.Namespace) -> int:
    from .hooktable import hook_table

    if args.remote:
        if args.config:
            return usage("hooks list", "--config is the server's; --remote lists what it has")

        from ..service import remote as client
        from ..service.access import TokenFileError
        from ..service.remoteread import RemoteError

        try:
            found = run_async(client.list_hooks, remote(args))
        except (RemoteError, TokenFileError) as exc:
            return remote_failed("hooks list", exc)
        if args.json:
            print(json.dumps(found, indent=2))
        elif not found:
            print("no hooks in force")
        else:
            print("\n".join(hook_table(found)))
        return EXIT_OK
    # hook_json: the converter's own shape, without loading cattrs
    from ..core.hooks import caller_autonomy, effect_in_force, hook_json
    from .printable import printable
    from .promptview import say_model_warnings, say_pinned_tool_warnings

    # A project file not applied is listed on stdout (`skipped_json`, "not applied: …"),
    # so the warning loading said for it is not said again on stderr.
    config = load(args, say=False)
    say_warnings(config, but_skipped=True)
    say_model_warnings(config.hooks)
    say_pinned_tool_warnings(config, config.hooks)
    if args.json:
        skipped = [skipped_json(f) for f in config.skipped]
        print(json.dumps([*(hook_json(h) for h in config.hooks), *skipped], indent=2))
        return EXIT_OK
    if not config.hooks:
        print("no hooks in force")
    else:
        # The effect each has in force under this config, as a run here would have it
        # (`exec --explain` says the same), not only the one declared.
        caller = caller_autonomy(config, None)
        in_force = [effect_in_force(h, caller, config.autonomy_max) for h in config.hooks]
        print("\n".join(hook_table([hook_json(h) for h in config.hooks], in_force)))
    for f in config.skipped:
        then = f"; to apply it: {f.trust_command}" if f.trust_command else ""
        print(printable(f"not applied: {shown_file(f.file)} ({f.reason}){then}"))
    return EXIT_OK


#: The names of the hooks in force a `hook test` of an unknown name lists, at most.
NAMES_LISTED: Final = 10


def _no_such_hook(name: str, names: list[str]) -> str:
    """What `hook test NAME` says of a name no hook in force has: the closest name, and the
    first `NAMES_LISTED` names (a generated config holds thousands), on one line."""
    from ..config import did_you_mean
    from .printable import printable

    hint = did_you_mean(name, names)
    listed = ", ".join(names[:NAMES_LISTED]) or "none"
    if len(names) > NAMES_LISTED:
        more = len(names) - NAMES_LISTED
        listed += f", and {more} more: `mcpx-hooks hooks list` lists them"
    return printable(f"no hook named {name!r} is in force{hint} (hooks in force: {listed})")


def skipped_json(skipped: SkippedFile) -> dict[str, str]:
    """A project file not applied, as `hooks list --json` lists it after the hooks in force:
    `skipped` (the file), `reason`, and `trust`, the command that trusts it (when one can)."""
    out = {"skipped": skipped.file, "reason": skipped.reason}
    if skipped.trust_command:
        out["trust"] = skipped.trust_command
    return out


def hook_test(args: argparse.Namespace) -> int:
    """`hook test`: runs the hook once, as a run would at its phase, against the generated
    input (`mock_context`); 0 when its status is `ok` and it did not refuse, 3 when it
    refused (a fail-closed failure refuses), 1 when it failed."""
    if args.show_request:
        return _hook_test(args)
    from ..process import prestarted

    with prestarted():  # the spawner's start overlaps the config's loading and the imports
        return _hook_test(args)


def _hook_test(args: argparse.Namespace) -> int:
    import os

    import attrs

    from ..core.convert import to_json
    from ..core.frames import HookStatus
    from ..core.points import Phase, When
    from ..core.redact import Redactor
    from ..core.servers import server_secrets
    from ..run.hookcontext import hook_secrets
    from .view import hook_frame_lines

    try:
        config, hook = _pick_hook(args)
        event: dict[str, Any] = {}
        if args.event:
            name = "stdin (--event -)" if args.event == "-" else shown_file(args.event)
            why = "a hook's input is held whole"
            data = read_bounded("--event", args.event, MAX_EVENT_BYTES, why)
            event = json_flag(name, data)
            if not isinstance(event, dict):
                raise Usage(f"{name}: expected a JSON object")
            _check_event(name, event)
    except (Usage, OSError, UnicodeDecodeError) as exc:
        say(f"mcpx-hooks hook test: {exc}")
        return EXIT_USAGE
    phase = Phase(args.phase) if args.phase else hook.phase
    hook = attrs.evolve(hook, phase=phase)
    # What a run's redaction hides: its hooks' secrets and its tool servers' (a plugin hook's
    # server may say one); from the values a prompt hook sends too, as in a run.
    secrets = hook_secrets((*config.hooks, hook), None, os.environ)
    redactor = Redactor(secrets | server_secrets(config.servers.values(), os.environ))
    try:
        follows = hook.when.get(When.KINDS)
        ctx = attrs.evolve(mock_context(config, phase, event, hook.on, follows), redactor=redactor)
    except Usage as exc:
        say(f"mcpx-hooks hook test: {exc}")
        return EXIT_USAGE
    if args.show_request:
        from .promptview import show_request

        return show_request(config, hook, ctx)
    frame = run_async(_run_one, hook, ctx, config)
    wire = redactor.fields(to_json(frame))
    if args.json:
        print(json.dumps(wire))
    else:
        print("\n".join(hook_frame_lines(wire)))
    if frame.refused is not None:
        return EXIT_REFUSED
    return EXIT_OK if frame.status is HookStatus.OK else EXIT_FAILED


def _pick_hook(args: argparse.Namespace) -> tuple[Config, Hook]:
    from ..core.hooks import SourceKind
    from ..core.points import Phase

    if args.hook_json is not None:
        from ..core.jsontext import JsonError, duplicate_keys, loads

        try:
            decl = loads(args.hook_json)
        except JsonError:
            decl = None  # load_config reports it with file and position
        # A key given twice: passed on as written, for load_config to refuse at its pointer
        # (rewritten here, the last of them was taken without a word).
        if isinstance(decl, dict) and not duplicate_keys(args.hook_json):
            if args.phase is not None:
                decl.setdefault("phase", args.phase)
            if "on" not in decl:
                # Without "on", the hook is one of the script point's, which has no default
                # phase (a hook declared without one observes the events its "on" names).
                if "phase" not in decl:
                    raise Usage(
                        '--hook: give its phase, as "phase" in the JSON or with --phase (or,'
                        ' for an observe hook, the event kinds it follows as "on")'
                    )
                if decl["phase"] == Phase.OBSERVE.value:
                    # Else the "script" filled in below is said as never firing: a value not typed.
                    raise Usage(
                        '--hook: an observe hook follows events: give their kinds as "on" in'
                        ' the JSON (such as "run.finished", "hook" or "*")'
                    )
                decl["on"] = "script"
            args.hook_json = json.dumps(decl)
        config = load(args, [args.hook_json])
        hook = next(h for h in config.hooks if h.source.kind is SourceKind.COMMAND_LINE)
    else:
        if args.name is None:
            raise Usage("hook test needs a hook NAME or --hook JSON")
        config = load(args)
        found = config.find(args.name)
        if found is None:
            raise Usage(_no_such_hook(args.name, [h.name for h in config.hooks]))
        hook = found
    if args.phase is not None and args.phase != hook.phase.value:
        raise Usage(
            f'--phase {args.phase}: the hook "{hook.name}" is declared at phase'
            f' "{hook.phase.value}"; leave --phase out to run it there'
        )
    return config, hook


#: What `--event` may give, as the hook's input holds it; the rest of the input (`protocol`,
#: `hook`, `run`: a captured input has them) is generated and takes its place.
_EVENT_KEYS: Final = ("input", "result", "error", "event")
_GENERATED_KEYS: Final = ("protocol", "hook", "run")


def _check_event(name: str, event: dict[str, Any]) -> None:
    """Refuses an `--event` object whose keys the input has not, or whose `result`, `error`
    or `event` is not the object the input holds there (`mcpx-hooks schema hook-input`): a
    misspelt key or an error given as a string was dropped, or broke the command."""
    from ..config import describe

    for key in event:
        if key not in (*_EVENT_KEYS, *_GENERATED_KEYS):
            expected = ", ".join(_EVENT_KEYS)
            raise Usage(
                f"{name}: unknown key {json.dumps(key)}; expected one of: {expected}"
                ' (an error as {"error": {"message": "…"}})'
            )
    # Each object key, with the key it needs and the type that key's value takes.
    needs: dict[str, tuple[str, type | None]] = {
        "result": ("value", None),
        "error": ("message", str),
        "event": ("", None),
    }
    for key, (inner, kind) in needs.items():
        value = event.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            found = describe(value)
        elif inner and inner not in value:
            found = f'an object without "{inner}"'
        elif inner and kind is not None and not isinstance(value[inner], kind):
            found = f'"{inner}" as {describe(value[inner])}'
        else:
            continue
        shape = f' with "{inner}"' if inner else ""
        holds = "as the hook's input holds it"
        raise Usage(f'{name}: "{key}" is an object{shape} ({holds}), found {found}')


def mock_context(
    config: Config,
    phase: Phase,
    event: dict[str, Any],
    on: str = "run.finished",
    when_kinds: Sequence[str] | None = None,
) -> HookContext:
    """The generated input of `hook test`, with the `--event` object merged over it. An
    observe hook's event is generated of a kind its `on` follows and its `when.kinds`
    (`when_kinds`) takes, and a given one is merged over it key by key (`{"event": {"data":
    …}}` keeps its `seq`, `kind` and `at`, which `MCPX_HOOK_EVENT_*` say); a given kind the
    hook does not follow is bad input."""
    from ..core.events import EventKind, kind_matches
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
    if phase is Phase.OBSERVE:
        patterns = [[on]] if when_kinds is None else [[on], list(when_kinds)]
        kinds = [k.value for k in EventKind if all(kind_matches(k.value, p) for p in patterns)]
        if not kinds:
            raise Usage(
                f"the hook observes no kind of event: on = {json.dumps(on)} and when.kinds ="
                f" {json.dumps(list(when_kinds or ()))} take none in common"
            )
        kind = EventKind.RUN_FINISHED.value if EventKind.RUN_FINISHED in kinds else kinds[0]
        generated = {"seq": 0, "kind": kind, "at": now_rfc3339(), "data": {}}
        mock_event = {**generated, **(mock_event or {})}
        if not all(kind_matches(str(mock_event["kind"]), p) for p in patterns):
            follows = f"on = {json.dumps(on)}" + (
                "" if when_kinds is None else f", when.kinds = {json.dumps(list(when_kinds))}"
            )
            raise Usage(
                f"--event: the event's kind {json.dumps(mock_event['kind'])} is not one the"
                f" hook observes ({follows}); give one it follows ({', '.join(kinds)})"
            )
    return HookContext(
        run=run,
        caller_autonomy=config.autonomy_hooks,
        supervisor_max=config.autonomy_max,
        input=(event.get("input", {}),) if phase is Phase.BEFORE else None,
        result=result,
        error=error,
        event=mock_event,
        outcome=outcome,
        withheld=config.models.key_names,
    )


async def _run_one(hook: Hook, ctx: HookContext, config: Config) -> HookFrame:
    import attrs

    from ..core.frames import stamp
    from ..process.spawner import open_spawner
    from ..run.bus import Bus
    from ..run.hookrun import run_hook
    from ..run.serverhooks import open_servers
    from ..tools.servers import ToolServers

    # A plugin hook calls the config's tool servers, started here for it and stopped after.
    async with open_spawner() as spawner, open_servers(spawner, Bus(), config) as servers:
        ctx = attrs.evolve(ctx, servers=ToolServers(servers, config.servers))
        return stamp((await run_hook(spawner, hook, ctx)).frame, ctx.run_id, 0)
