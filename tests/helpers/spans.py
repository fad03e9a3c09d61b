"""Spans as the exporter would see them: a processor on the test session's TracerProvider that
keeps finished spans only while a test asks for them (the rest of the suite produces spans too,
and nobody reads those)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider


class SpanCapture(SpanProcessor):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReadableSpan] = []
        self.active = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            with self._lock:
                self._spans.append(span)

    def start(self) -> None:
        with self._lock:
            self._spans.clear()
        self.active = True

    def stop(self) -> None:
        self.active = False
        with self._lock:
            self._spans.clear()

    @property
    def spans(self) -> list[ReadableSpan]:
        with self._lock:
            return list(self._spans)


_capture: SpanCapture | None = None


def install() -> SpanCapture:
    """Once per test process: the global provider, as `core.tracing.configure_exporters` would
    install one with an OTLP endpoint, exporting to memory instead."""
    global _capture
    if _capture is None:
        provider = TracerProvider()
        _capture = SpanCapture()
        provider.add_span_processor(_capture)
        trace.set_tracer_provider(provider)
    return _capture


def exported(spans: Iterable[ReadableSpan]) -> str:
    """Everything an exporter would ship, as text: names, attributes, events, links, status."""
    return "\n".join(span.to_json(indent=None) for span in spans)


def by_name(spans: Iterable[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found
