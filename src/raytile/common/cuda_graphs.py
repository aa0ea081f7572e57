"""One way to capture GPU work into a CUDA graph: :func:`capture_graph`.

Both uses follow SPECULA's ``trigger_code`` idea: a UDF's ``process_tile``
(:mod:`raytile.udf.capture`) and a pipeline stage's ``trigger_code``
(:mod:`raytile.pipeline.capture`) run once plain as a warm-up, are captured
once into a ``cupy.cuda.Graph``, and are replayed from then on. The capture
itself is the same for both, and subtle enough to live in one place:

- the compute stream is synchronised first (a capturing stream cannot wait
  on work queued outside the capture);
- the work is captured on a private capture stream, with every temporary
  allocated from a private memory pool that nothing else allocates from (so
  a replay never writes into memory handed out to someone else);
- ``end_capture`` runs even when the captured code raised, so the stream
  leaves capture mode; any failure returns no graph and the reason, and the
  caller runs that work uncaptured.

cupy is imported by the caller (GPU code paths import it lazily); this module
imports nothing from it at import time.

>>> graph, error = capture_graph(lambda: stage.trigger_code(), stream, capture_stream, pool)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["capture_graph"]


def capture_graph(fn: Callable[[], Any], stream: Any, capture_stream: Any,
                  pool: Any) -> tuple[Any, BaseException | None]:
    """Capture ``fn()`` into a CUDA graph on ``capture_stream`` (temporaries from ``pool``, a
    ``cupy.cuda.MemoryPool``) after synchronising ``stream``; ``(graph, None)``, or ``(None, error)``
    if ``fn`` raised or CUDA refused the capture."""
    import cupy

    stream.synchronize()  # a capturing stream cannot wait on work queued outside the capture
    graph = None
    error: BaseException | None = None
    with cupy.cuda.using_allocator(pool.malloc), capture_stream:
        capture_stream.begin_capture()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - any failure means: run this work uncaptured
            error = e
        finally:
            try:
                graph = capture_stream.end_capture()
            except Exception as e:  # noqa: BLE001
                error = error or e
                graph = None
    if error is not None or graph is None:
        return None, error or RuntimeError("end_capture returned no graph")
    return graph, None
