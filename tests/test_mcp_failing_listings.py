"""A listing never waits for a server known to be failing: within its backoff it is left out
at once (as before), and after it, its start goes on in the background while the listing is
answered at once without it; once it has started, the clients are told their lists changed.
Only the first start of a server (not yet known to fail) holds a listing, for its
`startTimeoutMs` at most."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing
from conftest import Marker
from mcpface_parts import stdio_session, through_mcpx, write_config

from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.serverhooks import open_servers
from mcpx_hooks.supervisor.tools import serverproc
from mcpx_hooks.supervisor.tools.serverentry import ServerEntry, ServerFailing
from mcpx_hooks.supervisor.tools.servers import RETRYING, ServerManager


class _Starts:
    """A stand-in for a server's life: each start waits its `startTimeoutMs` and fails (a
    server that never answers `initialize`), until `comes_up`: then it starts at once."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.comes_up = False

    async def __call__(self, spawner: Spawner, hooks: Any, entry: ServerEntry) -> None:
        self.times.append(trio.current_time())
        try:
            if self.comes_up:
                entry.session = cast(Any, object())
                entry.state = "running"
                entry.ready.set()
                await trio.sleep_forever()
            await trio.sleep(entry.spec.start_timeout_ms / 1000)
            entry.failed("server mute did not answer initialize within startTimeoutMs")
        finally:
            entry.session = None
            if entry.state in ("running", "starting"):
                entry.state = "idle"
            entry.ready.set()
            entry.ended.set()


async def _listed(manager: ServerManager, spec: ServerSpec) -> tuple[float, str]:
    """How long a listing's open of `spec` took, and why it failed ("" when it did not)."""
    began = trio.current_time()
    try:
        await manager.open(spec, listing=True)
    except ServerFailing as exc:
        return trio.current_time() - began, str(exc)
    return trio.current_time() - began, ""


async def test_a_listing_waits_for_a_failing_server_only_at_its_first_start(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts = _Starts()
    monkeypatch.setattr(serverproc, "serve_server", starts)
    spec = ServerSpec("mute", ("mute",), "/", sandbox=Profile.NONE, start_timeout_ms=10_000)
    async with open_servers(cast(Spawner, None), Bus(), Config()) as manager:
        await _fails_then_comes_up(manager, spec, starts)


async def _fails_then_comes_up(manager: ServerManager, spec: ServerSpec, starts: _Starts) -> None:
    with trio.fail_after(100):
        took, why = await _listed(manager, spec)  # its first start: waited for
        assert took == 10 and "startTimeoutMs" in why
        took, why = await _listed(manager, spec)  # within its backoff (1 s)
        assert took == 0 and "next start in 1.0 s" in why and len(starts.times) == 1
        await trio.sleep(1)
        entry = manager.entries[spec]
        took, why = await _listed(manager, spec)  # after it: started, not waited for
        assert took == 0 and why.endswith(f"({RETRYING})") and entry.state == "starting"
        took, why = await _listed(manager, spec)  # while that start goes on: no other
        assert took == 0 and RETRYING in why
        await trio.sleep(10)  # it failed again: backed off 2 s
        # (Its start fails at this very instant: let it say so before the next listing, which
        # Trio could otherwise run first, finding the start still going on.)
        await trio.testing.wait_all_tasks_blocked()
        assert starts.times == [0, 11]
        took, why = await _listed(manager, spec)
        assert took == 0 and "next start in 2.0 s" in why
        await trio.sleep(2)
        starts.comes_up = True
        told = manager.changes["tools"]
        took, why = await _listed(manager, spec)  # started in the background, at once
        assert took == 0 and RETRYING in why
        await manager.relisted.wait()  # its clients are told to list anew
        assert manager.changes["tools"] == told + 1 and starts.times == [0, 11, 23]
        assert await _listed(manager, spec) == (0, "")


async def test_a_server_that_never_answers_costs_only_the_first_listing(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker, h_mode="mute")
    declared = json.loads(config.read_text())
    declared["servers"]["h"]["startTimeoutMs"] = 3000
    config.write_text(json.dumps(declared))
    with trio.fail_after(60):
        async with stdio_session(through_mcpx(config), where / "stderr") as session:
            began = time.monotonic()
            first = await session.list_tools()
            assert time.monotonic() - began >= 3  # its first start: waited for
            await trio.sleep(1.2)  # (its backoff, 1 s, passes)
            began = time.monotonic()
            again = await session.list_tools()
            assert time.monotonic() - began < 2  # not its startTimeoutMs again
            assert [t.name for t in again.tools] == [t.name for t in first.tools]
            assert "words__count" in [t.name for t in again.tools]
    said = (where / "stderr").read_text()
    assert "the tools of server h are not listed" in said and RETRYING in said
    assert marker.alive() == []
