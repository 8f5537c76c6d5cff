"""The guard: every point in the points table fires, and a hook on it runs. A point that is
declared (so validation accepts hooks on it) and that nothing fires fails here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from conftest import Marker

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.events import Event, EventKind
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.points import PHASES, POINTS
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest

HOSTILE = str(Path(__file__).parent / "mcpservers" / "hostile.py")
PY = sys.executable
#: A script run that passes through every point: the run (`script`), a tool call (`call`),
#: and the start of the server the call needs (`server.start`).
JOB = 'def main():\n    return mcpx_call("h.echo", {"through": "every point"})\n'


async def test_every_declared_point_fires_and_runs_its_hooks(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    # Every phase of every point that a successful run passes (not onError, not source-only).
    phases = {
        point: [p.value for p in info.phases if p.value != "onError" and not PHASES[p].source_only]
        for point, info in POINTS.items()
    }
    hooks: list[dict[str, Any]] = [
        {"name": f"{point}:{phase}", "on": point, "phase": phase, "run": [PY, "-c", ""]}
        for point, names in phases.items()
        for phase in names
    ]
    config = {
        "defaults": {"sandbox": "none"},
        "servers": {"h": {"command": [PY, HOSTILE, "good", str(tmp_path / "l"), marker]}},
        "hooks": hooks,
    }
    config["servers"]["h"]["sandbox"] = "none"
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config))
    loaded = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    (tmp_path / "job.py").write_text(JOB)
    async with open_runtime(loaded) as runtime:
        async with runtime.bus.subscribe(kinds=(EventKind.HOOK_FINISHED,), since=0) as sub:
            run = runtime.new_run(RunRequest(Script(python_file="job.py"), str(tmp_path)))
            await runtime.execute(run)
            events = [await sub.__anext__() for _ in range(sub.pending)]
        frames = run.journal.decoded(0)
    check_order(frames)
    (result,) = [f for f in frames if f["type"] == "result"]
    assert result["value"] == {"through": "every point"}
    ran = {e.data["name"]: e.data["status"] for e in events if isinstance(e, Event)}
    assert ran == {h["name"]: "ok" for h in hooks}
    assert {name.split(":")[0] for name in ran} == set(POINTS)
    assert marker.alive() == []
