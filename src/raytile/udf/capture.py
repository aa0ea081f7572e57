"""CUDA-graph capture of ``process_tile`` (after SPECULA's trigger_code idea).

A UDF whose ``process_tile`` does only GPU work on arrays that exist before
the call (its result buffers, ``task_data``, the tile) and whose launches do
not depend on the tile's values or position may declare::

    class MyUDF(UDF):
        capturable = True
        def get_backends(self):
            return (self.BACKEND_CUPY,)

On a GPU task the part runner then hands its cupy tiles to a
:class:`TileGraphs`: the first tile of every (signal slice, tile shape, dtype)
runs normally as a warm-up (kernels compile, the private memory pool learns
the temporaries' sizes); the second is captured once on a private stream
(:func:`raytile.common.cuda_graphs.capture_graph`, the capture pipeline
stages use too) into a ``cupy.cuda.Graph`` and launched; every further tile of that key is copied
into the graph's static input and the graph replayed. Tiles of another shape
(partition edges, ROI remainders) get their own warm-up/capture or run
uncaptured. Nav-indexed result views move with each tile, so the graph
reads and writes static scratch copies of them that are copied in before and
out after each launch; sig and single views stay put within a partition.

Rules a capturable ``process_tile`` must follow: no host synchronisation
(``.get()``, ``float(x)``, printing values), no reading of ``self.meta.slice``
or ``coordinates`` (they are baked in at capture), no aux-data parameters,
no new allocations whose address it keeps beyond the call. A capture that
fails (CUDA refuses an operation while capturing) falls back to running that
key uncaptured; ``stats["failed"]`` counts it and ``errors`` keeps the reason.
"""

from __future__ import annotations

from typing import Any, Callable

from raytile.common.cuda_graphs import capture_graph

__all__ = ["TileGraphs", "is_capturable"]


class _Entry:
    __slots__ = ("graph", "static_in", "scratch", "failed")

    def __init__(self):
        self.graph = None
        self.static_in = None
        self.scratch: dict[str, Any] = {}
        self.failed = False


def is_capturable(udf: Any) -> bool:
    """True if ``udf`` declares ``capturable = True`` and has no aux-data parameters."""
    if not getattr(udf, "capturable", False):
        return False
    from raytile.common.buffer_wrappers import AuxBufferWrapper

    return not any(isinstance(v, AuxBufferWrapper) for _, v in udf.params.items())


class TileGraphs:
    """Captured ``process_tile`` graphs of one UDF within one partition.

    ``stream`` is the task's compute stream; captured graphs are launched on
    it. ``set_views(views)`` installs result views on the UDF (the part
    runner's own view setter, bound to the tile).
    """

    def __init__(self, udf: Any, stream: Any):
        import cupy

        self._cp = cupy
        self.udf = udf
        self.stream = stream
        self.capture_stream = cupy.cuda.Stream(non_blocking=True)
        # Temporaries made while capturing live in this pool, which nothing
        # else allocates from, so graph replays never write into memory
        # handed out to someone else.
        self.pool = cupy.cuda.MemoryPool()
        self._entries: dict[tuple, _Entry] = {}
        self.stats = {"warmup": 0, "captured": 0, "replayed": 0, "failed": 0}
        self.errors: list[str] = []

    def process(self, tile: Any, scheme_idx: int, views: dict[str, Any], nav_names: set[str],
                set_views: Callable[[dict], None]) -> None:
        cp = self._cp
        key = (scheme_idx, tuple(tile.shape), tile.dtype.str)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            with cp.cuda.using_allocator(self.pool.malloc):
                set_views(views)
                self.udf.process_tile(tile)
            self.stats["warmup"] += 1
            return
        if entry.failed:
            set_views(views)
            self.udf.process_tile(tile)
            return
        if entry.graph is None:
            self._capture(entry, tile, views, nav_names, set_views)
            if entry.failed:
                set_views(views)
                self.udf.process_tile(tile)
                return
        else:
            self.stats["replayed"] += 1
        with self.stream:
            if tile.data.ptr != entry.static_in.data.ptr:
                entry.static_in[...] = tile
            for name, scratch in entry.scratch.items():
                scratch[...] = views[name]
            entry.graph.launch(stream=self.stream)
            for name, scratch in entry.scratch.items():
                views[name][...] = scratch

    def _capture(self, entry: _Entry, tile: Any, views: dict[str, Any], nav_names: set[str],
                 set_views: Callable[[dict], None]) -> None:
        cp = self._cp
        with self.stream:
            entry.static_in = cp.empty_like(tile)
            entry.scratch = {n: cp.empty_like(v) for n, v in views.items()
                             if n in nav_names and v is not None}
        static_views = {n: entry.scratch.get(n, v) for n, v in views.items()}

        def captured() -> None:
            set_views(static_views)
            self.udf.process_tile(entry.static_in)

        # everything queued so far (warm-up, buffer zeroing) is done first: see capture_graph
        graph, error = capture_graph(captured, self.stream, self.capture_stream, self.pool)
        set_views(views)
        if graph is None:
            entry.failed = True
            entry.static_in = None
            entry.scratch = {}
            self.stats["failed"] += 1
            self.errors.append(f"{type(self.udf).__name__}: capture of tile key failed: {error!r}")
            return
        entry.graph = graph
        self.stats["captured"] += 1
