"""The supervisor in one process: its spawner, event bus, observers and run journal.

`open_runtime(config)` starts them under one nursery and stops them on exit: observers get
`[observe] drainMs` to finish the events already published (so a `run.finished` observer of
a one-shot `exec` still runs), then everything is cancelled and every process reaped; what
was cut short is in `runtime.observers` (`ObserverStats.cut_short`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..core.events import EventKind
from ..core.hooks import Config
from ..core.records import Record
from ..core.redact import Redactor
from ..core.servers import server_secrets
from ..history.faults import HistoryFault
from ..history.store import History, default_path
from ..process.denied import deny_own_files, own_files
from ..process.spawner import Spawner, open_spawner
from .artifacts import ArtifactStore
from .bus import Bus
from .hookcontext import hook_secrets
from .journals import Journals
from .observerstats import ObserverStats, observe_hooks
from .recording import Recorder
from .scriptrun import Run, RunRequest, execute
from .telemetry import Telemetry, Told, open_telemetry

if TYPE_CHECKING:
    from ..tools.servers import ServerManager

#: How long a runtime that ends waits for the history to take what its runs sent, in s.
FLUSH_S: Final = 10
#: How long it waits for telemetry to reach the collector, in s: a collector that answers
#: takes milliseconds; one that is down or hangs costs at most this, then what is left is
#: given up (the exporters' own retries would go on for `OTEL_EXPORTER_OTLP_TIMEOUT`).
TELEMETRY_FLUSH_S: Final = 5


@attrs.define(repr=False)
class Runtime(Record):
    config: Config
    spawner: Spawner
    bus: Bus
    journals: Journals
    observers: ObserverStats
    #: The tool servers, shared by every run (`servers.py`).
    servers: ServerManager | None = None
    #: What records the runs to the history on disk (None: `[history] enabled = false`).
    recorder: Recorder | None = None
    #: The runs' metrics (`GET /metrics`), and their spans and metrics sent over OTLP when
    #: `OTEL_EXPORTER_OTLP_ENDPOINT` is set (`telemetry.py`).
    telemetry: Telemetry = attrs.field(factory=Telemetry)

    def new_run(self, request: RunRequest) -> Run:
        return Run(request, self.journals.open(request.run_id))

    async def wait_observers(self) -> None:
        """Waits, at most `[observe] drainMs`, until the observers have handled what was
        published so far."""
        with trio.move_on_after(self.config.observe_drain_ms / 1000):
            await self.observers.wait_idle()

    async def execute(self, run: Run, config: Config | None = None) -> None:
        """Runs `run` with `config` (a request's layered config; default the runtime's)."""
        await execute(
            run,
            config=config or self.config,
            spawner=self.spawner,
            bus=self.bus,
            servers=self.servers,
        )


@contextlib.asynccontextmanager
async def open_runtime(config: Config) -> AsyncIterator[Runtime]:
    # The runs' artifacts go with the runtime, whatever ends it.
    artifacts = ArtifactStore(config.runs_artifact_bytes)
    # The config files in force stay read-only in every sandbox (`denied.py`).
    with contextlib.closing(artifacts), own_files(config.files):
        # The run history holds every run's frames: no sandbox reads it, wherever it is.
        if config.history_enabled:
            # Without a home for it there is no history to hide: the recorder says why.
            with contextlib.suppress(HistoryFault):
                db = str(_history_path(config))
                deny_own_files(
                    [db, f"{db}-wal", f"{db}-shm", os.path.join(os.path.dirname(db), "artifacts")]
                )
        async with _open_runtime(config, artifacts) as runtime:
            yield runtime


@contextlib.asynccontextmanager
async def _open_runtime(config: Config, artifacts: ArtifactStore) -> AsyncIterator[Runtime]:
    recorder = await _open_recorder(config)
    try:
        async with _open_parts(config, artifacts, recorder) as runtime:
            yield runtime
    finally:
        if recorder is not None and recorder.history is not None:
            recorder.history.close()


@contextlib.asynccontextmanager
async def _open_parts(
    config: Config, artifacts: ArtifactStore, recorder: Recorder | None
) -> AsyncIterator[Runtime]:
    telemetry = open_telemetry(os.environ)
    try:
        async with _open_serving(config, artifacts, recorder, telemetry) as runtime:
            yield runtime
    finally:
        # Sent before the process ends (`exec` and `mcp` leave by `os._exit`), even when it
        # ends by a cancellation (bounded).
        if telemetry.exporter is not None:
            with trio.move_on_after(TELEMETRY_FLUSH_S) as flushing:
                flushing.shield = True
                await trio.to_thread.run_sync(telemetry.close, abandon_on_cancel=True)


@contextlib.asynccontextmanager
async def _open_serving(
    config: Config, artifacts: ArtifactStore, recorder: Recorder | None, telemetry: Telemetry
) -> AsyncIterator[Runtime]:
    async with open_spawner() as spawner, trio.open_nursery() as nursery:
        # The supervisor's own hooks' and tool servers' secrets, redacted in every event.
        secrets = hook_secrets(config.hooks, None, os.environ)
        secrets.update(server_secrets(config.servers.values(), os.environ))
        bus = Bus(redactor=Redactor(secrets))
        # Tool servers and observe hooks where the config declares them: a runtime without
        # them (most `exec`s) never loads what runs them.
        servers = None
        if config.servers:
            servers = await nursery.start(_serve_servers, spawner, bus, config, telemetry.frame)
        stats = ObserverStats()
        if observe_hooks(config.hooks):
            stats = await nursery.start(_serve_observers, bus, spawner, config, telemetry.frame)
        if recorder is not None:
            await nursery.start(recorder.serve)
        journals = Journals(
            config.runs_retain,
            run_bytes=config.runs_run_bytes,
            retain_bytes=config.runs_retain_bytes,
            artifacts=artifacts,
            history=recorder.history if recorder is not None else None,
            recorder=recorder.note if recorder is not None else None,
            telemetry=telemetry,
            settle=recorder.settled if recorder is not None else None,
        )
        runtime = Runtime(config, spawner, bus, journals, stats, servers, recorder, telemetry)
        bus.publish(EventKind.SUPERVISOR_STARTED, {})
        try:
            yield runtime
        finally:
            bus.publish(EventKind.SUPERVISOR_STOPPING, {})
            await runtime.wait_observers()
            if recorder is not None:
                # What the runs sent goes to disk before the process ends, even when it
                # ends by a cancellation (bounded).
                with trio.move_on_after(FLUSH_S) as flushing:
                    flushing.shield = True
                    await recorder.wait_idle()
            nursery.cancel_scope.cancel()


def _history_path(config: Config) -> Path:
    return Path(config.history_path) if config.history_path else default_path(os.environ)


async def _open_recorder(config: Config) -> Recorder | None:
    """The history `[history]` names, opened in a worker thread; a fault opening it is the
    recorder's (each run then warns once), never the runtime's."""
    if not config.history_enabled:
        return None
    days, size = config.history_retain_days, config.history_retain_bytes
    try:
        history = await trio.to_thread.run_sync(History.open, _history_path(config))
    except HistoryFault as exc:
        return Recorder(None, str(exc), retain_days=days, retain_bytes=size)
    return Recorder(history, retain_days=days, retain_bytes=size)


async def _serve_servers(
    spawner: Spawner,
    bus: Bus,
    config: Config,
    telemetry: Told,
    task_status: trio.TaskStatus[ServerManager] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The tool servers, until cancelled (with the runtime): then every server's tree is
    killed and reaped."""
    from .serverhooks import open_servers

    async with open_servers(spawner, bus, config, telemetry) as servers:
        task_status.started(servers)
        await trio.sleep_forever()


async def _serve_observers(
    bus: Bus,
    spawner: Spawner,
    config: Config,
    telemetry: Told,
    task_status: trio.TaskStatus[ObserverStats] = trio.TASK_STATUS_IGNORED,
) -> None:
    from .observe import serve_observers

    await serve_observers(
        bus,
        spawner,
        config.hooks,
        caller_autonomy=config.autonomy_hooks,
        supervisor_max=config.autonomy_max,
        telemetry=telemetry,
        withheld=config.models.key_names,
        task_status=task_status,
    )
