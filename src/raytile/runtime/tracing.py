"""OpenTelemetry spans for runs, planning, tasks and merges.

Only ``opentelemetry-api`` is required: without an SDK configured the spans
are no-ops. The run's span context is injected into the run parameters so a
worker's task spans become children of the run's span.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

_TRACER_NAME = "raytile"


def tracer() -> trace.Tracer:
    return trace.get_tracer(_TRACER_NAME)


def start_span(name: str, attributes: dict[str, Any] | None = None) -> trace.Span:
    return tracer().start_span(name, attributes=attributes or {})


def use_span(span: trace.Span):
    return trace.use_span(span, end_on_exit=False)


@contextmanager
def child_span(name: str, attributes: dict[str, Any] | None = None) -> Iterator[trace.Span]:
    with tracer().start_as_current_span(name, attributes=attributes or {}) as span:
        yield span


def record_error(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:200]))


def inject_context() -> dict[str, str]:
    """The current span context as a picklable carrier dict."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


@contextmanager
def attached(carrier: dict | None) -> Iterator[None]:
    """Make the span context in ``carrier`` current (on a worker)."""
    if not carrier:
        yield
        return
    token = otel_context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)
