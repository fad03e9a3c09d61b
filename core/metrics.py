"""Metrics, recorded in-process until OpenTelemetry is wired up.

The seam: code records through the module-level instruments below, whose methods mirror
OpenTelemetry's (`Counter.add`, `UpDownCounter.add`, `Histogram.record`, attributes as a
mapping). Wiring OpenTelemetry means giving `Instrument` an OTel instrument to forward to;
callers do not change. Until then `snapshot()` is how tests and a debug endpoint read them.

Attributes carry ids and classes only (provider, deployment, outcome), never content.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

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

    def move_to(self, value: float, attributes: Attributes | None = None) -> None:
        """Moves the series to `value`, for owners that recount from the store rather than see
        every increment (the reconciler does); over OpenTelemetry this adds the difference."""
        key = _key(attributes)
        with self._lock:
            self._values[key] = value


class Histogram(Instrument):
    def __init__(self, name: str, unit: str, description: str) -> None:
        super().__init__(name, unit, description)
        self._values: dict[_Key, list[float]] = {}

    def record(self, value: float, attributes: Attributes | None = None) -> None:
        key = _key(attributes)
        with self._lock:
            series = self._values.setdefault(key, [])
            series.append(value)
            # Bounded: an exporter would have taken these long ago.
            del series[:-1000]

    def values(self, attributes: Attributes | None = None) -> list[float]:
        return list(self._values.get(_key(attributes), []))

    def snapshot(self) -> dict[_Key, Any]:
        with self._lock:
            return {k: list(v) for k, v in self._values.items()}

    def reset(self) -> None:
        with self._lock:
            self._values.clear()


_PREFIX = "connectsoft.factory.model_gateway."

invocations = Counter(_PREFIX + "invocations", "{invocation}", "Invocations by outcome.")
latency = Histogram(_PREFIX + "latency", "s", "Time to first token and completion.")
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

INSTRUMENTS: tuple[Instrument, ...] = (
    invocations,
    latency,
    tokens,
    fallbacks,
    denials,
    provider_errors,
    usage_unknown,
    probe_latency,
    probe_outcomes,
    receipts_reconciled,
)


def snapshot() -> dict[str, dict[_Key, Any]]:
    return {i.name: i.snapshot() for i in INSTRUMENTS}
