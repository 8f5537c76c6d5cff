"""A client nobody here wrote: the MCP Inspector's command-line mode (the npm package
`@modelcontextprotocol/inspector`, run with `npx`), set up the way MCP clients are, with an
`mcpServers` entry that runs `mcpx-hooks mcp` (and, over HTTP, pointed at `serve`'s `/mcp`
with the token in a header). It sees the servers' tools under their
exposed names, gets through the gateway what it gets from the server directly (a content
item of every type, structured content, `_meta`), and reads a hook's refusal in the tool
result. Skipped, saying why, where npx or the npm registry is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from conftest import Marker
from mcpface_parts import HOSTILE, LISTED, MCPX, PY, call_hook, write_config
from service_client import start_server

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
NPX = shutil.which("npx")


def inspect(where: Path, server: dict[str, Any] | list[str], *request: str) -> Any:
    """What the Inspector prints (JSON) for one request to `server`: an `mcpServers` entry,
    or the Inspector's own arguments naming one."""
    argv = [NPX or "npx", "-y", INSPECTOR, "--cli"]
    if isinstance(server, list):
        argv += server
    else:
        clients = where / "mcp.json"
        clients.write_text(json.dumps({"mcpServers": {"it": server}}))
        argv += ["--config", str(clients), "--server", "it"]
    done = subprocess.run(
        [*argv, *request], check=False, capture_output=True, text=True, timeout=180, cwd=where
    )
    # It prints the result, and exits 5 when the result is an error (`isError`).
    assert done.returncode in (0, 5), done.stdout + done.stderr
    printed = json.loads(done.stdout)
    assert (done.returncode == 5) == (printed.get("isError") is True), done.stderr
    return printed


def gateway(config: Path) -> dict[str, Any]:
    """The `mcpServers` entry a user writes for mcpx-hooks (docs/mcp.md)."""
    env = {"MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(config.parent / "state")}
    return {"command": MCPX, "args": ["mcp", "--config", str(config)], "env": env}


def call(tool: str, **args: str) -> list[str]:
    request = ["--method", "tools/call", "--tool-name", tool]
    for key, value in args.items():
        request += ["--tool-arg", f"{key}={value}"]
    return request


def test_the_inspector_lists_the_gateway_s_tools(
    npm_registry: None, tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker)
    listed = inspect(tmp_path, gateway(config), "--method", "tools/list")
    names = [tool["name"] for tool in listed["tools"]]
    assert names == LISTED
    assert marker.alive() == []


def test_the_inspector_gets_through_the_gateway_what_it_gets_directly(
    npm_registry: None, tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    hostile = {"command": PY, "args": [HOSTILE, "good", str(tmp_path / "direct.log")]}
    for tool, args in (("mixed", {}), ("echo", {"say": "hi"}), ("fail", {"why": "no"})):
        straight = inspect(tmp_path, hostile, *call(tool, **args))
        through = inspect(tmp_path, gateway(config), *call(f"h__{tool}", **args))
        assert through == straight, tool
    mixed = inspect(tmp_path, gateway(config), *call("h__mixed"))
    kinds = [item["type"] for item in mixed["content"]]
    assert kinds == ["text", "image", "audio", "resource_link", "resource"]
    assert mixed["_meta"] == {"example.org/trace": "abc"}
    assert marker.alive() == []


def test_the_inspector_reads_a_hook_s_refusal_in_the_tool_result(
    npm_registry: None, tmp_path: Path, marker: Marker
) -> None:
    refuse = call_hook(
        "no-shouting",
        "before",
        {"refuse": "shouting is not allowed here"},
        when={"tool": ["words.shout"]},
        effect="apply",
    )
    config = write_config(tmp_path / marker, marker, hooks=[refuse])
    refused = inspect(tmp_path, gateway(config), *call("words__shout", text="hello"))
    assert refused == {
        "content": [
            {"type": "text", "text": "refused by no-shouting: shouting is not allowed here"}
        ],
        "isError": True,
    }
    counted = inspect(tmp_path, gateway(config), *call("words__count", text="a b c"))
    assert counted["structuredContent"] == {"words": 3, "lines": 1}
    assert marker.alive() == []


def test_the_inspector_over_http_reaches_serve_s_mcp_with_its_token(
    npm_registry: None, tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    refuse = call_hook(
        "no-shouting",
        "before",
        {"refuse": "not here"},
        when={"tool": ["words.shout"]},
        effect="ask",
    )
    config = write_config(where, marker, hooks=[refuse])
    server = start_server(where, "--config", str(config), env={"XDG_STATE_HOME": str(where / "s")})
    try:
        url = server.url.replace("ws://", "http://") + "/mcp"
        token = f"Authorization: Bearer {server.token}"
        http = ["--transport", "http", "--server-url", url]
        listed = inspect(tmp_path, [*http, "--header", token], "--method", "tools/list")
        counted = inspect(tmp_path, [*http, "--header", token], *call("words__count", text="a b"))
        refused = inspect(tmp_path, [*http, "--header", token], *call("words__shout", text="x"))
        argv = [NPX or "npx", "-y", INSPECTOR, "--cli", *http, "--method", "tools/list"]
        tokenless = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=180)
    finally:
        assert server.stop() == 0
    assert "words__count" in [tool["name"] for tool in listed["tools"]]
    assert counted["structuredContent"] == {"words": 2, "lines": 1}
    assert refused["isError"] is True
    assert refused["content"][0]["text"] == "refused by no-shouting: not here"
    # Refused (401) without the token: the Inspector would go on to OAuth, which needs a person.
    assert tokenless.returncode != 0 and '"auth_required"' in tokenless.stderr
    assert marker.alive() == []
