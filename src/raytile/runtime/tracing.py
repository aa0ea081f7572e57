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

__all__ = [
    "tracer", "start_span", "use_span", "child_span", "record_error", "inject_context", "attached",
    "export_remote_spans",
]

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


def export_remote_spans(records: list[dict]) -> int:
    """Hand spans recorded on a worker to this process's span processors; returns how many.

    Workers without a tracer provider of their own record their task spans
    with a private in-memory SDK exporter and return them as plain dicts (see
    ``raytile.actors.worker``). Here they are rebuilt as finished SDK spans,
    with their original ids, parent ids and timestamps, and given to the
    driver's configured span processors, so whichever exporter the driver uses
    (OTLP, console, in-memory) sees them as children of the run span. Without
    an SDK provider in the driver this does nothing.
    """
    provider = trace.get_tracer_provider()
    processor = getattr(provider, "_active_span_processor", None)
    if processor is None or not records:
        return 0
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    scope = InstrumentationScope("raytile.worker")
    flags = TraceFlags(TraceFlags.SAMPLED)
    for r in records:
        ctx = SpanContext(r["trace_id"], r["span_id"], is_remote=False, trace_flags=flags)
        parent = (SpanContext(r["trace_id"], r["parent_id"], is_remote=True, trace_flags=flags)
                  if r.get("parent_id") else None)
        status = Status(StatusCode.ERROR, r.get("description")) if r.get("error") else Status(StatusCode.OK)
        span = ReadableSpan(
            name=r["name"], context=ctx, parent=parent, resource=getattr(provider, "resource", None),
            attributes=r.get("attributes") or {}, start_time=r.get("start"), end_time=r.get("end"),
            status=status, instrumentation_scope=scope,
        )
        processor.on_end(span)
    return len(records)
