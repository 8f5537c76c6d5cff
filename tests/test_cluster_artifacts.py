"""A run's artifacts through the cluster, with real parts: nats-server with JetStream on
loopback, two gateways, two workers. An artifact a script leaves on a worker is fetched
through the other gateway byte for byte (`GET /v1/runs/{runId}/artifacts/{id}`, as a single
`serve` answers it), and `exec --remote … --artifacts DIR` copies them out of a gateway."""

from __future__ import annotations

import hashlib
import http.client
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterparts import Cluster, Nats, need_nats, open_cluster, start_worker
from service_client import (
    CLI,
    ENV,
    Server,
    Stream,
    arun,
    open_ws,
    read_all,
    run_remote,
    start_server,
)

from mcpx_hooks.supervisor.cli.remoteview import NOT_STARTED_S
from mcpx_hooks.supervisor.cluster.jet import API_TIMEOUT_S

#: Three artifacts: a page, a nested text file, and 300 KiB of random bytes (several chunks).
WRITE = (
    'mkdir -p "$MCPX_ARTIFACTS_DIR/sub"; printf "<b>hi</b>" > "$MCPX_ARTIFACTS_DIR/page.html";'
    ' printf report > "$MCPX_ARTIFACTS_DIR/sub/report.txt";'
    ' head -c 307200 /dev/urandom > "$MCPX_ARTIFACTS_DIR/blob.bin";'
    ' : > "$MCPX_ARTIFACTS_DIR/empty";'
    " echo done"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_nats()
    parts = open_cluster(tmp_path_factory.mktemp("cluster"), gateways=2, workers=2)
    try:
        yield parts
    finally:
        parts.stop()
    for gateway in parts.gateways:
        assert "Traceback" not in gateway.log()
    for worker in parts.workers:
        assert "Traceback" not in worker.log.read_text()


def get(server: Server, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers=server.headers())
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def run(server: Server, script: str) -> list[dict[str, Any]]:
    stream = arun(run_remote(server, {"argv": ["sh", "-c", script, "mcpx-artifacts"]}))
    assert stream.code == 1000, stream
    assert stream.frames[-1]["type"] == "end"
    return stream.frames


def test_an_artifact_made_on_a_worker_comes_whole_through_the_other_gateway(
    cluster: Cluster,
) -> None:
    a, b = cluster.gateways
    frames = run(a, WRITE)
    run_id = frames[0]["runId"]
    artifacts = {f["name"]: f for f in frames if f["type"] == "artifact"}
    assert set(artifacts) == {"page.html", "sub/report.txt", "blob.bin", "empty"}
    # Asked at once on the other gateway: stored before the `end` the client saw.
    for name, frame in artifacts.items():
        status, headers, body = get(b, f"/v1/runs/{run_id}/artifacts/{frame['id']}")
        assert status == 200, (name, body)
        assert len(body) == frame["size"] and hashlib.sha256(body).hexdigest() == frame["sha256"]
        assert headers["Content-Type"] == frame["mime"]
        assert headers["Content-Security-Policy"] == "sandbox; frame-ancestors 'none'"
        assert headers["X-Content-Type-Options"] == "nosniff"
    assert artifacts["blob.bin"]["size"] == 307200
    page = artifacts["page.html"]
    status, headers, body = get(a, f"/v1/runs/{run_id}/artifacts/{page['id']}", "HEAD")
    assert (status, headers["Content-Length"], body) == (200, "9", b"")


@pytest.mark.parametrize(
    ("tail", "says"),
    [
        ("{run}/artifacts/a99", "has no artifact 'a99'"),
        ("{run}/artifacts/a.0", "has no artifact"),
        ("{run}/artifacts/..%2f..%2fetc", "has no artifact"),
        ("nosuchrun/artifacts/a0", "no run 'nosuchrun' is retained"),
        ("a.b/artifacts/a0", "is retained"),
    ],
)
def test_an_unknown_artifact_or_run_is_404_as_on_one_serve(
    cluster: Cluster, tail: str, says: str
) -> None:
    a, b = cluster.gateways
    run_id = run(a, "echo none")[0]["runId"]
    status, headers, body = get(b, "/v1/runs/" + tail.format(run=run_id))
    assert status == 404 and headers["Content-Type"] == "application/json"
    assert says in body.decode()


def test_exec_remote_copies_the_artifacts_out_through_a_gateway(
    cluster: Cluster, tmp_path: Path
) -> None:
    a = cluster.gateways[0]
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "exec", "--remote", a.url, "--artifacts", str(out), "--", "sh", "-c", WRITE],
        check=False,
        cwd=cluster.cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "page.html").read_bytes() == b"<b>hi</b>"
    assert (out / "sub" / "report.txt").read_text() == "report"
    assert (out / "blob.bin").stat().st_size == 307200
    assert "4 artifact(s) copied" in done.stderr
    assert "Traceback" not in done.stderr


async def objects(url: str) -> list[str]:
    """The names of the objects the artifacts bucket holds, beneath any gateway."""
    import nats
    import nats.js.errors

    nc = await nats.connect(url)
    try:
        bucket = await nc.jetstream().object_store("MCPX_ARTIFACTS")
        try:
            return sorted(o.name for o in await bucket.list(ignore_deletes=True))
        except nats.js.errors.NotFoundError:
            return []
    finally:
        await nc.close()


def test_the_bucket_keeps_the_budget_and_the_retained_runs_only(tmp_path: Path) -> None:
    need_nats()
    config = tmp_path / "c.toml"
    config.write_text("[runs]\nartifactBytes = 100\nretain = 3\n")
    parts = Cluster(tmp_path, Nats(tmp_path / "jetstream"))
    parts.nats.start()
    try:
        gateway = start_server(tmp_path, *parts.nats.flags("gateway"), "--config", str(config))
        parts.gateways.append(gateway)
        parts.workers.append(start_worker(tmp_path, parts.nats, "--config", str(config)))
        sixty = 'head -c 60 /dev/zero > "$MCPX_ARTIFACTS_DIR/sixty"'
        first = run(gateway, sixty)[0]["runId"]
        assert arun(objects(parts.nats.client_url())) == [f"{first}.a0"]
        second = run(gateway, sixty)[0]["runId"]
        # 120 bytes would not fit in 100: the older run's artifact went.
        assert arun(objects(parts.nats.client_url())) == [f"{second}.a0"]
        status, _, body = get(gateway, f"/v1/runs/{first}/artifacts/a0")
        assert status == 404 and b"has no artifact" in body
        assert get(gateway, f"/v1/runs/{second}/artifacts/a0")[0] == 200
        for _ in range(3):
            run(gateway, "true")  # retain = 3: the second run is no longer retained
        status, _, body = get(gateway, f"/v1/runs/{second}/artifacts/a0")
        assert status == 404 and b"is retained" in body
        small = run(gateway, 'printf x > "$MCPX_ARTIFACTS_DIR/x"')[0]["runId"]
        # The next run with artifacts removed those of the run no longer retained.
        assert arun(objects(parts.nats.client_url())) == [f"{small}.a0"]
        parts.nats.stop()
        # NATS gone: the gateway says so, as it would of any run (503, try again later).
        status, _, body = get(gateway, f"/v1/runs/{small}/artifacts/a0")
        assert status == 503 and b"the cluster cannot be reached" in body
    finally:
        parts.stop()


def test_without_nats_a_run_the_gateway_does_not_hold_is_a_503(tmp_path: Path) -> None:
    """NATS gone, a gateway asked of a run it holds nothing of (not in its runs, nor its
    history) cannot know whether the cluster has it: it says so (503; 1013 on a socket), as
    of a run it holds, and never drops the connection."""
    need_nats()
    parts = Cluster(tmp_path, Nats(tmp_path / "jetstream"))
    parts.nats.start()
    try:
        gateway = parts.add_gateway()
        parts.nats.stop()
        # Each said at once: it waited for the JetStream API's timeout (5 s) to say the same.
        for path in ("artifacts/a0", "output.txt", "frames.ndjson"):
            asked = time.monotonic()
            status, _, body = get(gateway, f"/v1/runs/unheardof0123/{path}")
            assert status == 503 and b"the cluster cannot be reached" in body, (path, body)
            assert time.monotonic() - asked < API_TIMEOUT_S, path

        async def follow(path: str) -> Stream:
            async with open_ws(gateway, path) as ws:
                return await read_all(ws)

        # A run followed, and the events (which `exec --remote` follows beside its run).
        for path in ("/v1/runs/unheardof0123", "/v1/events?kinds=hook"):
            asked = time.monotonic()
            followed = arun(follow(path))
            assert followed.code == 1013, (path, followed)
            assert "the cluster cannot be reached" in followed.reason, (path, followed)
            assert time.monotonic() - asked < API_TIMEOUT_S, path
        # A new run: refused at once, its true words first. It waited for NATS's 5 s, when
        # the view's "(no run yet after 5 s: … waits for a worker …)" came first, on stdout.
        started = time.monotonic()
        done = subprocess.run(
            [*CLI, "exec", "--remote", gateway.url, "--", "true"],
            check=False, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (done.returncode, done.stdout) == (1, ""), done
        assert done.stderr.startswith(
            "mcpx-hooks exec: the server said: the cluster cannot be reached: NATS is not connected"
        ), done.stderr
        assert time.monotonic() - started < NOT_STARTED_S
        assert " failed: " not in gateway.log() and "a bug" not in gateway.log()
    finally:
        parts.stop()
