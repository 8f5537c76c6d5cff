"""What the tests of `mcpx-hooks mcp` share: a config with real tool servers (the docs'
wordtools, the tests' hostile server), the MCP SDK's own stdio client starting `mcpx-hooks
mcp` or a server directly, and the shapes they compare."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final

import pydantic
import trio
from conftest import Marker
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.memory import create_client_server_memory_streams

from mcpx_hooks.supervisor.core.hooks import Config
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.service.mcpface import Gateway

HERE = Path(__file__).parent
HOSTILE = str(HERE / "mcpservers" / "hostile.py")
WORDTOOLS = HERE.parent / "supervisor" / "examples" / "tools" / "wordtools.py"
PY = sys.executable
MCPX = str(Path(sys.executable).with_name("mcpx-hooks"))
AGENT = types.Implementation(name="test-agent", version="1.0")
#: The `clientInfo` of a `LineClient` (`line_client`).
RAW_CLIENT: Final = {"name": "raw", "version": "0"}
#: What a client of `write_config`'s gateway is listed, in order: its own tool, then each
#: server's (`words` less its hidden `remove`, `h`'s exposed ones).
LISTED = [
    "mcpx_exec",
    "words__count",
    "words__shout",
    "words__sleep",
    "h__echo",
    "h__fail",
    "h__mixed",
]


def answer(obj: Any) -> list[str]:
    """A hook that prints `obj` as its answer."""
    return [PY, "-c", f"print({json.dumps(json.dumps(obj))})"]


def call_hook(name: str, phase: str, obj: Any, **fields: Any) -> dict[str, Any]:
    return {"name": name, "on": "call", "phase": phase, "run": answer(obj), **fields}


def write_config(
    where: Path,
    marker: Marker,
    hooks: Sequence[dict[str, Any]] = (),
    expose: Sequence[str] = ("echo", "fail", "h.mix*"),
    h_mode: str = "good",
    **more: Any,
) -> Path:
    """A config in `where` (a directory named by `marker`, so the `mcp` process's argv holds
    it): `words` (wordtools, `remove` hidden) and `h` (hostile in `h_mode`, only `expose`d
    tools)."""
    where.mkdir(exist_ok=True)
    shutil.copy(WORDTOOLS, where / "wordtools.py")
    config = {
        "defaults": {"sandbox": "none"},
        "servers": {
            "words": {
                "command": [PY, "wordtools.py", marker],
                "sandbox": "none",
                "hide": ["remove"],
            },
            "h": {
                "command": [PY, HOSTILE, h_mode, str(where / "h.log"), marker],
                "sandbox": "none",
                "expose": list(expose),
            },
        },
        "hooks": list(hooks),
        **more,
    }
    path = where / "config.json"
    path.write_text(json.dumps(config))
    return path


@asynccontextmanager
async def stdio_session(
    params: StdioServerParameters, errlog: Path, **client: Any
) -> AsyncIterator[ClientSession]:
    with errlog.open("w") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write, client_info=AGENT, **client) as session,
        ):
            await session.initialize()
            yield session


def through_mcpx(config: Path) -> StdioServerParameters:
    """`mcpx-hooks mcp` with `config`, its trust state (the servers' pins) beside it."""
    return StdioServerParameters(
        command=MCPX,
        args=["mcp", "--config", str(config)],
        env={"MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(config.parent / "state")},
        cwd=str(config.parent),
    )


def direct(argv: Sequence[str], cwd: Path) -> StdioServerParameters:
    return StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=str(cwd))


def dumped(result: pydantic.BaseModel) -> str:
    return result.model_dump_json(by_alias=True)


def texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if c.type == "text"]


async def direct_answers(
    where: Path, logs: Path, calls: Sequence[tuple[str, str, dict[str, Any]]]
) -> list[types.CallToolResult]:
    """What each of `calls` (server `words` or `h`, tool, arguments) gets straight from its
    server (`write_config`'s, in `where`), with the SDK's own client; their stderr in `logs`."""
    answers = []
    async with stdio_session(direct([PY, "wordtools.py"], where), logs / "e1") as words:
        answers += [await words.call_tool(t, a) for s, t, a in calls if s == "words"]
    hostile = [PY, HOSTILE, "good", str(logs / "direct.log")]
    async with stdio_session(direct(hostile, where), logs / "e2") as h:
        await h.list_tools()  # (the client checks structured content against outputSchema)
        answers += [await h.call_tool(t, a) for s, t, a in calls if s == "h"]
    return answers


@asynccontextmanager
async def memory_session(
    config: Config, frames: list[dict[str, Any]], gateways: list[Gateway] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with a gateway over `config`, in memory (added to
    `gateways`, if given); when it ends, the session's run's frames in `frames`."""
    async with (
        open_runtime(config) as runtime,
        create_client_server_memory_streams() as (
            (client_read, client_write),
            (server_read, server_write),
        ),
    ):
        gateway = Gateway(runtime)
        if gateways is not None:
            gateways.append(gateway)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gateway.serve, server_read, server_write)
            async with ClientSession(client_read, client_write, client_info=AGENT) as session:
                await session.initialize()
                yield session
            await client_write.aclose()
        assert gateway.session is not None
        frames += runtime.journals.get(gateway.session.run_id).decoded(0)


class LineClient:
    """A client of `mcpx-hooks mcp` writing JSON-RPC lines by hand, as no SDK would."""

    def __init__(self, proc: trio.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._stdin, self._stdout = proc.stdin, proc.stdout
        self._buf = b""
        #: The `mcpx-hooks mcp` process.
        self.proc = proc
        #: What came from `line_client`'s handshake and listing.
        self.opening: list[Any] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self._stdin.send_all(json.dumps(message).encode() + b"\n")

    async def line(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            chunk = await self._stdout.receive_some()
            assert chunk, "mcpx-hooks mcp ended its stdout"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        said: dict[str, Any] = json.loads(line)
        return said

    async def close_and_read(self) -> list[dict[str, Any]]:
        """Closes its end (stdin), then reads what comes until `mcpx-hooks mcp` ends stdout."""
        await self._stdin.aclose()
        while chunk := await self._stdout.receive_some():
            self._buf += chunk
        lines, self._buf = self._buf.splitlines(), b""
        return [json.loads(line) for line in lines]

    async def answer(self, rid: Any, method: str, params: dict[str, Any]) -> list[Any]:
        """What comes until the answer to `rid`, that answer last."""
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        came = [await self.line()]
        while came[-1].get("id") != rid:
            came.append(await self.line())
        return came


@asynccontextmanager
async def line_client(
    config: Path, client_info: dict[str, Any] = RAW_CLIENT
) -> AsyncIterator[LineClient]:
    """`mcpx-hooks mcp` with `config`, initialized as the client `client_info` and its tools
    listed (its servers started), to a `LineClient` (what came until then in its `opening`);
    at the end its stdin is closed and it exits (or is killed)."""
    env = {**os.environ, **(through_mcpx(config).env or {})}
    argv = [MCPX, "mcp", "--config", str(config)]
    proc = await trio.lowlevel.open_process(
        argv, cwd=config.parent, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        client = LineClient(proc)
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
        came = await client.answer(0, "initialize", {**hello, "clientInfo": client_info})
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        client.opening = came + await client.answer(1, "tools/list", {})
        yield client
        assert proc.stdin is not None
        await proc.stdin.aclose()
        await proc.wait()
    finally:
        with trio.CancelScope(shield=True):
            proc.kill()
            await proc.wait()


def session_frames(config: Path) -> list[dict[str, Any]]:
    """The frames of the one `mcp` session run in the history beside `config`."""
    env = {**os.environ, "XDG_STATE_HOME": str(config.parent / "state")}
    env["MCPX_HOOKS_NO_DISCOVERY"] = "1"

    def cli(*args: str) -> str:
        argv = [MCPX, "runs", *args, "--json"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout

    (run,) = [r for r in json.loads(cli("list")) if r["argv"][0] == "mcp"]
    return [json.loads(line) for line in cli("show", run["runId"]).splitlines()]


@contextmanager
def server_waiting(where: Path) -> Iterator[int]:
    """An fd that turns readable once the hostile server in `where` is waiting in its `wait`
    tool (it opens the fifo `h.log.waiting` then)."""
    fifo = where / "h.log.waiting"
    os.mkfifo(fifo)
    said = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        yield said
    finally:
        os.close(said)
