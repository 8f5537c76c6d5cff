"""Remote tool servers (`[servers.x] url`): a real SDK server (`MCPServer`, streamable HTTP
under uvicorn on a loopback port, checking a bearer token) reached by a script's call, a
plugin hook, `mcpx-hooks mcp` and `servers list`; the token in no frame, event, log or
error; a wrong token and an unreachable url fail with why, at once, and back off; the config
rules of `url`, `headers` and their secrets."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest
import trio
from conftest import Marker
from mcp.client.stdio import StdioServerParameters
from mcpface_parts import MCPX, PY, stdio_session, texts

from mcpx_hooks.supervisor.config.loading import load_config, validate_files
from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.errors import ConfigError, Problem
from mcpx_hooks.supervisor.core.hooks import Config
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.core.servers import MAX_MESSAGE_BYTES, ServerSpec
from mcpx_hooks.supervisor.process.spawner import open_spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest
from mcpx_hooks.supervisor.run.serverhooks import open_servers
from mcpx_hooks.supervisor.tools.serverentry import ServerFailing, ToolFailed
from mcpx_hooks.supervisor.tools.servers import ServerManager
from mcpx_hooks.supervisor.tools.wireresult import as_written

HERE = Path(__file__).parent
REMOTE = str(HERE / "mcpservers" / "remote_http.py")
AUTH = {"Authorization": "Bearer ${secret:R_TOKEN}"}

# The SDK's HTTP client leaves the async generators of a response stream it was reading
# (its GET stream, cut short when the session closes) to the garbage collector: Trio's
# finalizer warns, and under `-W error` that warning is raised where nothing can catch it.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2.:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object (EventSource|Response|PoolByteStream)"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]


@attrs.frozen
class Upstream:
    url: str
    token: str
    mode: str = "sse"


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Upstream]:
    """The remote server, its token in `R_TOKEN` (where the supervisor's secrets come from).
    Started through a shell that leaves it behind, so it is no child of this process (the
    tests' leak checks count those) and stands for a server the supervisor does not run.
    Its mode (`sse`, `json`, `gzip`: `remote_http.py`) is the test's parameter, if any."""
    token = "tok-" + secrets.token_hex(16)
    mode = getattr(request, "param", "sse")
    sh = subprocess.Popen(
        ["sh", "-c", '"$0" "$@" </dev/null & echo $!', PY, REMOTE, token, mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sh.stdout is not None
    with sh.stdout:
        server = psutil.Process(int(sh.stdout.readline()))
        sh.wait()
        try:
            port = int(sh.stdout.readline().split()[1])
            monkeypatch.setenv("R_TOKEN", token)
            yield Upstream(f"http://127.0.0.1:{port}/mcp", token, mode)
        finally:
            server.kill()
            server.wait(10)


def remote(url: str, **fields: Any) -> ServerSpec:
    return ServerSpec("r", (), str(HERE), url=url, headers=AUTH, secrets=("R_TOKEN",), **fields)


@pytest.fixture
async def manager(upstream: Upstream, no_leaks: None) -> AsyncIterator[ServerManager]:
    async with open_spawner() as spawner, open_servers(spawner, Bus(), Config()) as m:
        yield m


async def test_a_remote_server_serves_calls_with_its_bearer_token(
    upstream: Upstream, manager: ServerManager
) -> None:
    result, entry = await manager.call(remote(upstream.url), "add", {"a": 2, "b": 3})
    assert result.structured_content == {"sum": 5}
    (shown,) = manager.status()
    assert shown["state"] == "running" and shown["server"] == {
        "name": "remote-words",
        "version": "2.0",
    }
    assert [t["name"] for t in shown["tools"]] == ["echo", "add", "down", "tick", "big"]
    again, same = await manager.call(remote(upstream.url), "echo", {"text": "hi"})
    assert same is entry and texts(again) == ["hi"]
    # The server's own error in -32000, the code the SDK's client also fails requests with
    # when the connection ends: the call fails in the server's words, the server serves on.
    with pytest.raises(ToolFailed) as caught:
        await manager.call(remote(upstream.url), "down", {})
    assert str(caught.value) == "server r answered down with an error: the database is down"
    after, still = await manager.call(remote(upstream.url), "echo", {"text": "on"})
    assert still is entry and texts(after) == ["on"]


@pytest.mark.parametrize("upstream", ["sse", "json"], indirect=True)
async def test_an_answer_past_the_bound_fails_its_call_at_once_and_the_server_serves_on(
    upstream: Upstream, manager: ServerManager
) -> None:
    # The bound of an answer from a server the supervisor runs (one line of its stdout),
    # reached before the server has finished writing: 64 MiB here, which a JSON body read
    # whole would have held in memory (gigabytes, for a server that goes on writing).
    spec = remote(upstream.url)
    with trio.fail_after(30), pytest.raises(ToolFailed) as caught:
        await manager.call(spec, "big", {"size": 4 * MAX_MESSAGE_BYTES})
    said = {
        "json": "server r: the answer is too large: a message over 16777216 bytes",
        "sse": "exceeded the 16777216 byte limit",
    }
    assert said[upstream.mode] in str(caught.value)
    # Under the bound, an answer past the SDK's own bound of an event (1 MiB) is one.
    within, _ = await manager.call(spec, "big", {"size": 3 << 20})
    assert texts(within) == ["x" * (3 << 20)]


@pytest.mark.parametrize("upstream", ["gzip"], indirect=True)
async def test_a_server_that_compresses_unasked_fails_unread(
    upstream: Upstream, manager: ServerManager
) -> None:
    with trio.fail_after(10), pytest.raises(ServerFailing) as failed:
        await manager.call(remote(upstream.url), "echo", {"text": "x"})
    assert "its answer is compressed, unasked" in str(failed.value)


async def test_a_wrong_token_fails_with_the_status_and_never_the_token(
    upstream: Upstream, manager: ServerManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-" + secrets.token_hex(8)  # the server echoes it in its 401's body and headers
    monkeypatch.setenv("R_TOKEN", wrong)
    with trio.fail_after(10), pytest.raises(ServerFailing) as failed:
        await manager.call(remote(upstream.url), "echo", {"text": "x"})
    why = str(failed.value)
    assert "HTTP 401 Unauthorized" in why and upstream.url in why
    assert wrong not in why and "Bearer" not in why
    with pytest.raises(ServerFailing, match=r"next start in \d"):  # the backoff, at once
        await manager.call(remote(upstream.url), "echo", {"text": "x"})


async def test_an_unreachable_url_fails_at_once_with_why_and_backs_off(
    upstream: Upstream, manager: ServerManager
) -> None:
    with socket.socket() as sock:  # a loopback port no one listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = remote(f"http://127.0.0.1:{port}/mcp")
    with trio.fail_after(5), pytest.raises(ServerFailing) as failed:
        await manager.call(spec, "echo", {"text": "x"})
    assert f"server r (http://127.0.0.1:{port}/mcp) failed: ConnectError" in str(failed.value)
    assert upstream.token not in str(failed.value)
    with pytest.raises(ServerFailing, match=r"next start in \d"):
        await manager.call(spec, "echo", {"text": "x"})
    assert manager.status()[0]["state"] == "failing"


def config_file(where: Path, upstream: Upstream, marker: Marker, **more: Any) -> Path:
    """A config with server `r` (the upstream), and a `server.start` hook that keeps what it
    saw in `start.json`."""
    keep = f"import sys; open({str(where / 'start.json')!r}, 'w').write(sys.stdin.read())"
    config = {
        "defaults": {"sandbox": "none"},
        "servers": {"r": {"url": upstream.url, "headers": AUTH, "secrets": ["R_TOKEN"]}},
        "hooks": [
            {
                "name": "saw-start",
                "on": "server.start",
                "phase": "before",
                "run": [PY, "-c", keep, marker],
            },
            *more.pop("hooks", []),
        ],
        **more,
    }
    path = where / "config.json"
    path.write_text(json.dumps(config))
    return path


async def test_a_script_call_and_a_plugin_hook_reach_it_and_no_frame_holds_the_token(
    upstream: Upstream, tmp_path: Path, marker: Marker, no_leaks: None
) -> None:
    plugin = {
        "name": "sum",
        "on": "script",
        "phase": "onSuccess",
        "plugin": "r.add",
        "args": {"a": "@result.value", "b": 10},
    }
    path = config_file(tmp_path, upstream, marker, hooks=[plugin])
    (tmp_path / "job.py").write_text(
        textwrap.dedent(
            """
            def main():
                said = mcpx_call("r.echo", {"text": "through"})
                return 32 if said == {"result": "through"} else said
            """
        )
    )
    loaded = load_config([path], cwd=tmp_path, environ=os.environ, discover=False)
    async with open_runtime(loaded) as runtime:
        run = runtime.new_run(RunRequest(Script(python_file="job.py"), str(tmp_path)))
        await runtime.execute(run)
        frames = run.journal.decoded(0)
        async with runtime.bus.subscribe(since=0) as sub:
            events = [json.dumps(to_json(sub._items.popleft())) for _ in range(sub.pending)]
    check_order(frames)
    (call,) = [f for f in frames if f["type"] == "call"]
    assert (call["server"], call["tool"], call["ok"]) == ("r", "echo", True)
    (result,) = [f for f in frames if f["type"] == "result"]
    assert result["value"] == 32
    (hooked,) = [f for f in frames if f["type"] == "hook" and f["name"] == "sum"]
    assert (hooked["status"], hooked["server"], hooked["tool"]) == ("ok", "r", "add")
    # Its answer is not an answer object: the tool's text is the hook's advice (`answer =
    # "auto"`), nothing dropped.
    assert hooked.get("dropped", []) == [] and len(hooked["advice"]) == 1
    assert json.loads(hooked["advice"][0]) == {"sum": 42}
    seen = json.loads((tmp_path / "start.json").read_text())  # `server.start` fired
    assert seen["input"] == {"server": "r", "url": upstream.url}
    everything = json.dumps(frames) + "".join(events) + (tmp_path / "start.json").read_text()
    assert upstream.token not in everything


async def test_the_mcp_face_lists_and_calls_its_tools_and_pins_them(
    upstream: Upstream, tmp_path: Path, marker: Marker
) -> None:
    path = config_file(tmp_path, upstream, marker)
    env = {
        "MCPX_HOOKS_NO_DISCOVERY": "1",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "R_TOKEN": upstream.token,
        "PATH": os.environ["PATH"],
    }
    params = StdioServerParameters(
        command=MCPX, args=["mcp", "--config", str(path)], env=env, cwd=str(tmp_path)
    )
    async with stdio_session(params, tmp_path / "err") as session:
        listed = await session.list_tools()
        added = await session.call_tool("r__add", {"a": 1, "b": 2})
        echoed = await session.call_tool("r__echo", {"text": "agent"})
    assert sorted(t.name for t in listed.tools) == [
        "mcpx_exec",
        "r__add",
        "r__big",
        "r__down",
        "r__echo",
        "r__tick",
    ]
    assert added.structured_content == {"sum": 3} and texts(echoed) == ["agent"]
    said = (tmp_path / "err").read_text()
    assert "server r" in said and "pinned at their first use" in said
    assert upstream.token not in said
    for stored in (tmp_path / "state").rglob("*"):
        if stored.is_file():
            assert upstream.token.encode() not in stored.read_bytes(), stored
    with trio.fail_after(60):
        shown = await trio.run_process(
            [MCPX, "servers", "list", "--config", str(path)],
            env=env,
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out, err = shown.stdout.decode(), shown.stderr.decode()
    assert shown.returncode == 0, err
    assert "r (remote-words 2.0): running since" in out
    assert f"  url: {upstream.url}" in out and "  - add" in out
    assert upstream.token not in out + err
    assert marker.alive() == []


def test_headers_name_only_listed_secrets_and_url_excludes_command(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[servers.a]\nurl = "https://mcp.example.com/mcp"\nsecrets = ["A_TOKEN"]\n'
        'headers = { Authorization = "Bearer ${secret:A_TOKEN}", X-Other = "${secret:B}" }\n'
        '[servers.b]\nurl = "https://mcp.example.com/mcp"\ncommand = ["srv"]\n'
        '[servers.c]\nurl = "http://mcp.example.com/mcp"\n'
        '[servers.d]\nurl = "http://127.0.0.1:8080/mcp"\nheaders = { X = "${HOME}" }\n'
        '[servers.e]\ncommand = ["srv"]\nheaders = { X = "y" }\n'
        '[servers.f]\nsandbox = "net"\n'
    )
    assert validate_files([path]) == [
        Problem(
            str(path),
            "/servers/a/headers/X-Other",
            "${secret:B} names a secret this server's `secrets` does not list (its secrets:"
            " A_TOKEN); add 'B' to `secrets`",
        ),
        Problem(
            str(path),
            "/servers/b/url",
            "expected either `command` (a server it runs) or `url` (a remote server), found both",
        ),
        Problem(
            str(path),
            "/servers/c/url",
            "expected https:// (http:// is for a loopback host only: localhost, 127.0.0.1,"
            " ::1), found 'mcp.example.com'",
        ),
        Problem(
            str(path),
            "/servers/d/headers/X",
            "only ${secret:NAME} is expanded in a header value; ${HOME} would be sent as it is",
        ),
        Problem(
            str(path),
            "/servers/e/headers",
            "`headers` are sent to a remote server: this server has no `url`",
        ),
        Problem(
            str(path),
            "/servers/f",
            "expected `command` (a server it runs) or `url` (a remote server)",
        ),
    ]


def test_a_url_in_one_file_and_a_command_in_another_is_refused(tmp_path: Path) -> None:
    far, near = tmp_path / "far.toml", tmp_path / "near.toml"
    far.write_text('[servers.a]\ncommand = ["srv"]\n')
    near.write_text('[servers.a]\nurl = "https://mcp.example.com/mcp"\n')
    with pytest.raises(ConfigError) as refused:
        load_config([far, near], cwd=tmp_path, environ={}, discover=False)
    (problem,) = refused.value.problems
    assert (problem.file, problem.pointer) == (str(near), "/servers/a")
    assert "both" in problem.message


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("the supervisor runs on Linux", allow_module_level=True)


@pytest.mark.parametrize("upstream", ["odd"], indirect=True)
async def test_an_answer_is_kept_as_the_remote_server_wrote_it(
    upstream: Upstream, manager: ServerManager
) -> None:
    # It was read by the SDK's client: a key of a newer revision dropped, the keys in the
    # model's order, and a client of `mcpx-hooks mcp` got that.
    result, _ = await manager.call(remote(upstream.url), "add", {"a": 2, "b": 3})
    written = as_written(result)
    assert written is not None
    assert next(iter(written)) == "example.org/eta"
    assert written["example.org/eta"] == {"seconds": 0, "sure": 0.5}
    assert written["structuredContent"] == {"sum": 5}


async def test_a_remote_server_s_progress_reaches_its_hearer_as_it_wrote_it(
    upstream: Upstream, manager: ServerManager
) -> None:
    heard: list[Any] = []

    async def hear(
        progress: float, total: float | None, message: str | None, written: Any = None
    ) -> None:
        heard.append((progress, written))

    result, _ = await manager.call(remote(upstream.url), "tick", {}, progress=hear)
    assert texts(result) == ["ticked"]
    assert [p for p, _ in heard] == [0, 1]
    assert all(w is not None and w["progressToken"].startswith("mcpx-call-") for _, w in heard)
