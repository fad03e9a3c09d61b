"""Metrics: module-level instruments, kept in-process and forwarded to OpenTelemetry.

The seam: code records through the module-level instruments below, whose methods mirror
OpenTelemetry's (`Counter.add`, `UpDownCounter.add`, `Histogram.record`, attributes as a
mapping). `configure_exporters()` builds the process's OTel MeterProvider (a Prometheus
reader for `GET /metrics`, plus OTLP when an endpoint is configured) and gives every
`Instrument` an OTel instrument to forward to; callers do not change. The in-process copy
stays so tests can read values with `snapshot()` without scraping.

Attributes carry ids and classes only (provider, deployment, outcome), never content.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from prometheus_client.registry import CollectorRegistry

Attributes = Mapping[str, str]
_Key = tuple[tuple[str, str], ...]


def _key(attributes: Attributes | None) -> _Key:
    return tuple(sorted((attributes or {}).items()))


class Instrument:
    def __init__(self, name: str, unit: str, description: str) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self._lock = threading.Lock()
        self._otel: Any = None

    def bind(self, meter: Meter) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict[_Key, Any]:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError


class Counter(Instrument):
    def __init__(self, name: str, unit: str, description: str) -> None:
        super().__init__(name, unit, description)
        self._values: dict[_Key, float] = {}

    def add(self, amount: float, attributes: Attributes | None = None) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self._add(amount, attributes)

    def _add(self, amount: float, attributes: Attributes | None) -> None:
        key = _key(attributes)
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount
        if self._otel is not None:
            self._otel.add(amount, dict(key))

    def bind(self, meter: Meter) -> None:
        self._otel = meter.create_counter(self.name, self.unit, self.description)

    def value(self, attributes: Attributes | None = None) -> float:
        return self._values.get(_key(attributes), 0)

    def snapshot(self) -> dict[_Key, Any]:
        with self._lock:
            return dict(self._values)

    def reset(self) -> None:
        with self._lock:
            self._values.clear()


class UpDownCounter(Counter):
    def add(self, amount: float, attributes: Attributes | None = None) -> None:
        self._add(amount, attributes)

    def bind(self, meter: Meter) -> None:
        self._otel = meter.create_up_down_counter(self.name, self.unit, self.description)

    def move_to(self, value: float, attributes: Attributes | None = None) -> None:
        """Moves the series to `value`, for owners that recount from the store rather than see
        every increment (the reconciler does); over OpenTelemetry this adds the difference."""
        key = _key(attributes)
        with self._lock:
            delta = value - self._values.get(key, 0)
            self._values[key] = value
        if self._otel is not None and delta:
            self._otel.add(delta, dict(key))


def set_usage_unknown(counts: Mapping[str, int]) -> None:
    """The usage_unknown gauge is a count of the store (receipts Unknown or Estimated, per
    provider), never a tally of what this process wrote: every process that exports it
    recounts before exporting (`GET /metrics` on the API and the worker, every reconciler run),
    so it equals the database after restarts and whichever process wrote the receipts."""
    seen = {dict(k).get("provider", "") for k in usage_unknown.snapshot()}
    for provider in sorted(seen | set(counts)):
        usage_unknown.move_to(counts.get(provider, 0), {"provider": provider})


# The recent values each histogram series keeps in process, for tests (the exporter keeps the
# cumulative buckets). A thousand, as before, held some 32 KB a series: probe latency has a
# series per deployment, 190 MB in a worker probing 6,000 of them.
_RECENT = 64


class Histogram(Instrument):
    def __init__(
        self, name: str, unit: str, description: str, buckets: list[float] | None = None
    ) -> None:
        super().__init__(name, unit, description)
        self._values: dict[_Key, deque[float]] = {}
        self._counts: dict[_Key, int] = {}
        self._buckets = buckets

    def record(self, value: float, attributes: Attributes | None = None) -> None:
        key = _key(attributes)
        with self._lock:
            series = self._values.get(key)
            if series is None:
                series = self._values[key] = deque(maxlen=_RECENT)
            series.append(value)
            self._counts[key] = self._counts.get(key, 0) + 1
        if self._otel is not None:
            self._otel.record(value, dict(key))

    def bind(self, meter: Meter) -> None:
        self._otel = meter.create_histogram(
            self.name,
            self.unit,
            self.description,
            # OTel's default boundaries are milliseconds-shaped; these instruments are seconds.
            explicit_bucket_boundaries_advisory=self._buckets
            or (_SECONDS_BUCKETS if self.unit == "s" else None),
        )

    def values(self, attributes: Attributes | None = None) -> list[float]:
        """The series' most recent values (at most _RECENT of them)."""
        return list(self._values.get(_key(attributes), ()))

    def count(self, attributes: Attributes | None = None) -> int:
        """How many values the series has recorded in all."""
        return self._counts.get(_key(attributes), 0)

    def snapshot(self) -> dict[_Key, Any]:
        with self._lock:
            return {k: list(v) for k, v in self._values.items()}

    def reset(self) -> None:
        with self._lock:
            self._values.clear()
            self._counts.clear()


_SECONDS_BUCKETS = [
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
    120.0,
]

_PREFIX = "connectsoft.factory.model_gateway."

invocations = Counter(_PREFIX + "invocations", "{invocation}", "Invocations by outcome.")
latency = Histogram(_PREFIX + "latency", "s", "Time to first token and completion.")
# Not in the spec's table, in its family: the gateway's own time per invocation, up to the
# response's first byte, without the time spent waiting on the provider (api/server_timing.py).
# Its own bounds, a millisecond apart where it lives: 12-14 ms a call at c=1 on the benchmark's
# machine (docs/benchmarks.md) fell in the latency buckets' 10-25 ms, which could not show a
# millisecond's change.
_OVERHEAD_BUCKETS = [
    0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.010, 0.012, 0.014, 0.016, 0.020, 0.025,
    0.030, 0.040, 0.050, 0.075, 0.100, 0.250, 0.500, 1.0,
]  # fmt: skip
overhead = Histogram(
    _PREFIX + "overhead",
    "s",
    "The gateway's own time per invocation, provider time excluded.",
    buckets=_OVERHEAD_BUCKETS,
)
tokens = Counter(_PREFIX + "tokens", "{token}", "Input and output tokens.")
fallbacks = Counter(_PREFIX + "fallbacks", "{invocation}", "Fallbacks taken.")
denials = Counter(_PREFIX + "denials", "{invocation}", "Invocations denied by policy.")
provider_errors = Counter(_PREFIX + "provider_errors", "{error}", "Adapter errors by class.")
usage_unknown = UpDownCounter(
    _PREFIX + "usage_unknown", "{receipt}", "Receipts awaiting usage reconciliation."
)
# Not in the spec's table: what the health probe observes (a probe is never an invocation, so
# it stays out of `invocations`, `latency` and `tokens`).
probe_latency = Histogram(_PREFIX + "probe.latency", "s", "Health probe round trip.")
probe_outcomes = Counter(_PREFIX + "probe.outcomes", "{probe}", "Health probes by outcome.")
receipts_reconciled = Counter(
    _PREFIX + "receipts_reconciled", "{receipt}", "Receipts settled from provider statements."
)
# Not in the spec's table: webhook delivery attempts the receiver refused or never answered
# (each is retried, in order: a subscription counting these holds its later events).
webhook_delivery_failures = Counter(
    _PREFIX + "webhook_delivery_failures",
    "{attempt}",
    "Webhook delivery attempts that failed (by tenant); each is retried in order.",
)
# Not in the spec's table: what a reconciler run could not do, so that it can be alerted on
# (the run itself completes and reports them in `failed_windows` / `failed_sources`): UTC days
# whose window failed every attempt, and statement sources that stayed down, per run.
reconcile_windows_failed = Counter(
    _PREFIX + "reconcile_windows_failed",
    "{day}",
    "Reconciler days left unreconciled after every attempt (tried again next run).",
)
# Not in the spec's table: statement tokens the reconciler left to no receipt (each share is
# bounded by its deployment's context window; domain/reconciliation.py), by direction: the gap
# between the provider's bill and the receipts, to alert on.
reconcile_unattributed_tokens = Counter(
    _PREFIX + "reconcile_unattributed_tokens",
    "{token}",
    "Statement tokens no awaiting receipt could take (by direction: input, output).",
)
reconcile_sources_failed = Counter(
    _PREFIX + "reconcile_sources_failed",
    "{run}",
    "Reconciler runs whose statement source stayed down (by source).",
)
# Not in the spec's table: attempts a retry or a fallback replaced after a timeout or a cut
# stream. The provider may bill them, but no receipt carries their usage (see the reconciler
# notes in `domain/reconciliation.py`).
attempts_abandoned = Counter(
    _PREFIX + "attempts_abandoned",
    "{attempt}",
    "Replaced attempts the provider may bill (by provider and reason).",
)

# Not in the spec's table: invocations refused before anything was claimed: a dependency of the
# invoke path unreachable or refusing (temporal-unreachable, temporal-refused,
# worker-restarting, store-unavailable), every callable candidate's breaker open
# (circuit-open), no candidate available (none-available), or a run's pinned plan unusable
# (run-plan-retired, run-planned-without-need).
refusals = Counter(
    _PREFIX + "refusals", "{invocation}", "Invocations refused before they started, by reason."
)
# Not in the spec's table: receipts the sweeper closed (Failed, usage Unknown) because they were
# still open past the invocation budget.
receipts_swept = Counter(
    _PREFIX + "receipts_swept",
    "{receipt}",
    "Receipts closed by the sweeper, still open past the budget.",
)

INSTRUMENTS: tuple[Instrument, ...] = (
    invocations,
    latency,
    overhead,
    tokens,
    fallbacks,
    denials,
    provider_errors,
    usage_unknown,
    probe_latency,
    probe_outcomes,
    receipts_reconciled,
    reconcile_windows_failed,
    reconcile_sources_failed,
    reconcile_unattributed_tokens,
    webhook_delivery_failures,
    attempts_abandoned,
    refusals,
    receipts_swept,
)


def snapshot() -> dict[str, dict[_Key, Any]]:
    return {i.name: i.snapshot() for i in INSTRUMENTS}


# The most attribute sets (series) an instrument keeps. Past it the OpenTelemetry SDK folds
# every new set into one `otel_metric_overflow="true"` series without a word, for the process's
# life (the Prometheus reader is cumulative); its default, 2,000, was within reach of the fleet
# the instruments are labelled for:
# - probe_outcomes: 6,000 deployments x 2 outcomes = 12,000 (probe_latency: 6,000);
# - invocations: 2,000 active tenants (as many as an API process keeps routing snapshots for)
#   x 2 (profile, provider) pairs each x 5 outcomes = 20,000; tokens the same x 2 directions
#   in place of the outcomes, 8,000.
# 50,000 is 2.5 times the largest, room to grow before a series merges, and still a bound on
# what a runaway label can hold: the SDK keeps a series in about 1.6 KB (measured, counter or
# histogram), 80 MB for one instrument at the limit.
SERIES_LIMIT = 50_000

_configured_lock = threading.Lock()
_registry: CollectorRegistry | None = None


def configure_exporters(
    *,
    service_name: str = "model-router",
    otlp_endpoint: str | None = None,
    otlp_interval_seconds: float = 60.0,
) -> CollectorRegistry:
    """Once per process: the OTel MeterProvider behind every instrument, read by Prometheus
    (its own registry, rendered by `GET /metrics`) and pushed over OTLP/HTTP when an endpoint
    is given. Later calls return the same registry: a process has one provider, so the first
    caller's OTLP choice stands (`create_app` calls it; a worker process would call it once at
    start to export what probes and the reconciler record)."""
    global _registry
    with _configured_lock:
        if _registry is not None:
            return _registry
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
        from opentelemetry.sdk.metrics.view import View
        from opentelemetry.sdk.resources import Resource
        from prometheus_client.registry import CollectorRegistry

        registry = CollectorRegistry(auto_describe=True)
        readers: list[MetricReader] = [
            PrometheusMetricReader(disable_target_info=True, registry=registry)
        ]
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            readers.append(
                PeriodicExportingMetricReader(
                    OTLPMetricExporter(endpoint=otlp_endpoint),
                    export_interval_millis=otlp_interval_seconds * 1000,
                )
            )
        # Each process its own instance: `model-router api --workers N` runs N processes of one
        # service on one host, and their pushes under one identity were one series each
        # process reset in turn (a counter jumping back and forth).
        instance = f"{socket.gethostname()}-{os.getpid()}"
        resource = Resource.create({"service.name": service_name, "service.instance.id": instance})
        every = View(instrument_name="*", aggregation_cardinality_limit=SERIES_LIMIT)
        provider = MeterProvider(metric_readers=readers, resource=resource, views=[every])
        meter = provider.get_meter("model_router")
        for instrument in INSTRUMENTS:
            instrument.bind(meter)
        _registry = registry
        return registry
