"""Task spans recorded in a worker process and shipped back to the driver.

If the worker process has an SDK tracer provider of its own (configured by
the user, e.g. exporting OTLP), spans go there and nothing is shipped back.
Otherwise a private SDK provider with an in-memory exporter collects the
task's spans, which return with the task result; the driver feeds them to
its span processors (``raytile.runtime.tracing.export_remote_spans``).
"""

from __future__ import annotations


__all__ = ["WorkerTracing"]


def _span_record(span) -> dict:
    ctx = span.context
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": ctx.trace_id,
        "span_id": ctx.span_id,
        "parent_id": parent.span_id if parent is not None else None,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": dict(span.attributes or {}),
        "error": span.status.status_code.name == "ERROR",
        "description": span.status.description,
    }


class WorkerTracing:
    """Records task spans in the worker and hands them back to the driver.

    If the worker process has an SDK tracer provider of its own (configured by
    the user, e.g. exporting OTLP), spans go there and nothing is shipped back.
    Otherwise a private SDK provider with an in-memory exporter collects the
    task's spans, which return with the task result; the driver feeds them to
    its span processors (``raytile.runtime.tracing.export_remote_spans``).
    """

    def __init__(self):
        self._tracer = None
        self._exporter = None

    def _setup(self):
        if self._tracer is not None:
            return
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        if hasattr(provider, "add_span_processor"):  # a user-configured SDK provider
            self._tracer = provider.get_tracer("raytile.worker")
            return
        try:
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        except ImportError:
            self._tracer = trace.get_tracer("raytile.worker")  # API only: spans are no-ops
            return
        own = TracerProvider()
        self._exporter = InMemorySpanExporter()
        own.add_span_processor(SimpleSpanProcessor(self._exporter))
        self._tracer = own.get_tracer("raytile.worker")

    def tracer(self):
        self._setup()
        return self._tracer

    def collect(self) -> list[dict]:
        if self._exporter is None:
            return []
        spans = [_span_record(s) for s in self._exporter.get_finished_spans()]
        self._exporter.clear()
        return spans


