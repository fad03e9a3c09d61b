"""Traces: one trace per invocation, from the HTTP request through the InvokeModel workflow and
its activity to the provider call.

Code asks `tracer()` for spans; the OpenTelemetry API hands out no-op spans until a process
installs a provider. `configure_exporters()` does that once per process when an OTLP endpoint
is configured (tests install their own provider with an in-memory exporter instead). The
Temporal client carries `interceptors()`, so starting a workflow puts the caller's span context
in the workflow's headers and the worker continues the same trace — when tracing is on: with no
provider installed, the client carries no interceptor at all (its no-op spans and header work
were 2.7% of the API's CPU at c=16 under py-spy, bench/profile_invoke.py, 2026-12-01).

Span attributes are ids, names of models and classes, and counts — never content: Temporal's
interceptor records workflow and activity ids (ours hold tenant and receipt ids), and the spans
this project opens take only the fields listed in `activities/invoke_spans.py`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from temporalio.contrib.opentelemetry import TracingInterceptor

_NAME = "model_router"

_lock = threading.Lock()
_provider: TracerProvider | None = None


def tracer() -> trace.Tracer:
    # A proxy: spans go to whatever provider is installed, even one installed later.
    return trace.get_tracer(_NAME)


def enabled() -> bool:
    """Whether spans go anywhere: a real provider is installed (ours, a test's, or one the
    OpenTelemetry environment variables name), not the API's default proxy to no-ops."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def interceptors() -> list[TracingInterceptor]:
    """Temporal's tracing interceptor when tracing is on, none otherwise. Decided when a client
    connects: the entry points install their provider (`configure_exporters`) before that."""
    if not enabled():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(tracer())]


def configure_exporters(*, service_name: str, otlp_endpoint: str | None) -> TracerProvider | None:
    """Once per process: a TracerProvider that batches spans to OTLP/HTTP. Without an endpoint
    nothing is installed, so spans stay no-ops and cost next to nothing on the hot path."""
    global _provider
    if not otlp_endpoint:
        return None
    with _lock:
        if _provider is not None:
            return _provider
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
        trace.set_tracer_provider(provider)
        _provider = provider
        return provider


def shutdown() -> None:
    """Flushes what is batched (a worker or API process calls this on its way out)."""
    if _provider is not None:
        _provider.shutdown()
