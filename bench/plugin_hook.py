"""A plugin hook's overhead over its tool's own time, and a script's tool call round trip.

    .venv/bin/python bench/plugin_hook.py [--rounds 10] [--per-round 30] [--calls 200]

The server is the example tool server (`supervisor/examples/tools/wordtools.py`, tool
`count`), warm: started once through the supervisor's spawner (profile `none`, so what is
measured is ours, not the sandbox's) and kept running.

* `tool`: the baseline, the tool's own time: one `tools/call` through the MCP session on the
  warm server (`ServerManager.call`), as the SDK gives it.
* `plugin`: one `run_hook` of a plugin hook calling the same tool with the same arguments
  (`args = {text = "@input.text"}`), the whole per-hook path: clamp, placeholders, the call,
  the answer read as hook output and bounded, the hook frame.
  Rounds interleave the two (`_timing.interleaved`); round 0 warms up and is dropped.
  RESULT `plugin_hook_overhead_p50` (abs): plugin p50 minus tool p50, goal <= 1 ms; the
  baseline column is the tool's p50.
* A script's call round trip: a script run (argv, no launcher) makes `--calls` calls one
  after another on the frames channel and `MCPX_CALLS_FD`, timing each itself; once with no
  hook on the `call` point, once with a `before` module hook (profile `none`) that answers
  nothing. The same module hook is also timed alone (`module`: one `run_hook`, interleaved
  with the above). RESULT `script_call_p50` (abs: p50 per call, goal <= 2 ms; baseline: the
  tool's p50) and `script_call_before_hook_p50` (abs: goal <= the bare call's p50 plus the
  module hook's own p50 plus 1 ms, printed: what the `call` point adds around its hook;
  baseline: the bare call's p50, ratio with / without).

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2 --calls 5`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from _quick import parse_args
from _timing import interleaved, percentile, result

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import (
    Action,
    Config,
    Hook,
    Profile,
    Provenance,
    SourceKind,
)
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import open_spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest
from mcpx_hooks.supervisor.run.serverhooks import open_servers
from mcpx_hooks.supervisor.tools.servers import ServerManager, ToolServers

GOAL_OVERHEAD_MS = 1.0
GOAL_CALL_MS = 2.0
#: What the `call` point may add to a call beyond its hook's own time.
GOAL_POINT_ADDS_MS = 1.0
NOTHING = "def hook(data):\n    return None\n"
EXAMPLES = Path(__file__).resolve().parent.parent / "supervisor" / "examples" / "tools"
TEXT = "one two three four"
EXPECTED = {"words": 4, "lines": 1}
SPEC = ServerSpec("words", (sys.executable, "wordtools.py"), str(EXAMPLES), sandbox=Profile.NONE)
SCRIPT = """
import json, os, sys, time
out = os.fdopen(3, "w", buffering=1)
answers = os.fdopen(int(os.environ["MCPX_CALLS_FD"]), "r")
took = []
for n in range(int(sys.argv[1])):
    start = time.perf_counter()
    out.write(json.dumps({"type": "call", "id": n, "tool": "words.count",
                          "args": {"text": "one two three four"}}) + "\\n")
    answer = json.loads(answers.readline())
    took.append((time.perf_counter() - start) * 1000)
    assert answer == {"id": n, "ok": True, "value": {"words": 4, "lines": 1}}, answer
out.write(json.dumps({"type": "result", "value": took}) + "\\n")
"""


class Broken(Exception):
    """A measurement could not be made (a wrong answer, a failed hook or run)."""


def plugin_hook() -> Hook:
    return Hook(
        name="bench",
        on="script",
        phase=Phase.BEFORE,
        action=Action.PLUGIN,
        target="words.count",
        declaring_dir=str(EXAMPLES),
        source=Provenance(SourceKind.COMMAND_LINE),
        effect=Effect.ADVISE,
        args={"text": "@input.text"},
    )


async def tool_sample(manager: ServerManager) -> float:
    start = time.perf_counter()
    answer, _ = await manager.call(SPEC, "count", {"text": TEXT})
    elapsed = time.perf_counter() - start
    if answer.structured_content != EXPECTED:
        raise Broken(f"the tool answered {answer!r}")
    return elapsed


async def plugin_sample(manager: ServerManager, hook: Hook, ctx: HookContext) -> float:
    start = time.perf_counter()
    report = await run_hook(manager.spawner, hook, ctx)
    elapsed = time.perf_counter() - start
    if report.frame.status is not HookStatus.OK:
        raise Broken(f"the plugin hook: {report.frame.status}: {report.frame.reason}")
    return elapsed


def module_hook(directory: Path) -> Hook:
    return Hook(
        name="nothing",
        on="call",
        phase=Phase.BEFORE,
        action=Action.MODULE,
        target="nothing.py:hook",
        declaring_dir=str(directory),
        source=Provenance(SourceKind.COMMAND_LINE),
        sandbox=Profile.NONE,
    )


async def measure_plugin(directory: Path, rounds: int, per_round: int) -> dict[str, list[float]]:
    async with open_spawner() as spawner, open_servers(spawner, Bus(), Config()) as manager:
        servers = ToolServers(manager, {"words": SPEC})
        ctx = HookContext(None, input=({"text": TEXT},), servers=servers)
        samplers = {
            "tool": functools.partial(tool_sample, manager),
            "plugin": functools.partial(plugin_sample, manager, plugin_hook(), ctx),
            "module": functools.partial(plugin_sample, manager, module_hook(directory), ctx),
        }
        return await interleaved(samplers, rounds, per_round)


async def measure_calls(directory: Path, calls: int, hooked: bool) -> list[float]:
    config: dict[str, Any] = {
        "defaults": {"sandbox": "none"},
        "servers": {
            "words": {
                "command": [sys.executable, str(EXAMPLES / "wordtools.py")],
                "sandbox": "none",
            }
        },
    }
    if hooked:
        config["hooks"] = [{"on": "call", "phase": "before", "module": "nothing.py:hook"}]
    path = directory / f"bench-{hooked}.json"
    path.write_text(json.dumps(config))
    loaded = load_config([path], cwd=directory, environ=os.environ, discover=False)
    async with open_runtime(loaded) as runtime:
        script = Script(argv=(sys.executable, "-c", SCRIPT, str(calls)))
        run = runtime.new_run(RunRequest(script, str(directory)))
        await runtime.execute(run)
        frames = run.journal.decoded(0)
    results = [f for f in frames if f["type"] == "result"]
    if not results:
        raise Broken(f"the script run failed: {[f for f in frames if f['type'] == 'error']}")
    took: list[float] = results[0]["value"]
    return took[calls // 10 :]  # the first tenth warms the server and the hook up


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    args = parse_args(parser, rounds=1, per_round=2, calls=5)
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="mcpx-bench-") as tmp:
            (Path(tmp) / "nothing.py").write_text(NOTHING)
            samples = trio.run(measure_plugin, Path(tmp), args.rounds, args.per_round)
            bare = trio.run(measure_calls, Path(tmp), args.calls, False)
            hooked = trio.run(measure_calls, Path(tmp), args.calls, True)
    except Broken as exc:
        print(f"plugin_hook: cannot measure: {exc}", file=sys.stderr)
        return 1
    ms = {name: [v * 1e3 for v in values] for name, values in samples.items()}
    p50 = {name: percentile(v, 50) for name, v in ms.items()}
    p95 = {name: percentile(v, 95) for name, v in ms.items()}
    call50, call95 = percentile(bare, 50), percentile(bare, 95)
    hook50, hook95 = percentile(hooked, 50), percentile(hooked, 95)
    overhead = p50["plugin"] - p50["tool"]
    print(f"{len(ms['tool'])} samples each, p50 / p95:")
    shown = [
        ("baseline  the tool's own call, warm server", p50["tool"], p95["tool"]),
        ("plugin hook calling it", p50["plugin"], p95["plugin"]),
        (f"a script's call, no call hook ({len(bare)} calls)", call50, call95),
        ("a script's call, a before module hook", hook50, hook95),
        ("context   that module hook alone", p50["module"], p95["module"]),
    ]
    for label, fifty, ninety_five in shown:
        print(f"  {label + ':':52} {fifty:7.3f} / {ninety_five:7.3f} ms")
    print(f"  plugin hook overhead {overhead:.3f} ms (goal <= {GOAL_OVERHEAD_MS:g} ms)")
    print(f"({time.perf_counter() - started:.1f} s)")
    lines = [
        result(
            "plugin_hook_overhead_p50",
            overhead,
            p50["tool"],
            p50["plugin"] / p50["tool"],
            GOAL_OVERHEAD_MS,
            direction="abs",
            unit="ms",
        ),
        result(
            "script_call_p50",
            call50,
            p50["tool"],
            call50 / p50["tool"],
            GOAL_CALL_MS,
            direction="abs",
            unit="ms",
        ),
        result(
            "script_call_before_hook_p50",
            hook50,
            call50,
            hook50 / call50,
            round(call50 + p50["module"] + GOAL_POINT_ADDS_MS, 3),
            direction="abs",
            unit="ms",
        ),
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
