"""Merged results: `ResultBuffer`, `UDFResults` and the `ResultAccumulator` that builds them."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from raytile.common.buffer_wrappers import AuxBufferWrapper, BufferKind, check_mask_shape
from raytile.common.buffers import get_bbox_slice
from raytile.common.errors import UDFException, udf_exception_class
from raytile.common.shape import Shape
from raytile.runtime.param_versions import ParamVersion
from raytile.runtime.params import PartitionResult
from raytile.runtime.udf_calls import calling_udf
from raytile.udf.base import UDF, ArrayWithMask, MergeAttrMapping, UDFData, check_cast
from raytile.udf.buffers import BufferWrapper, expand_nav

__all__ = ["ResultBuffer", "Damage", "UDFResults", "ResultAccumulator", "expand_nav"]


class ResultBuffer(BufferWrapper):
    """One named result: ``.data`` shaped like the data set, with a validity mask.

    For a ``nav`` buffer ``.data`` has the data set's nav shape (+ extra
    shape); positions outside the ROI are NaN (float results; zero for
    others), positions not yet merged hold the buffer's initial zeros.
    ``.valid_mask`` has the shape of ``.data`` and is False for both.
    ``.raw_data`` is the ROI-compressed array the UDF sees; ``.extra_shape``
    the declared extra shape. ``._valid_mask`` is the valid mask of
    ``.raw_data`` (LiberTEM's name). A result is a
    :class:`~raytile.udf.buffers.BufferWrapper`, as LiberTEM's are
    (``isinstance(res["intensity"], BufferWrapper)``); given to a UDF as a
    parameter, the UDF sees its ``.data``, as there.

    >>> res = ctx.run_udf(dataset=ds, udf=SumUDF())
    >>> res["intensity"].data.shape == tuple(ds.shape.sig)
    True
    """

    def __init__(self, kind: BufferKind, raw_data: np.ndarray, data: np.ndarray, valid_mask: Any,
                 extra_shape: tuple[int, ...] = (), raw_valid_mask: Any = None):
        super().__init__(kind, extra_shape, data.dtype)
        self.data = data
        self._raw_data = raw_data
        self.valid_mask = valid_mask
        self._valid_mask = valid_mask if raw_valid_mask is None else raw_valid_mask

    @property
    def raw_data(self) -> np.ndarray:
        """The array as the UDF's buffer held it: for ``nav`` results flat and ROI-compressed."""
        return self._raw_data

    @property
    def masked_data(self) -> np.ma.MaskedArray:
        """``data`` as a masked array, invalid entries masked (a nav mask covers the extra dims too)."""
        invalid = ~np.asarray(self.valid_mask, dtype=bool)
        invalid = invalid.reshape(invalid.shape + (1,) * (self.data.ndim - invalid.ndim))
        return np.ma.MaskedArray(self.data, mask=np.broadcast_to(invalid, self.data.shape))

    @property
    def raw_masked_data(self) -> np.ma.MaskedArray:
        """``raw_data`` as a masked array, invalid entries masked (LiberTEM's ``raw_masked_data``)."""
        invalid = ~np.asarray(self._valid_mask, dtype=bool)
        invalid = invalid.reshape(invalid.shape + (1,) * (self.raw_data.ndim - invalid.ndim))
        return np.ma.MaskedArray(self.raw_data, mask=np.broadcast_to(invalid, self.raw_data.shape))

    @property
    def valid_slice_bounding(self) -> tuple[slice, ...]:
        """One slice per axis of ``data`` that bounds its valid entries (it may hold invalid ones too;
        empty slices when none is valid), LiberTEM's ``valid_slice_bounding``."""
        valid = np.asarray(self.valid_mask, dtype=bool)
        valid = np.broadcast_to(valid.reshape(valid.shape + (1,) * (self.data.ndim - valid.ndim)), self.data.shape)
        return get_bbox_slice(valid)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.data, dtype=dtype)

    def __repr__(self) -> str:
        return f"<ResultBuffer kind={self.kind} shape={self.data.shape} dtype={self.data.dtype}>"


class Damage:
    """Which nav positions have been merged so far: ``.data`` is a bool nav-shaped map, ``.raw_data`` the same
    over the ROI's positions only (as LiberTEM's damage buffer; ``.data`` when there is no ROI).
    ``np.asarray(damage)`` is ``.data``."""

    def __init__(self, data: np.ndarray, raw_data: np.ndarray | None = None):
        self.data = data
        self.raw_data = data.reshape(-1) if raw_data is None else raw_data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    @property
    def fraction(self) -> float:
        return float(self.data.mean()) if self.data.size else 1.0

    def __repr__(self) -> str:
        return f"<Damage {self.fraction:.0%} merged>"


class UDFResults:
    """A partial or final result of a run.

    ``buffers``: one dict ``name -> ResultBuffer`` per UDF; ``damage``: the
    merged nav positions; ``param_versions``: partition index -> the params
    version it was computed with; ``finished``: True for the last one.
    A stream of several scans gives per-scan results: ``scan`` is the scan
    shown (0-based) and ``scans_done`` how many scans are complete (see
    docs/streams.md); both stay 0 for other data sets. ``frames_dropped``: frames the data set's source
    had lost when the result was taken (a live stream, see ``DataSet.frames_dropped``; 0 for files),
    None for a viewer that did not start the run (``Context.attach``).
    """

    def __init__(self, buffers: Sequence[dict[str, ResultBuffer]], damage: Damage,
                 param_versions: dict[int, int], partitions_done: int, partitions_total: int,
                 finished: bool):
        self.buffers = tuple(buffers)
        self.damage = damage
        self.param_versions = dict(param_versions)
        self.partitions_done = partitions_done
        self.partitions_total = partitions_total
        self.finished = finished
        self.scan = 0
        self.scans_done = 0
        self.frames_dropped: int | None = None

    def __repr__(self) -> str:
        return (f"<UDFResults {self.partitions_done}/{self.partitions_total} partitions, "
                f"finished={self.finished}>")


class ResultAccumulator:
    """Holds the run's full result buffers on the coordinator and merges partitions into them."""

    def __init__(self, udfs: Sequence[UDF], dataset_shape: Shape, roi: np.ndarray | None,
                 metas: Sequence[Any], partition_offsets: dict[int, tuple[int, int]], total_partitions: int):
        self._templates = list(udfs)
        self._metas = list(metas)
        self._shape = dataset_shape
        self._roi = roi
        self._offsets = partition_offsets  # partition idx -> (compressed nav start, frames)
        self._total = total_partitions
        self.reset()

    def reset(self) -> None:
        """Forget everything merged (used when a patch asks to recompute)."""
        n = int(np.count_nonzero(self._roi)) if self._roi is not None else self._shape.nav.size
        sig = self._shape.sig.to_tuple()
        self.udfs: list[UDF] = []
        self._merge_all_parts: list[dict] = []
        for udf, meta in zip(self._templates, self._metas):
            udf.set_meta(meta)
            try:
                buffers = udf.get_result_buffers()
            except UDFException:
                raise
            except Exception as e:
                raise UDFException(
                    f"{type(udf).__name__}.get_result_buffers raised {type(e).__name__}: {e}"
                ) from e
            for buf in buffers.values():
                if buf.use != "result_only":  # results and private buffers are merged here
                    buf.allocate(n, sig)
            udf.results = UDFData(buffers)
            _preprocess_on_main_node(udf, self._roi)
            self.udfs.append(udf)
            self._merge_all_parts.append({})
        self._damage = np.zeros(n, dtype=bool)
        self.versions: dict[int, int] = {}

    def adopt(self, version: ParamVersion) -> None:
        """Merge and compute results with a new version of the parameters from now on (the version's
        patches were checked and applied by :class:`~raytile.runtime.param_versions.ParamVersions`)."""
        for udf, patch in zip(self._templates, version.patches):
            if patch:
                udf.update_parameters(patch)

    @property
    def done(self) -> int:
        return len(self.versions)

    def merge(self, result: PartitionResult, where: str = "") -> None:
        """Merge one partition's buffers; ``where`` (the partition) goes into a failing merge's error."""
        if result.nav_range is not None:
            start, stop = result.nav_range
            count = stop - start
        else:
            start, count = self._offsets[result.idx]
        for i, (udf, part) in enumerate(zip(self.udfs, result.buffers)):
            udf.meta.set_valid_nav_mask(self._damage.copy())
            if udf.overrides("merge_all") and not udf.overrides("merge"):
                self._merge_all_parts[i][start] = part
                continue
            dest = {}
            for name, buf in udf.results.buffers():
                if buf.use == "result_only":
                    continue
                dest[name] = buf.data[start:start + count] if buf.kind == "nav" else buf.data
            missing = set(dest) - set(part)
            if missing:
                raise UDFException(f"{type(udf).__name__}: partition result lacks buffers {sorted(missing)}")
            with calling_udf(udf, "merge", f"while merging {where or 'a partition'}"):
                udf.merge(MergeAttrMapping(dest), MergeAttrMapping(part))
        for idx in result.partitions:  # not the nav range: a segment without nav buffers may have gaps
            first, frames = self._offsets[idx]
            self._damage[first:first + frames] = True
            self.versions[idx] = result.version

    def _apply_merge_all(self, i: int, udf: UDF) -> None:
        parts = self._merge_all_parts[i]
        if not parts:
            return
        ordered = {k: MergeAttrMapping(parts[k]) for k in sorted(parts)}
        merged = udf.merge_all(ordered)
        starts = sorted(parts)
        for name, arr in merged.items():
            buf = udf.results.get_buffer(name)
            if buf.kind == "nav":
                pos = 0
                for s in starts:
                    n = parts[s][name].shape[0]
                    buf.raw_data[s:s + n] = arr[pos:pos + n]
                    pos += n
            else:
                check_cast(np.asarray(arr), buf.raw_data, f"{type(udf).__name__}.{name}")
                buf.raw_data[...] = arr

    def snapshot(self, finished: bool) -> UDFResults:
        """Run every UDF's ``get_results`` on copies of what is merged so far."""
        nav_shape = self._shape.nav.to_tuple()
        damage_full = expand_nav(self._damage.copy(), nav_shape, self._roi, ())  # a snapshot, not a view
        out = []
        for i, udf in enumerate(self.udfs):
            self._apply_merge_all(i, udf)
            udf.meta.set_valid_nav_mask(self._damage.copy())
            udf.results.clear_views()
            with calling_udf(udf, "get_results", ""):  # what it raises stays catchable by its type
                results = udf.get_results()
            declared = dict(udf.results.buffers())
            private = sorted(n for n in results if n in declared and declared[n].use == "private")
            if private:
                raise UDFException(f"{type(udf).__name__}.get_results returned use='private' buffers {private}; "
                                   "private buffers are merged for get_results but are not results")
            undeclared = sorted(str(n) for n in results if n not in declared)
            if undeclared:  # also a KeyError, LiberTEM's type for it
                raise udf_exception_class(KeyError)(
                                   f"{type(udf).__name__}.get_results returned {undeclared}, which "
                                   f"get_result_buffers does not declare (it declares {sorted(declared)}); "
                                   "declare them, with use='result_only' if get_results computes them")
            results = dict(results)
            for name, buf in declared.items():  # declared results get_results leaves out pass through
                if name not in results and buf.use is None:
                    results[name] = buf.data
            out.append({
                name: self._wrap(name, value, declared.get(name), damage_full, nav_shape)
                for name, value in results.items()
            })
        return UDFResults(out, Damage(damage_full, self._damage.copy()), self.versions, self.done, self._total, finished)

    def _raw_nav_mask(self, valid: np.ndarray, full: tuple, raw: tuple) -> np.ndarray:
        """A nav result's valid mask over its ROI-compressed ``raw_data`` (of shape ``raw``)."""
        try:
            flat = np.broadcast_to(valid, full).reshape((-1,) + raw[1:])
        except ValueError:  # a mask of the compressed shape (it fits only that)
            return np.broadcast_to(valid, raw)
        return flat if self._roi is None else flat[np.asarray(self._roi).reshape(-1)]

    def _wrap(self, name: str, value: Any, decl: BufferWrapper | None, damage_full: np.ndarray,
              nav_shape: tuple) -> ResultBuffer:
        mask = None
        if isinstance(value, ArrayWithMask):
            value, mask = value.data, value.mask
        arr = np.array(value, copy=True)
        if decl is not None and decl.kind == "nav":
            extra = decl.extra_shape
            n_compressed = self._damage.size
            compressed = arr.shape[:1] == (n_compressed,) and arr.shape[1:] == tuple(extra)
            if compressed:
                data = expand_nav(arr, nav_shape, self._roi, extra)
            else:
                data = arr.reshape(tuple(nav_shape) + tuple(extra))
            if mask is None:  # the merged nav positions, over the whole result shape (nav + extra)
                valid = np.broadcast_to(damage_full.reshape(damage_full.shape + (1,) * len(extra)),
                                        data.shape).copy()
            else:
                valid = np.asarray(mask)
                check_mask_shape(valid, data.shape, arr.shape)
            if not compressed:  # get_results gave the whole nav shape: raw_data is that, too
                try:
                    full_valid = np.broadcast_to(valid, data.shape).copy()
                except ValueError:  # a mask of raw_data's (flat) shape
                    full_valid = np.broadcast_to(valid, arr.shape).reshape(data.shape).copy()
                return ResultBuffer("nav", arr, data, full_valid, extra_shape=tuple(extra))
            raw_valid = self._raw_nav_mask(valid, data.shape, arr.shape)
            if valid.shape != data.shape:  # a mask of the ROI-compressed result: over the data set's nav, too
                valid = expand_nav(np.broadcast_to(raw_valid, arr.shape), nav_shape, self._roi, extra)
            return ResultBuffer("nav", arr, data, valid, extra_shape=tuple(extra), raw_valid_mask=raw_valid)
        kind = decl.kind if decl is not None else "single"
        # sig and single results are valid as they stand (partial merges included), as in LiberTEM
        valid = np.ones(arr.shape, dtype=bool) if mask is None else check_mask_shape(mask, arr.shape)
        return ResultBuffer(kind, arr, arr, valid, extra_shape=decl.extra_shape if decl is not None else arr.shape)


def _preprocess_on_main_node(udf: UDF, roi: np.ndarray | None) -> None:
    """Run ``preprocess`` once on the main node, with views over the whole data set's buffers, before
    any task (as LiberTEM does: a UDF may, e.g., create an output file there that partitions write to).

    With an ``roi`` the nav buffers hold the ROI's positions only, and so do the aux-data parameters
    there (as in LiberTEM, and as each partition's), so that ``self.results.x[:] = self.params.aux``
    fits."""
    if udf.preprocess is None:
        return
    params = udf.params
    aux = {k: v for k, v in udf._kwargs.items() if isinstance(v, AuxBufferWrapper)}
    if roi is not None and aux:
        flat = np.asarray(roi, dtype=bool).reshape(-1)
        udf.params = UDFData({**udf._kwargs, **{k: v.for_partition(0, flat.size, flat) for k, v in aux.items()}})
    udf.results.set_views({k: b.data for k, b in udf.results.buffers() if b.data is not None})
    try:
        with calling_udf(udf, "preprocess", "(on the main node, before any task)"):
            udf.preprocess()
    finally:
        udf.results.clear_views()
        udf.params = params

