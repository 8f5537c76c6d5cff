"""Parallel hooks and `when.files` inside a run, in process: a run cancelled while a group of
parallel hooks runs gives each its frame, in declaration order, then its suffix and `end`;
a request's own file list decides `when.files` without git."""

from __future__ import annotations

from pathlib import Path

import trio
from test_run import answer, argv_request, config, hook, of, outcome, run_to_end

from mcpx_hooks.supervisor.core.changes import ChangedFiles
from mcpx_hooks.supervisor.core.events import EventKind
from mcpx_hooks.supervisor.run.runtime import open_runtime


async def test_cancelled_parallel_group_frames_in_order(tmp_path: Path, no_leaks: None) -> None:
    cfg = config(
        tmp_path,
        hook("slow-a", "before", ["sleep", "30"], parallel=True),
        hook("slow-b", "before", ["sleep", "30"], parallel=True),
        hook("fin", "suffix", answer({"advise": "cleaned up"})),
    )
    async with open_runtime(cfg) as runtime, runtime.bus.subscribe(since=0) as sub:
        run = runtime.new_run(argv_request(tmp_path, "true"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.execute, run)
            started = set()
            async for event in sub:
                kind = getattr(event, "kind", None)
                if kind == EventKind.HOOK_STARTED:
                    started.add(event.data["name"])  # type: ignore[union-attr]
                if started == {"slow-a", "slow-b"}:
                    break  # both running at once: the first has not ended
            run.cancel()
        frames = run.journal.frames
    hooks = of(frames, "hook")
    assert [f["name"] for f in hooks] == ["slow-a", "slow-b", "fin"]
    assert [f["status"] for f in hooks] == ["killed", "killed", "ok"]
    assert all("the run was cancelled" in f["reason"] for f in hooks[:2])
    assert hooks[0]["seq"] + 1 == hooks[1]["seq"]
    assert outcome(frames)["message"] == "cancelled"
    assert frames[-1]["type"] == "end"


async def test_a_requests_file_list_decides_when_files(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        hook("py", "before", answer({"advise": "py"}), when={"files": ["*.py"]}),
        hook("docs", "before", answer({"advise": "docs"}), when={"files": ["docs/**"]}),
    )
    listed = ChangedFiles(("lib/a.py",), "listed by the test")
    frames = await run_to_end(cfg, argv_request(tmp_path, "true", files=listed))
    assert [f["name"] for f in of(frames, "hook")] == ["py"]
    # No list given and no git checkout here: both run (there is nothing to match against).
    frames = await run_to_end(cfg, argv_request(tmp_path, "true"))
    assert [f["name"] for f in of(frames, "hook")] == ["py", "docs"]
