"""The OpenTelemetry side of telemetry: the SDK's tracer and meter providers with the OTLP
exporters over HTTP, configured by the standard `OTEL_*` variables, fed from the run's frames
(`core/telemetry.py`'s `SPANS`) and from the measurements `Meters` takes.

Imported only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (`telemetry.py`): a process without
it never loads the SDK or the exporters. The providers are this object's own, not the
global ones, and export from the SDK's threads; `close` flushes and shuts them down, each
bounded by its timeout.

The SDK's own log (a retry line a try, a traceback) never reaches the terminal: a collector
that refuses, answers an error or does not answer within the close's bound is said in one
line of ours, once a process, naming the endpoint (with `MCPX_HOOKS_DEBUG=1`, the SDK's
lines too).

A span is made when the frame that ends it comes (a hook's and a call's start set back by
their duration), the run's span is kept open from its `start` frame to its `end`: the open
runs are the running ones, which the runtime bounds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import Counter, Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, Status, StatusCode

from ..core.frames import FrameType
from ..core.loglines import debugging
from ..core.telemetry import (
    DURATION_BUCKETS,
    METRICS,
    RUN_SPAN,
    SPANS,
    Instrument,
    Measurement,
    Metric,
)

#: The service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
SERVICE: Final = "mcpx-hooks"
#: How long closing waits for each provider to send what it holds, in ms (the runtime
#: bounds the whole close: `runtime.TELEMETRY_FLUSH_S`).
FLUSH_MS: Final = 2_000
#: How the SDK's lines about exporting begin (one that failed: a status code or an error
#: after them); its other lines are about a setting of the `OTEL_*` variables it could not use.
_EXPORTING: Final = (
    "Failed to export",
    "Transient error",
    "Shutdown in progress",
    "Exporter already shutdown",
    "Queue full",
    "Exception while exporting",
    "Dropping",
)
#: How the SDK's line on a header it cannot read begins (the header, which it ends with, is
#: never said: it may be an API key), and the variable it is read from.
_HEADERS: Final = "Header format invalid"
_HEADERS_ENV: Final = "OTEL_EXPORTER_OTLP_HEADERS"
#: The schemes an endpoint may have.
_SCHEMES: Final = ("http", "https")

logger = logging.getLogger("mcpx_hooks.telemetry")

#: The spans a single frame makes whole (a hook's, a call's), by the frame type.
_WHOLE: Final = {s.ends: s for s in SPANS if s.starts is s.ends}


class OtlpExporter:
    """Spans and metrics of the runtime's runs, sent over OTLP/HTTP by the SDK's threads."""

    def __init__(self, env: Mapping[str, str]) -> None:
        """The exporters read the `OTEL_*` variables of the process themselves (endpoint,
        headers, timeout, compression, certificates); `env` says only whether a service
        name is given there."""
        self._said = _Said(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", ""))
        if urlsplit(self._said.endpoint).scheme.lower() not in _SCHEMES:
            self._said.once("it is no http:// or https:// URL (as http://localhost:4318)")
        resource = Resource.create({} if _names_service(env) else {SERVICE_NAME: SERVICE})
        self._tracers = TracerProvider(resource=resource, shutdown_on_exit=False)
        self._spans_out = OTLPSpanExporter()
        self._metrics_out = OTLPMetricExporter()
        self._tracers.add_span_processor(BatchSpanProcessor(self._spans_out))
        reader = PeriodicExportingMetricReader(self._metrics_out)
        self._meters = MeterProvider(
            resource=resource, metric_readers=[reader], shutdown_on_exit=False
        )
        self._tracer = self._tracers.get_tracer("mcpx_hooks")
        meter = self._meters.get_meter("mcpx_hooks")
        self._instruments: dict[Metric, Counter | Histogram] = {}
        for metric in METRICS:
            if metric.kind is Instrument.COUNTER:
                self._instruments[metric] = meter.create_counter(
                    metric.name, unit=metric.unit, description=metric.description
                )
            else:
                self._instruments[metric] = meter.create_histogram(
                    metric.name,
                    unit=metric.unit,
                    description=metric.description,
                    explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
                )
        #: The runs whose `start` came and whose `end` has not: their span, and the
        #: attributes their outcome frame gave.
        self._runs: dict[str, tuple[Span, dict[str, Any]]] = {}

    def measure(self, taken: list[Measurement]) -> None:
        for m in taken:
            labels = dict(zip(m.metric.labels, m.labels, strict=True))
            instrument = self._instruments[m.metric]
            if isinstance(instrument, Counter):
                instrument.add(m.value, labels)
            else:
                instrument.record(m.value, labels)

    def frame(self, kind: FrameType, wire: Mapping[str, Any]) -> None:
        """A frame of a run: starts, ends or makes whole the span it belongs to."""
        run_id = str(wire.get("runId"))
        if kind is RUN_SPAN.starts:
            attributes = RUN_SPAN.attributes_of(kind, wire)
            span = self._tracer.start_span(RUN_SPAN.name, attributes=attributes)
            self._runs[run_id] = (span, {})
            return
        run = self._runs.get(run_id)
        if kind in (FrameType.RESULT, FrameType.ERROR) and run is not None:
            run[1].update(RUN_SPAN.attributes_of(kind, wire))
            if RUN_SPAN.failed(wire):
                run[0].set_status(Status(StatusCode.ERROR, str(wire.get("message", ""))[:200]))
        elif kind is RUN_SPAN.ends and run is not None:
            del self._runs[run_id]
            span, outcome = run
            span.set_attributes({**outcome, **RUN_SPAN.attributes_of(kind, wire)})
            span.end()
        elif (made := _WHOLE.get(kind)) is not None:
            now = time.time_ns()
            took = int(wire.get("durationMs") or 0) * 1_000_000
            parent = trace.set_span_in_context(run[0]) if run is not None else None
            span = self._tracer.start_span(
                made.name.format_map(_Blank(wire)),
                context=parent,
                attributes=made.attributes_of(kind, wire),
                start_time=now - took,
            )
            if made.failed(wire):
                span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=now)

    def close(self) -> None:
        """Ends the spans of runs still open, sends what the providers hold and shuts them
        down, bounded by `FLUSH_MS`. A collector that fails the last flush (refused, an
        error) is not waited for, nor one that has not answered by then. Blocks: call it
        from a worker thread."""
        for span, outcome in self._runs.values():
            span.set_attributes(outcome)
            span.end()
        self._runs.clear()
        # (the SDK's flush waits out the export's own timeout, 10 s, past the bound it is
        # given, and retries a refused connection 1, 2, 4 s later: neither is waited for)
        self._said.failed = False
        settled = self._said.settled
        settled.clear()

        def flush() -> None:
            if self._tracers.force_flush(FLUSH_MS):
                flushed.set()
            settled.set()

        flushed = threading.Event()
        threading.Thread(target=flush, daemon=True).start()
        settled.wait(FLUSH_MS / 1000)
        if flushed.is_set():
            self._tracers.shutdown()
            self._meters.shutdown(FLUSH_MS)  # (its reader's last export: a flush sent twice)
            return
        if not self._said.failed:
            self._said.once(f"it did not answer within {FLUSH_MS / 1000:g} s")
        # The exporters stopped first: a retry's wait ends at once, and nothing more is
        # tried. The providers are not shut down (that joins the SDK's threads, one of
        # which may wait out an export's timeout): their threads end with the process.
        self._spans_out.shutdown()  # type: ignore[no-untyped-call]
        self._metrics_out.shutdown()


def _names_service(env: Mapping[str, str]) -> bool:
    resource = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return bool(env.get("OTEL_SERVICE_NAME")) or "service.name=" in resource


class _Blank(dict[str, Any]):
    """A frame's wire for a span name's fields; a missing one is empty."""

    def __missing__(self, key: str) -> str:
        return ""


class _Said(logging.Handler):
    """The SDK's log (logger `opentelemetry`), kept off the terminal: its first failure said
    as one line of ours, naming the endpoint, once."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(logging.WARNING)
        self.endpoint = endpoint
        self._lock = threading.Lock()  # (the SDK logs from its exporting threads)
        self._said = False
        self._asides: set[str] = set()
        #: Whether an export failed since the close began, and the event the close waits
        #: on (its flush's end, or such a failure: a retry of the SDK's is not waited for).
        self.failed = False
        self.settled = threading.Event()
        sdk = logging.getLogger("opentelemetry")
        if not debugging():
            sdk.propagate = False
            for old in [h for h in sdk.handlers if isinstance(h, _Said)]:  # (a runtime before)
                sdk.removeHandler(old)
            sdk.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if str(record.msg).startswith(_HEADERS):  # (its words end with the header: a key)
            self.aside(f"a header in {_HEADERS_ENV} is not name=value (URL-encoded): not sent")
            return
        if not str(record.msg).startswith(_EXPORTING):
            self.aside(record.getMessage())
            return
        self.failed = True
        self.settled.set()
        error = next((a for a in args if isinstance(a, BaseException)), None)
        code = next((a for a in args[1:2] if isinstance(a, int)), None)
        if error is not None:
            self.once(f"it cannot be reached: {_cause(error)}")
        elif code is not None:
            reason = next((f" ({a})" for a in args[2:3] if isinstance(a, str) and a), "")
            self.once(f"it answered HTTP {code}{reason}")
        elif record.levelno >= logging.ERROR:
            self.once("its export failed")

    def aside(self, said: str) -> None:
        """A line of the SDK's not about an export (`Invalid timeout value 'abc', using
        default of 10 seconds`): a setting of the `OTEL_*` variables it could not use, said
        once each, in its words."""
        with self._lock:
            if said in self._asides:
                return
            self._asides.add(said)
        logger.warning("warning: telemetry: the OpenTelemetry SDK says: %s", said)

    def once(self, why: str) -> None:
        with self._lock:
            if self._said:
                return
            self._said = True
        logger.warning(
            "warning: telemetry: the OTLP collector at %s (OTEL_EXPORTER_OTLP_ENDPOINT): %s;"
            " spans and metrics it was not sent are dropped (the run goes on)",
            self.endpoint,
            why,
        )


def _cause(error: BaseException) -> str:
    """The system's words for why a connection failed (`Connection refused`), found under the
    HTTP library's wrappers; else the error's kind."""
    seen: list[object] = [error]
    for found in seen:
        if isinstance(found, OSError) and found.strerror:
            return str(found.strerror)
        if isinstance(found, BaseException) and len(seen) < 32:
            more = (found.__cause__, found.__context__, getattr(found, "reason", None), *found.args)
            seen.extend(m for m in more if isinstance(m, BaseException) and m not in seen)
    return type(error).__name__
