"""One way in: every run anyone asks for is admitted here, by `admit(request, caller)`.

`exec` in process, a `/v1/exec` client (`exec --remote` among them), a cluster's worker and an
MCP client's `mcpx_exec` call each
make an `ExecRequest` (the CLI from its flags, the others with `execrequest.parse_exec`) and
say who asks (a `Caller`); `admit` holds the request to the rules of that way in, fills every
default once, and gives back the `RunRequest` to run with the config it runs under. What
differs between the ways in is one row of `RULES`, not code in the callers:

- the working directory: a served request's `cwd` (and each per-call hook's) must lie inside
  the server's roots (`roots.py`), and one without `cwd` runs in the first root or in a
  directory made for it; `exec`'s own directory is its operator's grant;
- the sandboxes: a served request's profiles (the run's and each per-call hook's) must be
  among `[service] sandboxes`, and a per-call hook may not raise `maxOutputBytes` past
  `[defaults]`; `exec` runs what its operator asks;
- the caller's environment (what `passEnv` and `secrets` read): the values a served request
  sent (`callerEnv`); `exec`'s own environment;
- placeholders: each name a served request gives a value for must be one the config's
  prompt hooks take in their `vars` (a misspelt name would reach no prompt); `exec` checks
  its `--placeholder`s itself, with the hooks `--skip` leaves out.

For every way in alike: per-call hooks and script lines are layered under the config's own
files (declared in the run's `cwd`), the run's profile is the request's or the config's
`[script] sandbox`, its autonomy the caller's level in force, its timeout the request's or
`DEFAULT_SCRIPT_TIMEOUT_MS`. A refusal is a `WireError` (4400), as the wire sends it; a
directory made for the run is removed first. Whether a server takes a run at all now (it is
stopping, its cap on runs is reached) is the server's to say, around `admit`.

`admit` blocks (it reads the filesystem and the config files): call it from a thread.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from ..config.loading import load_config
from ..core import egress
from ..core.errors import ConfigError
from ..core.hooks import Config, Profile, SourceKind, caller_autonomy
from ..core.percall import already_in_force
from ..core.placeholders import undeclared_placeholder
from ..core.points import Phase
from ..core.records import Record
from ..core.whenindex import call_hooks, script_hooks
from ..process import release_held
from ..run.scriptrun import DEFAULT_SCRIPT_TIMEOUT_MS, RunRequest
from .execrequest import ExecRequest
from .roots import (
    THIS_SERVER,
    Admitter,
    admit_cwd,
    check_hook_dirs,
    roots_in_force,
    worker_admitter,
)
from .wire import Close, WireError


class Way(enum.Enum):
    """Who asks for a run."""

    #: `exec` in process: the operator at their own terminal.
    LOCAL = "local"
    #: A client of `serve`'s `/v1/exec` (`exec --remote` is one).
    CLIENT = "client"
    #: A cluster's worker, for a client of a gateway (which signed the request).
    WORKER = "worker"
    #: An MCP client of `mcpx-hooks mcp`, through its `mcpx_exec` tool.
    MCP = "mcp"


@attrs.frozen(repr=False, eq=False)
class Rules(Record):
    """What admission holds the requests of one way in to (the module docstring says why)."""

    #: The run's `cwd` and its per-call hooks' lie inside the server's roots.
    roots: bool
    #: Its profiles are among `[service] sandboxes`; per-call `maxOutputBytes` within the cap.
    sandboxes: bool
    #: Its caller's environment is the request's `callerEnv`, not the caller's own.
    sent_env: bool
    #: Each of its `placeholders` is a name the config's prompt hooks take (`exec` checks
    #: its own first, with the hooks `--skip` leaves out of the config it runs).
    placeholders: bool


#: The one place the ways in differ.
RULES: Final[dict[Way, Rules]] = {
    Way.LOCAL: Rules(roots=False, sandboxes=False, sent_env=False, placeholders=False),
    Way.CLIENT: Rules(roots=True, sandboxes=True, sent_env=True, placeholders=True),
    Way.WORKER: Rules(roots=True, sandboxes=True, sent_env=True, placeholders=True),
    Way.MCP: Rules(roots=True, sandboxes=True, sent_env=True, placeholders=True),
}


@attrs.frozen(repr=False, eq=False)
class Caller(Record):
    """Who asks, and what of theirs admission reads."""

    way: Way
    #: The config in force where the request arrives: the server's, or the one `exec` loaded
    #: (its `--hook`s and source flags layered in already).
    config: Config
    #: Where the server started (its roots when the config sets none), or `exec`'s directory.
    served_from: str
    #: The environment the config is read again with; a local caller's own environment.
    environ: Mapping[str, str] = attrs.field(repr=False)
    #: The run's id when it was made before (a gateway makes it for a worker's run).
    run_id: str | None = None
    #: Who admits it, as a refusal names it (a worker: by its host name).
    admitter: Admitter = THIS_SERVER

    @classmethod
    def local(cls, config: Config, cwd: str, environ: Mapping[str, str]) -> Caller:
        return cls(Way.LOCAL, config, cwd, environ)

    @classmethod
    def client(cls, config: Config, served_from: str, environ: Mapping[str, str]) -> Caller:
        return cls(Way.CLIENT, config, served_from, environ)

    @classmethod
    def worker(
        cls, config: Config, served_from: str, environ: Mapping[str, str], run_id: str, host: str
    ) -> Caller:
        return cls(Way.WORKER, config, served_from, environ, run_id, worker_admitter(host))

    @classmethod
    def mcp(cls, config: Config, served_from: str, environ: Mapping[str, str]) -> Caller:
        return cls(Way.MCP, config, served_from, environ)

    @property
    def rules(self) -> Rules:
        return RULES[self.way]


@attrs.frozen(repr=False, eq=False)
class Admitted(Record):
    """An admitted request: the run to start, and the config it runs under (the caller's,
    or with per-call layers, that config's files read again under them)."""

    request: RunRequest
    config: Config


def admit(request: ExecRequest, caller: Caller) -> Admitted:
    """The run `request` asks for, held to `caller`'s rules (the module docstring); else
    `WireError` (4400). Blocks: call it from a thread."""
    rules = caller.rules
    roots = roots_in_force(caller.config, caller.served_from) if rules.roots else ()
    if rules.roots:
        by_default = caller.config.service_roots is None
        cwd, made = admit_cwd(request.cwd, roots, caller.admitter, by_default=by_default)
    else:
        cwd, made = request.cwd or caller.served_from, False
    try:
        config = _config_for(request, caller, cwd, roots)
        problem = undeclared_placeholder(request.placeholders, declared_vars(config))
        if rules.placeholders and problem is not None:
            raise WireError(Close.BAD_REQUEST, f"placeholders: {problem}")
        if rules.sandboxes:
            profile = _allowed_sandboxes(request, config, caller.admitter)
        else:
            profile = run_profile(request, config)
        script_hooks(config)  # (its hooks indexed by `when` here, off the loop)
        call_hooks(config)
    except BaseException:
        if made:  # the run that was to remove it will not start (its lock file too)
            release_held(cwd)
        raise
    run = RunRequest(
        script=request.script,
        cwd=cwd,
        stdin=request.stdin,
        input=request.input,
        env=request.env,
        pass_env=request.pass_env,
        secrets=request.secrets,
        caller_env=request.caller_env if rules.sent_env else caller.environ,
        timeout_ms=request.timeout_ms or DEFAULT_SCRIPT_TIMEOUT_MS,
        autonomy=caller_autonomy(config, request.autonomy),
        sandbox=profile,
        network=run_network(request, config, profile, served=rules.sandboxes),
        sources={Phase(k): tuple(v) for k, v in config.script.items()},
        cwd_made=made,
        placeholders=request.placeholders,
    )
    if caller.run_id is not None:
        run = attrs.evolve(run, run_id=caller.run_id)
    return Admitted(run, config)


def declared_vars(config: Config) -> set[str]:
    """The placeholder names `config`'s prompt hooks take in their `vars` (hooks `--skip`
    leaves out too: their names are not misspelt)."""
    return {name for h in config.hooks if h.prompt is not None for name in h.prompt.vars}


def run_profile(request: ExecRequest, config: Config) -> Profile:
    """The run's sandbox profile: the request's, else the config's `[script] sandbox`."""
    return request.sandbox or config.script_sandbox


def run_network(
    request: ExecRequest, config: Config, profile: Profile, *, served: bool
) -> tuple[str, ...] | None:
    """The hosts the run's script reaches: the request's `network`, else the config's
    `[script] network`. The config's list is a ceiling the request may narrow, never widen
    (as a nearer layer's); with none, a served request may not name any (a client gets no
    network the operator did not give), an `exec` in process may. Else `WireError` (4400)
    naming each item no ceiling covers, or the run's profile that no list narrows."""
    ceiling = config.script_network
    if request.network is None:
        return ceiling
    if profile.value not in egress.CONFINING:
        raise WireError(Close.BAD_REQUEST, egress.unconfined(profile.value))
    if ceiling is None and not served:
        return request.network
    wide = () if ceiling is None else ceiling
    over = [item for item in request.network if not egress.narrows([item], wide)]
    if over:
        given = "none" if ceiling is None else ", ".join(ceiling)
        raise WireError(
            Close.BAD_REQUEST,
            f"network: {', '.join(over)} not within the server's [script] network ({given})",
            [f"network: {item!r} is not within [script] network ({given})" for item in over],
        )
    return request.network


def _config_for(request: ExecRequest, caller: Caller, cwd: str, roots: tuple[str, ...]) -> Config:
    """The caller's config, or for a request with per-call hooks or script lines, its files
    layered again under them (per-call hooks declare in the run's `cwd`; with `roots`, each
    one's own `cwd` must lie inside them or the run's)."""
    config = caller.config
    if not request.per_call:
        return config
    # A per-call hook that gives again one of the server's own hooks (a caller in the
    # server's project directory sends its file's hooks when it cannot know the server
    # applies that file, as through a gateway) is in force once, as the server's.
    hooks = [
        h for h in request.hooks if not (isinstance(h, dict) and already_in_force(h, config.hooks))
    ]
    try:
        layered = load_config(
            config.files,
            cwd=Path(cwd),
            environ=caller.environ,
            per_call_hooks=hooks,
            script=request.script_lines,
            discover=False,
            pinned=config.pinned,
        )
    except ConfigError as exc:
        raise WireError(
            Close.BAD_REQUEST,
            f"the per-call hooks or script are invalid: {exc.problems[0]}",
            [str(p) for p in exc.problems],
        ) from None
    if caller.rules.roots:
        check_hook_dirs(layered, roots, cwd, caller.admitter)
    # What the caller's own discovery said (files skipped as not trusted) stays said.
    warnings = tuple(dict.fromkeys((*config.warnings, *layered.warnings)))
    skipped = tuple(dict.fromkeys((*config.skipped, *layered.skipped)))
    return attrs.evolve(layered, warnings=warnings, skipped=skipped)


def _allowed_sandboxes(request: ExecRequest, config: Config, who: Admitter) -> Profile:
    """The run's profile, once the run's and every per-call hook's profile is one the
    server's `[service] sandboxes` allows; else `WireError` (4400) naming the allowed ones,
    and where each refused profile came from, before anything runs. A per-call hook may
    not raise `maxOutputBytes` past the server's own default either (its stdout is held in
    memory)."""
    allowed = config.service_sandboxes
    words = ", ".join(p.value for p in allowed) or "none at all"
    problems: list[str] = []
    sandboxes = False  # whether a profile was refused (then the allowed ones are said)
    profile = run_profile(request, config)
    if profile not in allowed:
        where = "the request's sandbox" if request.sandbox else f"{who.whose} [script] sandbox"
        problems.append(f'sandbox: the run\'s profile "{profile}" ({where}) is not allowed')
        sandboxes = True
    cap = config.defaults.max_output_bytes
    for hook in config.hooks:
        if hook.source.kind is not SourceKind.PER_CALL:
            continue
        label = f"hooks[{hook.source.index}] ({hook.name})"
        if hook.sandbox not in allowed:
            declared = request.hooks[hook.source.index or 0].get("sandbox") is not None
            where = "declared" if declared else f"{who.whose} [defaults] sandbox"
            problems.append(f'{label}: the profile "{hook.sandbox}" ({where}) is not allowed')
            sandboxes = True
        if hook.max_output_bytes > cap:
            problems.append(
                f"{label}: maxOutputBytes {hook.max_output_bytes} is over {who.whose} {cap}"
            )
    if sandboxes:
        problems.append(
            f"requests to {who.name} may use the sandboxes: {words} ([service] sandboxes)"
        )
    if problems:
        raise WireError(Close.BAD_REQUEST, "; ".join(problems), problems)
    return profile
