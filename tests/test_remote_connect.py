"""The WebSocket client of the remote commands (`service/remote.py` `open_remote`) against a
server that accepts the TCP connection and never answers the handshake: it gives up in
`CONNECT_TIMEOUT_S` with one line that says why, instead of waiting forever."""

from __future__ import annotations

import gc
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from mcpx_hooks.supervisor.service import remote as client
from mcpx_hooks.supervisor.service.remote import Remote, open_remote
from mcpx_hooks.supervisor.service.remoteread import RemoteError

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    """A listening socket nobody accepts on: the kernel completes each TCP handshake (up to
    the backlog), and no byte ever comes back."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


def _url(sock: socket.socket) -> str:
    return f"ws://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_handshake_never_answered_is_given_up(
    silent: socket.socket, autojump_clock: Any
) -> None:
    started = trio.current_time()
    with trio.fail_after(3 * client.CONNECT_TIMEOUT_S), pytest.raises(RemoteError) as caught:
        async with open_remote(Remote(_url(silent), "sekrit"), "/v1/hooks"):
            pytest.fail("no connection was made")
    assert str(caught.value) == (
        f"cannot connect to {_url(silent)}: no WebSocket handshake within"
        f" {client.CONNECT_TIMEOUT_S:g} s"
    )
    assert trio.current_time() - started == pytest.approx(client.CONNECT_TIMEOUT_S)
    gc.collect()  # (with warnings as errors: a socket left open fails the test here)


async def test_once_open_the_socket_is_the_callers_for_as_long_as_it_reads(
    autojump_clock: Any,
) -> None:
    """The bound is on connecting only: a socket that stays quiet past it once open is not
    cut (an `events` follower, a long run)."""

    async def handshake_then_quiet(request: Any) -> None:
        ws = await request.accept()
        await trio.sleep(3 * client.CONNECT_TIMEOUT_S)
        await ws.send_message('{"type": "hooks", "files": [], "hooks": []}')
        await ws.aclose()

    from trio_websocket import serve_websocket

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, handshake_then_quiet, "127.0.0.1", 0, None)
        remote = Remote(f"ws://127.0.0.1:{server.port}")
        assert await client.config_files(remote) == ([], [])
        nursery.cancel_scope.cancel()


async def test_a_socket_its_reader_left_on_a_cancellation_is_closed_at_once(
    autojump_clock: Any,
) -> None:
    """A cancelled reader (an `exec --remote`'s events follower, at the run's end) leaves no
    task to hear the closing handshake: the socket is closed at once, not after waiting
    `CLOSE_TIMEOUT_S` for it (which every `exec --remote` did, 2 s at its end)."""

    async def quiet(request: Any) -> None:
        await request.accept()
        await trio.sleep_forever()

    from trio_websocket import serve_websocket

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, quiet, "127.0.0.1", 0, None)
        remote = Remote(f"ws://127.0.0.1:{server.port}")
        with trio.move_on_after(1) as reading:
            async with open_remote(remote, "/v1/events") as ws:
                await ws.get_message()
        cancelled_at = reading.deadline
        assert reading.cancelled_caught
        assert trio.current_time() - cancelled_at < client.CLOSE_TIMEOUT_S / 10
        nursery.cancel_scope.cancel()


def test_remote_commands_say_why_and_exit_1(silent: socket.socket, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("sekrit\n")
    token.chmod(0o600)
    common = ["--remote", _url(silent), "--token-file", str(token)]
    commands = {
        "hooks list": ["hooks", "list", *common],
        "exec": ["exec", "--json", *common, "--", "true"],
        # The readable view opens the events socket first: its failure is said at once,
        # not after the run's own socket waited as long again (20 s before).
        "exec ": ["exec", *common, "--", "true"],
    }
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    started = time.monotonic()
    running = {
        name: subprocess.Popen(
            [*CLI, *argv], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for name, argv in commands.items()
    }
    try:
        for name, proc in running.items():
            left = started + 1.5 * client.CONNECT_TIMEOUT_S - time.monotonic()
            out, err = proc.communicate(timeout=max(left, 0.1))  # (all started at once)
            assert proc.returncode == 1, (name, out, err)
            assert out == b""
            assert err.decode() == (
                f"mcpx-hooks {name.strip()}: cannot connect to {_url(silent)}: no WebSocket"
                f" handshake within {client.CONNECT_TIMEOUT_S:g} s\n"
            )
    finally:
        for proc in running.values():  # (still waiting, when the bound did not hold)
            proc.kill()
            proc.communicate()
    assert time.monotonic() - started < 3 * client.CONNECT_TIMEOUT_S


async def test_no_server_says_why_it_cannot_connect() -> None:
    """Nothing listening: the line says what the connection met, not an empty reason
    (`cannot connect to ws://127.0.0.1:PORT: ` and nothing after, before)."""
    with socket.socket() as sock:  # a port just free: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RemoteError) as caught:
        async with open_remote(Remote(f"ws://127.0.0.1:{port}"), "/v1/hooks"):
            pytest.fail("no connection was made")
    assert str(caught.value) == f"cannot connect to ws://127.0.0.1:{port}: Connection refused"


def test_a_run_the_server_has_not_started_is_said_so_after_a_while(tmp_path: Path) -> None:
    """A server that takes the request and starts no run (a cluster gateway with no worker
    yet): the readable view says so after `NOT_STARTED_S`, rather than nothing for good."""
    import threading

    from websockets.sync.server import ServerConnection, serve

    from mcpx_hooks.supervisor.cli.remoteview import NOT_STARTED_S

    def hold(ws: ServerConnection) -> None:  # takes what comes, answers nothing
        for _ in ws:
            pass

    token = tmp_path / "token"
    token.write_text("sekrit\n")
    token.chmod(0o600)
    with serve(hold, "127.0.0.1", 0) as server:
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
        argv = [*CLI, "exec", "--remote", url, "--token-file", str(token), "--", "true"]
        with subprocess.Popen(
            argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            assert proc.stdout is not None
            started = time.monotonic()
            with selectors.DefaultSelector() as sel:  # (bounded: the old view said nothing)
                sel.register(proc.stdout, selectors.EVENT_READ)
                line = proc.stdout.readline() if sel.select(6 * NOT_STARTED_S) else ""
            waited = time.monotonic() - started
            proc.kill()  # (a first SIGTERM would send `cancel` and wait for the run's end)
            proc.communicate(timeout=60)
        server.shutdown()
        # (and its loop's selector with it: an fd left to the collector would close in
        # another test, whose fd check would see it go)
        serving.join(30)
    gc.collect()  # (it is held in a cycle once the loop ends)
    assert line == (
        f"(no run yet after {NOT_STARTED_S:g} s: the server has not started it; a cluster"
        " gateway's run waits for a worker to take it)\n"
    )
    assert waited >= NOT_STARTED_S


def test_a_connection_that_cannot_be_made_says_why_in_one_line(tmp_path: Path) -> None:
    # It said "all attempts to connect to 127.0.0.1:1 failed", the why left in its cause.
    with socket.socket() as sock:  # a port nobody listens on (bound, never listening)
        sock.bind(("127.0.0.1", 0))
        url = _url(sock)
        env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "HOME": str(tmp_path)}
        for command, args in (("exec", ["--", "true"]), ("runs list", []), ("events", [])):
            done = subprocess.run(
                [*CLI, *command.split(), "--remote", url, *args],
                capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False,
            )  # fmt: skip
            said = f"mcpx-hooks {command}: cannot connect to {url}: Connection refused\n"
            assert (done.returncode, done.stderr) == (1, said), done
    done = subprocess.run(
        [*CLI, "exec", "--remote", "ws://no-such-host.invalid:1", "--", "true"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert done.stderr.startswith(
        "mcpx-hooks exec: cannot connect to ws://no-such-host.invalid:1: "
    ), done.stderr
    assert "all attempts" not in done.stderr and "Errno" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (None, "the server closed the socket: 4400 (bad)"),
        ({"a": [1]}, "the server closed the socket: 4400 (bad)"),
        ("x" * 5000, "the server said: " + "x" * 2000 + "... (3000 more characters)"),
    ],
)
async def test_an_error_message_that_says_nothing_in_words_or_too_much_is_said_as_it_can_be(
    message: object, said: str
) -> None:
    """A server's error message without its words (`null`, an object) read "the server
    said: None"; one of 5,000 characters was said whole."""
    from trio_websocket import serve_websocket

    from mcpx_hooks.supervisor.service.remoteread import messages

    async def hostile(request: Any) -> None:
        ws = await request.accept()
        await ws.send_message(json.dumps({"type": "error", "message": message, "code": 4400}))
        await ws.aclose(4400, "bad")

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, hostile, "127.0.0.1", 0, None)
        remote = Remote(f"ws://127.0.0.1:{server.port}")
        with pytest.raises(RemoteError) as failed:
            async with open_remote(remote, "/v1/exec") as ws:
                async for _ in messages(ws, frames=True):
                    pass
        assert str(failed.value) == said
        assert failed.value.bad_input  # (4400: the request was wrong, exit 2)
        nursery.cancel_scope.cancel()
