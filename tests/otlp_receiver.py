"""A loopback OTLP/HTTP receiver for the tests: a real HTTP server on 127.0.0.1 taking
`POST /v1/traces` and `POST /v1/metrics` as a collector does, and decoding their protobuf
bodies with opentelemetry-proto (the exporter's own message definitions)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Received:
    """The bodies received, by path, as sent (after any gzip)."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {}
        self.lock = threading.Lock()

    def raw(self) -> bytes:
        with self.lock:
            return b"".join(b for bodies in self.bodies.values() for b in bodies)

    def spans(self) -> list[Any]:
        with self.lock:
            bodies = list(self.bodies.get("/v1/traces", []))
        found = []
        for body in bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    found.extend(ss.spans)
        return found

    def resources(self) -> list[dict[str, Any]]:
        with self.lock:
            bodies = list(self.bodies.get("/v1/traces", []))
        found = []
        for body in bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            found.extend(attributes(rs.resource.attributes) for rs in request.resource_spans)
        return found

    def metrics(self) -> dict[str, Any]:
        """Each metric's last data points received, by name."""
        with self.lock:
            bodies = list(self.bodies.get("/v1/metrics", []))
        found: dict[str, Any] = {}
        for body in bodies:
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        found[m.name] = m
        return found


def value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind is not None else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


@contextmanager
def receiver(status: int = 200, reason: str | None = None) -> Iterator[tuple[str, Received]]:
    """`(endpoint, received)`: the base URL for `OTEL_EXPORTER_OTLP_ENDPOINT`; stopped after.
    Each export is answered `status`, with `reason` as its reason phrase (else the usual)."""
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with got.lock:
                got.bodies.setdefault(self.path, []).append(body)
            self.send_response(status, reason)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
