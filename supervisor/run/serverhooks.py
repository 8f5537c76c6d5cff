"""The `server.start` hooks of the supervisor's config, run for its tool servers, and the
tool servers opened with them.

The tool servers (`tools/`) do not run hooks themselves: a server's start calls the
`StartHooks` it was given, and `ServerStartHooks` is that, here where hooks run. Each hook's
frames go on the bus (`hook.started`, `hook.finished`, `hook.failed`) under the run whose use
started the server.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs

from ..core.convert import to_json
from ..core.effects import YES
from ..core.events import EventKind
from ..core.frames import FrameType
from ..core.hooks import Config
from ..core.points import Phase
from ..core.records import Record
from ..core.when import tool_mismatch
from ..process.spawner import Spawner
from ..tools.servers import ServerManager, open_manager
from .bus import Bus
from .hookcontext import HookContext
from .telemetry import Told


@attrs.frozen(repr=False, eq=False)
class ServerStartHooks(Record):
    """The `server.start` hooks `config` declares, run with `spawner`, their frames on `bus`."""

    spawner: Spawner
    bus: Bus
    config: Config
    #: Told of each hook's frame (`telemetry.py`).
    telemetry: Told | None = None

    async def __call__(
        self, phase: Phase, server: str, run_id: str | None, **given: Any
    ) -> str | None:
        """Runs the `server.start` hooks of `phase` for `server`, one after another. Returns
        "refused by NAME: why" when one refused (an `ask` nobody can answer here takes its
        default)."""
        config, bus = self.config, self.bus
        ctx = HookContext(
            None,
            config.autonomy_hooks,
            config.autonomy_max,
            **given,
            withheld=config.models.key_names,
            redactor=bus.redactor,
        )
        for hook in config.hooks:
            if hook.on != "server.start" or hook.phase is not phase or not hook.enabled:
                continue
            if hook.when and tool_mismatch(hook.when, server, None) is not None:
                continue
            data = {"name": hook.name, "on": hook.on, "phase": phase.value, "server": server}
            bus.publish(EventKind.HOOK_STARTED, data, run_id=run_id)
            from .hookrun import run_hook  # with the first such hook: most runs have none

            report = await run_hook(self.spawner, hook, ctx)
            wire = {**to_json(report.frame), "server": server}
            bus.publish(EventKind.HOOK_FINISHED, wire, run_id=run_id)
            if self.telemetry is not None:
                self.telemetry(FrameType.HOOK, {**wire, "runId": run_id})
            if report.frame.status.is_failure:
                bus.publish(EventKind.HOOK_FAILED, wire, run_id=run_id)
            refused = report.frame.refused
            ask = report.answer.ask
            if refused is None and ask is not None and ask.default != YES:
                return f"refused by {hook.name}: {ask.question} (nobody to ask)"
            if refused is not None and phase is not Phase.ON_ERROR:
                return f"refused by {hook.name}: {refused.reason}"
        return None


def open_servers(
    spawner: Spawner, bus: Bus, config: Config, telemetry: Told | None = None
) -> AbstractAsyncContextManager[ServerManager]:
    """The supervisor's tool servers (`tools/servers.py`), their starts running `config`'s
    `server.start` hooks (their frames told to `telemetry`); all of them stopped (trees
    killed and reaped) when the block is left."""
    return open_manager(spawner, ServerStartHooks(spawner, bus, config, telemetry))
