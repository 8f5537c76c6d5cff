"""The service's WebSocket endpoints: what each does once its socket is admitted.

`/v1/hooks` lists the hooks in force; `/v1/exec` reads one request and streams its run;
`/v1/runs/{runId}` replays and follows a retained run; `/v1/events` streams the bus. Each
returns how its socket closes (a `WireError`; NORMAL when complete) or None when the client
is gone; a bad request or query raises `WireError`. The lifecycle, admission and the runs
themselves are the `Service`'s (`server.py`), which is an `Endpoints`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ..config.loading import load_config
from ..core.convert import to_json
from ..core.errors import ConfigError
from ..core.hooks import Config, Profile, SourceKind
from ..run.journal import UnknownRun
from ..run.runtime import Runtime
from ..run.scriptrun import DEFAULT_SCRIPT_TIMEOUT_MS, Run, RunRequest
from .connection import ServerConnection
from .options import Limits, ServiceOptions
from .roots import admit_cwd, check_hook_dirs, remove_made, roots_in_force
from .streams import Streams, Wake, complete
from .targets import Target, check_from, check_query, parse_events, parse_from
from .wire import Close, ExecRequest, WireError, encode, parse_exec, sources

SHUTTING_DOWN: Final = "the server is shutting down"


class Endpoints:
    """The endpoint handlers of a `Service`, apart from its lifecycle. What they use of it
    is declared here; the `Service` sets it and starts the runs (`_start_run`)."""

    runtime: Runtime
    options: ServiceOptions
    limits: Limits
    streams: Streams
    stopping: bool
    _active: dict[str, Run]

    def _start_run(self, run: Run, config: Config) -> None:
        raise NotImplementedError

    async def _hooks(self, conn: ServerConnection, target: Target) -> WireError | None:
        check_query(target)
        config = self.runtime.config
        message = {
            "type": "hooks",
            "hooks": [to_json(h) for h in config.hooks],
            "files": list(config.files),
            # The project files found and not applied (not trusted, or changed since).
            "skipped": [to_json(skipped) for skipped in config.skipped],
            # The tool servers declared, each as it is now (`servers list --remote`).
            "servers": self.runtime.servers.states(config.servers.values())
            if self.runtime.servers
            else [],
        }
        return complete() if await self.streams.send(conn, encode(message)) else None

    async def _request_message(
        self, conn: ServerConnection, target: Target, wake: Wake
    ) -> str | bytes | WireError:
        """An exec socket's one request message, within `request_s` of the upgrade (or why
        there is none)."""
        check_query(target)
        with wake.waiting(), trio.move_on_after(self.limits.request_s) as timer:
            text = await conn.get_message()
        if wake.reason is not None:
            return wake.reason
        if timer.cancelled_caught:
            return WireError(
                Close.TIMEOUT, f"no request within {self.limits.request_s:g} s of the upgrade"
            )
        return text

    async def _exec(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        text = await self._request_message(conn, target, wake)
        if isinstance(text, WireError):
            return text
        request = parse_exec(text)
        if self.stopping:
            return WireError(Close.GOING_AWAY, f"{SHUTTING_DOWN}; no new runs")
        cwd, made = await admitted_cwd(request, self.runtime.config, self.options.cwd)
        try:
            config = await self._config_for(request, cwd)
            profile = allowed_sandboxes(request, config)
            if len(self._active) >= self.limits.max_runs:
                raise WireError(
                    Close.TRY_AGAIN,
                    f"too many runs in progress (the cap is {self.limits.max_runs});"
                    " try again later",
                )
            run = self.runtime.new_run(run_request(request, cwd, config, profile, cwd_made=made))
        except BaseException:
            if made:  # the run that was to remove it will not start
                await remove_made(cwd)
            raise
        self._start_run(run, config)
        wake.idle = False
        ending = await self.streams.stream_run(conn, run.journal, 0, wake, run=run, cancels=True)
        if request.cancel_on_disconnect and not run.journal.finished:
            run.cancel()
        return ending

    async def _follow(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        start = parse_from(target)
        assert target.run_id is not None
        try:
            journal = self.runtime.journals.get(target.run_id)
        except UnknownRun:
            raise WireError(
                Close.NOT_FOUND,
                f"no run {target.run_id!r} is retained (the server keeps the last "
                f"{self.runtime.journals.retain} runs)",
            ) from None
        check_from(start, len(journal))
        # While the run runs, this socket may answer its asks too.
        run = self._active.get(target.run_id)
        return await self.streams.stream_run(conn, journal, start, wake, run=run)

    async def _events(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        kinds, since = parse_events(target)
        bus = self.runtime.bus
        if since is not None and since > bus.next_seq:
            raise WireError(
                Close.OUT_OF_RANGE,
                f"since={since} was never published here (the next seq is {bus.next_seq})",
            )
        async with bus.subscribe(kinds=kinds, since=since) as sub:
            return await self.streams.stream_events(conn, sub, wake, self.limits.coalesce_events)

    async def _config_for(self, request: ExecRequest, cwd: str) -> Config:
        """The server's config, or for a request with per-call hooks or script lines, the
        server's files layered again under them (per-call hooks declare in the run's cwd)."""
        config = self.runtime.config
        if not request.per_call:
            return config
        load = partial(
            load_config,
            config.files,
            cwd=Path(cwd),
            environ=self.options.environ,
            per_call_hooks=request.hooks,
            script=request.script_lines,
            discover=False,
            pinned=config.pinned,
        )
        try:
            layered = await trio.to_thread.run_sync(load)
        except ConfigError as exc:
            raise WireError(
                Close.BAD_REQUEST,
                f"the per-call hooks or script are invalid: {exc.problems[0]}",
                [str(p) for p in exc.problems],
            ) from None
        # A per-call hook's own cwd is a grant like the run's: inside a root, or the run's.
        roots = partial(roots_in_force, config, self.options.cwd)
        await trio.to_thread.run_sync(lambda: check_hook_dirs(layered, roots(), cwd))
        # What the server's own discovery said (files skipped as not trusted) stays said.
        warnings = tuple(dict.fromkeys((*config.warnings, *layered.warnings)))
        skipped = tuple(dict.fromkeys((*config.skipped, *layered.skipped)))
        return attrs.evolve(layered, warnings=warnings, skipped=skipped)


async def admitted_cwd(request: ExecRequest, server: Config, served_from: str) -> tuple[str, bool]:
    """The run's working directory, inside the `server` config's roots (`roots.py`; when it
    sets none, derived from `served_from`, where the server started), and whether it was
    made for the run; else `WireError` (4400) naming the roots."""

    def admit() -> tuple[str, bool]:
        return admit_cwd(request.cwd, roots_in_force(server, served_from))

    return await trio.to_thread.run_sync(admit)


def run_request(
    request: ExecRequest,
    cwd: str,
    config: Config,
    profile: Profile,
    *,
    cwd_made: bool = False,
    **more: Any,
) -> RunRequest:
    """The run an admitted exec request asks for, in `cwd` (admitted: inside a root, so the
    operator's grant; `cwd_made`: made for the run, removed when it ends) with the server's
    `config` and the sandbox `profile` it allows, as `serve` (and a cluster's worker, `more`
    giving its run id) starts it."""
    return RunRequest(
        script=request.script,
        cwd=cwd,
        stdin=request.stdin,
        input=request.input,
        env=request.env,
        pass_env=request.pass_env,
        secrets=request.secrets,
        caller_env=request.caller_env,
        timeout_ms=request.timeout_ms or DEFAULT_SCRIPT_TIMEOUT_MS,
        autonomy=request.autonomy,
        sandbox=profile,
        sources=sources(config),
        cwd_made=cwd_made,
        placeholders=request.placeholders,
        **more,
    )


def allowed_sandboxes(request: ExecRequest, config: Config) -> Profile:
    """The run's profile, once the run's and every per-call hook's profile is one the
    server's `[service] sandboxes` allows; else `WireError` (4400) naming the allowed ones,
    and where each refused profile came from, before anything runs. A per-call hook may
    not raise `maxOutputBytes` past the server's own default either (its stdout is held in
    memory)."""
    allowed = config.service_sandboxes
    words = ", ".join(p.value for p in allowed) or "none at all"
    problems: list[str] = []
    profile = request.sandbox or config.script_sandbox
    if profile not in allowed:
        where = "the request's sandbox" if request.sandbox else "the server's [script] sandbox"
        problems.append(f'sandbox: the run\'s profile "{profile}" ({where}) is not allowed')
    cap = config.defaults.max_output_bytes
    for hook in config.hooks:
        if hook.source.kind is not SourceKind.PER_CALL:
            continue
        label = f"hooks[{hook.source.index}] ({hook.name})"
        if hook.sandbox not in allowed:
            declared = request.hooks[hook.source.index or 0].get("sandbox") is not None
            where = "declared" if declared else "the server's [defaults] sandbox"
            problems.append(f'{label}: the profile "{hook.sandbox}" ({where}) is not allowed')
        if hook.max_output_bytes > cap:
            problems.append(
                f"{label}: maxOutputBytes {hook.max_output_bytes} is over the server's {cap}"
            )
    if problems:
        problems.append(
            f"this server's requests may use the sandboxes: {words} ([service] sandboxes)"
        )
        raise WireError(Close.BAD_REQUEST, "; ".join(problems), problems)
    return profile
