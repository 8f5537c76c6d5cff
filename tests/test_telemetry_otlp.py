"""Telemetry over OTLP with a real `mcpx-hooks exec` and a real collector's wire: a loopback
OTLP/HTTP receiver (`otlp_receiver.py`) gets the run's spans (the run, each hook, each tool
call, with their attributes and parents) and its metrics before `exec` has exited; no secret
reaches them; and without `OTEL_EXPORTER_OTLP_ENDPOINT` nothing of the SDK is even imported."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Marker
from importset import imported_by
from otlp_receiver import attributes, receiver

from mcpx_hooks.supervisor.core.frames import FrameType

HOSTILE = str(Path(__file__).parent / "mcpservers" / "hostile.py")
PY = sys.executable
CLI = [PY, "-m", "mcpx_hooks.supervisor"]
SECRET = "s3cr3t-token-8f41e2"


def _answer(obj: Any) -> list[str]:
    return [PY, "-c", f"print({json.dumps(json.dumps(obj))})"]


#: A hook that says the secret it was given, on stdout (advice) and on stderr.
_TELLS = (
    "import os, sys; t = os.environ['MCPX_TEST_TOKEN'];"
    " print('token ' + t, file=sys.stderr); print('the token is ' + t)"
)


def _config(tmp_path: Path, marker: Marker) -> Path:
    config = {
        "defaults": {"sandbox": "none"},
        "servers": {
            "h": {
                "command": [PY, HOSTILE, "good", str(tmp_path / "log"), marker],
                "sandbox": "none",
            },
        },
        "hooks": [
            {
                "name": "gate",
                "on": "script",
                "phase": "before",
                "run": [PY, "-c", _TELLS],
                "secrets": ["MCPX_TEST_TOKEN"],
            },
            {
                "name": "no-rm",
                "on": "call",
                "phase": "before",
                "run": _answer({"refuse": "rm is not allowed"}),
                "effect": "ask",
                "when": {"tool": ["h.rm"]},
            },
            {"name": "starting", "on": "server.start", "phase": "before", "run": ["true"]},
            {
                "name": "slow",
                "on": "script",
                "phase": "suffix",
                "run": [PY, "-c", "import time; time.sleep(30)"],
                "timeoutMs": 300,
            },
        ],
    }
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps(config))
    (tmp_path / "job.py").write_text(
        textwrap.dedent(
            """
            import mcpx
            def main():
                mcpx_call("h.echo", {"n": 1})
                try:
                    mcpx_call("h.rm", {"path": "/"})
                except mcpx.CallError as exc:
                    return str(exc)
            """
        )
    )
    return path


def _exec(tmp_path: Path, config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "exec", "--config", str(config), "--json", "--python", "job.py"],
        cwd=tmp_path,
        env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "MCPX_TEST_TOKEN": SECRET, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_exec_run_s_spans_and_metrics_reach_the_collector_before_it_exits(
    tmp_path: Path, marker: Marker
) -> None:
    config = _config(tmp_path, marker)
    with receiver() as (endpoint, got):
        done = _exec(tmp_path, config, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
        # What was received by now was flushed by `exec` itself: it has exited.
        spans = got.spans()
        metrics = got.metrics()
        raw = got.raw()
        resources = got.resources()
        exports = len(got.bodies["/v1/metrics"])
    assert done.returncode == 0, done.stderr
    assert exports == 1  # once, at the end (a flush and the shutdown each sent them)
    assert "Traceback" not in done.stderr
    assert marker.alive() == []

    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == [
        "call h.echo",
        "call h.rm",
        "hook gate",
        "hook no-rm",
        "hook slow",
        "hook starting",
        "run",
    ]
    run = by_name["run"]
    run_attrs = attributes(run.attributes)
    assert run_attrs["mcpx_hooks.run.outcome"] == "result"
    assert run_attrs["mcpx_hooks.run.sandbox"] == "workspace"
    assert run_attrs["mcpx_hooks.run.id"]
    assert run_attrs["mcpx_hooks.run.duration_ms"] >= 300
    for span in spans:  # one trace, every other span a child of the run's
        assert span.trace_id == run.trace_id
        if span is not run:
            assert span.parent_span_id == run.span_id
            assert run.start_time_unix_nano <= span.start_time_unix_nano
            assert span.end_time_unix_nano <= run.end_time_unix_nano

    gate = attributes(by_name["hook gate"].attributes)
    assert gate == {
        "mcpx_hooks.hook.name": "gate",
        "mcpx_hooks.hook.point": "script",
        "mcpx_hooks.hook.phase": "before",
        "mcpx_hooks.hook.action": "run",
        "mcpx_hooks.hook.effect": "advise",
        "mcpx_hooks.hook.status": "ok",
        "mcpx_hooks.hook.duration_ms": gate["mcpx_hooks.hook.duration_ms"],
        "mcpx_hooks.hook.sandbox": "none",
        "mcpx_hooks.hook.refused": False,
    }
    slow = by_name["hook slow"]
    assert attributes(slow.attributes)["mcpx_hooks.hook.status"] == "timeout"
    assert slow.status.code == 2  # STATUS_CODE_ERROR
    took = (slow.end_time_unix_nano - slow.start_time_unix_nano) / 1e6
    assert abs(took - attributes(slow.attributes)["mcpx_hooks.hook.duration_ms"]) < 2
    starting = attributes(by_name["hook starting"].attributes)
    assert starting["mcpx_hooks.hook.point"] == "server.start"
    no_rm = attributes(by_name["hook no-rm"].attributes)
    assert no_rm["mcpx_hooks.hook.point"] == "call"
    assert no_rm["mcpx_hooks.hook.refused"] is True

    echo = attributes(by_name["call h.echo"].attributes)
    assert echo["mcpx_hooks.call.server"] == "h" and echo["mcpx_hooks.call.tool"] == "echo"
    assert echo["mcpx_hooks.call.ok"] is True
    assert "mcpx_hooks.call.destructive_hint" not in echo  # the tool does not say
    rm = attributes(by_name["call h.rm"].attributes)
    assert rm["mcpx_hooks.call.ok"] is False
    assert rm["mcpx_hooks.call.destructive_hint"] is True
    assert rm["mcpx_hooks.call.refused_by"] == "no-rm"
    assert by_name["call h.rm"].status.code == 2

    assert {"service.name": "mcpx-hooks"}.items() <= resources[0].items()

    duration = metrics["mcpx_hooks.hook.duration"]
    assert duration.unit == "s"
    points = {
        tuple(sorted(attributes(p.attributes).items())): p for p in duration.histogram.data_points
    }
    script_before = points[(("phase", "before"), ("point", "script"))]
    assert script_before.count == 1
    assert list(script_before.explicit_bounds)[:3] == [0.005, 0.01, 0.025]
    assert points[(("phase", "suffix"), ("point", "script"))].sum >= 0.3

    def total(name: str) -> float:
        return sum(p.as_double or p.as_int for p in metrics[name].sum.data_points)

    assert total("mcpx_hooks.hooks.failed") == 1
    assert total("mcpx_hooks.hooks.timed_out") == 1
    assert total("mcpx_hooks.hooks.refused") == 1

    # The hook said its secret on stdout and stderr; the run's frames carry it redacted,
    # and nothing of it is in what was exported.
    assert SECRET.encode() not in raw
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert any("[secret MCPX_TEST_TOKEN]" in json.dumps(f) for f in frames)
    assert SECRET not in done.stdout


def test_without_the_endpoint_an_exec_imports_nothing_of_the_sdk(
    tmp_path: Path, marker: Marker, monkeypatch: Any
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    config = _config(tmp_path, marker)
    monkeypatch.setenv("MCPX_TEST_TOKEN", SECRET)
    args = ["exec", "--config", str(config), "--sandbox", "none", "--python", "job.py"]
    modules = imported_by(args, tmp_path)
    assert "mcpx_hooks.supervisor.run.telemetry" in modules  # it did count
    assert "mcpx_hooks.supervisor.tools.mcpclient" in modules  # it made its calls
    heavy = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto", "google")
    assert sorted(m for m in modules if m.startswith(heavy)) == []
    assert "mcpx_hooks.supervisor.run.otel" not in modules
    assert marker.alive() == []


def test_the_sdk_s_own_switch_keeps_it_off(tmp_path: Path, marker: Marker) -> None:
    config = _config(tmp_path, marker)
    with receiver() as (endpoint, got):
        done = _exec(
            tmp_path, config, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SDK_DISABLED="true"
        )
        assert got.raw() == b""
    assert done.returncode == 0, done.stderr


def test_a_collector_s_refusal_is_said_on_stderr_without_its_control_characters(
    tmp_path: Path, marker: Marker
) -> None:
    config = _config(tmp_path, marker)
    with receiver(400, "\x1b]0;owned\x07\x1b[31mbad") as (endpoint, _):
        done = _exec(tmp_path, config, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"mcpx-hooks exec: warning: telemetry: the OTLP collector at {endpoint}"
        " (OTEL_EXPORTER_OTLP_ENDPOINT): it answered HTTP 400 (\\x1b]0;owned\\x07\\x1b[31mbad);"
        " spans and metrics it was not sent are dropped (the run goes on)"
    ]
    assert "\x1b" not in done.stderr
    assert marker.alive() == []


def test_a_collector_that_refuses_or_hangs_is_said_in_one_line_of_ours(tmp_path: Path) -> None:
    """A refused connection printed the SDK's retry lines, one a try ("Transient error
    HTTPConnectionPool(…) … retrying in 0.89s."); one that takes the connection and never
    answers was dropped in silence. Each is one line now, naming the endpoint, and the run
    ends as it would."""
    with socket.socket() as refusing, socket.socket() as hanging:
        refusing.bind(("127.0.0.1", 0))  # (bound, never listening: refused)
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(8)  # (the kernel takes the connection; nobody reads it)
        for sock, why in ((refusing, "it cannot be reached: Connection refused"),
                          (hanging, "it did not answer within 2 s")):  # fmt: skip
            endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
            done = subprocess.run(
                [*CLI, "exec", "--sandbox", "none", "--", "true"],
                cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
                env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1",
                     "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert done.stderr.splitlines() == [
                f"mcpx-hooks exec: warning: telemetry: the OTLP collector at {endpoint}"
                f" (OTEL_EXPORTER_OTLP_ENDPOINT): {why}; spans and metrics it was not sent"
                " are dropped (the run goes on)"
            ]


async def test_an_mcp_session_s_calls_reach_the_collector_when_the_client_closes(
    tmp_path: Path, marker: Marker
) -> None:
    from mcpface_parts import call_hook, stdio_session, through_mcpx, write_config

    where = tmp_path / marker
    config = write_config(where, marker, [call_hook("note", "suffix", {"advise": "seen"})])
    with receiver() as (endpoint, got):
        params = through_mcpx(config)
        params.env = {**(params.env or {}), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        async with stdio_session(params, tmp_path / "err") as session:
            result = await session.call_tool("h__echo", {"n": 2})
            assert not result.is_error
        spans = got.spans()
        metrics = got.metrics()
    assert marker.alive() == []
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == ["call h.echo", "hook note", "run"]
    run = by_name["run"]
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
    call = attributes(by_name["call h.echo"].attributes)
    assert call["mcpx_hooks.call.ok"] is True
    assert attributes(by_name["hook note"].attributes)["mcpx_hooks.hook.phase"] == "suffix"
    (point,) = metrics["mcpx_hooks.hook.duration"].histogram.data_points
    assert point.count == 1
    assert attributes(point.attributes) == {"point": "call", "phase": "suffix"}


def test_a_setting_the_sdk_cannot_use_is_said_as_itself_and_the_export_goes_on(
    tmp_path: Path, marker: Marker
) -> None:
    """`OTEL_EXPORTER_OTLP_TIMEOUT=abc` was said as "it answered HTTP 10 ... dropped" (the
    SDK's default of 10 taken for a status code) while the spans reached the collector; a
    compression it does not know was said not at all; a header without `=` is said without
    itself (it may be the API key); an endpoint without its scheme was "it cannot be
    reached: InvalidSchema"."""
    config = _config(tmp_path, marker)
    said = "mcpx-hooks exec: warning: telemetry: the OpenTelemetry SDK says: "
    for env, line in [
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "abc"},
         said + "Invalid timeout value 'abc', using default of 10 seconds"),
        ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, said + "Unsupported compression type: zstd"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key {SECRET}"},
         said + "a header in OTEL_EXPORTER_OTLP_HEADERS is not name=value (URL-encoded): not sent"),
    ]:  # fmt: skip
        with receiver() as (endpoint, got):
            done = _exec(tmp_path, config, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, **env)
            spans = got.spans()
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == [line]
        assert "run" in {s.name for s in spans}
    done = _exec(tmp_path, config, OTEL_EXPORTER_OTLP_ENDPOINT="localhost:4318")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "mcpx-hooks exec: warning: telemetry: the OTLP collector at localhost:4318"
        " (OTEL_EXPORTER_OTLP_ENDPOINT): it is no http:// or https:// URL (as"
        " http://localhost:4318); spans and metrics it was not sent are dropped (the run goes on)"
    ]
    assert marker.alive() == []


def test_closing_waits_neither_for_a_refused_collector_nor_past_its_bound_for_a_silent_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A collector that refuses the connection held every command's exit about 5 s (the
    SDK retries it 1, 2, 4 s later, and shutting its providers down joined those retries);
    one that takes the connection and never answers, as long. The close now stops at the
    first failed export, and waits for a silent collector `FLUSH_MS` at most."""
    from mcpx_hooks.supervisor.run.otel import FLUSH_MS, OtlpExporter

    with socket.socket() as refusing, socket.socket() as hanging:
        refusing.bind(("127.0.0.1", 0))  # (bound, never listening: refused)
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(8)  # (the kernel takes the connection; nobody reads it)
        for sock, bound in ((refusing, FLUSH_MS / 1000), (hanging, FLUSH_MS / 1000 + 1)):
            endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            exporter = OtlpExporter({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
            exporter.frame(FrameType.START, {"runId": "r1", "argv": ["true"], "seq": 0})
            exporter.frame(FrameType.END, {"runId": "r1", "seq": 1})
            began = time.monotonic()
            exporter.close()
            assert time.monotonic() - began < bound, endpoint
