"""Execution plan: which array backend each UDF gets its tiles in, per device class."""

from __future__ import annotations

from typing import Iterable, Sequence

from raytile.errors import BackendError
from raytile.udf.base import BACKEND_CUDA, BACKEND_CUPY, BACKEND_NUMPY, UDF

CUDA_BACKENDS = frozenset({
    BACKEND_CUPY, "cupyx.scipy.sparse.csr_matrix", "cupyx.scipy.sparse.csc_matrix",
    "cupyx.scipy.sparse.coo_matrix", BACKEND_CUDA,
})


def canonical_backends(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    if spec is None:
        return ()
    if isinstance(spec, str):
        return (spec,)
    return tuple(spec)


def device_classes_for(udfs: Sequence[UDF], restrict_to: Iterable[str] | None = None) -> set[str]:
    """Device classes ("cpu", "cuda") on which every UDF can be served."""
    allowed = set(canonical_backends(restrict_to)) or None
    classes = {"cpu", "cuda"}
    for udf in udfs:
        backends = set(canonical_backends(udf.get_backends()))
        if allowed is not None:
            backends &= allowed
        if not backends:
            raise BackendError(
                f"{type(udf).__name__} supports backends {canonical_backends(udf.get_backends())}, "
                f"none of which is allowed by backends={sorted(allowed or ())}"
            )
        udf_classes = set()
        if backends - CUDA_BACKENDS:
            udf_classes.add("cpu")
        if backends & CUDA_BACKENDS:
            udf_classes.add("cuda")
        classes &= udf_classes
    return classes


def execution_plan(
    udfs: Sequence[UDF], device_class: str, native_backend: str = BACKEND_NUMPY,
    restrict_to: Iterable[str] | None = None,
) -> dict[str, list[int]]:
    """Map backend -> indices of UDFs served in it, preferring the data's native backend.

    On "cpu" only CPU backends are used; on "cuda" CUDA backends first, with
    CPU backends as a fallback for UDFs that have no CUDA backend.
    """
    allowed = set(canonical_backends(restrict_to)) or None
    plan: dict[str, list[int]] = {}
    for i, udf in enumerate(udfs):
        backends = [b for b in canonical_backends(udf.get_backends()) if allowed is None or b in allowed]
        if device_class == "cpu":
            candidates = [b for b in backends if b not in CUDA_BACKENDS]
        else:
            candidates = [b for b in backends if b in CUDA_BACKENDS] or [
                b for b in backends if b not in CUDA_BACKENDS
            ]
        if not candidates:
            raise BackendError(
                f"{type(udf).__name__} cannot run on {device_class}: it supports {backends}"
            )
        chosen = native_backend if native_backend in candidates else candidates[0]
        if chosen == BACKEND_CUDA:
            chosen = BACKEND_NUMPY  # "cuda" UDFs take numpy tiles and run their own kernels
        plan.setdefault(chosen, []).append(i)
    return plan


class TileConverter:
    """Converts one tile into each backend it is needed in, once per backend."""

    def __init__(self, data, native_backend: str = BACKEND_NUMPY):
        self._cache = {native_backend: data}

    def get(self, backend: str):
        if backend not in self._cache:
            from sparseconverter import for_backend

            self._cache[backend] = for_backend(self._cache[next(iter(self._cache))], backend)
        return self._cache[backend]
