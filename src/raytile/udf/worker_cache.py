"""`WorkerCache`: task data a worker computes once per params version and reuses across partitions.

A UDF's ``get_task_data`` runs for every partition. What it computes from the
parameters alone (masks, above all) is the same for every partition of one
run, so computing it again per partition is wasted work: for a stream of
16 MiB partitions, a 256x256 ring mask cost about 12% of each task. As
LiberTEM keeps its ``MaskContainer`` on a worker while the parameters stay the
same, the runtime hands each per-partition UDF a :class:`WorkerCache` in
``self.meta.worker_cache``, scoped to the UDF's template of the current
params version on that worker (:func:`worker_cache_for`):

- a live patch makes new templates (a new params version), hence a new, empty
  cache: values computed from the old parameters are never served after it;
- the cache is dropped with the template (the worker's params cache, the
  inline executor's run), so nothing outlives its run;
- on the main node ``meta.worker_cache`` is None: compute as before.

Keys must name everything the value depends on besides the parameters (signal
shape, dtype, array backend, ROI). Values are shared by the partitions (and
threads) of a worker: treat them as read-only.

>>> from raytile.udf.worker_cache import WorkerCache
>>> cache = WorkerCache()
>>> calls = []
>>> cache.get_or_make(("masks", (16, 16)), lambda: calls.append(1) or "masks")
'masks'
>>> cache.get_or_make(("masks", (16, 16)), lambda: calls.append(1) or "masks"), len(calls)
('masks', 1)
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Hashable, TypeVar

import numpy as np

if TYPE_CHECKING:
    from raytile.udf.meta import UDFMeta

__all__ = ["WorkerCache", "worker_cache_for", "scope_key"]

T = TypeVar("T")


class WorkerCache:
    """Values keyed by hashable keys, each made once (under a lock) and then reused."""

    def __init__(self) -> None:
        self._values: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get_or_make(self, key: Hashable, make: Callable[[], T]) -> T:
        """The value for ``key``, made by ``make()`` on the first call; a failing ``make`` stores nothing."""
        with self._lock:  # one maker at a time: partitions on other threads wait for the same value
            if key not in self._values:
                self._values[key] = make()
            return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __reduce__(self) -> tuple[Any, ...]:
        return (WorkerCache, ())  # a copy elsewhere starts empty: values are local to a worker

    def __repr__(self) -> str:
        return f"WorkerCache({len(self._values)} values)"


_caches: "weakref.WeakKeyDictionary[Any, WorkerCache]" = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def worker_cache_for(template: Any) -> WorkerCache:
    """The cache of ``template`` (a UDF of one params version on this worker), made on first use.

    The cache lives as long as ``template``: a patched run's new templates
    get new caches.
    """
    with _caches_lock:
        cache = _caches.get(template)
        if cache is None:
            cache = _caches[template] = WorkerCache()
        return cache


def scope_key(meta: "UDFMeta", backend: str | None = None) -> tuple[Hashable, ...]:
    """What task data may depend on besides the parameters: signal shape, input dtype, array backend
    (``backend``, default ``meta.array_backend``) and a digest of the ROI.

    Within one params version these are fixed; the key still names them, so
    that a value is never served for another shape, dtype, backend or ROI.
    """
    roi = meta.roi
    digest = None if roi is None else hashlib.blake2b(np.packbits(np.asarray(roi, dtype=bool)).tobytes(),
                                                      digest_size=16).hexdigest()
    return (tuple(meta.dataset_shape.sig.to_tuple()), str(meta.input_dtype),
            meta.array_backend if backend is None else backend, None if roi is None else roi.shape, digest)
