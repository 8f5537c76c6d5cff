"""Who may touch the cluster (docs/cluster.md, "Who may touch the cluster"), with real
parts: nats-server with the documented users and permissions, gateways and workers as
subprocesses, and nats-py as the outsider. A request no gateway signed is never run; a
message naming no run is dropped; JetStream never holds a caller's secret in the clear; a
part refuses an open NATS server (unless --nats-insecure, then warns), a missing or loose
key or auth file, and credentials the server refuses."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from clusterparts import (
    Cluster,
    Nats,
    forged,
    frames_until_end,
    need_nats,
    open_cluster,
    publish_request,
    raw_lines,
    start_worker,
    write_private,
)
from service_client import CLI, ENV, arun, open_ws, read_all, run_remote

from mcpx_hooks.supervisor.cluster.names import Stream as Streams
from mcpx_hooks.supervisor.cluster.sealing import UNSIGNED
from mcpx_hooks.supervisor.core.chain import check
from mcpx_hooks.supervisor.core.order import check_order

SECRET = "s3cr3t-value-7c1e-never-stored"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One gateway and one worker taking one request at a time (so a message published
    before a run is settled before that run is taken)."""
    need_nats()
    parts = open_cluster(tmp_path_factory.mktemp("access"), gateways=1, workers=0)
    try:
        parts.workers.append(start_worker(parts.cwd, parts.nats, "--concurrency", "1"))
        yield parts
    finally:
        parts.stop()


@pytest.mark.parametrize(
    "signature",
    [None, "0" * 64, "not hex at all"],
    ids=["unsigned", "signed-with-another-key", "garbage-signature"],
)
def test_a_request_no_gateway_signed_is_never_run(
    cluster: Cluster, signature: str | None, tmp_path: Path
) -> None:
    run_id = uuid.uuid4().hex
    marker = tmp_path / "ran"
    data = forged(run_id, marker)
    if signature == "0" * 64:  # a well-formed HMAC, by a key that is not the cluster's
        signature = hmac.new(b"k" * 32, data, hashlib.sha256).hexdigest()
    headers = {"Mcpx-Signature": signature} if signature is not None else None
    url = cluster.nats.client_url("gateway")  # an account that may publish requests
    arun(publish_request(url, data, headers))
    frames = arun(frames_until_end(url, run_id))
    check_order(frames)
    assert [f["type"] for f in frames] == ["start", "error", "end"]
    assert frames[1]["message"] == UNSIGNED  # what to fix: the key, said to the client
    assert frames[1]["cause"] == "failed"  # (no hook refused it: exec exits 1, not 3)
    assert check(arun(raw_lines(url, run_id))) is None  # its `end` chains the lines before
    assert not marker.exists()
    # The worker goes on, and a gateway's own request still runs.
    ran = arun(run_remote(cluster.gateways[0], {"argv": ["sh", "-c", "echo signed"]}))
    assert ran.code == 1000 and ran.frames[-2]["type"] == "result"
    assert not marker.exists()
    log = cluster.workers[0].log.read_text()
    assert f"run {run_id}: not run: {UNSIGNED}" in log
    assert "Traceback" not in log


def test_a_message_naming_no_run_is_dropped_and_acknowledged(cluster: Cluster) -> None:
    for data in (b"not json", b"[]", b'{"runId": "a.b", "request": "{}"}', b"{" * 5000):
        arun(publish_request(cluster.nats.client_url(), data))
    ran = arun(run_remote(cluster.gateways[0], {"argv": ["sh", "-c", "echo after"]}))
    assert ran.code == 1000
    log = cluster.workers[0].log.read_text()
    assert log.count("a queued message that is no request, dropped") >= 4
    assert "Traceback" not in log

    async def waiting() -> int:
        """The work queue's messages, asked until none is left or 10 s have passed: the
        worker acknowledges a request after the run's `end`, which the client may see first."""
        nc = await nats.connect(cluster.nats.client_url())
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                info = await nc.jetstream().stream_info(Streams.REQUESTS)
                if not info.state.messages or asyncio.get_running_loop().time() > deadline:
                    return int(info.state.messages)
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    assert arun(waiting()) == 0  # acknowledged: gone from the work queue


def test_a_run_cannot_read_the_workers_key_or_credentials(cluster: Cluster) -> None:
    """The worker's cluster key and NATS auth file lie in its working directory (its root):
    a run there, under the default workspace profile, reads neither; its other files it does."""
    key, auth = cluster.nats.key_file, cluster.nats.auth_file("worker")
    (cluster.cwd / "plain.txt").write_text("readable\n")
    for path in (key, auth):
        ran = arun(run_remote(cluster.gateways[0], {"argv": ["cat", str(path)]}))
        assert ran.code == 1000
        text = "".join(f.get("text", "") for f in ran.frames)
        assert ran.frames[-2]["type"] == "error", ran.frames
        assert path.read_text().strip() not in text
    ran = arun(run_remote(cluster.gateways[0], {"argv": ["cat", "plain.txt"]}))
    assert [f["text"] for f in ran.frames if f["type"] == "stdout"] == ["readable"]


def test_the_stored_request_holds_no_secret_value(tmp_path: Path) -> None:
    """A request queued with a secret: what JetStream holds of it has no trace of the value
    (sealed); a worker started afterwards opens it and the run gets the value. The stored
    message, signature and all, published again by an outsider, does not run it twice."""
    need_nats()
    parts = open_cluster(tmp_path, gateways=1, workers=0)
    try:
        gateway = parts.gateways[0]
        count = tmp_path / "count"
        # The value checked in two halves: the whole of it is nowhere in the request's text.
        head, tail = SECRET[:10], SECRET[10:]
        script = f'test "${{TOKEN%{tail}}}" = {head} && echo same && echo x >> {count}'
        request = {
            "argv": ["sh", "-c", script],
            "secrets": ["TOKEN"],
            "callerEnv": {"TOKEN": SECRET},
        }

        async def scenario() -> tuple[bytes, dict[str, str], Any]:
            acked, nc = await watch_queued(parts.nats.client_url())
            async with open_ws(gateway, "/v1/exec") as ws:
                await ws.send(json.dumps(request))
                data, headers = await stored_request(nc, await acked)
                await nc.close()
                worker = await asyncio.to_thread(
                    start_worker, tmp_path, parts.nats, "--concurrency", "1"
                )
                parts.workers.append(worker)
                return data, headers, await read_all(ws)

        data, headers, seen = arun(scenario())
        stored = data + json.dumps(headers).encode()
        assert SECRET.encode() not in stored
        assert b"sealedEnv" in data and "Mcpx-Signature" in headers
        assert seen.code == 1000, seen
        assert [f["text"] for f in seen.frames if f["type"] == "stdout"] == ["same"]
        # Replayed as stored: taken (one at a time) before the next run, and not run again.
        arun(publish_request(parts.nats.client_url(), data, headers))
        assert arun(run_remote(gateway, {"argv": ["true"]})).code == 1000
        assert count.read_text() == "x\n"
        run_id = seen.frames[0]["runId"]
        assert arun(frames_until_end(parts.nats.client_url(), run_id)) == seen.frames
    finally:
        parts.stop()


async def watch_queued(url: str) -> tuple[asyncio.Future[int], Any]:
    """A future set to the stream sequence of the next request JetStream acknowledges onto
    the requests stream (its ack seen on the gateway's reply inbox), and the connection."""
    nc = await nats.connect(url)
    acked: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def seen(msg: Any) -> None:
        try:
            ack = json.loads(msg.data)
        except ValueError:
            return
        if isinstance(ack, dict) and ack.get("stream") == Streams.REQUESTS and not acked.done():
            acked.set_result(int(ack["seq"]))

    await nc.subscribe("_INBOX.>", cb=seen)
    await nc.flush()
    return acked, nc


async def stored_request(nc: Any, seq: int) -> tuple[bytes, dict[str, str]]:
    raw = await nc.jetstream().get_msg(Streams.REQUESTS, seq)
    return bytes(raw.data or b""), dict(raw.headers or {})


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], check=False, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60
    )


def test_an_open_nats_server_is_refused_unless_insecure_then_warned(tmp_path: Path) -> None:
    need_nats()
    parts = Cluster(tmp_path, Nats(tmp_path / "jetstream", open=True))
    parts.nats.start()
    try:
        given = [
            "--cluster",
            parts.nats.url,
            "--nats-auth-file",
            str(parts.nats.auth_file("worker")),
            "--cluster-key-file",
            str(parts.nats.key_file),
        ]
        for part in (["worker"], ["serve", "--no-auth", "--port", "0"]):
            done = cli(*part, *given, cwd=tmp_path)
            assert done.returncode == 2, done
            assert "lets anyone in without credentials" in done.stderr
            assert "--nats-insecure" in done.stderr and "Traceback" not in done.stderr
        # Accepted with --nats-insecure: it starts, runs, and says why that is unsafe.
        worker = parts.add_worker()
        gateway = parts.add_gateway()
        ran = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo open"]}))
        assert ran.code == 1000
        assert "warning: --nats-insecure" in worker.log.read_text()
        assert "warning: --nats-insecure" in gateway.stderr.read_text()
        doctor = ["doctor", "--cluster", parts.nats.url]
        warned = cli(*doctor, "--nats-insecure", cwd=tmp_path)
        assert "WARNING  access    warning: --nats-insecure" in warned.stdout, warned
        refused = cli(*doctor, cwd=tmp_path)
        assert "OPEN     access" in refused.stdout and refused.returncode == 1
    finally:
        parts.stop()


def test_credentials_the_server_refuses_stop_a_part_with_exit_2(tmp_path: Path) -> None:
    need_nats()
    server = Nats(tmp_path / "jetstream")
    server.start()
    try:
        wrong = write_private(tmp_path / "wrong.toml", 'user = "mcpx-worker"\npassword = "no"\n')
        key = ["--cluster-key-file", str(server.key_file)]
        done = cli("worker", "--cluster", server.url, "--nats-auth-file", str(wrong), *key,
                   cwd=tmp_path)  # fmt: skip
        assert done.returncode == 2, done
        assert "refused the credentials given" in done.stderr
        assert "Traceback" not in done.stderr
        # Without credentials, against a server with users: said before any connection.
        bare = cli("worker", "--cluster", server.url, *key, cwd=tmp_path)
        assert bare.returncode == 2 and "NATS needs credentials" in bare.stderr
    finally:
        server.stop()


def test_a_part_whose_nats_user_may_not_use_its_subjects_refuses_to_start(
    tmp_path: Path,
) -> None:
    # Each started with the other's auth file: a gateway that could not hear the leases
    # would end every running run as "worker lost"; a worker that could not say them would
    # have its runs ended so. Each is told at start, in one line, and exits 2.
    need_nats()
    server = Nats(tmp_path / "jetstream")
    server.start()
    try:
        key = ["--cluster-key-file", str(server.key_file)]
        parts = {
            "gateway": (["serve", "--no-auth", "--port", "0"], "worker", "mcpx.lease.*"),
            "worker": (["worker"], "gateway", "mcpx.lease.*"),
        }
        for part, (command, other, subject) in parts.items():
            auth = ["--nats-auth-file", str(server.auth_file(other))]
            done = cli(*command, "--cluster", server.url, *auth, *key, cwd=tmp_path)
            assert done.returncode == 2, done
            assert len(done.stderr.splitlines()) == 1, done.stderr
            verb = "subscribe to" if part == "gateway" else "publish to"
            said = f"does not let NATS user 'mcpx-{other}' {verb} {subject} ("
            assert said in done.stderr and "worker lost" in done.stderr, done.stderr
            assert f"the permissions docs/cluster.md shows for a {part}" in done.stderr
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("key", "mode", "says"),
    [
        (None, 0o600, "--cluster-key-file: required"),
        ("ab" * 32, 0o644, "is open to others (mode 644)"),
        ("ab" * 16, 0o600, "at least 32 random bytes written as hex"),
        ("zz" * 32, 0o600, "at least 32 random bytes written as hex"),
    ],
    ids=["missing", "loose", "short", "not-hex"],
)
def test_a_part_without_a_good_key_file_refuses_to_start(
    tmp_path: Path, key: str | None, mode: int, says: str
) -> None:
    auth = write_private(tmp_path / "auth.toml", 'user = "u"\npassword = "p"\n')
    flags = ["--cluster", "nats://127.0.0.1:1", "--nats-auth-file", str(auth)]
    if key is not None:
        flags += ["--cluster-key-file", str(write_private(tmp_path / "k", key, mode))]
    for part in (["worker"], ["serve", "--no-auth", "--port", "0"]):
        done = cli(*part, *flags, cwd=tmp_path)
        assert done.returncode == 2, done
        assert says in done.stderr and "Traceback" not in done.stderr


def test_a_loose_auth_file_is_refused(tmp_path: Path) -> None:
    auth = write_private(tmp_path / "auth.toml", 'user = "u"\npassword = "p"\n', 0o640)
    key = write_private(tmp_path / "k", "ab" * 32)
    flags = ["--cluster", "nats://127.0.0.1:1", "--cluster-key-file", str(key)]
    done = cli("worker", *flags, "--nats-auth-file", str(auth), cwd=tmp_path)
    assert done.returncode == 2
    assert "--nats-auth-file" in done.stderr and "open to others (mode 640)" in done.stderr
    odd = write_private(tmp_path / "odd.toml", 'user = "u"\n')
    done = cli("worker", *flags, "--nats-auth-file", str(odd), cwd=tmp_path)
    assert done.returncode == 2 and 'expected user = "NAME" and password' in done.stderr
    inline = cli("worker", "--cluster", "nats://u:p@127.0.0.1:1", cwd=tmp_path)
    assert inline.returncode == 2 and "no credentials in the URL" in inline.stderr


def test_a_tls_nats_server_is_reached_with_its_ca_and_refused_without(tmp_path: Path) -> None:
    need_nats()
    parts = Cluster(tmp_path, Nats(tmp_path / "jetstream", tls=True))
    parts.nats.start()
    try:
        flags = parts.nats.flags("worker")
        at = flags.index("--nats-tls-ca")
        untrusted = cli("worker", *flags[:at], *flags[at + 2 :], cwd=tmp_path)
        assert untrusted.returncode == 2, untrusted
        assert "certificate" in untrusted.stderr and "--nats-tls-ca" in untrusted.stderr
        assert "Traceback" not in untrusted.stderr
        parts.add_worker()
        gateway = parts.add_gateway()
        ran = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo over tls"]}))
        assert ran.code == 1000
        assert [f["text"] for f in ran.frames if f["type"] == "stdout"] == ["over tls"]
    finally:
        parts.stop()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f'user = "u"\n"{SECRET}" = "p"\n', "unknown key of 30 characters (not shown"),
        (f'user = "u"\npassword = "p"\n[{SECRET}]\n', "unknown key of 30 characters (not shown"),
        (f"[{SECRET}]\n[{SECRET}]\n", "a key or table declared twice (at line 2, column"),
        (f"{SECRET} = [1]\n[[{SECRET}]]\n", "a value extended that cannot be (an array"),
        (f'user = "u"\npassword = {{ {SECRET} = 1, {SECRET} = 2 }}\n', "declared twice"),
        ('pasword = "p"\nuser = "u"\n', "unknown key 'pasword'"),
        ('user = "u"\npassword = p4ss\n', "is not TOML: Invalid value (at line 2, column 12)"),
    ],
    ids=["key", "table", "twice", "redefined", "inline-twice", "a-typo-is-shown", "not-toml"],
)
def test_an_auth_file_refused_never_shows_what_may_be_the_secret(
    tmp_path: Path, text: str, says: str
) -> None:
    """A key written in an auth file is said in its refusal only when it reads as a name:
    the file holds a password or token, and a line of it pasted where a key goes (or the
    secret written as a table's name) must not reach the terminal or a log."""
    auth = write_private(tmp_path / "auth.toml", text)
    key = write_private(tmp_path / "k", "ab" * 32)
    flags = ["--nats-auth-file", str(auth), "--cluster-key-file", str(key)]
    for part in (["worker"], ["serve", "--no-auth", "--port", "0"]):
        done = cli(*part, "--cluster", "nats://127.0.0.1:1", *flags, cwd=tmp_path)
        assert done.returncode == 2, done
        assert says in done.stderr, done.stderr
        assert SECRET not in done.stderr and "Traceback" not in done.stderr
