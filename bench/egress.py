"""Egress by name: what the proxy adds to one HTTPS request, and to a hook's start.

    .venv/bin/python bench/egress.py [--requests 200] [--rounds 10] [--per-round 10]

Two figures, each against its baseline measured in the same run:
* `egress_https_added`: one HTTPS request (a new connection, TLS handshake, GET, the whole
  answer) to a loopback TLS server, made by a strict hook with `network` through the whole
  path (its HTTPS_PROXY: the forwarder on its own loopback, the Unix socket, the proxy's
  CONNECT tunnel, DNS by the proxy), against the same request made directly from this
  process with the same code; p50 of each, the difference. Goal: <= 2 ms added (`abs`).
  The request is timed inside the hook, so the hook's own start is not in it.
* `egress_start_added`: a whole `run` hook of /bin/true under strict with `network`, against
  the same hook under strict without it (interleaved rounds, medians); the difference.
  Goal: <= 1 ms added (`abs`).
Needs root (strict needs it here, as bench/sandbox_overhead.py says).

Quick mode (`MCPX_BENCH_QUICK=1`): `--requests 5 --rounds 1 --per-round 2`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import ssl
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio
from _quick import missing, parse_args
from _timing import TRUE, interleaved, medians, percentile, result

from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.egressca import RunCA
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookrun import run_hook

HTTPS_GOAL_MS = 2.0
START_GOAL_MS = 1.0

#: Times `n` HTTPS requests to https://localhost:PORT/ (through HTTPS_PROXY when it is set:
#: http.client's tunnel), each on a new connection; prints their durations in seconds.
CLIENT = textwrap.dedent(
    """
    import http.client, json, os, ssl, sys, time
    port, n, cafile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ctx = ssl.create_default_context(cafile=cafile)
    proxy = os.environ.get("HTTPS_PROXY")
    times = []
    for _ in range(n):
        t = time.perf_counter()
        if proxy:
            host, pport = proxy.rsplit("/", 1)[-1].rsplit(":", 1)
            conn = http.client.HTTPSConnection(host, int(pport), context=ctx)
            conn.set_tunnel("localhost", port)
        else:
            conn = http.client.HTTPSConnection("localhost", port, context=ctx)
        conn.request("GET", "/")
        body = conn.getresponse().read()
        conn.close()
        assert body == b"hello", body
        times.append(time.perf_counter() - t)
    print(json.dumps({"advise": json.dumps(times)}))
    """
)


def _tls(where: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA's certificate file and a server context for `localhost` it signed (the per-run
    CA's own class, standing here for a CA the system trusts)."""
    ca = RunCA()
    (where / "ca.pem").write_bytes(ca.pem)
    return where / "ca.pem", ca.server_context("localhost")


async def _serve_tls(ctx: ssl.SSLContext, task_status: trio.TaskStatus[int]) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def handle(plain: trio.SocketStream) -> None:
        async with trio.SSLStream(plain, ctx, server_side=True) as stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
            )

    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


def _hook(where: str, argv: tuple[str, ...], network: tuple[str, ...] | None) -> Hook:
    return Hook(
        "bench", "script", Phase.BEFORE, Action.RUN, argv, where,
        Provenance(SourceKind.COMMAND_LINE), sandbox=Profile.STRICT, network=network,
        timeout_ms=120_000,
    )  # fmt: skip


async def _timed_hook(spawner: Spawner, hook: Hook) -> float:
    start = time.perf_counter()
    report = await run_hook(spawner, hook, HookContext(run=None))
    elapsed = time.perf_counter() - start
    assert report.frame.status == "ok", report.frame
    return elapsed


async def measure(
    args: argparse.Namespace, where: Path
) -> tuple[list[float], list[float], dict[str, list[float]]]:
    ca_file, server_ctx = _tls(where)
    client = where / "client.py"
    client.write_text(CLIENT)
    async with open_spawner() as spawner, trio.open_nursery() as nursery:
        port = await nursery.start(_serve_tls, server_ctx)
        argv = (sys.executable, str(client), str(port), str(args.requests), str(ca_file))
        hook = _hook(str(where), argv, (f"localhost:{port}",))
        report = await run_hook(spawner, hook, HookContext(run=None))
        assert report.frame.status == "ok", report.frame
        proxied = json.loads(report.frame.advice[0])
        direct_out = await trio.run_process(
            [*argv],
            capture_stdout=True,
            env={k: v for k, v in os.environ.items() if "PROXY" not in k.upper()},
        )
        direct = json.loads(json.loads(direct_out.stdout)["advise"])
        samplers = {
            "strict_hook": functools.partial(
                _timed_hook, spawner, _hook(str(where), (TRUE,), None)
            ),
            "network_hook": functools.partial(
                _timed_hook, spawner, _hook(str(where), (TRUE,), ("localhost:1",))
            ),
        }
        starts = await interleaved(samplers, args.rounds, args.per_round)
        nursery.cancel_scope.cancel()
    return proxied, direct, starts


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=10)
    args = parse_args(parser, requests=5, rounds=1, per_round=2)
    if os.geteuid() != 0:
        missing("bench/egress.py: the strict profile needs root here: run as root")
    started = time.perf_counter()
    where = Path(tempfile.mkdtemp(prefix="mcpx-bench-egress-"))
    os.chmod(where, 0o755)
    try:
        proxied, direct, starts = trio.run(measure, args, where)
    finally:
        for f in where.iterdir():
            f.unlink()
        where.rmdir()
    via, bare = statistics.median(proxied) * 1e3, statistics.median(direct) * 1e3
    added = via - bare
    print(f"HTTPS request to a loopback TLS server, {len(proxied)} each, new connection each:")
    for label, p50, values in (
        ("direct (this process)", bare, direct),
        ("via the proxy", via, proxied),
    ):
        print(f"  {label:22} p50 {p50:7.3f} ms  p90 {percentile(values, 90) * 1e3:7.3f} ms")
    print(f"  added p50 {added:.3f} ms (goal <= {HTTPS_GOAL_MS} ms)")
    figures = medians(starts)
    strict, network = figures["strict_hook"] * 1e3, figures["network_hook"] * 1e3
    print(f"hook start ({len(starts['strict_hook'])} each, interleaved, medians):")
    print(f"  strict /bin/true            {strict:7.3f} ms")
    added_start = network - strict
    print(f"  strict + network            {network:7.3f} ms  added {added_start:.3f} ms")
    print(f"({time.perf_counter() - started:.1f} s)")
    print(
        result(
            "egress_https_added", added, bare, via / bare, HTTPS_GOAL_MS, direction="abs", unit="ms"
        )
    )
    print(
        result(
            "egress_start_added",
            network - strict,
            strict,
            network / strict,
            START_GOAL_MS,
            direction="abs",
            unit="ms",
        )
    )


if __name__ == "__main__":
    main()
