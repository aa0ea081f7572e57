"""OpenTelemetry: run, merge and task spans; worker task spans are children of the run span."""

from __future__ import annotations

import os

import numpy as np
import pytest

import raytile as rt

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


@pytest.fixture
def exporter():
    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    exp = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    yield exp
    exp.shutdown()


def test_task_spans_are_children_of_the_run_span(ctx, exporter):
    data = np.arange(4 * 4 * 8 * 8, dtype=np.uint16).reshape(4, 4, 8, 8)
    ds = ctx.load("memory", data=data, num_partitions=4)
    res = ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name == "raytile.run"]
    assert len(runs) == 1
    run = runs[0]
    tasks = [s for s in spans if s.name == "raytile.task"]
    merges = [s for s in spans if s.name == "raytile.merge"]
    assert sorted(s.attributes["raytile.partition"] for s in tasks) == [0, 1, 2, 3]
    assert 1 <= len(merges) <= 4  # one per partition, or per segment merged near the data (Ray)
    for s in tasks + merges:
        assert s.context.trace_id == run.context.trace_id
        assert s.parent is not None and s.parent.span_id == run.context.span_id
    for s in tasks:
        assert run.start_time <= s.start_time <= s.end_time <= run.end_time
    pids = {s.attributes["raytile.pid"] for s in tasks}
    if ctx.executor.__class__.__name__ == "RayExecutor":
        assert os.getpid() not in pids  # recorded in the worker processes, shipped back
    else:
        assert pids == {os.getpid()}
    assert any(s.name == "raytile.plan" and s.context.trace_id == run.context.trace_id for s in spans)
