"""`capture_graph`, the one CUDA-graph capture of UDF tiles and pipeline stages, with a stand-in for cupy's
streams (the real capture runs in tests/test_gpu.py and tests/test_pipeline_gpu.py on a GPU)."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest

from raytile.common.cuda_graphs import capture_graph


class Stream:
    def __init__(self, log: list, name: str, refuse: bool = False):
        self.log, self.name, self.refuse = log, name, refuse

    def synchronize(self):
        self.log.append(f"{self.name}.synchronize")

    def begin_capture(self):
        self.log.append(f"{self.name}.begin_capture")

    def end_capture(self):
        self.log.append(f"{self.name}.end_capture")
        if self.refuse:
            raise RuntimeError("operation not permitted when stream is capturing")
        return "graph"

    def __enter__(self):
        self.log.append(f"enter {self.name}")

    def __exit__(self, *exc):
        self.log.append(f"exit {self.name}")


@pytest.fixture
def log(monkeypatch):
    calls: list = []

    @contextlib.contextmanager
    def using_allocator(malloc):
        calls.append(f"allocator {malloc}")
        yield
        calls.append("allocator done")

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(
        using_allocator=using_allocator)))
    return calls


def test_captures_after_syncing_the_compute_stream_with_the_private_pool(log):
    pool = types.SimpleNamespace(malloc="pool.malloc")
    graph, error = capture_graph(lambda: log.append("work"), Stream(log, "compute"), Stream(log, "capture"), pool)
    assert (graph, error) == ("graph", None)
    assert log == ["compute.synchronize", "allocator pool.malloc", "enter capture", "capture.begin_capture", "work",
                   "capture.end_capture", "exit capture", "allocator done"]


def test_a_raising_capture_still_ends_capture_mode_and_returns_the_reason(log):
    def work():
        raise ValueError("host sync while capturing")

    graph, error = capture_graph(work, Stream(log, "compute"), Stream(log, "capture"), types.SimpleNamespace(malloc=0))
    assert graph is None and isinstance(error, ValueError) and "capture.end_capture" in log


def test_a_refused_capture_returns_cudas_reason(log):
    graph, error = capture_graph(lambda: None, Stream(log, "compute"), Stream(log, "capture", refuse=True),
                                 types.SimpleNamespace(malloc=0))
    assert graph is None and "not permitted" in str(error)
