"""The runtime's telemetry: every run's frames counted into `Meters` (what `GET /metrics`
answers), and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, sent as spans and metrics over OTLP
(`otel.py`, which alone imports the OpenTelemetry SDK).

Without the variable nothing of the SDK or its exporters is imported and nothing is sent:
what a run pays is a few additions per hook frame (the table of the metrics loads with the
first hook frame, or when `/metrics` is first asked: a run with no hook never loads it).
The journal tells `Telemetry.frame` of each frame as it was sent, redacted, so a secret never
reaches a span or a metric.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias

from ..core.frames import FrameType

if TYPE_CHECKING:
    from ..core.telemetry import Measurement, Meters

#: The variable that turns OTLP export on (the standard one: the exporters read it and the
#: other `OTEL_*` variables themselves).
OTLP_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: The standard switch that turns the SDK off whatever else is set.
SDK_DISABLED_ENV: Final = "OTEL_SDK_DISABLED"
#: The frame types telemetry reads; others (output, most of a run) are passed over at once.
TOLD: Final = frozenset(
    {FrameType.START, FrameType.HOOK, FrameType.CALL, FrameType.RESULT, FrameType.ERROR}
    | {FrameType.END}
)

#: What is told of a hook's (or a run's) frame as it was sent: `Telemetry.frame`.
Told: TypeAlias = Callable[[FrameType, Mapping[str, Any]], object]


class Exporter(Protocol):
    """Where telemetry goes beyond the process (`otel.OtlpExporter`)."""

    def measure(self, taken: list[Measurement]) -> None: ...

    def frame(self, kind: FrameType, wire: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class Telemetry:
    """The counts of the runtime's hooks, and the exporter they and the spans go to (None:
    kept here only)."""

    def __init__(self, exporter: Exporter | None = None) -> None:
        self.exporter = exporter
        self._meters: Meters | None = None

    @property
    def meters(self) -> Meters:
        """The counts so far (made when first asked for)."""
        if self._meters is None:
            from ..core.telemetry import Meters

            self._meters = Meters()
        return self._meters

    def frame(self, kind: FrameType, wire: Mapping[str, Any]) -> None:
        """One frame of a run, as it was sent. Never blocks: the SDK exports from its own
        threads."""
        if kind not in TOLD:
            return
        if kind is FrameType.HOOK:
            from ..core.telemetry import hook_measurements

            taken = hook_measurements(wire)
            meters = self.meters
            for m in taken:
                meters.take(m)
            if self.exporter is not None:
                self.exporter.measure(taken)
        if self.exporter is not None:
            self.exporter.frame(kind, wire)

    def count(self, kind: FrameType, wire: Mapping[str, Any]) -> None:
        """A hook frame of a run that ran elsewhere (a cluster gateway's): counted in the
        meters, never exported (the process that ran it exports its spans and metrics)."""
        if kind is FrameType.HOOK:
            from ..core.telemetry import hook_measurements

            for m in hook_measurements(wire):
                self.meters.take(m)

    def close(self) -> None:
        """Sends what is held and stops exporting (bounded; blocks: from a worker thread)."""
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None


def otlp_wanted(env: Mapping[str, str]) -> bool:
    return bool(env.get(OTLP_ENDPOINT_ENV)) and env.get(SDK_DISABLED_ENV, "").lower() != "true"


def open_telemetry(env: Mapping[str, str]) -> Telemetry:
    """The runtime's telemetry: exporting over OTLP when `env` asks for it."""
    if not otlp_wanted(env):
        return Telemetry()
    from .otel import OtlpExporter  # the SDK and the exporters load only here

    return Telemetry(OtlpExporter(env))
