"""A pin taken anew (`trust --servers`, another process) takes effect in a running `serve`
and a running `mcpx-hooks mcp`: a server whose tools changed on disk, reviewed and pinned
again, is listed and called as pinned, in the sessions open and in new ones, without a
restart. Real servers behind the SDK's own clients, over HTTP and stdio."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from conftest import Marker
from mcp.client.session import ClientSession
from mcpface_parts import stdio_session, texts, through_mcpx, write_config
from test_mcp_http import AUTH, http_session, served
from test_mcp_pins import cli

pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpx2\.:ResourceWarning"),
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpcore2\.:ResourceWarning"),
]


async def count_said(session: ClientSession) -> str | None:
    """The description of `words__count` as the session is listed (None: not listed)."""
    listed = {t.name: t.description for t in (await session.list_tools()).tools}
    return listed.get("words__count")


def new_version(where: Path) -> None:
    """The server on disk now describes `count` otherwise; `servers diff` says so, and
    `trust --servers` pins it (each starting it afresh, in a process of its own)."""
    server = where / "wordtools.py"
    server.write_text(server.read_text().replace("Counts the words", "Counts all the words"))
    diff = cli(where / "config.json", "servers", "diff", "words")
    assert (diff.returncode, diff.stdout) == (1, "tool changed: count (description)\n")
    pinned = cli(where / "config.json", "trust", "--servers", "words")
    assert (pinned.returncode, pinned.stdout) == (0, "pinned words: 4 tools\n")


async def test_a_pin_taken_anew_takes_effect_in_a_running_serve(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    told = trio.Event()

    async def heard(message: object) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            told.set()

    async with (
        served(tmp_path, marker, monkeypatch) as face,
        http_session(face.url, AUTH, message_handler=heard) as one,
    ):
        before = await count_said(one)
        assert before is not None and before.startswith("Counts the words")
        new_version(tmp_path / marker)
        # A new session: before, the running server (the old version) was quarantined, its
        # refusal asking for the `trust --servers` just done.
        async with http_session(face.url, AUTH) as two:
            now = await count_said(two)
            called = await two.call_tool("words__count", {"text": "a b"})
        assert now is not None and now.startswith("Counts all the words"), now
        assert called.is_error is False, texts(called)
        with trio.fail_after(30):
            await told.wait()  # the session open all along is told, and lists the new tools
        assert await count_said(one) == now
        again = await one.call_tool("words__count", {"text": "a b c"})
        assert again.is_error is False and texts(again) == ['{"words": 3, "lines": 1}']


async def test_a_pin_taken_anew_takes_effect_in_a_running_mcp(
    tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker)
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        before = await count_said(session)
        assert before is not None and before.startswith("Counts the words")
        new_version(tmp_path / marker)
        # Before, it went on listing the old version's tools, which were no longer pinned.
        now = await count_said(session)
        called = await session.call_tool("words__count", {"text": "a b"})
    assert now is not None and now.startswith("Counts all the words"), now
    assert called.is_error is False, texts(called)
    assert marker.alive() == []
