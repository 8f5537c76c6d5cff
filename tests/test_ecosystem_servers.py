"""Servers the ecosystem's way: `npx -y pkg` (the published `@modelcontextprotocol/
server-everything`) and `uvx pkg`, fetched once with network into the cache under the state
directory, then run under `strict` (no network) offline from that cache; a package that
cannot be had fails the start with its stderr's end, and "no network under strict" when the
server tried to reach one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.core.limits import Limits
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.serverhooks import open_servers
from mcpx_hooks.supervisor.tools.packages import ECOSYSTEMS, NO_NETWORK_SIGNS, install_argv
from mcpx_hooks.supervisor.tools.serverentry import ServerFailing
from mcpx_hooks.supervisor.tools.servers import ServerManager

EVERYTHING = "@modelcontextprotocol/server-everything"
HOSTILE = Path(__file__).parent / "mcpservers" / "hostile.py"
NPX = shutil.which("npx")
UVX = shutil.which("uvx") or (
    str(Path(sys.executable).with_name("uvx"))
    if Path(sys.executable).with_name("uvx").exists()
    else None
)


def npx_server(tmp_path: Path, *args: str, **fields: Any) -> ServerSpec:
    fields.setdefault("sandbox", Profile.STRICT)
    fields.setdefault("start_timeout_ms", 60_000)
    command = (str(NPX), "-y", *args)
    return ServerSpec("everything", command, str(tmp_path / "project"), **fields)


@pytest.fixture
async def manager(strict_spawner: Spawner) -> AsyncIterator[ServerManager]:
    async with open_servers(strict_spawner, Bus(), Config()) as m:
        yield m


def test_the_install_step_is_the_one_the_command_implies() -> None:
    npm, uv = ECOSYSTEMS
    spec = ServerSpec("x", ("npx", "-y", "pkg@1", "--flag"), "/p")
    assert install_argv(spec, npm) == ("npx", "--yes", "--package=pkg@1", "--", "node", "-e", "")
    spec = ServerSpec("x", ("npx", "-y", "-p", "a", "--package=b", "bin"), "/p")
    assert install_argv(spec, npm)[2:4] == ("--package=a", "--package=b")
    spec = ServerSpec("x", ("uvx", "--python", "3.12", "mcp-server-time", "--tz"), "/p")
    assert install_argv(spec, uv) == (
        "uvx",
        "--python",
        "3.12",
        "--from",
        "mcp-server-time",
        "python",
        "-c",
        "",
    )
    spec = ServerSpec("x", ("npx", "pkg"), "/p", install=("npm", "ci"))
    assert install_argv(spec, npm) == ("npm", "ci")


async def test_npx_fetches_once_then_runs_offline_under_strict(
    npm_registry: None,
    state: Path,
    tmp_path: Path,
    strict_spawner: Spawner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = npx_server(tmp_path, EVERYTHING)
    async with open_servers(strict_spawner, Bus(), Config()) as manager:
        with trio.fail_after(300):
            result, entry = await manager.call(spec, "echo", {"message": "offline"})
        assert [c.text for c in result.content] == ["Echo: offline"]  # type: ignore[union-attr]
        assert entry.info["name"] == "mcp-servers/everything"
    # The wait for the fetch is said (a first use otherwise waits in silence), once.
    said = [r.getMessage() for r in caplog.records]
    (fetching,) = [line for line in said if "fetching its package" in line]
    assert fetching.startswith("server everything: fetching its package into its cache, once")
    assert "npx --yes --package=@modelcontextprotocol/server-everything" in fetching
    caplog.clear()
    (done,) = (state / "mcpx-hooks" / "packages" / "npm").glob("everything-*/.mcpx-installed")
    assert (done.parent / "_npx").is_dir()
    fetched_at = done.stat().st_mtime_ns
    async with open_servers(strict_spawner, Bus(), Config()) as manager:  # a new supervisor
        with trio.fail_after(120):
            again, _ = await manager.call(spec, "echo", {"message": "again"})
    assert [c.text for c in again.content] == ["Echo: again"]  # type: ignore[union-attr]
    assert done.stat().st_mtime_ns == fetched_at  # not fetched again
    assert not [r for r in caplog.records if "fetching its package" in r.getMessage()]


async def test_npx_under_workspace_finds_its_cache_in_a_state_directory_inside_its_project(
    npm_registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manager: ServerManager
) -> None:
    # `XDG_STATE_HOME=$PWD/.state`, as a CI job sets it: the cache lies in the project, which
    # workspace makes writable, and in the state directory, which the view covers. An
    # ordinary user's server found no cache there ("ENOTCACHED"), root's did.
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(project / ".state"))
    spec = npx_server(tmp_path, EVERYTHING, sandbox=Profile.WORKSPACE)
    with trio.fail_after(300):
        result, _ = await manager.call(spec, "echo", {"message": "inside"})
    assert [c.text for c in result.content] == ["Echo: inside"]  # type: ignore[union-attr]


async def test_an_install_step_reaches_its_cache_below_a_0700_state_home_in_its_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manager: ServerManager
) -> None:
    # `XDG_STATE_HOME=$PWD/.state` made 0700 (`mkdir -m 700`). As root, the install step (a
    # per-child uid, under net) sees the project bound in a cover over the 0700
    # `/tmp/pytest-of-root`, then the host's `.state` on the way to its cache: EACCES
    # (npm's on its `_cacache`). Now that directory is covered too, the cache attached in it.
    project = tmp_path / "project"
    project.mkdir()
    (project / ".state").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_STATE_HOME", str(project / ".state"))
    shutil.copy(HOSTILE, project / "hostile.py")
    npx = project / "npx"
    npx.write_text(f"#!/bin/sh\nMCPX_TEST_TOKEN=cached exec {sys.executable} hostile.py leak\n")
    npx.chmod(0o755)
    spec = ServerSpec(
        "cached",
        (str(npx), "-y", "pkg"),
        str(project),
        sandbox=Profile.WORKSPACE,
        install=("sh", "-c", 'mkdir "$npm_config_cache/fetched"'),
    )
    with trio.fail_after(60):
        result, _ = await manager.call(spec, "echo", {})
    assert [c.text for c in result.content] == ["no: cached"]  # type: ignore[union-attr]
    assert list((project / ".state" / "mcpx-hooks" / "packages" / "npm").glob("*/fetched"))


async def test_a_package_that_does_not_exist_fails_its_start_with_why(
    npm_registry: None, state: Path, tmp_path: Path, manager: ServerManager
) -> None:
    missing = "@modelcontextprotocol/no-such-server-mcpx-hooks-test"
    with trio.fail_after(120), pytest.raises(ServerFailing) as failed:
        await manager.call(npx_server(tmp_path, missing), "echo", {})
    why = str(failed.value)
    assert "its install step" in why and "its stderr ends:" in why and "E404" in why
    with pytest.raises(ServerFailing, match=r"next start in \d"):  # backing off, at once
        await manager.call(npx_server(tmp_path, missing), "echo", {})


async def test_a_package_not_in_the_cache_under_strict_says_no_network(
    state: Path, tmp_path: Path, manager: ServerManager
) -> None:
    if NPX is None:
        pytest.skip("npx is not installed")
    missing = "@modelcontextprotocol/not-in-the-cache-mcpx-hooks-test"
    spec = npx_server(tmp_path, missing, install=("true",))  # an install that fetches nothing
    with trio.fail_after(120), pytest.raises(ServerFailing) as failed:
        await manager.call(spec, "echo", {})
    why = str(failed.value)
    assert "its stderr ends:" in why and "ENOTCACHED" in why
    assert "no network under strict" in why


async def test_both_steps_keep_mallocs_arenas_few_unless_the_server_says(
    state: Path, tmp_path: Path, manager: ServerManager
) -> None:
    """Each glibc malloc arena past the main one reserves 64 MiB of address space: where
    RLIMIT_AS bounds memory (rootless) uv's and npm's threads ran out of it. The install step
    and the server get MALLOC_ARENA_MAX=2; a server's own `env` wins."""
    project = tmp_path / "project"
    shutil.copy(HOSTILE, project / "hostile.py")
    npx = project / "npx"  # a server the ecosystem's way, that says what it was given
    npx.write_text(
        "#!/bin/sh\n"
        'MCPX_TEST_TOKEN="arenas=$MALLOC_ARENA_MAX offline=$npm_config_offline"'
        f" exec {sys.executable} hostile.py leak\n"
    )
    npx.chmod(0o755)
    said = 'test "$MALLOC_ARENA_MAX" = "$WANT" || { echo "arenas=$MALLOC_ARENA_MAX" >&2; exit 3; }'
    for given, arenas in (({}, "2"), ({"MALLOC_ARENA_MAX": "8"}, "8")):
        spec = ServerSpec(
            f"arenas{arenas}",
            (str(npx), "-y", "pkg"),
            str(project),
            sandbox=Profile.STRICT,
            install=("sh", "-c", said),
            env={"WANT": arenas, **given},
        )
        with trio.fail_after(60):
            result, _ = await manager.call(spec, "echo", {})
        texts = [c.text for c in result.content]  # type: ignore[union-attr]
        assert texts == [f"no: arenas={arenas} offline=true"]


async def test_an_install_step_over_its_memory_says_so(
    state: Path, tmp_path: Path, manager: ServerManager
) -> None:
    fill = (  # shared and written: a cgroup counts it (RLIMIT_DATA would not), RLIMIT_AS too
        "import mmap\nm = mmap.mmap(-1, 200 << 20)\nfor i in range(0, len(m), 4096): m[i] = 1"
    )
    spec = npx_server(
        tmp_path, "pkg", install=(sys.executable, "-c", fill), limits=Limits(memory_mb=64)
    )
    with trio.fail_after(60), pytest.raises(ServerFailing, match="over memoryMb 64"):
        await manager.call(spec, "echo", {})


@pytest.mark.skipif(UVX is None, reason="uv is not installed (pip install uv provides uvx)")
async def test_uvx_fetches_once_then_runs_offline_under_strict(
    state: Path, tmp_path: Path, strict_spawner: Spawner
) -> None:
    spec = ServerSpec(
        "time",
        (str(UVX), "mcp-server-time"),
        str(tmp_path / "project"),
        sandbox=Profile.STRICT,
        start_timeout_ms=60_000,
        env={"UV_NATIVE_TLS": "1"},  # the system's certificates, as pip here uses them
    )
    async with open_servers(strict_spawner, Bus(), Config()) as manager:
        with trio.fail_after(300):
            try:
                result, _ = await manager.call(spec, "get_current_time", {"timezone": "UTC"})
            except ServerFailing as exc:
                if "its install step" in str(exc) and NO_NETWORK_SIGNS.search(str(exc)):
                    pytest.skip(f"the Python package index is unreachable from here: {exc}")
                raise
        (done,) = (state / "mcpx-hooks" / "packages" / "uv").glob("time-*/.mcpx-installed")
        fetched_at = done.stat().st_mtime_ns
    async with open_servers(strict_spawner, Bus(), Config()) as manager:  # a new supervisor
        with trio.fail_after(120):
            again, _ = await manager.call(spec, "get_current_time", {"timezone": "UTC"})
    assert result.is_error is not True and again.is_error is not True
    assert "UTC" in str(again.structured_content)
    assert done.stat().st_mtime_ns == fetched_at  # not fetched again


@pytest.mark.skipif(UVX is None, reason="uv is not installed (pip install uv provides uvx)")
def test_a_plugin_hook_on_the_published_time_server_shows_its_answer_as_advice(
    state: Path, tmp_path: Path
) -> None:
    """PyPI's `mcp-server-time`, started with uvx, asked by a plugin hook of an `exec`: its
    plain answer (the time, not an answer object) is the hook's advice, as a script would read
    it, nothing of it dropped as unknown keys."""
    project = tmp_path / "project"
    config = project / "time.toml"
    config.write_text(
        "[servers.time]\n"
        f'command = ["{UVX}", "mcp-server-time"]\n'
        'sandbox = "strict"\n'
        "startTimeoutMs = 60000\n"
        'env = { UV_NATIVE_TLS = "1" }\n'
        "[[hooks]]\n"
        'name = "what-time"\n'
        'on = "script"\n'
        'phase = "before"\n'
        'plugin = "time.get_current_time"\n'
        'args = { timezone = "UTC" }\n'
        "timeoutMs = 240000\n"
    )
    cli = [sys.executable, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--config"]
    done = subprocess.run(
        [*cli, str(config), "--", "true"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=project,
        env={**os.environ, "XDG_STATE_HOME": str(state), "MCPX_HOOKS_NO_DISCOVERY": "1"},
    )
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    (hook,) = [f for f in frames if f["type"] == "hook"]
    if hook["status"] != "ok" and NO_NETWORK_SIGNS.search(hook.get("reason", "")):
        pytest.skip(f"the Python package index is unreachable from here: {hook['reason']}")
    assert done.returncode == 0, done.stderr
    assert (hook["status"], hook.get("dropped", [])) == ("ok", []), hook
    (advice,) = hook["advice"]
    said = json.loads(advice)
    assert said["timezone"] == "UTC" and said["datetime"].startswith(str(time.gmtime().tm_year))
