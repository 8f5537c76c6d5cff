"""Telemetry's names, declared once: the metrics (`METRICS`) and the spans with their
attributes (`SPANS`), each read from a run's frames as they were sent (so redacted: a secret
never reaches an attribute); and `Meters`, the metrics' own counts, kept without any library.

`GET /metrics` answers `Meters.prometheus_text()`; when OTLP is on (`run/telemetry.py`), the
OpenTelemetry SDK is fed the same measurements (`Measurement`) as they are taken here. The
reference page of the spans and metrics is rendered from these tables (`config/docgen.py`).

Pure: no trio, no I/O, no OpenTelemetry.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from .frames import FrameType, HookStatus
from .records import Record

#: Every metric's and attribute's name starts with this (`mcpx_hooks.hook.duration`).
NAMESPACE: Final = "mcpx_hooks"


class Instrument(enum.StrEnum):
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@attrs.frozen(repr=False, eq=False)
class Metric(Record):
    """One metric: its OpenTelemetry name, instrument, unit (UCUM: `s`, `1`), meaning and
    labels (their values are bounded: a point, a phase)."""

    name: str
    kind: Instrument
    unit: str
    description: str
    labels: tuple[str, ...]

    @property
    def prometheus(self) -> str:
        """Its name in Prometheus' text format, as OpenTelemetry's own exporters convert
        one: dots to underscores, a unit of seconds as `_seconds`, a counter's `_total`."""
        name = self.name.replace(".", "_")
        if self.unit == "s":
            name += "_seconds"
        return name + "_total" if self.kind is Instrument.COUNTER else name


#: The labels of every hook metric: the point (`script`, `call`, `server.start`; an observe
#: hook's event, as its `on` says it) and the phase.
HOOK_LABELS: Final = ("point", "phase")

HOOK_DURATION: Final = Metric(
    f"{NAMESPACE}.hook.duration",
    Instrument.HISTOGRAM,
    "s",
    "how long each hook took, from its start to its frame (a skipped hook is not counted)",
    HOOK_LABELS,
)
HOOKS_FAILED: Final = Metric(
    f"{NAMESPACE}.hooks.failed",
    Instrument.COUNTER,
    "1",
    "hooks whose status is a failure: `failed`, `timeout`, `killed` or `invalid-output`",
    HOOK_LABELS,
)
HOOKS_REFUSED: Final = Metric(
    f"{NAMESPACE}.hooks.refused",
    Instrument.COUNTER,
    "1",
    "hooks that refused (their run, call or phase stopped there)",
    HOOK_LABELS,
)
HOOKS_TIMED_OUT: Final = Metric(
    f"{NAMESPACE}.hooks.timed_out",
    Instrument.COUNTER,
    "1",
    "hooks killed past their `timeoutMs` (counted among the failed too)",
    HOOK_LABELS,
)
METRICS: Final = (HOOK_DURATION, HOOKS_FAILED, HOOKS_REFUSED, HOOKS_TIMED_OUT)

#: The histogram's bucket bounds, in seconds (the same for Prometheus and OTLP): hooks run
#: from a few milliseconds (a `module` hook) to minutes (a test suite as a gate).
DURATION_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

_FAILED: Final = frozenset(s.value for s in HookStatus if s.is_failure)


class Read(enum.Enum):
    """How an attribute is read from its frame's wire key."""

    #: The value as it is (a string, number or boolean); absent or null: no attribute.
    VALUE = "value"
    #: Whether the key holds something (a hook's `refused`): a boolean, always set.
    PRESENT = "present"


@attrs.frozen(repr=False, eq=False)
class Attribute(Record):
    """One span attribute: its key, the frame types it is read from and the wire key."""

    key: str
    frames: frozenset[FrameType]
    wire: str
    meaning: str
    read: Read = Read.VALUE


@attrs.frozen(repr=False, eq=False)
class Span(Record):
    """One kind of span: its name (formatted with the wire of the frame that ends it), the
    frame type that starts it and the one that ends it, whether that frame says it failed,
    and its attributes."""

    kind: str
    name: str
    starts: FrameType
    ends: FrameType
    meaning: str
    failed: Callable[[Mapping[str, Any]], bool]
    #: When its status is an error, in words (the docs say it).
    fails: str
    attributes: tuple[Attribute, ...]

    def attributes_of(self, kind: FrameType, wire: Mapping[str, Any]) -> dict[str, Any]:
        """The attributes a frame of `kind` gives a span of this kind."""
        found: dict[str, Any] = {}
        for a in self.attributes:
            if kind not in a.frames:
                continue
            value = wire.get(a.wire)
            if a.read is Read.PRESENT:
                found[a.key] = value is not None
            elif isinstance(value, str | bool | int | float):
                found[a.key] = value
        return found


def _a(span: str, name: str, frames: set[FrameType], wire: str, meaning: str) -> Attribute:
    return Attribute(f"{NAMESPACE}.{span}.{name}", frozenset(frames), wire, meaning)


_H, _C = {FrameType.HOOK}, {FrameType.CALL}
_OUTCOME = {FrameType.RESULT, FrameType.ERROR}

RUN_SPAN: Final = Span(
    "run",
    "run",
    FrameType.START,
    FrameType.END,
    "one run, from its `start` frame to its `end`: a script's, or an MCP session's calls",
    lambda wire: wire.get("type") == FrameType.ERROR,
    "the run ended in `error` (the status says its message, redacted)",
    (
        _a("run", "id", {FrameType.START}, "runId", "the run's id"),
        _a("run", "sandbox", {FrameType.START}, "sandbox", "the script's sandbox profile"),
        _a("run", "outcome", _OUTCOME, "type", "`result` or `error`"),
        _a("run", "cause", {FrameType.ERROR}, "cause", "why it ended in `error`"),
        _a("run", "exit_code", {FrameType.END}, "exitCode", "the script's exit code"),
        _a("run", "duration_ms", {FrameType.END}, "durationMs", "how long the run took"),
    ),
)
HOOK_SPAN: Final = Span(
    "hook",
    "hook {name}",
    FrameType.HOOK,
    FrameType.HOOK,
    "one hook of a run, its start set back from its frame by its duration",
    lambda wire: wire.get("status") in _FAILED,
    "the hook's `status` is a failure",
    (
        _a("hook", "name", _H, "name", "the hook's name"),
        _a("hook", "point", _H, "on", "its point, or the event an observe hook is on"),
        _a("hook", "phase", _H, "phase", "its phase"),
        _a("hook", "action", _H, "action", "its action (`run`, `module`, `prompt`, …)"),
        _a("hook", "effect", _H, "effect", "the effect in force, after clamping"),
        _a("hook", "status", _H, "status", "its status (`ok`, `failed`, `timeout`, …)"),
        _a("hook", "duration_ms", _H, "durationMs", "how long it took"),
        _a("hook", "sandbox", _H, "sandbox", "the sandbox profile it ran under"),
        attrs.evolve(_a("hook", "refused", _H, "refused", "whether it refused"), read=Read.PRESENT),
    ),
)
CALL_SPAN: Final = Span(
    "call",
    "call {server}.{tool}",
    FrameType.CALL,
    FrameType.CALL,
    "one tool call through the `call` point (its hooks are spans of the run beside it)",
    lambda wire: wire.get("ok") is not True,
    "the caller got no value (refused, failed, or the tool's `isError`)",
    (
        _a("call", "server", _C, "server", "the tool server"),
        _a("call", "tool", _C, "tool", "the tool"),
        _a("call", "ok", _C, "ok", "whether the caller got a value"),
        _a("call", "destructive_hint", _C, "destructiveHint", "the tool's `destructiveHint`"),
        _a("call", "refused_by", _C, "refusedBy", "the hook that refused it"),
        _a("call", "duration_ms", _C, "durationMs", "how long it took, hooks included"),
    ),
)
SPANS: Final = (RUN_SPAN, HOOK_SPAN, CALL_SPAN)


@attrs.frozen(repr=False, eq=False)
class Measurement(Record):
    """One value taken into a metric: 1 for a counter, seconds for the histogram."""

    metric: Metric
    labels: tuple[str, ...]
    value: float


def hook_measurements(wire: Mapping[str, Any]) -> list[Measurement]:
    """What a hook frame adds to the metrics."""
    labels = (str(wire.get("on", "")), str(wire.get("phase", "")))
    status = wire.get("status")
    taken: list[Measurement] = []
    if status != HookStatus.SKIPPED:
        seconds = float(wire.get("durationMs") or 0) / 1000
        taken.append(Measurement(HOOK_DURATION, labels, seconds))
    if status in _FAILED:
        taken.append(Measurement(HOOKS_FAILED, labels, 1))
    if wire.get("refused") is not None:
        taken.append(Measurement(HOOKS_REFUSED, labels, 1))
    if status == HookStatus.TIMEOUT:
        taken.append(Measurement(HOOKS_TIMED_OUT, labels, 1))
    return taken


@attrs.define(repr=False)
class _Histogram(Record):
    buckets: list[int]
    total: float = 0.0
    count: int = 0


class Meters:
    """The counts of `METRICS`, by label values, since the process started them."""

    def __init__(self) -> None:
        self._counters: dict[Metric, dict[tuple[str, ...], float]] = {}
        self._histograms: dict[Metric, dict[tuple[str, ...], _Histogram]] = {}

    def take(self, measurement: Measurement) -> None:
        metric, labels, value = measurement.metric, measurement.labels, measurement.value
        if metric.kind is Instrument.COUNTER:
            counts = self._counters.setdefault(metric, {})
            counts[labels] = counts.get(labels, 0) + value
            return
        series = self._histograms.setdefault(metric, {})
        h = series.get(labels)
        if h is None:
            h = series[labels] = _Histogram([0] * (len(DURATION_BUCKETS) + 1))
        h.buckets[bisect.bisect_left(DURATION_BUCKETS, value)] += 1
        h.total += value
        h.count += 1

    def value(self, metric: Metric, labels: tuple[str, ...]) -> float:
        """A counter's count, or a histogram's count of values, for `labels` (0 if none)."""
        if metric.kind is Instrument.COUNTER:
            return self._counters.get(metric, {}).get(labels, 0)
        h = self._histograms.get(metric, {}).get(labels)
        return 0 if h is None else h.count

    def prometheus_text(self) -> str:
        """Every metric in Prometheus' text exposition format (version 0.0.4)."""
        lines: list[str] = []
        for metric in METRICS:
            name = metric.prometheus
            lines.append(f"# HELP {name} {_help(metric.description)}")
            lines.append(f"# TYPE {name} {metric.kind.value}")
            if metric.kind is Instrument.COUNTER:
                for labels, count in sorted(self._counters.get(metric, {}).items()):
                    lines.append(f"{name}{_labels(metric, labels)} {_number(count)}")
                continue
            for labels, h in sorted(self._histograms.get(metric, {}).items()):
                running = 0
                for le, n in zip(_LE, h.buckets, strict=True):
                    running += n
                    lines.append(f"{name}_bucket{_labels(metric, labels, le)} {running}")
                lines.append(f"{name}_sum{_labels(metric, labels)} {_number(h.total)}")
                lines.append(f"{name}_count{_labels(metric, labels)} {h.count}")
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


#: Each bucket's `le` label, the last one `+Inf`.
_LE: Final = (*(repr(float(b)) for b in DURATION_BUCKETS), "+Inf")

#: The content type of `prometheus_text()`.
PROMETHEUS_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(metric: Metric, values: tuple[str, ...], le: str | None = None) -> str:
    pairs = list(zip(metric.labels, values, strict=True))
    if le is not None:
        pairs.append(("le", le))
    return "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs) + "}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
