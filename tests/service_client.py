"""Test helpers: a real `mcpx-hooks serve` process, and a client from another library.

The client is `websockets` (asyncio), not trio-websocket: the server's own library must not
be the only judge of its wire. Each test function drives it with `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
ENV = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
READY_S = 30.0


@attrs.define
class Server:
    proc: subprocess.Popen[str]
    url: str
    token: str | None
    cwd: Path
    stderr: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def headers(self) -> dict[str, str]:
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self, signal: int | None = signal.SIGTERM, timeout: float = 30) -> int:
        """Signals the server (None: it was already), waits for it; every process it had
        is gone afterwards."""
        family = self.descendants() if self.proc.poll() is None else []
        if signal is not None and self.proc.poll() is None:
            self.proc.send_signal(signal)
        code = self.proc.wait(timeout=timeout)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        _, alive = psutil.wait_procs(family, timeout=5)
        assert alive == [], alive
        return code

    def log(self) -> str:
        return self.stderr.read_text()


def start_server(
    cwd: Path,
    *args: str,
    auth: bool = True,
    env: Mapping[str, str] | None = None,
    run_in: Path | None = None,
    open_files: int | None = None,
) -> Server:
    """`serve --port 0` in `cwd` (with `env` added to its environment; `run_in`: started
    there instead, its token and log still in `cwd`; `open_files`: the process may open
    that many, its hard limit too); returns once it printed that it listens (no sleeps)."""
    token_file = cwd / "token"
    access = ["--token-file", str(token_file)] if auth else ["--no-auth"]
    stderr = cwd / f"serve-{len(list(cwd.glob('serve-*.log')))}.log"
    cli = CLI if open_files is None else _limited(open_files)
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [*cli, "serve", "--port", "0", *access, *args],
            cwd=run_in or cwd,
            env={**ENV, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(READY_S):
            proc.kill()
            raise AssertionError(f"serve did not get ready: {stderr.read_text()}")
    line = proc.stdout.readline()
    found = re.search(r"listening on (ws://\S+?);", line)
    assert found, (line, stderr.read_text())
    token = token_file.read_text().strip() if auth else None
    if auth:
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert str(token_file) in line
    return Server(proc, found.group(1), token, cwd, stderr)


def _limited(most: int) -> list[str]:
    """The CLI, in a process that may open `most` files (its hard limit too)."""
    code = (
        "import resource, runpy, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({most}, {most})); "
        "sys.argv[0] = 'mcpx-hooks'; runpy.run_module('mcpx_hooks.supervisor', run_name='__main__')"
    )
    return [sys.executable, "-c", code]


@attrs.define
class Stream:
    """What one client saw: the objects (one per line), messages, close code."""

    objects: list[dict[str, Any]] = attrs.field(factory=list)
    messages: int = 0
    code: int | None = None
    reason: str = ""

    @property
    def frames(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if "seq" in o]

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The server's error messages (no `seq`: not a run's `error` frame)."""
        return [o for o in self.objects if o.get("type") == "error" and "seq" not in o]


def open_ws(server: Server, path: str, **kw: Any) -> Any:
    headers = {**server.headers(), **kw.pop("headers", {})}
    return connect(
        server.url + path,
        additional_headers=headers,
        proxy=None,
        max_size=None,
        compression=None,
        open_timeout=10,
        **kw,
    )


async def read_all(ws: ClientConnection, stream: Stream | None = None) -> Stream:
    """Reads to the close; every line of every message, in order."""
    stream = stream or Stream()
    try:
        while True:
            message = await ws.recv()
            stream.messages += 1
            assert isinstance(message, str)
            stream.objects.extend(json.loads(line) for line in message.split("\n"))
    except ConnectionClosed as exc:
        stream.code = exc.rcvd.code if exc.rcvd else None
        stream.reason = exc.rcvd.reason if exc.rcvd else ""
    return stream


async def run_remote(server: Server, request: Mapping[str, Any], **kw: Any) -> Stream:
    async with open_ws(server, "/v1/exec", **kw) as ws:
        await ws.send(json.dumps(request))
        return await read_all(ws)


async def read_until(ws: ClientConnection, stream: Stream, want: Any) -> dict[str, Any]:
    """Reads messages until an object for which `want(obj)` holds; returns it. The rest of
    the message that holds it is kept in `stream` too (a batch may carry more frames)."""
    while True:
        message = await ws.recv()
        stream.messages += 1
        assert isinstance(message, str)
        objects = [json.loads(line) for line in message.split("\n")]
        stream.objects.extend(objects)
        for obj in objects:
            if want(obj):
                return obj


def arun(coro: Any, timeout: float = 60) -> Any:
    """Runs a coroutine on a fresh asyncio loop, bounded."""

    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


STABLE_DROP = ("runId", "at", "durationMs", "resources", "chain")
#: Frames from different pipes of the script (stdout, stderr, the frames channel): their
#: interleaving is "as they happen", so two runs of one script may interleave them apart.
CHANNELS = ("stdout", "stderr", "log", "emit")


def stable(frames: list[dict[str, Any]]) -> Any:
    """What two runs of the same thing share: frames without ids and times; the output
    channels each in their own order (and `seq` only where the interleaving cannot move it)."""
    same = [{k: v for k, v in f.items() if k not in STABLE_DROP} for f in frames]
    others = [f for f in same if f["type"] not in CHANNELS]
    channels = {
        kind: [{k: v for k, v in f.items() if k != "seq"} for f in same if f["type"] == kind]
        for kind in CHANNELS
    }
    return others, channels


def served(cwd: Path) -> Iterator[Server]:
    """A module's server (a fixture's body): `serve` in `cwd`, stopped cleanly afterwards,
    with no traceback in its log."""
    srv = start_server(cwd)
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.log(), srv.log()


def http_get(server: Server, path: str) -> tuple[int, bytes]:
    """A GET of `path` on `server` with its token: the status and the body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path, headers=server.headers())
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def restarted_with_a_big_run(cwd: Path, lines: int = 150_000) -> tuple[Server, str, int]:
    """A `serve` in `cwd` (its state directory there) that ran a script printing `lines`
    lines, stopped, and started again: the run is in its history only. The server, the
    run's id and how many frames its client got."""
    cwd.chmod(0o755)  # the script's sandbox reads its working directory as another user
    env = {"XDG_STATE_HOME": str(cwd / "state")}
    server = start_server(cwd, env=env)
    script = f"import sys\nfor i in range({lines}): sys.stdout.write(f'line {{i:08}}\\n')"
    try:
        stream = arun(run_remote(server, {"argv": [sys.executable, "-c", script]}))
    finally:
        assert server.stop() == 0
    return start_server(cwd, env=env), stream.frames[0]["runId"], len(stream.frames)
