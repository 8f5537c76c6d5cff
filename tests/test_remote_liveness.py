"""`exec --remote` across a network that freezes or is cut: a real `serve`, a TCP proxy (a
trio task) between it and the client. A frozen connection is said to be lost within a bound
(`liveness.py`), a quiet healthy one is never cut, and a cut one is said in words. Virtual
time (an autojump clock that jumps only once nothing has moved for a while of real time):
the server's answers come in real milliseconds, the client's minutes of silence in none."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
import trio
import trio.testing
from service_client import Server, start_server

from mcpx_hooks.supervisor.service.liveness import LOST_AFTER_S, PING_AFTER_S
from mcpx_hooks.supervisor.service.remote import Remote, exec_remote
from mcpx_hooks.supervisor.service.remoteread import RemoteError


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("liveness"))
    yield srv
    assert srv.stop() == 0


class Proxy:
    """Forwards each connection to the server until `freeze` (nothing more passes either
    way; the sockets stay open) or `cut` (both sockets closed at once, no close frame)."""

    def __init__(self, port: int, freeze_after: bytes | None = None) -> None:
        self.port, self.frozen, self.cut = port, False, trio.Event()
        self.listening: trio.SocketListener | None = None
        #: Frozen once bytes holding this have passed (a frame's text, as the server wrote it).
        self.freeze_after = freeze_after

    async def serve(self, task_status: trio.TaskStatus[int]) -> None:
        async def handle(client: trio.SocketStream) -> None:
            upstream = await trio.open_tcp_stream("127.0.0.1", self.port)
            async with client, upstream, trio.open_nursery() as nursery:  # (closed however)
                nursery.start_soon(self._pipe, client, upstream)
                nursery.start_soon(self._pipe, upstream, client)
                await self.cut.wait()
                nursery.cancel_scope.cancel()

        [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listener.socket.getsockname()[1])
        await trio.serve_listeners(handle, [listener])

    async def _pipe(self, a: trio.SocketStream, b: trio.SocketStream) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await a.receive_some(65536):
                if self.frozen:
                    await trio.sleep_forever()
                await b.send_all(data)
                if self.freeze_after is not None and self.freeze_after in data:
                    self.frozen = True


def through_proxy(
    server: Server, script: str, when: Any
) -> tuple[list[dict[str, Any]], RemoteError | None, float]:
    """Runs `script` on `server` through a proxy; `when(frame, proxy)` after each frame.
    The frames seen, the error (None: none), and the virtual seconds it took."""
    seen: list[dict[str, Any]] = []
    failed: list[RemoteError] = []
    took: list[float] = []

    async def main() -> None:
        proxy = Proxy(server.port)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(proxy.serve)
            remote = Remote(f"ws://127.0.0.1:{port}", server.token)

            def on_frame(frame: dict[str, Any]) -> None:
                seen.append(frame)
                when(frame, proxy)

            started = trio.current_time()
            with trio.fail_after(3600):
                try:
                    await exec_remote(remote, {"argv": ["sh", "-c", script]}, on_frame)
                except RemoteError as exc:
                    failed.append(exc)
            took.append(trio.current_time() - started)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.3))
    return seen, (failed[0] if failed else None), took[0]


def test_a_frozen_network_is_said_to_be_lost_within_a_bound(server: Server) -> None:
    """Found: the client waited for ever, nothing on screen, once the network froze (the
    server gave up on its side after a minute)."""

    def freeze(frame: dict[str, Any], proxy: Proxy) -> None:
        if frame.get("text") == "one":
            proxy.frozen = True

    seen, failed, took = through_proxy(server, "echo one; sleep 30; echo two", freeze)
    assert [f.get("text") for f in seen if f["type"] == "stdout"] == ["one"]
    assert failed is not None
    bound = PING_AFTER_S + LOST_AFTER_S
    assert str(failed) == (
        f"the connection to the server was lost: nothing came from it for {bound:.0f} s, not"
        f" even an answer to a ping (sent after {PING_AFTER_S:g} s of silence, answered within"
        f" {LOST_AFTER_S:g} s on a live connection)"
    )
    assert bound <= took < bound + 10


def test_a_quiet_healthy_connection_is_not_cut(server: Server) -> None:
    """A script that prints nothing for minutes of the client's time: it pings, the server
    answers, the run ends in its result."""
    seen, failed, took = through_proxy(server, "sleep 4; echo done", lambda *_: None)
    assert failed is None
    assert [f.get("text") for f in seen if f["type"] == "stdout"] == ["done"]
    assert seen[-1]["type"] == "end" and seen[-2]["type"] == "result"
    assert took > 3 * (PING_AFTER_S + LOST_AFTER_S)  # (several pings' worth of silence)


def test_a_cut_connection_is_said_lost_not_closed_by_the_server(server: Server) -> None:
    """Found: "the server closed the socket: 1006", when the server closed nothing."""

    def cut(frame: dict[str, Any], proxy: Proxy) -> None:
        if frame.get("text") == "one":
            proxy.cut.set()

    _, failed, _ = through_proxy(server, "echo one; sleep 30", cut)
    assert str(failed) == (
        "the connection to the server was lost (it ended without a close frame, 1006: the"
        " network cut it, or the server's process ended at once)"
    )


async def lost_after(follow: Awaitable[object]) -> tuple[RemoteError | None, float]:
    """`follow` awaited (3600 virtual seconds at most): the error it raised (None: none), and
    the virtual seconds it took."""
    begun = trio.current_time()
    with trio.fail_after(3600):
        try:
            await follow
        except RemoteError as exc:
            return exc, trio.current_time() - begun
    return None, trio.current_time() - begun


def assert_lost(failed: RemoteError | None, took: float) -> None:
    """The connection was said to be lost, once silent past the bound."""
    assert failed is not None and str(failed).startswith("the connection to the server was lost")
    assert PING_AFTER_S + LOST_AFTER_S <= took < PING_AFTER_S + LOST_AFTER_S + 10


def test_runs_show_following_a_run_on_a_frozen_network_says_it_is_lost(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs show RUN --remote URL` follows a run still going: on a frozen network it waited
    for ever too."""
    from mcpx_hooks.supervisor.cli.runs import _show

    ended: list[tuple[RemoteError | None, float]] = []

    async def main() -> None:
        proxy = Proxy(server.port, freeze_after=b'"text":"one"')
        started = trio.Event()
        run_id: list[str] = []

        def on_frame(frame: dict[str, Any]) -> None:
            if frame["type"] == "start":
                run_id.append(frame["runId"])
            if frame.get("text") == "one":
                started.set()

        async with trio.open_nursery() as nursery:
            port = await nursery.start(proxy.serve)
            direct = Remote(f"ws://127.0.0.1:{server.port}", server.token)
            request = {"argv": ["sh", "-c", "echo one; sleep 30"]}
            nursery.start_soon(exec_remote, direct, request, on_frame)
            await started.wait()
            followed = Remote(f"ws://127.0.0.1:{port}", server.token)
            # (frozen once "one" has reached it: nothing more comes)
            ended.append(await lost_after(_show(followed, run_id[0], True, False)))
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.3))
    assert_lost(*ended[0])
    assert '"text":"one"' in capsys.readouterr().out


def test_events_followed_on_a_frozen_network_are_said_to_be_lost(server: Server) -> None:
    """`events --remote URL` follows the bus for good: on a frozen network it too waited for
    ever."""
    from mcpx_hooks.supervisor.service.remote import follow_events

    ended: list[tuple[RemoteError | None, float]] = []

    async def main() -> None:
        direct = Remote(f"ws://127.0.0.1:{server.port}", server.token)
        await exec_remote(direct, {"argv": ["true"]}, lambda _: None)  # (the bus has events)
        proxy = Proxy(server.port, freeze_after=b'"kind"')
        async with trio.open_nursery() as nursery:
            port = await nursery.start(proxy.serve)
            remote = Remote(f"ws://127.0.0.1:{port}", server.token)
            # (from the bus's first event: frozen once one has reached it)
            ended.append(await lost_after(follow_events(remote, None, 0, lambda _: None)))
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.3))
    assert_lost(*ended[0])
