"""docs/coming-from.md, "Coming from Claude Code hooks", run as a user would: its config and its
hook script, taken from the page, in a scratch project; the published filesystem server
(`npx -y @modelcontextprotocol/server-filesystem`) behind `mcpx-hooks mcp`, and the MCP SDK's
client as the agent. Writing `notes.txt` works; writing `.env` or under `.git/` comes back as
the refusal the page shows, and nothing is written. Skipped, saying why, where npx or the npm
registry is missing."""

from __future__ import annotations

import re
from pathlib import Path

import trio
from conftest import Marker
from docpage import block
from mcp.client.stdio import StdioServerParameters
from mcpface_parts import MCPX, stdio_session, texts

PAGE = Path(__file__).parent.parent / "docs" / "coming-from.md"


def section() -> str:
    text = PAGE.read_text()
    return text[text.index("## Coming from Claude Code hooks") : text.index("## Errors")]


async def test_the_claude_code_gate_as_a_call_hook_refuses_what_the_page_says(
    npm_registry: None, tmp_path: Path, marker: Marker
) -> None:
    project = tmp_path / marker
    (project / "hooks").mkdir(parents=True)
    (project / ".git").mkdir()
    (project / "agent-hooks.toml").write_text(block(PAGE.name, "[servers.fs]", "toml").body)
    (project / "hooks" / "guard_writes.py").write_text(block(PAGE.name, "refuse", "python").body)
    shown = re.search(r"the text\s+`(refused by guard-writes: .*?)`", section(), re.S)
    assert shown is not None
    expected = " ".join(shown.group(1).split())
    params = StdioServerParameters(
        command=MCPX,
        args=["mcp", "--config", "agent-hooks.toml"],
        env={
            "MCPX_HOOKS_NO_DISCOVERY": "1",
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "PATH": "/usr/bin:/bin",  # python3 and npx as a user has them
        },
        cwd=str(project),
    )
    with trio.fail_after(300):  # the first start fetches the server's package
        async with stdio_session(params, tmp_path / "err") as agent:
            listed = {tool.name for tool in (await agent.list_tools()).tools}
            wrote = await agent.call_tool("fs__write_file", {"path": "notes.txt", "content": "hi"})
            env = await agent.call_tool("fs__write_file", {"path": ".env", "content": "K=v"})
            git = await agent.call_tool(
                "fs__edit_file", {"path": ".git/config", "edits": [], "dryRun": True}
            )
    assert {"fs__write_file", "fs__edit_file", "fs__read_text_file"} <= listed
    assert wrote.is_error is not True, texts(wrote)
    assert (project / "notes.txt").read_text() == "hi"
    assert env.is_error is True and texts(env) == [expected]
    assert not (project / ".env").exists()
    assert git.is_error is True and texts(git)[0].startswith("refused by guard-writes: edit_file")
    assert marker.alive() == []
