"""`ApplyMasksUDF`: dot products of every frame with a stack of masks."""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

import numpy as np
import sparse
from sparseconverter import CUPY_BACKENDS

from raytile.common.container import MaskContainer
from raytile.common.errors import UDFException, udf_exception_class
from raytile.common.math import prod
from raytile.common.sparse import is_sparse, to_dense, to_sparse
from raytile.udf._tiles import TILE_BACKENDS
from raytile.udf.base import BACKEND_CUPY, BACKEND_NUMPY, UDF
from raytile.udf.maskengine import ApplyMasksEngine
from raytile.udf.worker_cache import scope_key

__all__ = ["ApplyMasksUDF", "MaskFactory", "MaskStack"]

MaskFactory = Callable[[], Any]


class MaskStack:
    """A mask factory for :class:`MaskContainer`: the user's factories' masks as one ``(n, *sig)`` stack.

    ``ApplyMasksUDF`` takes more forms than the container does: a callable
    returning one sig-shaped mask, a stack ``(n, *sig)``, a 2D scipy matrix
    ``(n, prod(sig))``, or a list of callables each returning one mask. This
    checks each against the signal shape (an error names the factory and
    both shapes) and stacks them: sparse (``sparse.COO``) when every mask is
    sparse, dense otherwise. Called where the masks are needed: on the
    workers, and on the main node only if the count or dtype is asked for.
    """

    def __init__(self, factories: Union[MaskFactory, Sequence[MaskFactory]], sig: tuple[int, ...], owner: str):
        self.factories = [factories] if callable(factories) else list(factories)
        self.sig = tuple(sig)
        self.owner = owner

    def _one(self, factory: Any) -> Any:
        if not callable(factory):
            raise UDFException(f"{self.owner}: mask_factories must be callables, got {factory!r}")
        m = factory()
        if isinstance(m, (list, tuple)):  # one callable returning a list of masks, as LiberTEM accepts
            return _stack([self._checked(factory, one) for one in m])
        return self._checked(factory, m)

    def _checked(self, factory: Any, m: Any) -> Any:
        """One mask (or stack) ``m`` as a ``(n, *sig)`` stack, its shape checked against the signal."""
        shape, sig = tuple(m.shape), self.sig
        if shape == sig:
            n = 1
        elif len(shape) == len(sig) + 1 and shape[1:] == sig:
            n = shape[0]
        elif len(shape) == 2 and shape[1] == prod(sig):
            n = shape[0]
        else:
            raise UDFException(
                f"{self.owner}: mask factory {getattr(factory, '__name__', factory)!r} returned shape "
                f"{shape}, expected the signal shape {sig} or a stack (n, *{sig})"
            )
        if is_sparse(m):
            return to_sparse(m).reshape((n,) + sig)
        return np.asarray(m).reshape((n,) + sig)

    def __call__(self) -> Any:
        return _stack([self._one(f) for f in self.factories])


def _stack(parts: list[Any]) -> Any:
    """``(n_i, *sig)`` stacks as one: sparse when every part is, dense otherwise."""
    if all(is_sparse(p) for p in parts):
        return sparse.concatenate(parts, axis=0)
    return np.concatenate([to_dense(p) for p in parts], axis=0)


class ApplyMasksUDF(UDF):
    """Apply masks to every frame: ``intensity[nav, i] = sum(frame * mask_i)``.

    Parameters
    ----------
    mask_factories
        A callable returning one sig-shaped mask or a stack ``(n, *sig)``
        of masks, or a list of callables each returning one sig-shaped mask.
        Masks may be dense numpy arrays, ``sparse.COO``/``GCXS`` or scipy
        sparse matrices (2D, shaped ``sig`` or ``(n, prod(sig))``).
    use_torch
        LiberTEM's switch for its PyTorch path; accepted, without effect
        (raytile multiplies with numpy, scipy or cupy).
    use_sparse
        ``None``: sparse if every factory returns a sparse mask (as in
        LiberTEM); ``True``/``False`` forces sparse or dense masks; or a
        format, ``'scipy.sparse'``, ``'scipy.sparse.csc'``, ``'sparse.pydata'``
        (see :class:`~raytile.common.container.MaskContainer`).
    mask_count
        Number of masks when one callable returns a stack (found by calling
        it if left out).
    mask_dtype
        dtype the masks are converted to (default: the factories' dtype).
    preferred_dtype
        The input dtype asked for (default float32, as every UDF), e.g. an
        integer type for integer data and masks.
    backends
        Array backends to allow, in order of preference (default: all the
        UDF supports: numpy, cupy and the sparse ones; numpy and cupy with
        ``shifts``).
    shifts
        Optional integer ``(dy, dx)`` shifts of the masks relative to the
        frames: one for all frames, or one per frame as
        ``ApplyMasksUDF.aux_data(shifts, kind="nav", extra_shape=(2,))``.
        A positive shift moves the mask down (right); pixels where mask and
        frame do not overlap are ignored. Frames are then processed one by
        one, dense.

    The masks are applied by :class:`~raytile.udf.maskengine.ApplyMasksEngine`.

    Result: ``intensity`` (nav, ``extra_shape=(n_masks,)``).

    Example::

        >>> from raytile.udf import ApplyMasksUDF, masks
        >>> udf = ApplyMasksUDF(mask_factories=[
        ...     lambda: masks.disk(8, 8, 3, (16, 16)),
        ...     lambda: masks.ring(8, 8, 3, 7, (16, 16)),
        ... ])
        >>> ctx.run_udf(dataset=ds, udf=udf)["intensity"].data.shape  # nav + (2,)
    """

    def __init__(self, mask_factories: Union[MaskFactory, Sequence[MaskFactory]], use_torch: bool = True,
                 use_sparse: bool | str | None = None, mask_count: int | None = None, mask_dtype: Any = None,
                 preferred_dtype: Any = None, backends: Sequence[str] | None = None, shifts: Any = None):
        if shifts is not None and isinstance(use_sparse, str) and use_sparse.startswith("scipy.sparse"):
            # shifted masks are cut in their signal dims, which a 2D scipy.sparse stack does not have
            raise udf_exception_class(ValueError)(
                f"{type(self).__name__}: use_sparse={use_sparse!r} cannot be used with shifts; use "
                f"'sparse.pydata' (LiberTEM's ValueError)")
        super().__init__(mask_factories=mask_factories, use_torch=use_torch, use_sparse=use_sparse,
                         mask_count=mask_count, mask_dtype=mask_dtype, preferred_dtype=preferred_dtype,
                         backends=None if backends is None else tuple(backends), shifts=shifts)
        if backends is not None:
            self.get_backends()  # none of them supported: LiberTEM's ValueError, at construction

    @property
    def masks(self) -> MaskContainer:
        """The masks as a :class:`MaskContainer` for this run's array backend (LiberTEM's ``masks``).

        Needs ``self.meta`` (set while the UDF runs), as in LiberTEM.
        """
        return self._masks(BACKEND_CUPY if self.meta.array_backend in CUPY_BACKENDS else BACKEND_NUMPY)

    def _masks(self, backend: str = BACKEND_NUMPY) -> MaskContainer:
        """The masks as a container for array backend ``backend``.

        On the main node nothing is computed yet. On a worker the container
        is made and its masks computed once per params version (a patch
        makes new ones) and shared by the partitions that follow, with the
        signal regions it has cut (see :mod:`raytile.udf.worker_cache`).
        """
        cache = self.meta.worker_cache
        if cache is None:
            return self._new_masks(backend)
        return cache.get_or_make(("ApplyMasksUDF.masks",) + scope_key(self.meta, backend),
                                 lambda: self._new_masks(backend, compute=True))

    def _new_masks(self, backend: str, compute: bool = False) -> MaskContainer:
        p = self.params
        stack = MaskStack(p.mask_factories, tuple(self.meta.dataset_shape.sig.to_tuple()), type(self).__name__)
        masks = MaskContainer(stack, dtype=p.mask_dtype, use_sparse=p.use_sparse, count=p.mask_count,
                              backend=backend)
        if compute:
            masks.computed_masks  # noqa: B018 (computed here, once, not by each partition that shares it)
        return masks

    # -- UDF interface -------------------------------------------------------
    def get_backends(self) -> tuple[str, ...]:
        # shifted frames are multiplied dense, one by one
        supported = (BACKEND_NUMPY, BACKEND_CUPY) if self.params.shifts is not None else TILE_BACKENDS
        wanted = self.params.backends
        if wanted is None:
            return supported
        chosen = tuple(b for b in wanted if b in supported)
        if not chosen:
            raise udf_exception_class(ValueError)(
                f"{type(self).__name__}: none of backends={wanted} is supported; it supports "
                f"{supported}" + (" with shifts" if self.params.shifts is not None else ""))
        return chosen

    def get_preferred_input_dtype(self) -> Any:
        """``preferred_dtype`` if given; else the data as it is (integer detector frames are multiplied
        in float32 or wider without a converted copy, see :meth:`_product_dtype`), float32 with
        ``shifts``."""
        if self.params.preferred_dtype is not None:
            return self.params.preferred_dtype
        if self.params.shifts is not None:
            return super().get_preferred_input_dtype()
        return self.USE_NATIVE_DTYPE

    def _product_dtype(self, masks: MaskContainer) -> np.dtype:
        """The result's dtype: LiberTEM's, which reads the data as float32 unless ``preferred_dtype`` says
        otherwise (so integer data and masks give float32 products, float64 data float64)."""
        if self.params.preferred_dtype is not None:
            return np.result_type(self.meta.input_dtype, masks.dtype)
        return np.result_type(np.float32, self.meta.input_dtype, masks.dtype)

    def get_method(self) -> Any:
        """Whole tiles, or frame by frame with ``shifts`` (each frame has its own shift)."""
        return "tile" if self.params.shifts is None else "frame"

    def _check_count(self, masks: MaskContainer) -> None:
        """``mask_count`` must be the number of masks the factories make (computes them)."""
        p = self.params
        if p.mask_count is None:
            return
        made = masks.computed_masks.shape[0]
        if made != int(p.mask_count):
            raise UDFException(f"{type(self).__name__}: mask_count={p.mask_count} but the factories make "
                               f"{made} masks")

    def get_result_buffers(self):
        masks = self._masks()
        if self.params.mask_dtype is None:  # the masks are made anyway (for their dtype)
            self._check_count(masks)
        dtype = self._product_dtype(masks)
        return {"intensity": self.buffer(kind="nav", extra_shape=(len(masks),), dtype=dtype, where="device")}

    def get_task_data(self) -> dict[str, Any]:
        backend = BACKEND_CUPY if self.meta.array_backend in CUPY_BACKENDS else BACKEND_NUMPY
        masks = self._masks(backend)
        # with mask_count and mask_dtype both given the main node never makes the masks: the workers,
        # which make them anyway, check the count before a wrongly shaped result is filled
        self._check_count(masks)
        return {"engine": ApplyMasksEngine(masks, self.meta, use_torch=self.params.use_torch,
                                           dtype=self._product_dtype(masks))}

    def merge(self, dest, src) -> None:
        """Copies a partition's intensities, once it is sure that the masks made for the partition are
        as many as those the result was declared with (each place makes its own masks: a factory
        that returns a different number on another call must not have one broadcast into the other)."""
        made, declared = src.intensity.shape[1:], dest.intensity.shape[1:]
        if made != declared:
            raise UDFException(
                f"{type(self).__name__}: the mask factories made {declared[0] if declared else 1} masks on one "
                f"call (the result's shape) and {made[0] if made else 1} on another (for a partition): a mask "
                "factory must return the same masks on every call"
            )
        super().merge(dest, src)

    def process_tile(self, tile) -> None:
        out = self.results.intensity
        out += self.task_data.engine.process_tile(tile).astype(out.dtype, copy=False)

    def process_frame(self, frame) -> None:
        out = self.results.intensity
        res = self.task_data.engine.process_frame_shifted(frame, self.params.shifts)
        out += res.astype(out.dtype, copy=False)
