"""A client's listing of the servers' prompts, resources and resource templates is answered
from what each server listed before, as its tools are: a server is asked again only once it
says that list changed (then the client is told so, and its next listing is fresh), or
when it starts anew."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from conftest import Marker
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcpface_parts import (
    AGENT,
    HOSTILE,
    PY,
    line_client,
    memory_session,
    stdio_session,
    through_mcpx,
    write_config,
)

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.service.mcpface import Gateway

SDKLISTS = str(Path(__file__).parent / "mcpservers" / "sdklists.py")
_LISTINGS = ("prompts/list", "resources/list", "resources/templates/list")


async def _listed(session: ClientSession) -> tuple[list[str], list[str], list[str]]:
    prompts = (await session.list_prompts()).prompts
    resources = (await session.list_resources()).resources
    templates = (await session.list_resource_templates()).resource_templates
    return [p.name for p in prompts], [str(r.uri) for r in resources], [t.name for t in templates]


async def test_a_client_s_listings_cost_no_round_trip_until_the_server_says_they_changed(
    tmp_path: Path, marker: Marker
) -> None:
    # Each client listing read every page of every server's listing again: a client that
    # polled a server of 16 pages made the gateway ask it 16 times a poll.
    where = tmp_path / marker
    where.mkdir()
    log = where / "asked.log"
    server = {"command": [PY, SDKLISTS, str(log), marker], "sandbox": "none"}
    config = {"servers": {"s": server}, "defaults": {"sandbox": "none"}}
    (where / "config.json").write_text(json.dumps(config))
    told: list[str] = []
    heard = trio.Event()

    async def hear(message: Any) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str) and method.endswith("/list_changed"):
            told.append(method)
            if len(set(told)) == 2:
                heard.set()

    def asked() -> Counter[str]:
        return Counter(log.read_text().split())

    async with stdio_session(
        through_mcpx(where / "config.json"), tmp_path / "err", message_handler=hear
    ) as session:
        first = await _listed(session)
        for _ in range(4):
            assert await _listed(session) == first
        assert asked() == dict.fromkeys(_LISTINGS, 16)  # each page once, not once a poll
        assert len(first[0]) == 16 and first[0][0] == "s__p0"
        await session.call_tool("s__change", {})
        with trio.fail_after(10):
            await heard.wait()
        after = await _listed(session)
        assert await _listed(session) == after
    assert sorted(set(told)) == [
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    ]
    assert after[0][-1] == "s__changed" and after[1][-1] == "file:///r/changed"
    assert after[2][-1] == "changed"
    assert [items[:-1] for items in after] == [items[:-1] for items in first]
    assert asked() == dict.fromkeys(_LISTINGS, 2 * 16)  # listed anew once, as it said
    assert marker.alive() == []


async def test_a_server_that_does_not_say_its_lists_changed_is_asked_at_every_listing(
    tmp_path: Path, marker: Marker
) -> None:
    # (It declares no `listChanged`: a listing kept would hide its changes for its whole life.)
    where = tmp_path / marker
    where.mkdir()
    log = where / "asked.log"
    server = {"command": [PY, SDKLISTS, str(log), marker, "--unsaid"], "sandbox": "none"}
    (where / "config.json").write_text(json.dumps({"servers": {"s": server}}))
    async with stdio_session(through_mcpx(where / "config.json"), tmp_path / "err") as session:
        for _ in range(3):
            await _listed(session)
        await session.call_tool("s__quietly", {})
        quiet = [str(r.uri) for r in (await session.list_resources()).resources]
    assert Counter(log.read_text().split()) == {
        "prompts/list": 3 * 16,
        "resources/list": 4 * 16,
        "resources/templates/list": 3 * 16,
    }
    assert quiet[0] == "file:///r/quiet"
    assert marker.alive() == []


async def test_a_resource_a_server_added_unsaid_is_read_all_the_same(
    tmp_path: Path, marker: Marker
) -> None:
    # (The listings are kept: a URI none of them holds is looked for in fresh ones.)
    where = tmp_path / marker
    where.mkdir()
    server = {"command": [PY, SDKLISTS, str(where / "asked.log"), marker], "sandbox": "none"}
    (where / "config.json").write_text(json.dumps({"servers": {"s": server}}))
    async with stdio_session(through_mcpx(where / "config.json"), tmp_path / "err") as session:
        listed = [str(r.uri) for r in (await session.list_resources()).resources]
        await session.call_tool("s__quietly", {})
        read = await session.read_resource("file:///r/quiet")
        again = [str(r.uri) for r in (await session.list_resources()).resources]
    assert "file:///r/quiet" not in listed and again == ["file:///r/quiet", *listed[1:]]
    assert [c.text for c in read.contents if isinstance(c, types.TextResourceContents)] == ["read"]
    assert marker.alive() == []


@pytest.mark.parametrize("listing", ["tools", "prompts", "resources", "resource_templates"])
async def test_a_listing_starts_every_server_at_once(
    tmp_path: Path, marker: Marker, no_leaks: None, monkeypatch: pytest.MonkeyPatch, listing: str
) -> None:
    # A listing started the servers one after another: each server that never answered its
    # `initialize` held the listing for its whole `startTimeoutMs` (10 s by default) before
    # the next one was even started, and the client waited for the sum, at every listing
    # after each one's backoff.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    where = tmp_path / marker
    where.mkdir()
    mute = {"command": [PY, HOSTILE, "mute", "-", marker], "sandbox": "none"}
    servers = {name: {**mute, "startTimeoutMs": 600_000} for name in ("mute1", "mute2")}
    (where / "config.json").write_text(json.dumps({"servers": servers}))
    config = load_config([where / "config.json"], cwd=where, environ={}, discover=False)
    gateways: list[Gateway] = []
    async with memory_session(config, [], gateways) as session, trio.open_nursery() as nursery:
        nursery.start_soon(getattr(session, f"list_{listing}"))
        await trio.testing.wait_all_tasks_blocked()
        manager = gateways[0].runtime.servers
        assert manager is not None
        states = [entry.state for entry in manager.entries.values()]
        nursery.cancel_scope.cancel()
    assert states == ["starting", "starting"]
    assert marker.alive() == []


@pytest.mark.parametrize("unsaid", [False, True])
async def test_reads_of_uris_no_server_lists_ask_each_server_at_most_once_in_a_while(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch, unsaid: bool
) -> None:
    # Each read of a URI no listing held had every server listed afresh (its resources and
    # its templates, every page, twice over for a server that does not say its lists
    # changed): a client reading unknown URIs in a loop kept every server listing.
    from mcpx_hooks.supervisor.service import mcprelay

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(mcprelay, "LOOK_AGAIN_S", 3600.0)  # (a count, not a timing)
    where = tmp_path / marker
    where.mkdir()
    log = where / "asked.log"
    argv = [PY, SDKLISTS, str(log), marker, *(["--unsaid"] if unsaid else [])]
    path = where / "config.json"
    path.write_text(json.dumps({"servers": {"s": {"command": argv, "sandbox": "none"}}}))
    config = load_config([str(path)], cwd=where, environ={}, discover=False)
    frames: list[dict[str, Any]] = []
    async with memory_session(config, frames) as session:
        for n in range(10):
            with pytest.raises(MCPError) as refused:
                await session.read_resource(f"file:///nowhere/{n}")
            assert refused.value.error.code == mcprelay.RESOURCE_NOT_FOUND
        looked = Counter(log.read_text().split())
        monkeypatch.setattr(mcprelay, "LOOK_AGAIN_S", 0.0)  # (the while over)
        with pytest.raises(MCPError):
            await session.read_resource("file:///nowhere/again")
        await session.call_tool("s__quietly", {})  # (it adds file:///r/quiet, unsaid)
        read = await session.read_resource("file:///r/quiet")
    assert looked == {"resources/list": 16, "resources/templates/list": 16}
    assert Counter(log.read_text().split()) == {
        "resources/list": 3 * 16,
        "resources/templates/list": 2 * 16,
    }
    assert [c.text for c in read.contents if isinstance(c, types.TextResourceContents)] == ["read"]
    assert marker.alive() == []


async def test_reads_of_uris_no_server_lists_say_a_failing_server_once_in_a_while(
    tmp_path: Path,
    marker: Marker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A server that cannot start was tried, and said on stderr, twice at each read: a
    # client reading unknown URIs in a loop flooded the log of `mcpx-hooks mcp`.
    from mcpx_hooks.supervisor.service import mcprelay

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(mcprelay, "LOOK_AGAIN_S", 3600.0)  # (a count, not a timing)
    where = tmp_path / marker
    where.mkdir()
    argv = [PY, HOSTILE, "die-at-start", str(where / "dead.log"), marker]
    path = where / "config.json"
    path.write_text(json.dumps({"servers": {"dead": {"command": argv, "sandbox": "none"}}}))
    config = load_config([str(path)], cwd=where, environ={}, discover=False)
    frames: list[dict[str, Any]] = []
    async with memory_session(config, frames) as session:
        for n in range(10):
            with pytest.raises(MCPError):
                await session.read_resource(f"file:///nowhere/{n}")
    warned = [f["message"] for f in frames if f["type"] == "warning"]
    logged = [r.getMessage() for r in caplog.records if "are not listed" in r.getMessage()]
    assert len(warned) == len(logged) == 2, warned  # (its resources, its templates: once)
    assert (where / "dead.log").read_text().split() == ["start"]  # (tried once)
    assert marker.alive() == []


async def test_a_change_a_server_says_before_its_handshake_answer_is_not_told_to_clients(
    tmp_path: Path, marker: Marker
) -> None:
    # The reference "everything" server says its tools changed before it answers
    # `initialize`: each start of it told every client its tools had changed (the client
    # listed them again), though the start's own listing came after what it said.
    config = write_config(tmp_path / marker, marker, h_mode="eager")
    async with line_client(config, AGENT.model_dump()) as client:  # (it starts both servers)
        came = client.opening
        assert "h__echo" in [tool["name"] for tool in came[-1]["result"]["tools"]]
        # A call of the server, then of the other: what the start said would be told by now.
        came += await client.answer(2, "tools/call", {"name": "h__echo", "arguments": {}})
        came += await client.answer(3, "tools/call", {"name": "words__count", "arguments": {}})
        came += await client.close_and_read()
    assert [m["method"] for m in came if "method" in m] == []
