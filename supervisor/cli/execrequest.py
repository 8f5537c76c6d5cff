"""What `exec` asks for: the run request its flags make, in process (`local_request`) and
for a server (`remote_request`, the same run as the `/v1/exec` request), and the pieces both
take (the argv, the source lines, the environment, stdin, the timeout)."""

from __future__ import annotations

import argparse
import math
import os

from ..core.places import shown_file
from .common import Usage, json_flag, load, read_bounded, say

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from typing import Any, Final

    from ..core.changes import ChangedFiles
    from ..core.hooks import Config
    from ..core.points import Phase
    from ..core.selection import Selection
    from ..run.scriptrun import RunRequest

#: The most `--files-from` reads, in bytes: a list of paths, not a stream.
_MAX_FILES_FROM: Final = 16 * 1024 * 1024
#: The most `exec --stdin` gives a script in process (a run over a service: its message).
MAX_STDIN_BYTES: Final = 64 * 1024 * 1024
#: The longest `--timeout`, in seconds: a year.
_MAX_TIMEOUT_S: Final = 365 * 24 * 3600


def source_flags() -> dict[str, Phase]:
    """A flag per source phase of the script point: `--before`, …, `--on-success`, …"""
    from ..core.points import POINTS

    return {"--" + _kebab(phase.value): phase for phase in POINTS["script"].phases}


def _kebab(name: str) -> str:
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in name)


def _timeout_ms(args: argparse.Namespace) -> int | None:
    """`--timeout S` in ms: a finite number of seconds above 0, at most a year."""
    if args.timeout is None:
        return None
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= _MAX_TIMEOUT_S):
        raise Usage(
            f"--timeout: expected seconds above 0 and at most {_MAX_TIMEOUT_S}, got {args.timeout}"
        )
    seconds: float = args.timeout
    return max(1, round(seconds * 1000))


def run_argv(args: argparse.Namespace) -> list[str]:
    argv: list[str] = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if sum(x is not None and x != [] for x in (args.python, args.code, argv or None)) != 1:
        raise Usage("exec needs exactly one of -- ARGV…, --python FILE, -c CODE")
    from ..core.jsontext import is_unicode
    from ..core.spawntext import argv_problems

    # An argument that is not UTF-8 arrives as lone surrogates: said here, not by the spawner.
    problems = [_not_utf8(f"argv[{i}]", a) for i, a in enumerate(argv) if not is_unicode(a)]
    problems += [
        _not_utf8(flag, value)
        for flag, value in (("--python", args.python), ("-c", args.code))
        if value is not None and not is_unicode(value)
    ]
    problems = problems or argv_problems(argv, "argv") + argv_problems(
        [x for x in (args.python, args.code) if x is not None], "--python/-c"
    )
    if argv[:1] == [""]:
        problems.append("argv[0]: the program is empty")
    if problems:
        raise Usage("; ".join(problems))
    return argv


def _not_utf8(what: str, given: str) -> str:
    """An argument with bytes that are not UTF-8 (read as lone surrogates), named as bash
    quotes it: a run's command line is sent as text, so it cannot be carried."""
    return (
        f"{what}: {shown_file(given)} is not UTF-8 (a run's command line is sent as text);"
        " give it in UTF-8 (a file so named: rename it, or let the script find it)"
    )


def source_lines(args: argparse.Namespace) -> dict[str, list[str | None]]:
    """The source flags as a per-call `script` layer: appended to the config's lines."""
    return {
        phase.value: [None, *getattr(args, f"src_{phase}")]
        for phase in source_flags().values()
        if getattr(args, f"src_{phase}")
    }


def _env(args: argparse.Namespace) -> dict[str, str]:
    """`--env K=V`, each a literal value; `--pass-env`/`--secret` names checked too."""
    from ..core.passenv import reference_problem, secret_name_problem
    from ..core.spawntext import env_problems

    env: dict[str, str] = {}
    problems: list[str] = []
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not name:
            problems.append(f"--env: expected NAME=VALUE, found {item!r}")
            continue
        env[name] = value
        if (why := reference_problem(value, flags=True)) is not None:
            problems.append(f"--env {name}: {why}")
    problems += env_problems(env, "--env")
    names = dict.fromkeys([*args.pass_env, *args.secrets], "")
    problems += env_problems(names, "--pass-env/--secret")
    problems += [f"--secret: {why}" for s in args.secrets if (why := secret_name_problem(s))]
    if problems:
        raise Usage("; ".join(problems))
    return env


def _say_withheld(args: argparse.Namespace, config: Config) -> None:
    """A warning for each `--pass-env` that names or matches one of the supervisor's own
    secrets (the service token, a model's key), which it never passes."""
    from ..core.passenv import withheld_matches

    for glob, name in withheld_matches(args.pass_env, config.models.key_names):
        say(
            f"mcpx-hooks exec: warning: --pass-env {glob}: {name} is the supervisor's own"
            f" secret, never passed by --pass-env; pass it with --secret {name} (redacted)"
        )


def _placeholders(args: argparse.Namespace) -> dict[str, str]:
    """`--placeholder K=V`: each value a string, each name a placeholder's."""
    from ..core.models import is_name
    from ..core.placeholders import run_value_problem

    found: dict[str, str] = {}
    for item in getattr(args, "placeholders", ()):
        name, eq, value = item.partition("=")
        if not eq or not is_name(name):
            raise Usage(
                f"--placeholder: expected NAME=VALUE with NAME a letter or _ then letters,"
                f" digits, _ or -, found {item!r}"
            )
        if (why := run_value_problem(name)) is not None:
            raise Usage(f"--placeholder {name}: {why}")
        found[name] = value
    return found


def selection(args: argparse.Namespace) -> Selection:
    """What `--skip`, `--only` and `MCPX_HOOKS_SKIP` leave out of the run."""
    from ..core.selection import Selection, env_names

    return Selection(
        tuple(dict.fromkeys(getattr(args, "skip", ()))),
        tuple(dict.fromkeys(getattr(args, "only", ()))),
        env_names(os.environ),
    )


def selected(args: argparse.Namespace, config: Config) -> Config:
    """`config` without the hooks the run leaves out (a `Usage` when it may not)."""
    from ..core.selection import SelectionError, select

    try:
        return select(config, selection(args))
    except SelectionError as exc:
        raise Usage(str(exc)) from None


def files_from(args: argparse.Namespace) -> ChangedFiles | None:
    """`--files-from FILE` (`-`: stdin): the files `when.files` matches, instead of git's."""
    from ..core.changes import given_files

    name = getattr(args, "files_from", None)
    if name is None:
        return None
    if name == "-" and args.stdin == "-":
        raise Usage("--files-from - and --stdin - cannot both read this stdin")
    text = read_bounded("--files-from", name, _MAX_FILES_FROM, "paths, one a line")
    return given_files(text.decode(errors="surrogateescape"), f"--files-from {name}")


def _stdin_bytes(args: argparse.Namespace) -> bytes:
    if not args.stdin:
        return b""
    why = "a script's stdin is held whole: let the script open a file that large itself"
    return read_bounded("--stdin", args.stdin, MAX_STDIN_BYTES, why)


def local_request(args: argparse.Namespace) -> tuple[Config, RunRequest]:
    """The run `exec` makes in process, admitted as every run is (`service/admission.py`):
    its request from the flags, its caller the operator here, with the config this
    directory's layers, `--hook`s and source flags resolve to."""
    from ..core.effects import Effect
    from ..core.hooks import Profile
    from ..service.admission import Caller, admit
    from ..service.execrequest import ExecRequest

    argv = run_argv(args)
    script_lines = source_lines(args)
    # What loading says is in the run's stream (a `warning` frame each): the readable view
    # shows it there, once; with --json the stream is a program's, so stderr says it too.
    loaded = load(args, args.hooks, script_lines or None, say=args.json)
    config = selected(args, loaded)
    files = files_from(args)
    env = _env(args)
    _say_withheld(args, config)
    stdin = _stdin_bytes(args)
    cwd = _cwd()
    request = ExecRequest(
        argv=tuple(argv) or None,
        file=args.python,
        python=args.code,
        cwd=cwd,
        stdin=stdin,
        env=env,
        pass_env=tuple(args.pass_env),
        secrets=tuple(args.secrets),
        input=(json_flag("--input", args.input),) if args.input is not None else None,
        timeout_ms=_timeout_ms(args),
        autonomy=Effect.parse(args.autonomy) if args.autonomy is not None else None,
        sandbox=Profile(args.sandbox) if args.sandbox else None,
        network=_network(args, config.script_network, args.sandbox or config.script_sandbox),
        placeholders=_declared(_placeholders(args), loaded),
    )
    # In process, the caller's environment is this one.
    admitted = admit(request, Caller.local(config, cwd, os.environ))
    if files is None:
        return admitted.config, admitted.request
    import attrs

    return admitted.config, attrs.evolve(admitted.request, files=files)


def _declared(given: dict[str, str], config: Config) -> dict[str, str]:
    """`given` (`--placeholder`), each name a `vars` name of a prompt hook in `config` (the
    ones `--skip` leaves out too): a value for a name none declares would be dropped without
    a word (a name misspelt)."""
    from ..core.placeholders import undeclared_placeholder
    from ..service.admission import declared_vars

    problem = undeclared_placeholder(given, declared_vars(config))
    if problem is not None:
        raise Usage(f"--placeholder {problem}")
    return given


def _cwd() -> str:
    """The run's working directory, this one: a path a request carries as text."""
    from ..core.jsontext import is_unicode

    cwd = os.getcwd()
    if not is_unicode(cwd):
        raise Usage(
            f"the working directory's path is not UTF-8 ({shown_file(cwd)}): a run's directory"
            " is sent as text; cd to a directory whose path is UTF-8 and run it from there"
        )
    return cwd


def _network(
    args: argparse.Namespace, ceiling: tuple[str, ...] | None, profile: str | None
) -> tuple[str, ...] | None:
    """`--network` (repeatable): the run's hosts, None when not given; each a host glob, and
    within `ceiling` (`[script] network`) when there is one: it narrows it, never widens;
    the run's `profile` one a list narrows (None: the server's, which it checks)."""
    from ..core import egress

    if not args.network:
        return None
    if profile is not None and str(profile) not in egress.CONFINING:
        raise Usage(f"--network: {egress.unconfined(str(profile))}")
    for item in args.network:
        if not egress.valid(item):
            raise Usage(
                f"--network {item}: expected a host glob with an optional port (pypi.org,"
                f" *.example.com:8443){egress.item_hint(item)}"
            )
        if ceiling is not None and not egress.narrows([item], ceiling):
            raise Usage(
                f"--network {item}: not within [script] network ({', '.join(ceiling)}):"
                " --network may narrow it, never widen it"
            )
    return tuple(args.network)


def _remote_env(args: argparse.Namespace, config: Config, hooks: list[Any]) -> dict[str, Any]:
    """The run's `env`, `pass_env` and `secrets` (the caller's `[script]` ones, then the
    flags'), and `caller_env`: this environment's values for the names the run and its
    per-call hooks pass, and none other of it."""
    from ..core.passenv import PASS_ENV_KEY, SECRETS_KEY, wanted

    pass_env = tuple(dict.fromkeys([*config.script_pass_env, *args.pass_env]))
    secrets = tuple(dict.fromkeys([*config.script_secrets, *args.secrets]))
    globs = [*pass_env, *_listed(hooks, PASS_ENV_KEY)]
    names = [*secrets, *_listed(hooks, SECRETS_KEY)]
    return {
        "env": _env(args),
        "pass_env": pass_env,
        "secrets": secrets,
        "caller_env": wanted(globs, names, os.environ, withheld=config.models.key_names),
    }


def _listed(hooks: list[Any], key: str) -> list[str]:
    """The strings of each hook's list `key` (what the server validates, taken as given)."""
    found: list[str] = []
    for hook in hooks:
        listed = hook.get(key) if isinstance(hook, dict) else None
        found += [x for x in listed if isinstance(x, str)] if isinstance(listed, list) else []
    return found


def remote_request(
    args: argparse.Namespace,
    server_files: Callable[[], tuple[Collection[str], list[dict[str, Any]]]] | None = None,
) -> dict[str, Any]:
    """The `/v1/exec` request for the same run `exec` would make in process: this working
    directory, and the hooks and source lines this directory's config layers resolve to, as
    per-call ones (`remotehooks.py`). When the caller applies files, `server_files` (asked
    then) names the server's own files and hooks: those files are left out, and a hook the
    server lists already is not sent (the server applies them itself; a worker behind a
    gateway, whose files the gateway does not list, drops a hook it has itself). The server
    admits it (`service/admission.py`)."""
    from ..core.effects import Effect
    from ..core.hooks import DEFAULT_RUN_SANDBOX, Profile
    from ..core.percall import listed
    from ..service.execrequest import ExecRequest, wire_request
    from .common import say_warnings
    from .remotehooks import caller_config, per_call_hooks, script_lines

    argv = run_argv(args)
    if not selection(args).empty or getattr(args, "files_from", None) is not None:
        raise Usage(
            "--skip, --only, MCPX_HOOKS_SKIP and --files-from shape a run here; with --remote"
            " the server applies its own hooks (unset MCPX_HOOKS_SKIP, or run without --remote)"
        )
    config = caller_config(args, source_lines(args) or None)
    served: list[dict[str, Any]] = []
    if config.files and server_files is not None:
        files, served = server_files()
        theirs = {os.path.realpath(f) for f in files}
        if theirs & {os.path.realpath(f) for f in config.files}:
            config = caller_config(args, source_lines(args) or None, theirs)
    say_warnings(config)
    _say_withheld(args, config)
    hooks = [h for h in per_call_hooks(config) if not listed(h, served)]
    environment = _remote_env(args, config, hooks)
    stdin = _stdin_bytes(args)
    try:
        stdin.decode()
    except UnicodeDecodeError:
        raise Usage("--stdin: with --remote, stdin is sent as text and must be UTF-8") from None
    # The caller's hooks.autonomy as a local run clamps it: --autonomy, the config's, its max.
    autonomy = min(config.autonomy_hooks, config.autonomy_max)
    if args.autonomy is not None:
        autonomy = min(autonomy, Effect.parse(args.autonomy))
    sandbox = None  # the server's own default, unless this side's differs
    if args.sandbox or config.script_sandbox is not DEFAULT_RUN_SANDBOX:
        sandbox = Profile(args.sandbox or config.script_sandbox)
    request = ExecRequest(
        argv=tuple(argv) or None,
        file=args.python,
        python=args.code,
        cwd=_cwd(),
        hooks=tuple(hooks),
        script_lines=script_lines(config) or None,
        stdin=stdin,
        input=(json_flag("--input", args.input),) if args.input is not None else None,
        placeholders=_placeholders(args),
        timeout_ms=_timeout_ms(args),
        autonomy=autonomy if args.autonomy is not None or autonomy < Effect.RUN else None,
        sandbox=sandbox,
        # (The server holds it to its own [script] network, and its own profile.)
        network=_network(args, None, args.sandbox),
        # Like an in-process run, which ends with its `exec`: a vanished client stops its run.
        cancel_on_disconnect=True,
        **environment,
    )
    return wire_request(request)
