"""What the run of an MCP session notes of a failed call whose server runs without network
and said it tried to reach one: a note in the `call` frame (and `runs show`), how to give the
server hosts; never a word in what the client gets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import Marker
from mcpface_parts import HOSTILE, call_hook, stdio_session, texts, through_mcpx, write_config
from test_mcp_raw import session_frames

NOTE = call_hook("note", "suffix", {"advise": "seen"})


@pytest.mark.parametrize("hooks", [[], [NOTE]])
async def test_a_failed_call_of_a_server_without_network_notes_how_to_give_it_hosts(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]]
) -> None:
    # A tool of a server under `strict` that answered "fetch failed" left only that in the
    # run: nothing said the server had no network, nor how to give it some.
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("fail",))
    declared = json.loads(config.read_text())
    shutil.copy(HOSTILE, where / "hostile.py")  # (what the strict sandbox sees)
    h = declared["servers"]["h"]
    h.update(sandbox="strict", command=[h["command"][0], str(where / "hostile.py"), "good"])
    h["command"] += ["/dev/null", marker]
    config.write_text(json.dumps(declared))
    whys = ["fetch failed", "no such file", "getaddrinfo EAI_AGAIN api.example.com"]
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        await session.list_tools()  # (the server started: relayed when no hook is on it)
        got = [await session.call_tool("h__fail", {"why": why}) for why in whys]
    # The client gets what the server answered, and nothing more.
    assert [texts(r) for r in got] == [[json.dumps({"why": why})] for why in whys]
    calls = [f for f in session_frames(config) if f["type"] == "call"]
    note = (
        "server h runs without network (sandbox strict): to let it reach a host, name it in"
        ' [servers.h] network = ["example.com"]'
    )
    # Only where the answer says it tried the network.
    assert [c.get("note") for c in calls] == [note, None, note]
    assert marker.alive() == []


def test_the_note_is_only_for_a_server_the_sandbox_keeps_off_the_network() -> None:
    from mcpx_hooks.supervisor.core.hooks import Profile
    from mcpx_hooks.supervisor.core.servers import ServerSpec, offline_note

    run = ServerSpec("s", ("node", "s.js"), "/w")
    said = "TypeError: fetch failed"
    assert offline_note(run, said) is not None
    assert offline_note(ServerSpec("s", ("node", "s.js"), "/w", sandbox=Profile.WORKSPACE), said)
    for spec in (
        ServerSpec("s", ("node", "s.js"), "/w", network=("api.example.com",)),  # its proxy says
        ServerSpec("s", ("node", "s.js"), "/w", sandbox=Profile.NET),
        ServerSpec("s", ("node", "s.js"), "/w", sandbox=Profile.NONE),
        ServerSpec("s", (), "/w"),  # a remote server: not ours to sandbox
    ):
        assert offline_note(spec, said) is None
