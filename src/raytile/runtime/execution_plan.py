"""Execution plan: which array backend each UDF gets its tiles in, per device class.

Every UDF declares the array backends its ``process_*`` accepts
(:meth:`UDF.get_backends`, in order of preference); a data set declares the
backends its tiles come in natively (``array_backends``, first the native
one). :func:`execution_plan` groups the UDFs of a run by backend for one
device class so that a tile is converted as rarely and as cheaply as
possible, and :class:`~raytile.runtime.tile_converter.TileConverter` makes
each needed format once per tile.

Order of preference when assigning UDFs (after LiberTEM's planner):

1. a backend native to both the data set and the device class (no conversion);
2. on a device class the data set is not native to (a CPU data set read by a
   GPU task), a backend of the same kind as the data set: sparse stays sparse
   and dense stays dense when moving to the device;
3. any backend of the device class (a dense<->sparse conversion);
4. "CPU on GPU" fallback: a GPU task serves a UDF without a GPU backend in a
   CPU backend, native to the data set if possible, else any.

Within each step the backend that serves the most of the remaining UDFs
wins; ties go to the backend the UDFs prefer on average (their order).
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
from sparseconverter import (
    BACKENDS,
    CPU_BACKENDS,
    CUDA,
    CUDA_BACKENDS,
    CUPY_BACKENDS,
    DENSE_BACKENDS,
    NUMPY,
    SPARSE_BACKENDS,
    cheapest_pair,
    result_type,
)

from raytile.common.errors import BackendError
from raytile.common.device_class import DeviceClass

__all__ = [
    "BACKENDS", "CPU_BACKENDS", "CUDA_BACKENDS", "CUPY_BACKENDS", "SPARSE_BACKENDS", "DENSE_BACKENDS",
    "ExecutionPlan", "canonical_backends", "check_backends", "device_classes_for",
    "execution_plan", "plan_dtype",
]

def canonical_backends(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """A backend spec (one name, a sequence or None) as a tuple of names."""
    if spec is None:
        return ()
    if isinstance(spec, str):
        return (spec,)
    return tuple(spec)


def check_backends(spec: Any, owner: str) -> tuple[str, ...]:
    """``canonical_backends`` that raises :class:`BackendError` naming ``owner`` for unknown names."""
    backends = canonical_backends(spec)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise BackendError(
            f"{owner} names unknown array backends {unknown}; known backends: {sorted(BACKENDS)}"
        )
    return backends


def _udf_backends(udf, allowed: frozenset | None) -> tuple[str, ...]:
    backends = check_backends(udf.get_backends(), f"{type(udf).__name__}.get_backends()")
    if allowed is not None:
        backends = tuple(b for b in backends if b in allowed)
    return backends


def available_backends(device_class: DeviceClass, restrict_to: Iterable[str] | None = None,
                       cupy: bool = True) -> frozenset:
    """Backends a task on ``device_class`` can hand out (all CPU backends on a GPU, too).

    A GPU worker without cupy can serve the CPU backends and "cuda" (numpy
    tiles for UDFs that launch their own kernels).
    """
    if device_class == DeviceClass.CPU:
        avail = CPU_BACKENDS
    elif device_class == DeviceClass.CUDA:
        avail = BACKENDS if cupy else CPU_BACKENDS | {CUDA}
    else:
        raise BackendError(f"unknown device class {device_class!r}; use 'cpu' or 'cuda'")
    if restrict_to is not None:
        allowed = frozenset(check_backends(restrict_to, "run_udf(backends=...)"))
        if allowed:
            avail = avail & allowed
    return frozenset(avail)


def device_classes_for(udfs: Sequence, restrict_to: Iterable[str] | None = None) -> set[DeviceClass]:
    """Device classes ("cpu", "cuda") on which every UDF can be served.

    Follows the reference's resource rule: a UDF with only GPU backends
    needs a GPU, one with only CPU backends needs a CPU (or the CPU-on-GPU
    fallback), and a run whose UDFs need both cannot be served in one task.
    Raises :class:`BackendError` when a UDF has no backend left after the
    ``backends=`` restriction, or the UDFs need both a CPU-only and a GPU-only task.
    """
    allowed = frozenset(check_backends(restrict_to, "run_udf(backends=...)")) or None
    needs_cuda: list[str] = []
    needs_cpu: list[str] = []
    for udf in udfs:
        backends = set(_udf_backends(udf, allowed))
        name = type(udf).__name__
        if not backends:
            raise BackendError(
                f"{name} supports backends {list(canonical_backends(udf.get_backends()))}, "
                f"none of which is allowed by backends={sorted(allowed or ())}"
            )
        if backends.isdisjoint(CPU_BACKENDS):
            needs_cuda.append(name)
        if backends.isdisjoint(CUDA_BACKENDS):
            needs_cpu.append(name)
    if needs_cuda and needs_cpu:
        raise BackendError(
            f"no common device for these UDFs: {needs_cuda} need a GPU backend, {needs_cpu} a CPU "
            f"backend (limited to backends={sorted(allowed) if allowed else 'any'}); run them separately"
        )
    if needs_cuda:
        return {DeviceClass.CUDA}
    # CPU-only UDFs also run on a GPU worker (CPU-on-GPU fallback).
    return {DeviceClass.CPU, DeviceClass.CUDA}


@dataclass
class ExecutionPlan:
    """The plan of one device class: the tile format to read and who gets what.

    ``ds_backend`` is the backend the partition yields tiles in; ``udfs``
    maps each backend to the indices of the UDFs served in it, in the order
    conversions are cheapest (each format made from the cheapest one already
    at hand).
    """

    device_class: DeviceClass
    ds_backend: str
    udfs: "OrderedDict[str, list[int]]" = field(default_factory=OrderedDict)

    def backend_of(self) -> dict[int, str]:
        return {i: b for b, idxs in self.udfs.items() for i in idxs}

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self.udfs)

    @property
    def needs_cupy(self) -> bool:
        return not CUPY_BACKENDS.isdisjoint(self.udfs)

    # A read-only mapping backend -> UDF indices, like the plain dicts of earlier versions.
    def __getitem__(self, backend: str) -> list[int]:
        return self.udfs[backend]

    def __iter__(self):
        return iter(self.udfs)

    def __len__(self) -> int:
        return len(self.udfs)

    def __contains__(self, backend: object) -> bool:
        return backend in self.udfs

    def items(self):
        return self.udfs.items()

    def keys(self):
        return self.udfs.keys()

    def values(self):
        return self.udfs.values()

    def describe(self, udfs: Sequence | None = None) -> list[str]:
        out = []
        for b, idxs in self.udfs.items():
            names = [type(udfs[i]).__name__ if udfs is not None else str(i) for i in idxs]
            out.append(f"{b}: {', '.join(names)}")
        return out


def execution_plan(
    udfs: Sequence,
    device_class: DeviceClass,
    ds_backends: str | Iterable[str] = NUMPY,
    restrict_to: Iterable[str] | None = None,
    cupy: bool = True,
) -> ExecutionPlan:
    """Assign every UDF a backend for tasks on ``device_class`` (see the module docstring).

    Raises :class:`BackendError` naming the UDFs that cannot be served.
    """
    ds_backends = check_backends(ds_backends, "the data set's array_backends") or (NUMPY,)
    avail = available_backends(device_class, restrict_to, cupy)
    native = avail & (CUDA_BACKENDS if device_class == DeviceClass.CUDA else CPU_BACKENDS)
    allowed = frozenset(check_backends(restrict_to, "run_udf(backends=...)")) or None
    udf_backends = [_udf_backends(u, allowed) for u in udfs]

    aversion: dict[str, float] = defaultdict(float)
    for backends in udf_backends:
        for rank, b in enumerate(backends):
            aversion[b] += rank / len(backends)
    # Tie-break: data set's own formats first, then what the UDFs prefer on average.
    preference = sorted(BACKENDS, key=lambda b: (b not in ds_backends, aversion.get(b, 1e9), b))

    remaining = list(range(len(udfs)))
    assigned: "OrderedDict[str, list[int]]" = OrderedDict()

    def assign(restrict: Iterable[str]) -> bool:
        restrict = frozenset(restrict)
        popular: dict[str, list[int]] = defaultdict(list)
        for i in remaining:
            for b in udf_backends[i]:
                if b in restrict:
                    popular[b].append(i)
        if not popular:
            return False
        best = max(len(v) for v in popular.values())
        backend = next(b for b in preference if len(popular.get(b, ())) == best)
        for i in popular[backend]:
            remaining.remove(i)
        assigned.setdefault(backend, []).extend(popular[backend])
        return True

    assign(native & set(ds_backends))
    if not SPARSE_BACKENDS.isdisjoint(ds_backends):
        assign(native & SPARSE_BACKENDS)
    if not DENSE_BACKENDS.isdisjoint(ds_backends):
        assign(native & DENSE_BACKENDS)
    while remaining and assign(native):
        pass
    # CPU on GPU fallback (also the only step left for a GPU task without cupy)
    assign(avail & set(ds_backends))
    while remaining and assign(avail):
        pass

    if remaining:
        details = "; ".join(
            f"{type(udfs[i]).__name__} supports {list(canonical_backends(udfs[i].get_backends()))}"
            for i in remaining
        )
        limit = f" limited to backends={sorted(allowed)}" if allowed else ""
        cp = "" if cupy or device_class != DeviceClass.CUDA else " without cupy"
        raise BackendError(f"cannot serve on a {device_class} worker{cp}{limit}: {details}")

    # Order the conversions: start from the cheapest data set format, then
    # always convert to the format that is cheapest to make from those at hand.
    # "cuda" is served with numpy tiles.
    required = [b for b in assigned]
    ds_backend, first = cheapest_pair(tuple(ds_backends), tuple(required))
    ordered: "OrderedDict[str, list[int]]" = OrderedDict()
    ordered[first] = sorted(assigned[first])
    have = [ds_backend, first]
    required.remove(first)
    while required:
        _, nxt = cheapest_pair(tuple(have), tuple(required))
        ordered[nxt] = sorted(assigned[nxt])
        required.remove(nxt)
        have.append(nxt)
    return ExecutionPlan(device_class, ds_backend, ordered)


def plan_dtype(base_dtype: Any, backends: Iterable[str]) -> np.dtype:
    """``base_dtype`` widened so that every backend in ``backends`` supports it.

    (``sparseconverter.result_type``: e.g. scipy.sparse has no float16.)
    """
    backends = [b for b in backends if b in BACKENDS]
    return np.dtype(result_type(np.dtype(base_dtype), *backends))
