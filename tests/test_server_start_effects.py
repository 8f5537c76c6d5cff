"""A `server.start` hook's effect is bounded by what its phase takes: a start can be refused
(`before`, `onSuccess`), never given another command or another tool list, nor made to run a
command of the hook's; its `onError` can only be told about. An answer above that is dropped
and named, as a `suffix` hook's is, never shown as done."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from conftest import Marker

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.events import Event, EventKind
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest

HOSTILE = str(Path(__file__).parent / "mcpservers" / "hostile.py")
PY = sys.executable
JOB = 'def main():\n    return mcpx_call("h.echo", {"said": "hello"})\n'


def _answering(name: str, phase: str, effect: str, answer: dict[str, Any]) -> dict[str, Any]:
    said = json.dumps(answer)
    return {
        "name": name,
        "on": "server.start",
        "phase": phase,
        "effect": effect,
        "run": [PY, "-c", f"print({said!r})"],
    }


async def test_a_server_start_hook_cannot_replace_the_start_or_run_a_command(
    tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    # Before: the frames said `changed: true` with the new command and tool list as `value`,
    # though the server started with its own command and listed its own tools, and the
    # `run` answer's command ran.
    touched = tmp_path / "touched"
    elsewhere = {"server": "h", "command": ["/bin/false"]}
    hooks = [
        _answering(
            "start-before",
            "before",
            "run",
            {
                "apply": {"value": elsewhere},
                "propose": {"value": elsewhere, "note": "n"},
                "run": {"argv": ["touch", str(touched)]},
                "advise": "starting h",
            },
        ),
        _answering("start-after", "onSuccess", "apply", {"apply": {"value": {"tools": []}}}),
    ]
    config = {
        "defaults": {"sandbox": "none"},
        "servers": {
            "h": {"command": [PY, HOSTILE, "good", str(tmp_path / "l"), marker], "sandbox": "none"}
        },
        "hooks": hooks,
    }
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config))
    loaded = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    (tmp_path / "job.py").write_text(JOB)
    async with open_runtime(loaded) as runtime:
        async with runtime.bus.subscribe(kinds=(EventKind.HOOK_FINISHED,), since=0) as sub:
            run = runtime.new_run(RunRequest(Script(python_file="job.py"), str(tmp_path)))
            await runtime.execute(run)
            events = [await sub.__anext__() for _ in range(sub.pending)]
        frames = {e.data["name"]: e.data for e in events if isinstance(e, Event)}
        result = [f for f in run.journal.decoded(0) if f["type"] == "result"]
    before, after = frames["start-before"], frames["start-after"]
    assert (before["effect"], before["requestedEffect"], before["clampedBy"]) == (
        "ask",
        "run",
        ["phase"],
    )
    assert [d["key"] for d in before["dropped"]] == ["apply", "propose", "run"]
    assert "needs effect apply; in force: ask" in before["dropped"][0]["reason"]
    assert before["advice"] == ["starting h"]
    assert not before.get("changed") and "value" not in before and "ran" not in before
    assert not touched.exists()
    assert (after["effect"], after["clampedBy"]) == ("ask", ["phase"])
    assert [d["key"] for d in after["dropped"]] == ["apply"]
    assert not after.get("changed") and "value" not in after
    assert [r["value"] for r in result] == [{"said": "hello"}]  # the server as it is
