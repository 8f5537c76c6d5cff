"""Hostile requests, scripts and sockets against a real service in process (issue 11).

One test per case the hostile tester found; each runs the case as it was reported and then
checks that the service, and a run in flight beside it, went on unhurt. The client is
`websockets` (sync, in a thread) or a raw socket where the point is a misbehaving client.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.events import EventKind
from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.run.journal import FRAME_OVERHEAD
from mcpx_hooks.supervisor.run.journals import Journals
from mcpx_hooks.supervisor.run.runtime import Runtime, open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest
from mcpx_hooks.supervisor.service.access import check_access
from mcpx_hooks.supervisor.service.server import Limits, Listening, Service, ServiceOptions

PY = sys.executable


def read(
    url: str, request: dict[str, Any] | str | None = None, headers: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Every object the server sends, and the close code (1006: no close frame)."""
    objects: list[dict[str, Any]] = []
    with connect(url, proxy=None, open_timeout=10, max_size=None, additional_headers=headers) as ws:
        if request is not None:
            ws.send(request if isinstance(request, str) else json.dumps(request))
        try:
            while True:
                message = ws.recv(timeout=60)
                assert isinstance(message, str)
                objects.extend(json.loads(line) for line in message.split("\n"))
        except ConnectionClosed as exc:
            return objects, exc.rcvd.code if exc.rcvd else 1006


def frames_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if "seq" in o]


def errors_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("type") == "error" and "seq" not in o]


@attrs.define
class Live:
    url: str
    runtime: Runtime
    service: Service

    async def read(self, path: str, request: Any = None, **kw: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: read(self.url + path, request, **kw))


def unconfined(tmp_path: Path, toml: str = "") -> Config:
    """A config whose hooks and runs are `none`, and whose requests may use it."""
    (tmp_path / "c.toml").write_text(
        '[defaults]\nsandbox = "none"\n[script]\nsandbox = "none"\n'
        '[service]\nsandboxes = ["none", "strict"]\n' + toml
    )
    return load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)


@contextlib.asynccontextmanager
async def live_service(
    config: Config, tmp_path: Path, limits: Limits | None = None, journals: Journals | None = None
) -> AsyncIterator[Live]:
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        if journals is not None:
            runtime.journals = journals
        service = Service(
            runtime, ServiceOptions(port=0, cwd=str(tmp_path), limits=limits or Limits())
        )
        listening: Listening = await nursery.start(service.serve)
        try:
            yield Live(listening.url, runtime, service)
        finally:
            service.stop()


async def beside(live: Live, check: Any) -> None:
    """Runs `check` while a run that prints 200 numbered lines goes on; that run still ends
    in order with all its lines, and a plain run afterwards still works."""
    code = "import time\nfor i in range(200):\n    print(i, flush=True)\n    time.sleep(0.002)\n"
    async with trio.open_nursery() as nursery:
        got: list[Any] = []

        async def long_run() -> None:
            got.append(await live.read("/v1/exec", {"argv": [PY, "-c", code]}))

        nursery.start_soon(long_run)
        await check()
    objects, close = got[0]
    frames = frames_of(objects)
    check_order(frames)
    assert close == 1000
    assert [f["text"] for f in frames if f["type"] == "stdout"] == [str(i) for i in range(200)]
    objects, close = await live.read("/v1/exec", {"argv": ["true"]})
    assert close == 1000 and frames_of(objects)[-2]["type"] == "result"


# ---- 1. a request cannot choose a sandbox the server does not allow ---------------------------


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        (
            {
                "argv": ["true"],
                "hooks": [
                    {"on": "script", "phase": "before", "sandbox": "none", "run": ["id", "-u"]}
                ],
            },
            'hooks[0] (script.before.0): the profile "none" (declared) is not allowed',
        ),
        ({"argv": ["true"], "sandbox": "none"}, 'the run\'s profile "none"'),
        ({"argv": ["true"], "sandbox": "net"}, 'the run\'s profile "net"'),
        (
            {
                "argv": ["true"],
                "hooks": [{"on": "script", "phase": "before", "sandbox": "net", "run": ["true"]}],
            },
            'the profile "net" (declared) is not allowed',
        ),
    ],
)
async def test_1_a_request_cannot_lower_the_sandbox(
    tmp_path: Path, request_: dict[str, Any], named: str, no_leaks: None
) -> None:
    config = load_config([], cwd=tmp_path, environ={}, discover=False)  # the default
    assert config.service_sandboxes == (Profile.STRICT, Profile.WORKSPACE)
    async with live_service(config, tmp_path) as live:
        objects, close = await live.read("/v1/exec", request_)
    assert close == 4400 and not frames_of(objects), objects
    message = errors_of(objects)[0]["message"]
    assert named in message
    assert "may use the sandboxes: strict, workspace ([service] sandboxes)" in message


async def test_1_a_server_default_of_none_is_not_a_clients_to_use(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('[defaults]\nsandbox = "none"\n')  # for its own hooks
    config = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)
    async with live_service(config, tmp_path) as live:
        objects, close = await live.read(
            "/v1/exec", {"argv": ["true"], "sandbox": "strict",
                         "hooks": [{"on": "script", "phase": "before", "run": ["true"]}]}
        )  # fmt: skip
    assert close == 4400
    assert "the server's [defaults] sandbox" in errors_of(objects)[0]["message"]


async def test_1_per_call_hooks_cannot_raise_the_output_cap(tmp_path: Path) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        hook = {"on": "script", "phase": "before", "run": ["true"], "maxOutputBytes": 1 << 34}
        objects, close = await live.read("/v1/exec", {"argv": ["true"], "hooks": [hook]})
    assert close == 4400
    assert "maxOutputBytes 17179869184 is over the server's 1048576" in objects[0]["message"]


# ---- 2. what the spawner cannot start never reaches it ----------------------------------------


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"argv": ["echo", "a\u0000b"]}, "argv"),
        ({"argv": ["\ud800"]}, "argv"),
        ({"argv": [""]}, "argv"),
        ({"argv": ["true"], "env": {"A=B": "x"}}, "env"),
        ({"argv": ["true"], "env": {"A\u0000": "x"}}, "env"),
        ({"argv": ["true"], "env": {"A": "x\u0000"}}, "env"),
        ({"argv": ["true"], "env": {"\udc80": "x"}}, "env"),
        ({"argv": ["true"], "cwd": "/tmp\u0000"}, "cwd"),
        ({"argv": ["true"], "stdin": "\ud800"}, "stdin"),
        ({"python": "print(1)\u0000"}, "python"),
        ({"argv": ["true"], "hooks": [{"on": "script", "phase": "before", "run": ["a\u0000"]}]},
         "hooks"),
        ({"argv": ["true"], "hooks": [{"on": "script", "phase": "before", "run": ["true"],
                                       "env": {"A=B": "x"}}]}, "hooks"),
    ],
)  # fmt: skip
async def test_2_unspawnable_text_is_refused_where_it_enters(
    tmp_path: Path, request_: dict[str, Any], field: str, no_leaks: None
) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        spawner = live.runtime.spawner.pid

        async def check() -> None:
            objects, close = await live.read("/v1/exec", request_)
            assert close == 4400 and not frames_of(objects), objects
            assert errors_of(objects)[0]["message"].startswith((field, "the per-call hooks")), (
                objects
            )

        await beside(live, check)
        assert live.runtime.spawner.pid == spawner  # never restarted: it never fell


# ---- 3. every frame can be encoded; a huge integer is a clear error ---------------------------

SURROGATE_SCRIPT = r"""
import json, os
fd = int(os.environ["MCPX_FRAMES_FD"])
with os.fdopen(fd, "w") as frames:
    frames.write('{"type": "emit", "value": "a\\ud800b"}\n')
    frames.write('{"type": "log", "level": "info", "message": "\\udfff",'
                 ' "attrs": {"\\ud800": 1}}\n')
    frames.write('{"type": "result", "value": {"k": "\\ud800"}}\n')
"""


async def test_3_lone_surrogates_become_replacement_characters(tmp_path: Path) -> None:
    hook = {
        "on": "script",
        "phase": "onSuccess",
        "effect": "apply",
        "run": [
            PY,
            "-c",
            r"print('{\"advise\": \"\\ud800\", \"apply\": {\"value\": \"\\udc00\"}}')",
        ],
    }
    async with live_service(unconfined(tmp_path), tmp_path) as live:

        async def check() -> None:
            objects, close = await live.read(
                "/v1/exec", {"argv": [PY, "-c", SURROGATE_SCRIPT], "hooks": [hook]}
            )
            assert close == 1000, objects
            frames = frames_of(objects)
            check_order(frames)
            by_type = {f["type"]: f for f in frames}
            assert by_type["emit"]["value"] == "a\ufffdb"
            assert by_type["log"]["message"] == "\ufffd"
            assert by_type["log"]["attrs"] == {"\ufffd": 1}
            hook_frame = by_type["hook"]
            assert hook_frame["advice"] == ["\ufffd"] and hook_frame["original"] == {"k": "\ufffd"}
            assert by_type["result"]["value"] == "\ufffd"
            # A replay sends the same frames, and so does the bus.
            again, close = await live.read(f"/v1/runs/{frames[0]['runId']}")
            assert close == 1000 and frames_of(again) == frames

        await beside(live, check)


async def test_3_a_python_main_returning_a_lone_surrogate(tmp_path: Path) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        objects, close = await live.read(
            "/v1/exec", {"python": "def main():\n    return '\\ud800'\n"}
        )
    frames = frames_of(objects)
    check_order(frames)
    assert close == 1000 and frames[-2] == {**frames[-2], "type": "result", "value": "\ufffd"}


async def test_3_a_surrogate_in_the_request_argv_is_refused(tmp_path: Path) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        objects, close = await live.read("/v1/exec", '{"argv": ["echo", "\\ud800"]}')
    assert close == 4400 and "argv" in errors_of(objects)[0]["message"]


@pytest.mark.parametrize(
    "text",
    [
        '{"argv": ["true"], "timeoutMs": ' + "9" * 5000 + "}",
        '{"argv": ["true"], "input": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"argv": ["true"], "input": ' + "[" * 129 + "]" * 129 + "}",
    ],
    ids=["5000-digit integer", "100k deep", "129 deep"],
)
async def test_3_numbers_and_nesting_past_the_limits_are_a_4400(tmp_path: Path, text: str) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        objects, close = await live.read("/v1/exec", text)
    assert close == 4400 and errors_of(objects)[0]["message"].startswith("malformed JSON")


# ---- 4. memory: what the journal holds is bounded, counted as it costs ------------------------


async def test_4_a_flood_of_newlines_is_held_to_the_run_budget(tmp_path: Path) -> None:
    budget = 2 * 1024 * 1024
    journals = Journals(256, run_bytes=budget)
    code = "import sys\nsys.stdout.write('\\n' * 300_000)\nprint('{\"done\": true}')\n"
    async with live_service(unconfined(tmp_path), tmp_path, journals=journals) as live:
        objects, close = await live.read("/v1/exec", {"argv": [PY, "-c", code]})
    frames = frames_of(objects)
    check_order(frames)
    journal = journals.get(frames[0]["runId"])
    output = [f for f in frames if f["type"] == "stdout"]
    warnings = [f["message"] for f in frames if f["type"] == "warning"]
    assert close == 1000 and journal.dropped_frames > 0
    assert len(output) + journal.dropped_frames == 300_001
    assert sum(len(line) for line in journal.lines) + FRAME_OVERHEAD * len(journal) == journal.cost
    # Output stops at the budget; what says how the run went is kept past it.
    output_cost = sum(len(line) + FRAME_OVERHEAD for line in journal.lines[: len(output) + 1])
    assert output_cost <= budget
    assert "budget (runs.runBytes, 2 MiB); later output is dropped" in warnings[0]
    # (sizes as a person reads them: `1.2 MiB`, not `0.190735 MiB` or 1258291 bytes)
    dropped = rf"{journal.dropped_frames:,} frames \(\d+(\.\d)? (bytes|KiB|MiB)\) dropped"
    assert re.search(dropped, warnings[-1]), warnings[-1]
    assert frames[-2]["type"] == "error" or frames[-2]["type"] == "result"


def test_4_retained_runs_are_forgotten_past_the_total_budget() -> None:
    from mcpx_hooks.supervisor.core.frames import EndFrame, OutputFrame, blank

    journals = Journals(100, run_bytes=10_000, retain_bytes=25_000)
    for n in range(5):
        journal = journals.open(f"r{n}")
        while journal.offer(blank(OutputFrame, text="x" * 100)):
            pass
        journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    assert journals.cost <= 25_000
    assert [j.run_id for j in journals] == ["r3", "r4"]


# ---- 5. results and emits past 64 KiB arrive whole ---------------------------------------------


async def test_5_big_results_arrive_intact(tmp_path: Path) -> None:
    emit = (
        "import os\n"
        "with os.fdopen(int(os.environ['MCPX_FRAMES_FD']), 'w') as f:\n"
        '    f.write(\'{"type": "emit", "value": "\' + \'e\' * 300_000 + \'"}\\n\')\n'
        "print('[' + ','.join(['1'] * 100_000) + ']')\n"
    )
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        python, _ = await live.read("/v1/exec", {"python": "def main():\n    return 'q' * 70000\n"})
        argv, _ = await live.read("/v1/exec", {"argv": [PY, "-c", emit]})
    assert frames_of(python)[-2] == {**frames_of(python)[-2], "value": "q" * 70000}
    by_type = {f["type"]: f for f in frames_of(argv)}
    assert by_type["emit"]["value"] == "e" * 300_000
    assert by_type["result"]["value"] == [1] * 100_000


async def test_5_a_frames_line_over_the_cap_is_dropped_whole_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpx_hooks.supervisor.run import script

    monkeypatch.setattr(script, "MAX_FRAME_LINE", 1000)
    code = (
        "import os\n"
        "with os.fdopen(int(os.environ['MCPX_FRAMES_FD']), 'w') as f:\n"
        '    f.write(\'{"type": "emit", "value": "\' + \'e\' * 5000 + \'"}\\n\')\n'
        '    f.write(\'{"type": "emit", "value": 2}\\n\')\n'
    )
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        objects, _ = await live.read("/v1/exec", {"argv": [PY, "-c", code]})
    frames = frames_of(objects)
    assert [f.get("value") for f in frames if f["type"] == "emit"] == [2]
    assert [f["type"] for f in frames].count("warning") == 1
    assert not [f for f in frames if f["type"] == "log"]  # no junk pieces


# ---- 7. run bookkeeping ------------------------------------------------------------------------


async def test_7_deep_json_on_the_frames_channel_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    code = (
        "import os\n"
        "with os.fdopen(int(os.environ['MCPX_FRAMES_FD']), 'w') as f:\n"
        "    f.write('{\"type\": \"emit\", \"value\": ' + '[' * 100_000 + ']' * 100_000 + '}\\n')\n"
    )
    async with (
        live_service(unconfined(tmp_path), tmp_path) as live,
        live.runtime.bus.subscribe(kinds=("run.finished",)) as finished,
    ):
        objects, close = await live.read("/v1/exec", {"argv": [PY, "-c", code]})
        with trio.fail_after(10):
            event = await finished.__anext__()
    frames = frames_of(objects)
    check_order(frames)
    assert close == 1000 and frames[-2]["type"] == "result"
    logs = [f["message"] for f in frames if f["type"] == "log"]
    assert logs and "nested deeper than 128 levels" in logs[0]
    assert event.run_id == frames[0]["runId"]


async def test_7_a_dead_spawner_is_said_in_words(tmp_path: Path, no_leaks: None) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        runtime = live.runtime
        run = runtime.new_run(
            # (It waits on nothing the spawner's death could end first: `input()` read the
            # end of its stdin and exited 1 before the kill, now and then under load.)
            RunRequest(
                Script(argv=(PY, "-c", "import time; print('up', flush=True); time.sleep(120)")),
                str(tmp_path),
            )
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.execute, run)
            with trio.fail_after(20):
                async for batch in run.journal.follow(0):
                    if any(f["type"] == "stdout" for f in batch):
                        break
            os.kill(runtime.spawner.pid, signal.SIGKILL)
        assert run.journal.outcome is not None
        assert "the spawner died while the script ran" in run.journal.outcome["message"]
        check_order(run.journal.frames)


# ---- 9. starvation -----------------------------------------------------------------------------


async def test_9_stalled_handshakes_never_keep_a_client_out(tmp_path: Path) -> None:
    limits = Limits(max_pending=8, handshake_s=30)
    async with live_service(unconfined(tmp_path), tmp_path, limits=limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        stalled = []
        for _ in range(40):  # five times the budget, each sending half a request
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /v1/events HTTP/1.1\r\nHost: x\r\n")
            stalled.append(sock)
        try:
            for _ in range(5):
                objects, close = await live.read("/v1/exec", {"argv": ["true"]})
                assert close == 1000 and frames_of(objects)[-1]["type"] == "end"
            assert len(live.service._handshakes) <= 8
        finally:
            for sock in stalled:
                sock.close()


async def test_9_idle_sockets_have_their_own_budget(tmp_path: Path) -> None:
    limits = Limits(max_idle=2)
    async with live_service(unconfined(tmp_path), tmp_path, limits=limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        holders = [await trio.to_thread.run_sync(_handshake, port, "/v1/events") for _ in "ab"]
        try:
            assert all(head.startswith(b"HTTP/1.1 101") for head, _ in holders)
            head, third = await trio.to_thread.run_sync(_handshake, port, "/v1/events")
            third.close()
            assert head.startswith(b"HTTP/1.1 503") and b"carry no run" in head, head
            _, close = await live.read("/v1/exec", {"argv": ["true"]})  # runs have room
            assert close == 1000
        finally:
            for _, sock in holders:
                sock.close()


def _handshake(port: int, path: str) -> tuple[bytes, socket.socket]:
    """A WebSocket handshake by hand: the server's answer, and the socket (a client that,
    from here on, never reads or answers)."""
    sock = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    sock.settimeout(20)
    while b"\r\n\r\n" not in head or len(head) < _answer_size(head):
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head, sock


def _answer_size(head: bytes) -> int:
    """How long an answer whose head is in `head` is, its body included (a refusal has one:
    it may come in a segment of its own)."""
    found = re.search(rb"\r\ncontent-length: *(\d+)\r\n", head, re.IGNORECASE)
    return head.index(b"\r\n\r\n") + 4 + (int(found.group(1)) if found else 0)


def _read_to_eof(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


async def test_9_an_idle_socket_that_does_not_answer_pings_is_closed(tmp_path: Path) -> None:
    limits = Limits(ping_s=0.2)
    async with live_service(unconfined(tmp_path), tmp_path, limits=limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        head, sock = await trio.to_thread.run_sync(_handshake, port, "/v1/events")
        assert head.startswith(b"HTTP/1.1 101"), head
        try:
            got = await trio.to_thread.run_sync(_read_to_eof, sock)
        finally:
            sock.close()
        assert got[:1] == b"\x89"  # a ping, unanswered; then the server hung up
        assert live.service.seats.idle == 0


# ---- 10. smaller ------------------------------------------------------------------------------


def test_10_two_origin_headers_are_refused() -> None:
    own = frozenset({"http://127.0.0.1:8765"})
    headers = [(b"Origin", b"http://127.0.0.1:8765"), (b"Origin", b"http://evil.example")]
    refusal = check_access(headers, (), token=None, origins=own)
    assert refusal is not None and refusal.status == 400
    twice = [(b"Authorization", b"Bearer a"), (b"authorization", b"Bearer b")]
    refusal = check_access(twice, (), token="a", origins=own)
    assert refusal is not None and refusal.status == 400


async def test_10_a_before_hook_cut_short_by_a_cancel_has_its_frame(
    tmp_path: Path, no_leaks: None
) -> None:
    config = unconfined(
        tmp_path,
        textwrap.dedent(f"""
        [[hooks]]
        name = "slow"
        on = "script"
        phase = "before"
        run = ["{PY}", "-c", "import time; time.sleep(60)"]
        """),
    )
    async with open_runtime(config) as runtime:
        run = runtime.new_run(RunRequest(Script(argv=("true",)), str(tmp_path)))
        async with (
            runtime.bus.subscribe(kinds=("hook.started",)) as started,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(runtime.execute, run)
            with trio.fail_after(10):
                await started.__anext__()
            run.cancel()
    frames = run.journal.frames
    check_order(frames)
    hook = next(f for f in frames if f["type"] == "hook")
    assert hook["name"] == "slow" and hook["status"] == "killed"
    assert "cancelled" in hook["reason"]
    assert [f["type"] for f in frames][-2:] == ["error", "end"]
    assert EventKind.HOOK_FAILED  # published like any failure (the frame is the event's data)


# ---- 15. answers: a hostile answer is refused in words, the ask and the run go on ----------------

ASKING_HOOK = {
    "name": "gate",
    "on": "script",
    "phase": "before",
    "effect": "ask",
    "run": [
        "sh",
        "-c",
        'cat >/dev/null; echo \'{"ask": {"question": "go?", "deadlineMs": 60000}}\'',
    ],
}
HOSTILE_ANSWERS = [
    ('{"type": "answer"', "malformed JSON"),
    ('["answer"]', "expected a message after the request as a JSON object"),
    ('{"type": "answer", "askId": "ask-1"}', "answer: expected yes or no, got nothing"),
    ('{"type": "answer", "askId": "ask-1", "answer": "maybe"}', "answer: expected yes or no"),
    ('{"type": "answer", "askId": "ask-1", "answer": true}', "answer: expected yes or no"),
    ('{"type": "answer", "askId": 1, "answer": "yes"}', "askId: expected the askId"),
    ('{"type": "answer", "askId": "' + "x" * 100_000 + '", "answer": "yes"}', "askId: expected"),
    ('{"type": "answer", "askId": "a\\u0000", "answer": "yes"}', "askId: expected"),
    ('{"type": "answer", "askId": "ask-1", "answer": "yes", "by": "x"}', "unknown field 'by'"),
    ('{"type": "cancel"}', "cancel is taken on the exec socket"),
]


def _answering_scenario(url: str) -> dict[str, Any]:
    """Starts a run whose hook asks; throws every hostile answer at it over follower
    sockets; then answers it. What each socket saw."""
    seen: dict[str, Any] = {"hostile": [], "stale": []}
    with connect(url + "/v1/exec", proxy=None, open_timeout=10, max_size=None) as run:
        run.send(json.dumps({"argv": ["true"], "hooks": [ASKING_HOOK]}))
        objects: list[dict[str, Any]] = []
        while not any(o.get("type") == "ask" for o in objects):
            objects.extend(json.loads(x) for x in str(run.recv(timeout=60)).split("\n"))
        ask = next(o for o in objects if o.get("type") == "ask")
        follow = f"{url}/v1/runs/{ask['runId']}"
        for text, _ in HOSTILE_ANSWERS:
            with connect(follow, proxy=None, open_timeout=10, max_size=None) as bad:
                bad.send(text)
                got, code = [], 1006
                try:
                    while True:
                        got.extend(json.loads(x) for x in str(bad.recv(timeout=60)).split("\n"))
                except ConnectionClosed as exc:
                    code = exc.rcvd.code if exc.rcvd else 1006
                seen["hostile"].append((errors_of(got), code))
        for text in ('{"type": "answer", "askId": "ask-7", "answer": "yes"}',):
            with connect(follow, proxy=None, open_timeout=10, max_size=None) as stale:
                stale.send(text)
                got = []
                while not errors_of(got):  # told why, and the socket stays open
                    got.extend(json.loads(x) for x in str(stale.recv(timeout=60)).split("\n"))
                seen["stale"].append(errors_of(got)[0])
        run.send(json.dumps({"type": "answer", "askId": ask["askId"], "answer": "yes"}))
        run.send(json.dumps({"type": "answer", "askId": ask["askId"], "answer": "no"}))
        try:
            while True:
                objects.extend(json.loads(x) for x in str(run.recv(timeout=60)).split("\n"))
        except ConnectionClosed as exc:
            seen["close"] = exc.rcvd.code if exc.rcvd else 1006
        seen["objects"] = objects
    return seen


async def test_15_hostile_answers_are_refused_and_the_ask_goes_on(
    tmp_path: Path, no_leaks: None
) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        seen = await trio.to_thread.run_sync(_answering_scenario, live.url)
        objects, close = await live.read("/v1/exec", {"argv": ["true"]})  # still serving
        assert close == 1000 and frames_of(objects)[-2]["type"] == "result"
    for (errors, code), (_, says) in zip(seen["hostile"], HOSTILE_ANSWERS, strict=True):
        assert code == 4400, (says, errors)
        assert says in errors[0]["message"], errors
    (stale,) = seen["stale"]
    assert stale["askId"] == "ask-7" and stale["code"] == 4400
    assert stale["message"].startswith(
        "answer refused: no ask 'ask-7' in this run (open now: ask-1)"
    )
    assert seen["close"] == 1000
    frames = frames_of(seen["objects"])
    check_order(frames)
    (gate,) = [f for f in frames if f["type"] == "hook"]
    assert gate["asked"] == {"question": "go?", "answer": "yes", "by": "client"}
    assert frames[-2]["type"] == "result"
    (late,) = errors_of(seen["objects"])  # the socket stayed open: 1000 after `end`
    assert late["askId"] == "ask-1" and late["message"] in (
        "answer refused: ask-1 was already answered yes (by client); the first counts",
        "answer refused: ask-1 is closed: the run has ended",  # when the run was that quick
    )
