"""Telemetry's tables and counts (`core/telemetry.py`), and `GET /metrics` on a real `serve`:
Prometheus' own parser reads what it answers after runs with hooks that fail, time out and
refuse; the token is required."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_client import (
    Server,
    Stream,
    arun,
    open_ws,
    read_until,
    run_remote,
    served,
    start_server,
)

from mcpx_hooks.supervisor.core.frames import FrameType, HookStatus
from mcpx_hooks.supervisor.core.telemetry import (
    DURATION_BUCKETS,
    HOOK_DURATION,
    HOOK_SPAN,
    HOOKS_FAILED,
    HOOKS_REFUSED,
    HOOKS_TIMED_OUT,
    METRICS,
    NAMESPACE,
    SPANS,
    Meters,
    hook_measurements,
)

PY = sys.executable


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(families: dict[str, Any], name: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"no sample {name} {labels}")


def _hook(**wire: Any) -> dict[str, Any]:
    return {"on": "script", "phase": "before", "status": "ok", "durationMs": 12, **wire}


def test_the_names_are_declared_once_and_well_formed() -> None:
    names = [m.name for m in METRICS]
    assert len(set(names)) == len(names)
    assert all(n.startswith(f"{NAMESPACE}.") for n in names)
    assert [m.prometheus for m in METRICS] == [
        "mcpx_hooks_hook_duration_seconds",
        "mcpx_hooks_hooks_failed_total",
        "mcpx_hooks_hooks_refused_total",
        "mcpx_hooks_hooks_timed_out_total",
    ]
    keys = [a.key for s in SPANS for a in s.attributes]
    assert len(set(keys)) == len(keys)
    assert all(k.startswith(f"{NAMESPACE}.") for k in keys)
    assert list(DURATION_BUCKETS) == sorted(DURATION_BUCKETS)


def test_a_hook_frame_counts_where_its_status_and_refusal_say() -> None:
    meters = Meters()
    frames = [
        _hook(),
        _hook(status="failed"),
        _hook(status="timeout", durationMs=5000, on="call", phase="suffix"),
        _hook(refused={"reason": "no"}),
        _hook(status="skipped"),
    ]
    for wire in frames:
        for m in hook_measurements(wire):
            meters.take(m)
    before, call_suffix = ("script", "before"), ("call", "suffix")
    assert meters.value(HOOK_DURATION, before) == 3  # the skipped one did not run
    assert meters.value(HOOKS_FAILED, before) == 1
    assert meters.value(HOOKS_FAILED, call_suffix) == 1  # a timeout is a failure too
    assert meters.value(HOOKS_TIMED_OUT, call_suffix) == 1
    assert meters.value(HOOKS_TIMED_OUT, before) == 0
    assert meters.value(HOOKS_REFUSED, before) == 1
    families = _families(meters.prometheus_text())
    assert set(families) == {
        "mcpx_hooks_hook_duration_seconds",
        "mcpx_hooks_hooks_failed",
        "mcpx_hooks_hooks_refused",
        "mcpx_hooks_hooks_timed_out",
    }
    assert families["mcpx_hooks_hook_duration_seconds"].type == "histogram"
    duration = "mcpx_hooks_hook_duration_seconds"
    labels = {"point": "call", "phase": "suffix"}
    assert _sample(families, f"{duration}_bucket", **labels, le="2.5") == 0
    assert _sample(families, f"{duration}_bucket", **labels, le="5.0") == 1
    assert _sample(families, f"{duration}_bucket", **labels, le="+Inf") == 1
    before = {"point": "script", "phase": "before"}
    assert _sample(families, f"{duration}_sum", **before) == pytest.approx(0.036)
    assert _sample(families, "mcpx_hooks_hooks_failed_total", **before) == 1


def test_a_label_value_is_escaped_and_an_empty_table_still_declares_each_metric() -> None:
    meters = Meters()
    for m in hook_measurements(_hook(on='sc"ri\\pt\n', status="failed")):
        meters.take(m)
    families = _families(meters.prometheus_text())
    name = "mcpx_hooks_hooks_failed_total"
    assert _sample(families, name, point='sc"ri\\pt\n', phase="before") == 1
    empty = _families(Meters().prometheus_text())
    declared = {m.prometheus.removesuffix("_total") for m in METRICS}
    assert {f.name for f in empty.values()} == declared
    assert all(f.samples == [] for f in empty.values())


def test_span_attributes_are_only_the_declared_keys_of_the_frame() -> None:
    wire = _hook(
        name="gate",
        action="run",
        effect="advise",
        sandbox="none",
        refused=None,
        stderrTail="the secret hunter2",
        advice=["hunter2"],
        reason="hunter2",
    )
    got = HOOK_SPAN.attributes_of(FrameType.HOOK, wire)
    assert got["mcpx_hooks.hook.refused"] is False
    assert got["mcpx_hooks.hook.point"] == "script"
    assert "hunter2" not in json.dumps(got)
    assert HOOK_SPAN.failed(_hook(status=HookStatus.INVALID_OUTPUT.value))
    assert not HOOK_SPAN.failed(_hook(status="skipped"))


CONFIG = f"""\
[defaults]
sandbox = "none"

[[hooks]]
name = "fine"
on = "script"
phase = "before"
run = ["true"]

[[hooks]]
name = "broken"
on = "script"
phase = "onSuccess"
run = ["false"]

[[hooks]]
name = "slow"
on = "script"
phase = "suffix"
run = ["{PY}", "-c", "import time; time.sleep(30)"]
timeoutMs = 300

[[hooks]]
name = "watcher"
on = "run.finished"
phase = "observe"
run = ["false"]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    cwd = tmp_path_factory.mktemp("serve")
    (cwd / "hooks.toml").write_text(CONFIG)
    srv = start_server(cwd, "--config", str(cwd / "hooks.toml"))
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.log(), srv.log()


def _get(server: Server, path: str, token: bool = True) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path, headers=server.headers() if token else {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def test_metrics_need_the_token(server: Server) -> None:
    status, _, body = _get(server, "/metrics", token=False)
    assert status == 401
    assert "mcpx_hooks" not in body


async def _observed(server: Server, runs: int) -> None:
    """Until the observe hook has finished on `runs` runs (its frame is counted before its
    `hook.finished` event is sent)."""
    async with open_ws(server, "/v1/events?kinds=hook&since=0") as ws:
        stream, seen = Stream(), 0
        while seen < runs:
            await read_until(
                ws,
                stream,
                lambda e: e["kind"] == "hook.finished" and e["data"].get("name") == "watcher",
            )
            seen = sum(
                e["kind"] == "hook.finished" and e["data"].get("name") == "watcher"
                for e in stream.objects
            )


def test_metrics_after_runs_count_their_hooks(server: Server) -> None:
    for _ in range(2):
        stream = arun(run_remote(server, {"argv": ["true"], "sandbox": "workspace"}))
        assert stream.code == 1000, stream
    arun(_observed(server, 2))
    status, headers, text = _get(server, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    families = _families(text)
    duration = "mcpx_hooks_hook_duration_seconds"
    before = {"point": "script", "phase": "before"}
    assert _sample(families, f"{duration}_count", **before) == 2
    assert _sample(families, f"{duration}_count", point="script", phase="suffix") == 2
    assert _sample(families, f"{duration}_sum", point="script", phase="suffix") >= 0.6
    failed = "mcpx_hooks_hooks_failed_total"
    assert _sample(families, failed, point="script", phase="onSuccess") == 2
    assert _sample(families, failed, point="script", phase="suffix") == 2
    suffix = {"point": "script", "phase": "suffix"}
    assert _sample(families, "mcpx_hooks_hooks_timed_out_total", **suffix) == 2
    # The observe hook, outside any run's frames, is counted under its event and phase.
    assert _sample(families, failed, point="run.finished", phase="observe") == 2
    with pytest.raises(AssertionError):  # none refused
        _sample(families, "mcpx_hooks_hooks_refused_total", point="script", phase="before")


def test_a_server_with_no_runs_answers_each_metric_empty(tmp_path: Path) -> None:
    for srv in served(tmp_path):
        status, _, text = _get(srv, "/metrics")
        assert status == 200
        assert {f.name for f in _families(text).values()} == {
            m.prometheus.removesuffix("_total") for m in METRICS
        }
