"""A tool server the ecosystem's way with a `network` list, as a new user meets it: `npx -y` a
published package (`mcp-server-fetch-typescript`, whose `get_raw_text` fetches a URL with
axios, which honours the proxy variables) under `strict`, starting from an empty npm cache of
its own, so that npx fetches the package at its start through the supervisor's proxy (the
registry named in `network`, the per-run CA trusted through `NODE_EXTRA_CA_CERTS`); then
its tool reaches the one API host the list names (a loopback HTTP server) and is refused
another. Without the registry in the list, the fetch itself is refused, and the start says
so: the install step runs under the server's own list, not under `net`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
from test_egress import hello_server

from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.serverhooks import open_servers
from mcpx_hooks.supervisor.tools.serverentry import ServerFailing, ToolFailed

#: A published MCP server whose tool fetches the URL it is given (pinned: its tool's name).
FETCHER = "mcp-server-fetch-typescript@0.1.1"
REGISTRY = "registry.npmjs.org"


def fetcher(tmp_path: Path, *network: str) -> ServerSpec:
    command = (str(shutil.which("npx")), "-y", FETCHER)
    return ServerSpec(
        "fetch", command, str(tmp_path / "project"), sandbox=Profile.STRICT,
        network=network, start_timeout_ms=60_000,
    )  # fmt: skip


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


async def test_npx_fetches_through_the_proxy_then_its_tool_reaches_one_api_host(
    npm_registry: None, state: Path, tmp_path: Path, strict_spawner: Spawner
) -> None:
    with hello_server() as port:
        spec = fetcher(tmp_path, REGISTRY, f"localhost:{port}")
        async with open_servers(strict_spawner, Bus(), Config()) as manager:
            with trio.fail_after(300):
                got, entry = await manager.call(
                    spec, "get_raw_text", {"url": f"http://localhost:{port}/api"}
                )
            assert text(got) == "hello" and not got.is_error
            with trio.fail_after(60), pytest.raises(ToolFailed, match="status code 403"):
                await manager.call(spec, "get_raw_text", {"url": f"http://localhost:{port + 1}/"})
            assert entry.egress is not None
            assert entry.egress.refused == {"localhost": port + 1}  # the registry was allowed
    (done,) = (state / "mcpx-hooks" / "packages" / "npm").glob("fetch-*/.mcpx-installed")
    assert (done.parent / "_npx").is_dir()  # fetched into its own cache, at its start


async def test_without_the_registry_in_network_its_fetch_is_refused(
    npm_registry: None, state: Path, tmp_path: Path, strict_spawner: Spawner
) -> None:
    spec = fetcher(tmp_path, "localhost:9")
    async with open_servers(strict_spawner, Bus(), Config()) as manager:
        with trio.fail_after(120), pytest.raises(ServerFailing) as failed:
            await manager.call(spec, "get_raw_text", {"url": "http://localhost:9/"})
    why = str(failed.value)
    assert "its install step" in why and f"the proxy refused {REGISTRY}" in why
    assert not list((state / "mcpx-hooks" / "packages" / "npm").glob("fetch-*/.mcpx-installed"))
