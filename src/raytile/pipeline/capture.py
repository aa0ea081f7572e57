"""`TriggerGraph`: a GPU stage's ``trigger_code`` captured once into a CUDA graph and replayed.

After SPECULA's ``build_stream``: a stage on a GPU runs ``trigger_code`` on
its private stream. If its class declares ``capturable = True``, the first
trigger runs normally (a warm-up: kernels compile, the private memory pool
learns the temporaries' sizes), the second is captured (:func:`raytile.common.cuda_graphs.capture_graph`, the capture
udf/capture.py uses too) into a ``cupy.cuda.Graph`` on a capture stream and
launched, and every later trigger replays the graph.
This is valid because a stage's inputs and outputs are arrays allocated once
that never move (streams are refilled in place; inputs from another device
land in fixed local buffers). A capture that CUDA refuses falls back to
running ``trigger_code`` uncaptured; ``stats["failed"]`` counts it and
``error`` keeps the reason (as udf/capture.py does for UDF tiles).

Rules for a capturable ``trigger_code``: GPU work only on arrays that exist
before the call (no host synchronisation, no reading of values on the host,
no Python decisions on data or on ``current_time``), and no return value
that matters (a kernel that returns ``False`` to skip a refresh is not
capturable).

>>> g = TriggerGraph(stage.trigger_code, stream)
>>> g.run()   # warm-up, then capture, then replays
"""

from __future__ import annotations

from typing import Any, Callable

from raytile.common.cuda_graphs import capture_graph

__all__ = ["TriggerGraph"]


class TriggerGraph:
    """Runs ``fn`` on ``stream``: once plain, then captured into a CUDA graph, then replayed."""

    def __init__(self, fn: Callable[[], Any], stream: Any, capture: bool = True):
        import cupy

        self._cp = cupy
        self.fn = fn
        self.stream = stream
        self.capture = capture
        self.graph: Any = None
        self.error: str | None = None
        self.pool = cupy.cuda.MemoryPool()  # temporaries of the captured code live here only
        self.stats = {"warmup": 0, "captured": 0, "replayed": 0, "failed": 0, "uncaptured": 0}

    def reset(self) -> None:
        """Forget the graph (parameters changed): warm up and capture again."""
        self.graph = None
        self.error = None
        self.stats["warmup"] = 0

    def run(self) -> None:
        cp = self._cp
        if self.graph is not None:
            self.graph.launch(stream=self.stream)
            self.stats["replayed"] += 1
            return
        if not self.capture or self.error is not None:
            with self.stream:
                self.fn()
            self.stats["uncaptured"] += 1
            return
        if self.stats["warmup"] == 0:
            with cp.cuda.using_allocator(self.pool.malloc), self.stream:
                self.fn()
            self.stats["warmup"] += 1
            return
        self._capture()
        if self.graph is None:
            with self.stream:
                self.fn()
            return
        self.graph.launch(stream=self.stream)

    def _capture(self) -> None:
        graph, error = capture_graph(self.fn, self.stream, self._cp.cuda.Stream(non_blocking=True), self.pool)
        if graph is None:
            self.error = f"capture failed: {error!r}"
            self.stats["failed"] += 1
            return
        self.graph = graph
        self.stats["captured"] += 1
