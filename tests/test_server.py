"""The service (SPEC §8) as clients meet it: a real `serve` process on loopback, a real client
library (`websockets`), every stream held to SPEC §6's order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from service_client import (
    CLI,
    ENV,
    Server,
    Stream,
    arun,
    open_ws,
    read_all,
    read_until,
    run_remote,
    stable,
    start_server,
)
from websockets.exceptions import ConnectionClosed, InvalidStatus

from mcpx_hooks.supervisor.core.order import check_order

PY = sys.executable
PLAIN = (
    '[defaults]\nsandbox = "none"\n[script]\nsandbox = "none"\n[service]\nsandboxes = ["none"]\n'
)


def slow_printer(lines: int, every_s: float, marker: str = "") -> list[str]:
    """A script that prints `ready`, then a numbered line every `every_s` seconds."""
    code = (
        "import sys, time\nprint('ready', flush=True)\n"
        f"for i in range({lines}):\n    time.sleep({every_s})\n    print(i, flush=True)\n"
    )
    return [PY, "-c", code, *([marker] if marker else [])]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the tests that do not stop it: plain config, room for 100 runs."""
    cwd = tmp_path_factory.mktemp("serve")
    (cwd / "c.toml").write_text(PLAIN)
    srv = start_server(cwd, "--config", "c.toml", "--max-runs", "128")
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.log(), srv.log()


# ---- frames: the same run, local and remote ---------------------------------------------------

HOOKED = """
[defaults]
sandbox = "none"

[service]
sandboxes = ["none"]

[script]
before = ["import json"]
sandbox = "none"

[[hooks]]
name = "check"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; echo '{\\"advise\\": \\"looks fine\\"}'"]

[[hooks]]
name = "double"
on = "script"
phase = "onSuccess"
module = "double.py"
effect = "apply"

[[hooks]]
name = "tidy"
on = "script"
phase = "suffix"
run = ["sh", "-c", "cat >/dev/null; echo '{\\"advise\\": \\"tidied\\"}'"]
"""

JOB = """
import os, sys
import mcpx

def main():
    print("out", flush=True)
    print("err", file=sys.stderr, flush=True)
    mcpx.log("logged", n=1)
    mcpx.emit({"step": 1})
    with open(os.path.join(os.environ["MCPX_ARTIFACTS_DIR"], "a.txt"), "w") as f:
        f.write("artifact")
    return 21
"""


def mcpx(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it."""
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env={**ENV, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_remote_frames_equal_local_frames(tmp_path: Path) -> None:
    (tmp_path / "hooks.toml").write_text(HOOKED)
    (tmp_path / "double.py").write_text(
        "def hook(p):\n    return {'apply': {'value': p['result']['value'] * 2}}\n"
    )
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    per_call = {"on": "script", "phase": "onSuccess", "run": ["true"], "sandbox": "none"}
    same = ("--hook", json.dumps(per_call), "--on-success", "print('result was', result)")
    same += ("--input", '{"x": 1}', "--python", "job.py")
    local = mcpx("exec", "--config", "hooks.toml", "--json", *same, cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    local_frames = [json.loads(line) for line in local.stdout.splitlines()]
    srv = start_server(tmp_path, "--config", "hooks.toml")
    try:
        request = {
            "file": "job.py",
            "cwd": str(tmp_path),
            "hooks": [per_call],
            "script": {"onSuccess": [None, "print('result was', result)"]},
            "input": {"x": 1},
        }
        remote = arun(run_remote(srv, request))
        cli = mcpx(
            "exec", "--remote", srv.url, "--token-file", "token", "--json", *same, cwd=tmp_path
        )
        assert cli.returncode == 0, cli.stderr
    finally:
        assert srv.stop() == 0
    assert remote.code == 1000 and remote.errors == []
    check_order(remote.frames)
    check_order(local_frames)
    assert stable(remote.frames) == stable(local_frames)
    cli_frames = [json.loads(line) for line in cli.stdout.splitlines()]
    assert stable(cli_frames) == stable(local_frames)
    types = [f["type"] for f in local_frames]
    for kind in ("start", "hook", "stdout", "stderr", "log", "emit", "artifact", "result", "end"):
        assert kind in types
    assert next(f for f in local_frames if f["type"] == "result")["value"] == 42
    assert [f["name"] for f in local_frames if f["type"] == "hook"] == [
        "check",
        "double",
        "script.onSuccess.1",
        "tidy",
    ]


def test_remote_exec_cli_has_the_local_view_and_exit_code(server: Server) -> None:
    def both(*argv: str) -> tuple[subprocess.CompletedProcess[str], ...]:
        local = mcpx("exec", "--config", "c.toml", *argv, cwd=server.cwd)
        token = server.token or ""
        remote = mcpx("exec", "--remote", server.url, *argv, cwd=server.cwd, MCPX_HOOKS_TOKEN=token)
        return local, remote

    def view(out: str) -> list[str]:
        return [line for line in out.splitlines() if not line.startswith(("run ", "end:"))]

    local, remote = both("--", "sh", "-c", "echo five; exit 4")
    assert (local.returncode, remote.returncode) == (4, 4), remote.stderr
    assert "| five" in remote.stdout and "ERROR the script exited with status 4" in remote.stdout
    assert view(local.stdout) == view(remote.stdout)
    local, remote = both("-c", "def main():\n    return 3")
    assert (local.returncode, remote.returncode) == (0, 0)
    assert "RESULT 3" in remote.stdout
    refused = mcpx(
        "exec", "--remote", server.url, "--", "true", cwd=server.cwd, MCPX_HOOKS_TOKEN="wrong"
    )
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr
    bad_hook = ("--hook", '{"run": "ls"}', "--", "true")
    bad = mcpx("exec", "--remote", server.url, "--token-file", "token", *bad_hook, cwd=server.cwd)
    # Checked here, as a local run checks it, before the server is asked anything.
    assert bad.returncode == 2 and "--hook #1:/run: expected an argv array" in bad.stderr


# ---- many clients ------------------------------------------------------------------------------


def test_hundred_concurrent_clients_each_get_an_ordered_stream(server: Server) -> None:
    async def main() -> list[Stream]:
        requests = [
            {"argv": ["echo", f"x{i}"]} if i % 2 else {"argv": ["true"]} for i in range(100)
        ]
        return await asyncio.gather(*(run_remote(server, r) for r in requests))

    streams = arun(main())
    run_ids = set()
    for i, stream in enumerate(streams):
        assert stream.code == 1000 and stream.errors == []
        check_order(stream.frames)
        run_ids.add(stream.frames[0]["runId"])
        out = [f["text"] for f in stream.frames if f["type"] == "stdout"]
        assert out == ([f"x{i}"] if i % 2 else [])
        assert stream.frames[-2]["type"] == "result"
    assert len(run_ids) == 100


def test_killed_client_reconnects_and_loses_nothing(server: Server) -> None:
    """A client process SIGKILLed mid-run; `from=last+1` gives exactly the rest."""
    watcher = textwrap.dedent(
        f"""
        import json, sys
        from websockets.sync.client import connect
        ws = connect({server.url + "/v1/exec"!r}, proxy=None, max_size=None,
                     additional_headers={server.headers()!r})
        ws.send(json.dumps({{"argv": {slow_printer(40, 0.02)!r}}}))
        for message in ws:
            print(message, flush=True)
        """
    )
    seen: list[dict[str, Any]] = []
    with subprocess.Popen([PY, "-c", watcher], stdout=subprocess.PIPE, text=True) as client:
        assert client.stdout is not None
        for line in client.stdout:
            seen.append(json.loads(line))
            if seen[-1].get("text") == "5":
                client.kill()
                break
        client.wait(timeout=10)
    run_id, last = seen[0]["runId"], seen[-1]["seq"]

    async def main() -> tuple[Stream, Stream]:
        async with open_ws(server, f"/v1/runs/{run_id}?from={last + 1}") as ws:
            rest = await read_all(ws)
        async with open_ws(server, f"/v1/runs/{run_id}?from=0") as ws:
            full = await read_all(ws)
        return rest, full

    rest, full = arun(main())
    assert rest.code == full.code == 1000
    check_order(full.frames)
    assert seen + rest.frames == full.frames
    assert full.frames[-2]["type"] == "result"  # the run did not stop with its client


def test_slow_reader_never_slows_the_run_or_another_client(server: Server) -> None:
    """One client does not read while a run writes ~6 MB of frames; the run and a fast
    follower finish meanwhile; the slow one then gets every frame, in large messages."""
    code = "for i in range(40000):\n    print('%06d' % i + 'x' * 60)\n"

    async def main() -> tuple[Stream, Stream]:
        async with open_ws(server, "/v1/exec", max_queue=1) as slow:
            await slow.send(json.dumps({"argv": [PY, "-c", code]}))
            lazy = Stream()
            start = await read_until(slow, lazy, lambda o: o["type"] == "start")
            async with open_ws(server, f"/v1/runs/{start['runId']}") as fast_ws:
                fast = await read_all(fast_ws)
            # The run has ended and the fast client has every frame, while the slow one has
            # read nothing past `start`.
            assert fast.frames[-1]["type"] == "end"
            await read_all(slow, lazy)
        return fast, lazy

    fast, lazy = arun(main())
    assert fast.code == lazy.code == 1000
    check_order(lazy.frames)
    assert lazy.frames == fast.frames
    assert len(lazy.frames) == 40003
    assert lazy.messages < len(lazy.frames) / 10  # what waited went out coalesced


# ---- access -----------------------------------------------------------------------------------


def test_no_token_or_a_wrong_one_is_refused_before_the_upgrade(server: Server) -> None:
    async def status(path: str, headers: dict[str, str]) -> int:
        try:
            async with open_ws(server, path, headers=headers):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    async def main() -> list[int]:
        no_token = Server(server.proc, server.url, None, server.cwd, server.stderr)
        codes = []
        for path in ("/v1/exec", "/v1/hooks", "/v1/events", "/v1/runs/x", "/v1/nope"):
            try:
                async with open_ws(no_token, path):
                    codes.append(101)
            except InvalidStatus as exc:
                codes.append(exc.response.status_code)
                assert b"token" in exc.response.body
        codes.append(await status("/v1/hooks", {"Authorization": "Bearer nope"}))
        codes.append(await status("/v1/hooks", {"Authorization": "Basic abc"}))
        codes.append(await status("/v1/nope", {}))
        async with open_ws(no_token, f"/v1/hooks?token={server.token}") as ws:
            codes.append((await read_all(ws)).code or 0)
        return codes

    assert arun(main()) == [401, 401, 401, 401, 401, 401, 401, 404, 1000]


def test_foreign_origin_is_refused_unless_allowed(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(PLAIN)
    srv = start_server(
        tmp_path, "--config", "c.toml", "--allow-origin", "https://app.example", auth=False
    )

    async def status(origin: str | None) -> int:
        try:
            async with open_ws(srv, "/v1/hooks", origin=origin) as ws:
                return (await read_all(ws)).code or 0
        except InvalidStatus as exc:
            return exc.response.status_code

    async def main() -> list[int]:
        origins = [
            None,
            f"http://127.0.0.1:{srv.port}",
            f"http://localhost:{srv.port}",
            "https://app.example",
            "http://evil.example",
            f"http://127.0.0.1:{srv.port + 1}",
            "null",
        ]
        return [await status(o) for o in origins]

    try:
        assert arun(main()) == [1000, 1000, 1000, 1000, 403, 403, 403]
    finally:
        assert srv.stop() == 0


# ---- bad input --------------------------------------------------------------------------------

BIG = "x" * (1024 * 1024 + 10)


@pytest.mark.parametrize(
    ("path", "messages", "code", "says"),
    [
        ("/v1/exec", ["{not json"], 4400, "malformed JSON"),
        ("/v1/exec", ["[1, 2]"], 4400, "JSON object"),
        ("/v1/exec", ['{"argv": ["true"], "colour": 1}'], 4400, "unknown field 'colour'"),
        ("/v1/exec", ['{"argv": "true"}'], 4400, "argv: expected a non-empty array"),
        ("/v1/exec", ['{"argv": ["true"], "timeoutMs": "5"}'], 4400, "timeoutMs: expected"),
        ("/v1/exec", ['{"python": "1", "argv": ["true"]}'], 4400, "exactly one of"),
        ("/v1/exec", ['{"argv": ["true"], "cwd": "rel"}'], 4400, "cwd: expected an absolute"),
        ("/v1/exec", ['{"argv": ["true"], "cwd": "/no/such/dir"}'], 4400, "no such directory"),
        ("/v1/exec", ['{"argv": ["true"], "hooks": [{"run": "ls"}]}'], 4400, "per-call hook"),
        ("/v1/exec", [b"\x00binary"], 1003, "binary"),
        ("/v1/exec", ['{"type": "cancel"}'], 4400, "unknown field 'type'"),
        ("/v1/exec", [BIG], 1009, "message over 1048576 bytes (--max-message-bytes): send less"),
        ("/v1/exec?x=1", [], 4400, "unknown query parameter 'x'"),
        ("/v1/runs/nosuchrun", [], 4404, "no run 'nosuchrun'"),
        ("/v1/runs/nosuchrun?from=-1", [], 4400, "non-negative integer"),
        # An unknown run is unknown whatever `from` says (a huge one was 4416).
        ("/v1/runs/nosuchrun?from=" + "9" * 40, [], 4404, "no run 'nosuchrun'"),
        ("/v1/events?since=" + "9" * 40, [], 4416, "(a number past 2**63) was never published"),
        ("/v1/events?since=99999999", [], 4416, "never published"),
        ("/v1/events?kinds=hooks", [], 4400, "matches no event kind"),
        ("/v1/events", ['{"hello": 1}'], 4400, "takes no messages"),
        ("/v1/hooks?kinds=x", [], 4400, "unknown query parameter"),
    ],
)
def test_bad_input_gets_its_error_and_close_code_while_a_run_carries_on(
    server: Server, path: str, messages: list[str | bytes], code: int, says: str
) -> None:
    async def main() -> tuple[Stream, Stream]:
        async with open_ws(server, "/v1/exec") as good:
            await good.send(json.dumps({"argv": slow_printer(5, 0.01)}))
            carried = Stream()
            await read_until(good, carried, lambda o: o.get("text") == "ready")
            async with open_ws(server, path) as bad:
                for message in messages:
                    with contextlib.suppress(ConnectionClosed):
                        await bad.send(message)
                refused = await read_all(bad)
            await read_all(good, carried)
        return refused, carried

    refused, carried = arun(main())
    assert refused.code == code, refused
    (error,) = refused.errors
    assert error["code"] == code and says in error["message"], error
    assert refused.frames == []
    assert carried.code == 1000
    check_order(carried.frames)
    assert carried.frames[-2]["type"] == "result"


def test_a_second_request_or_garbage_mid_run_ends_that_socket_only(server: Server) -> None:
    async def main() -> tuple[Stream, Stream]:
        async with open_ws(server, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": slow_printer(30, 0.02)}))
            stream = Stream()
            start = await read_until(ws, stream, lambda o: o.get("text") == "ready")
            await ws.send(json.dumps({"argv": ["true"]}))
            await read_all(ws, stream)
        async with open_ws(server, f"/v1/runs/{start['runId']}") as ws:
            full = await read_all(ws)
        return stream, full

    stream, full = arun(main())
    assert stream.code == 4400 and "second request" in stream.errors[0]["message"]
    assert full.code == 1000 and full.frames[-2]["type"] == "result"  # the run went on
    check_order(full.frames)


def test_from_out_of_range_and_from_the_end(server: Server) -> None:
    async def main() -> tuple[Stream, Stream, Stream]:
        done = await run_remote(server, {"argv": ["echo", "a"]})
        run_id, n = done.frames[0]["runId"], len(done.frames)
        async with open_ws(server, f"/v1/runs/{run_id}?from={n + 1}") as ws:
            past = await read_all(ws)
        async with open_ws(server, f"/v1/runs/{run_id}?from={n}") as ws:
            at_end = await read_all(ws)
        async with open_ws(server, f"/v1/runs/{run_id}?from={n - 2}") as ws:
            tail = await read_all(ws)
        assert tail.frames == done.frames[-2:]
        async with open_ws(server, f"/v1/runs/{run_id}?from={'9' * 400}") as ws:
            huge = await read_all(ws)
        assert huge.code == 4416, huge
        assert huge.errors[0]["message"].startswith("from (a number past 2**63) is past the run's")
        return done, past, at_end

    _, past, at_end = arun(main())
    assert past.code == 4416 and "past the run's frames" in past.errors[0]["message"]
    assert at_end.code == 1000 and at_end.objects == []


# ---- cancel ---------------------------------------------------------------------------------


def test_cancel_message_ends_the_run_in_error_cancelled(server: Server) -> None:
    async def main() -> Stream:
        async with open_ws(server, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": slow_printer(500, 0.02)}))
            stream = Stream()
            await read_until(ws, stream, lambda o: o.get("text") == "ready")
            await ws.send(json.dumps({"type": "cancel"}))
            return await read_all(ws, stream)

    stream = arun(main())
    assert stream.code == 1000
    check_order(stream.frames)
    error = stream.frames[-2]
    assert error["type"] == "error" and error["message"] == "cancelled"


@pytest.mark.parametrize("cancel", [True, False])
def test_cancel_on_disconnect(server: Server, cancel: bool) -> None:
    async def main() -> Stream:
        async with open_ws(server, "/v1/exec") as ws:
            request = {"argv": slow_printer(25, 0.02), "cancelOnDisconnect": cancel}
            await ws.send(json.dumps(request))
            start = await read_until(ws, Stream(), lambda o: o.get("text") == "ready")
        async with open_ws(server, f"/v1/runs/{start['runId']}") as ws:
            return await read_all(ws)

    stream = arun(main())
    check_order(stream.frames)
    outcome = stream.frames[-2]
    if cancel:
        said = "cancelled: its client disconnected (cancelOnDisconnect)"
        assert (outcome["type"], outcome["message"]) == ("error", said)
    else:
        assert outcome["type"] == "result"
        assert [f["text"] for f in stream.frames if f["type"] == "stdout"][-1] == "24"


# ---- events and hooks ---------------------------------------------------------------------------


def test_events_stream_with_kinds_since_and_client_events(server: Server) -> None:
    def finished(run_id: str) -> Any:
        return lambda o: o["kind"] == "run.finished" and o.get("runId") == run_id

    async def main() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        async with open_ws(server, "/v1/events?kinds=run,client.connected&since=0") as ws:
            stream = Stream()
            done = await run_remote(server, {"argv": ["true"]})  # live, after the replay
            run_id = done.frames[0]["runId"]
            await read_until(ws, stream, finished(run_id))
        started = next(o for o in stream.objects if o.get("runId") == run_id)
        async with open_ws(server, f"/v1/events?kinds=run&since={started['seq']}") as ws:
            again = Stream()
            await read_until(ws, again, finished(run_id))
        return run_id, stream.objects, again.objects

    run_id, seen, again = arun(main())
    events = [e for e in seen if e["kind"] != "gap"]
    assert {e["kind"] for e in events} <= {"run.started", "run.finished", "client.connected"}
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    ours = [e for e in events if e.get("runId") == run_id]
    assert [e["kind"] for e in ours] == ["run.started", "run.finished"]
    assert ours[1]["data"]["outcome"] == "result"
    connected = [e for e in events if e["kind"] == "client.connected"]
    assert connected[-1]["data"]["endpoint"] == "/v1/exec"
    assert connected[-1]["seq"] < ours[0]["seq"]
    assert again == ours


def test_hooks_endpoint_equals_hooks_list(tmp_path: Path) -> None:
    (tmp_path / "hooks.toml").write_text(HOOKED)
    local = mcpx("hooks", "list", "--config", "hooks.toml", "--json", cwd=tmp_path)
    srv = start_server(tmp_path, "--config", "hooks.toml")
    try:

        async def main() -> Stream:
            async with open_ws(srv, "/v1/hooks") as ws:
                return await read_all(ws)

        stream = arun(main())
        cli = mcpx("hooks", "list", "--remote", srv.url, "--token-file", "token", cwd=tmp_path)
    finally:
        assert srv.stop() == 0
    assert stream.code == 1000 and stream.messages == 1
    (message,) = stream.objects
    assert message["type"] == "hooks"
    assert message["hooks"] == json.loads(local.stdout)
    assert message["files"] == [str(tmp_path / "hooks.toml")]
    assert "hooks.toml:/hooks/2" in cli.stdout and "double" in cli.stdout


def test_events_cli_follows_until_interrupted(server: Server) -> None:
    with subprocess.Popen(
        [*CLI, "events", "--remote", server.url, "--token-file", "token"]  # noqa: RUF005
        + ["--kinds", "run", "--json", "--since", "0"],
        cwd=server.cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        done = arun(run_remote(server, {"argv": ["true"]}))
        run_id = done.frames[0]["runId"]
        for line in proc.stdout:
            event = json.loads(line)
            assert event["kind"].startswith("run") or event["kind"] == "gap"
            if event.get("runId") == run_id and event["kind"] == "run.finished":
                proc.send_signal(signal.SIGINT)
                break
        assert proc.wait(timeout=10) == 0


# ---- caps ---------------------------------------------------------------------------------------


def test_caps_on_runs_and_connections(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(PLAIN)
    srv = start_server(tmp_path, "--config", "c.toml", "--max-runs", "1", "--max-connections", "3")

    async def main() -> tuple[Stream, int, Stream]:
        async with open_ws(srv, "/v1/exec") as first:
            # (long enough to still run when the second request is admitted, a worker
            # thread or two later: 30 ms was not always)
            await first.send(json.dumps({"argv": slow_printer(50, 0.02)}))
            carried = Stream()
            await read_until(first, carried, lambda o: o.get("text") == "ready")
            over = await run_remote(srv, {"argv": ["true"]})  # second run: 1013
            async with open_ws(srv, "/v1/events"), open_ws(srv, "/v1/events"):
                try:
                    async with open_ws(srv, "/v1/events"):
                        status = 101
                except InvalidStatus as exc:
                    status = exc.response.status_code
            await read_all(first, carried)
        return over, status, carried

    try:
        over, status, carried = arun(main())
    finally:
        assert srv.stop() == 0
    assert over.code == 1013 and "too many runs" in over.errors[0]["message"]
    assert status == 503
    assert carried.code == 1000 and carried.frames[-2]["type"] == "result"


# ---- shutdown -----------------------------------------------------------------------------------

FINALLY = PLAIN + (
    '[[hooks]]\nname = "fin"\non = "script"\nphase = "suffix"\n'
    'run = ["sh", "-c", "cat >/dev/null; echo \'{\\"advise\\": \\"cleaned\\"}\'"]\n'
)


def test_sigterm_lets_runs_finish_in_grace_then_cancels_the_rest(
    tmp_path: Path,
) -> None:
    marker = f"mcpx-serve-test-{tmp_path.name}"
    (tmp_path / "c.toml").write_text(FINALLY)
    srv = start_server(tmp_path, "--config", "c.toml", "--grace", "1.5")
    quick = [PY, "-c", "import time; print('ready', flush=True); time.sleep(0.3)"]

    async def client(argv: list[str], ready: asyncio.Event) -> Stream:
        async with open_ws(srv, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv}))
            stream = Stream()
            await read_until(ws, stream, lambda o: o.get("text") == "ready")
            ready.set()
            return await read_all(ws, stream)

    async def events(subscribed: asyncio.Event) -> Stream:
        async with open_ws(srv, "/v1/events?kinds=client") as ws:
            subscribed.set()
            return await read_all(ws)

    async def main() -> tuple[list[Stream], Stream]:
        readies = [asyncio.Event() for _ in range(4)]
        subscribed = asyncio.Event()
        tasks = [
            asyncio.create_task(client(slow_printer(3000, 0.02, marker), readies[0])),
            asyncio.create_task(client(slow_printer(3000, 0.02, marker), readies[1])),
            asyncio.create_task(
                client(
                    [PY, "-c", "import time; print('ready', flush=True); time.sleep(60)", marker],
                    readies[2],
                )
            ),
            asyncio.create_task(client(quick, readies[3])),
        ]
        watcher = asyncio.create_task(events(subscribed))
        await subscribed.wait()
        for ready in readies:
            await ready.wait()
        srv.proc.send_signal(signal.SIGTERM)
        return list(await asyncio.gather(*tasks)), await watcher

    streams, watched = arun(main())
    assert srv.stop(signal=None) == 0
    for stream in streams:
        assert stream.code == 1000
        check_order(stream.frames)
        assert stream.frames[-1]["type"] == "end"
        assert [f["advice"] for f in stream.frames if f["type"] == "hook"] == [["cleaned"]]
    for stream in streams[:3]:
        assert stream.frames[-3]["type"] == "error"
        assert stream.frames[-3]["message"] == "cancelled: the server is shutting down"
    assert streams[3].frames[-3]["type"] == "result"  # finished within the grace
    assert watched.code == 1001 and watched.errors[0]["error"] == "going-away"
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []
    assert "SIGTERM" in srv.log()


def test_a_second_sigterm_kills_the_suffix_hooks_still_running(tmp_path: Path) -> None:
    # A suffix hook that ignores SIGTERM and sleeps held `serve` for its whole timeoutMs
    # after the second signal, which the log calls "stopping at once".
    marker = f"mcpx-serve-second-{tmp_path.name}"
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    stubborn = f"trap '' TERM; echo started > {fifo}; sleep 60 # {marker}"
    (tmp_path / "c.toml").write_text(
        PLAIN
        + '[[hooks]]\nname = "stubborn"\non = "script"\nphase = "suffix"\ntimeoutMs = 60000\n'
        + f"run = {json.dumps(['sh', '-c', stubborn])}\n"
    )
    state = {"XDG_STATE_HOME": str(tmp_path / "state")}
    srv = start_server(tmp_path, "--config", "c.toml", "--grace", "0.2", env=state)
    sleeper = [PY, "-c", "import time; print('ready', flush=True); time.sleep(60)", marker]

    async def main() -> Stream:
        async with open_ws(srv, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": sleeper}))
            stream = Stream()
            await read_until(ws, stream, lambda o: o.get("text") == "ready")
            srv.proc.send_signal(signal.SIGTERM)
            # (the suffix hook says it runs, once the grace is over and the run cancelled)
            assert await asyncio.to_thread(fifo.read_text) == "started\n"
            srv.proc.send_signal(signal.SIGTERM)
            return await read_all(ws, stream)

    began = time.monotonic()
    try:
        stream = arun(main())
        srv.stop(signal=None, timeout=20)
    finally:
        if srv.proc.poll() is None:  # (it did not stop: its whole family goes with it)
            srv.proc.kill()
            srv.proc.wait()
    assert time.monotonic() - began < 15  # (it waited out the hook's 60 s before)
    # (and said nothing of why it did not stop, between the first signal and the second)
    assert "1 run(s) cancelled after the grace; their suffix hooks still run, each" in srv.log()
    assert "second signal: stopping at once" in srv.log()
    # (the client's socket was cut; the run's end, the hook killed, is in the history)
    shown = mcpx("runs", "show", stream.frames[0]["runId"], "--json", cwd=tmp_path, **state)
    stored = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [(f["name"], f["status"]) for f in stored if f["type"] == "hook"] == [
        ("stubborn", "killed")
    ]
    assert stored[-1]["type"] == "end"
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []
