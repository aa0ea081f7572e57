"""The `UDF` base class: the interface every user-defined function follows.

A UDF declares result buffers in :meth:`UDF.get_result_buffers` and
implements one of ``process_tile``, ``process_frame`` or
``process_partition``. The runtime calls that method on every unit of data
with ``self.results`` viewing the part of the buffers that belongs to the
unit, sends the partition's buffers back, and merges them into the full
result with :meth:`UDF.merge`. Example::

    class MaxUDF(UDF):
        def get_result_buffers(self):
            return {"maxval": self.buffer(kind="sig", dtype=self.meta.input_dtype)}

        def process_tile(self, tile):
            self.results.maxval[:] = self.xp.maximum(self.results.maxval, tile.max(axis=0))

        def merge(self, dest, src):
            dest.maxval[:] = np.maximum(dest.maxval, src.maxval)
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence

import numpy as np
import sparseconverter as _sc

from raytile.common.errors import UDFException, UDFRunCancelled, UnsafeCastError
from raytile.common.udf import UDFMethod as _UDFMethodEnum
from raytile.common.buffer_wrappers import (
    ArrayWithMask, AuxBufferWrapper, BufferKind, BufferLocation, BufferUse, BufferWrapper, NavBufferView,
    PlaceholderBufferWrapper,
)
from raytile.udf.meta import UDFMeta
from raytile.udf.protocols import (
    UDFFrameMixin, UDFPartitionMixin, UDFPostprocessMixin, UDFPreprocessMixin, UDFTileMixin,
)

__all__ = [
    "UDF", "UDFData", "MergeAttrMapping", "ArrayWithMask", "UDFMethod", "check_cast", "UDFRunCancelled",
    "UDFFrameMixin", "UDFTileMixin", "UDFPartitionMixin", "UDFPreprocessMixin", "UDFPostprocessMixin",
    "BACKEND_NUMPY",
    "BACKEND_CUPY", "BACKEND_SPARSE_COO", "BACKEND_SPARSE_GCXS", "BACKEND_SCIPY_CSR", "BACKEND_SCIPY_CSC",
    "BACKEND_CUPY_SCIPY_CSR", "BACKEND_CUPY_SCIPY_CSC", "BACKEND_CUDA", "UseDiscouragedWarning", "check_method",
]


class UseDiscouragedWarning(FutureWarning):
    """A feature that works, for LiberTEM's sake, but reads wrong: ``self.results["x"]`` inside a UDF."""

UDFMethod = Literal["tile", "frame", "partition"]

#: Array backend names (the ones sparseconverter uses, plus "cuda").
BACKEND_NUMPY = "numpy"
BACKEND_CUPY = "cupy"
BACKEND_SPARSE_COO = "sparse.COO"
BACKEND_SPARSE_GCXS = "sparse.GCXS"
BACKEND_SCIPY_CSR = "scipy.sparse.csr_matrix"
BACKEND_SCIPY_CSC = "scipy.sparse.csc_matrix"
BACKEND_CUPY_SCIPY_CSR = "cupyx.scipy.sparse.csr_matrix"
BACKEND_CUPY_SCIPY_CSC = "cupyx.scipy.sparse.csc_matrix"
BACKEND_CUDA = "cuda"


class MergeAttrMapping:
    """Attribute access to named arrays; assigning an attribute writes into the array."""

    def __init__(self, arrays: Mapping[str, np.ndarray]):
        object.__setattr__(self, "_arrays", dict(arrays))

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self._arrays[name]
        except KeyError:
            raise AttributeError(f"no buffer named {name!r}; have {sorted(self._arrays)}") from None

    def __setattr__(self, name: str, value) -> None:
        self._arrays[name][...] = value

    def __getitem__(self, name: str) -> np.ndarray:
        """The array ``name``, as attribute access gives it; discouraged, as LiberTEM discourages it
        (a :class:`UseDiscouragedWarning`)."""
        warnings.warn("dict-like access is discouraged, as it can be confusing vs. using attribute access",
                      UseDiscouragedWarning, stacklevel=2)
        return self._arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self._arrays

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def items(self):
        return self._arrays.items()


class UDFData:
    """``self.results`` and ``self.params``: names to buffers, read through the current view.

    Attribute access returns the view for the unit being processed (the
    frame's row of a nav buffer, the tile's slice of a sig buffer) or, for
    plain parameters, the value. Assigning an attribute writes into the view.
    """

    def __init__(self, data: Mapping[str, Any]):
        object.__setattr__(self, "_data", dict(data))
        object.__setattr__(self, "_views", {})
        object.__setattr__(self, "_meta", None)

    def bind_meta(self, meta: UDFMeta | None) -> None:
        """The owning UDF's meta (``UDF.results`` keeps it current): :meth:`get_buffer` reads the data
        set's nav shape and ROI from it."""
        object.__setattr__(self, "_meta", meta)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        views = self._views
        if name in views:
            return views[name]
        try:
            value = self._data[name]
        except KeyError:
            raise AttributeError(f"no buffer or parameter named {name!r}; have {sorted(self._data)}") from None
        if isinstance(value, BufferWrapper):
            return value.data
        return value

    def __setattr__(self, name: str, value) -> None:
        getattr(self, name)[...] = value

    def __getitem__(self, name: str) -> Any:
        """The stored entry itself, as LiberTEM: for a buffer the whole declared buffer (a
        ``BufferWrapper``, which takes no item assignment), not the current view; for a parameter or
        task data entry its value. Discouraged (a :class:`UseDiscouragedWarning`): attribute access
        gives the view, ``get_buffer`` the buffer."""
        warnings.warn("dict-like access is discouraged, as it can be confusing vs. using attribute access. "
                      "Please use `get_buffer` instead, if you really need the `BufferWrapper` and not the "
                      "current view", UseDiscouragedWarning, stacklevel=2)
        if name not in self._data:
            raise KeyError(f"no buffer or parameter named {name!r}; have {sorted(self._data)}")
        return self.get_buffer(name)

    def __contains__(self, name: str) -> bool:
        return name in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def get(self, name: str, default=None):
        try:
            return getattr(self, name)
        except AttributeError:
            return default

    def get_buffer(self, name: str) -> BufferWrapper | NavBufferView:
        """The declared buffer ``name`` itself, not the current view.

        On the main node (``merge``, ``get_results``) an allocated ``nav``
        buffer comes as a :class:`~raytile.udf.buffers.NavBufferView`: its
        ``data`` is shaped like the data set's nav (+ extra shape), NaN or 0
        outside the ROI, and ``raw_data`` is the stored ROI-compressed array,
        as LiberTEM's ``BufferWrapper.data`` / ``raw_data``.
        """
        buf = self._data[name]
        meta = self._meta
        if (isinstance(buf, BufferWrapper) and buf.kind == "nav" and buf.data is not None and meta is not None
                and meta.on_main_node):
            return NavBufferView(buf, meta.dataset_shape.nav.to_tuple(), meta.roi)
        return buf

    def items(self):
        return self._data.items()

    def keys(self):
        return self._data.keys()

    def buffers(self) -> Iterator[tuple[str, BufferWrapper]]:
        for k, v in self._data.items():
            if isinstance(v, BufferWrapper):
                yield k, v

    def set_views(self, views: dict[str, Any]) -> None:
        object.__setattr__(self, "_views", views)

    def clear_views(self) -> None:
        object.__setattr__(self, "_views", {})

    def __repr__(self) -> str:
        return f"UDFData({sorted(self._data)})"


class UDF:
    """Base class of user-defined functions.

    Keyword arguments to the constructor become ``self.params``. Subclasses
    with named parameters pass them on::

        class RingUDF(UDF):
            def __init__(self, ri, ro, **kwargs):
                super().__init__(ri=ri, ro=ro, **kwargs)

    Available while running: ``self.params``, ``self.results``,
    ``self.task_data`` (from :meth:`get_task_data`), ``self.meta``
    (:class:`UDFMeta`) and ``self.xp`` (numpy, or cupy on a GPU).
    """

    #: Ask for the data set's own dtype in ``get_preferred_input_dtype``.
    USE_NATIVE_DTYPE = np.dtype(bool)
    #: ``get_tiling_preferences`` values: any depth / the largest possible depth.
    TILE_DEPTH_DEFAULT = -1
    TILE_DEPTH_MAX = -2
    #: ``total_size`` values: what fits caches best / as large as possible.
    TILE_SIZE_BEST_FIT = -1
    TILE_SIZE_MAX = -2

    BACKEND_NUMPY = BACKEND_NUMPY
    BACKEND_CUPY = BACKEND_CUPY
    BACKEND_SPARSE_COO = BACKEND_SPARSE_COO
    BACKEND_SPARSE_GCXS = BACKEND_SPARSE_GCXS
    BACKEND_SCIPY_CSR = BACKEND_SCIPY_CSR
    BACKEND_SCIPY_CSC = BACKEND_SCIPY_CSC
    BACKEND_CUPY_SCIPY_CSR = BACKEND_CUPY_SCIPY_CSR
    BACKEND_CUPY_SCIPY_CSC = BACKEND_CUPY_SCIPY_CSC
    BACKEND_CUDA = BACKEND_CUDA
    BACKEND_ALL = (
        BACKEND_NUMPY, BACKEND_CUPY, BACKEND_SPARSE_COO, BACKEND_SPARSE_GCXS, BACKEND_SCIPY_CSR,
        BACKEND_SCIPY_CSC, BACKEND_CUPY_SCIPY_CSR, BACKEND_CUPY_SCIPY_CSC, BACKEND_CUDA,
    )
    # The rest of LiberTEM's backend constants, from sparseconverter (UDFs use them in get_backends)
    BACKEND_SPARSE_DOK = _sc.SPARSE_DOK  #: sparse.DOK (slow)
    BACKEND_SCIPY_COO = _sc.SCIPY_COO
    BACKEND_SCIPY_COO_ARRAY = _sc.SCIPY_COO_ARRAY
    BACKEND_SCIPY_CSR_ARRAY = _sc.SCIPY_CSR_ARRAY
    BACKEND_SCIPY_CSC_ARRAY = _sc.SCIPY_CSC_ARRAY
    BACKEND_CUPY_SCIPY_COO = _sc.CUPY_SCIPY_COO
    CPU_BACKENDS = _sc.CPU_BACKENDS  #: frozenset: backends of device class CPU
    CUDA_BACKENDS = _sc.CUDA_BACKENDS  #: frozenset: backends of device class CUDA
    CUPY_BACKENDS = _sc.CUPY_BACKENDS  #: frozenset: backends using CuPy (a subset of CUDA's)
    SPARSE_BACKENDS = _sc.SPARSE_BACKENDS  #: frozenset: sparse array backends
    DENSE_BACKENDS = _sc.DENSE_BACKENDS  #: frozenset: dense array backends
    ND_BACKENDS = _sc.ND_BACKENDS  #: frozenset: backends with N-D arrays
    D2_BACKENDS = _sc.D2_BACKENDS  #: frozenset: backends with 2D matrices only
    UDF_METHOD = _UDFMethodEnum  #: enum of the process_* methods (members equal "tile", "frame", "partition")

    def __init__(self, **kwargs: Any):
        self._kwargs = dict(kwargs)
        self._meta: UDFMeta | None = None
        self.params = UDFData(self._kwargs)
        self.results = UDFData({})
        self.task_data = UDFData({})
        self._backend: str = BACKEND_NUMPY

    @property
    def results(self) -> UDFData:
        """The result buffers, read through the view of the unit being processed."""
        return self._results

    @results.setter
    def results(self, value: UDFData) -> None:
        value.bind_meta(self._meta)
        self._results = value

    # -- parameters and copies --------------------------------------------
    def copy(self) -> "UDF":
        """This instance for another run or the main node: its own attributes, its own parameters.

        As LiberTEM uses the user's own instance on the main node, attributes
        a subclass sets in ``__init__`` (besides the parameters) are kept,
        e.g. LiberTEM's ``RecordUDF``, whose ``_is_master`` flag is not a
        parameter. The copy is shallow, with a parameter dict of its own (a
        patch to it leaves this instance alone) and no results, task data or
        meta. Per partition, :meth:`copy_for_partition` builds a fresh
        instance from the parameters instead.
        """
        new = copy.copy(self)
        new._kwargs = dict(self._kwargs)
        new._meta = None
        new.params = UDFData(new._kwargs)
        new.results = UDFData({})
        new.task_data = UDFData({})
        return new

    def update_parameters(self, patch: Mapping[str, Any]) -> None:
        """Change parameters (a live patch); unknown names are an error."""
        unknown = set(patch) - set(self._kwargs)
        if unknown:
            raise UDFException(
                f"{type(self).__name__} has no parameters {sorted(unknown)}; it has {sorted(self._kwargs)}"
            )
        self._kwargs.update(patch)
        self.params = UDFData(self._kwargs)

    def copy_for_partition(self, start: int, stop: int, roi: np.ndarray | None) -> "UDF":
        """A fresh instance for one partition, built from the constructor arguments (LiberTEM's
        ``new_for_partition``): aux-data parameters hold only the frames ``[start, stop)`` in the
        ROI, and nothing else of this instance's state is carried over."""
        kwargs = {
            k: (v.for_partition(start, stop, roi) if isinstance(v, AuxBufferWrapper) else v)
            for k, v in self._kwargs.items()
        }
        return self.__class__(**kwargs)

    # -- declaration ---------------------------------------------------------
    def get_result_buffers(self) -> dict[str, BufferWrapper]:
        """Declare result buffers with :meth:`buffer`. Called where ``self.meta`` is set."""
        return {}

    def get_task_data(self) -> dict[str, Any]:
        """Per-partition data computed on the worker before processing (e.g. masks)."""
        return {}

    def get_preferred_input_dtype(self) -> Any:
        """dtype the UDF wants its data in; combined with the data set's by ``np.result_type``.

        Return ``UDF.USE_NATIVE_DTYPE`` to get the data set's own dtype.
        """
        return np.dtype(np.float32)

    def get_tiling_preferences(self) -> dict[str, int]:
        """``{"depth": frames, "total_size": bytes}``; either may be left out. A ``process_tile`` UDF that
        needs each frame whole adds ``"whole_frames": True`` (tiles of several whole frames, see
        :func:`raytile.io.negotiator.wants_whole_frames`)."""
        return {"depth": self.TILE_DEPTH_DEFAULT, "total_size": self.TILE_SIZE_BEST_FIT}

    def get_backends(self) -> str | Sequence[str]:
        """Array backends ``process_*`` accepts, in order of preference."""
        return (BACKEND_NUMPY,)

    def get_method(self) -> UDFMethod:
        """Which ``process_*`` runs: tile before frame before partition."""
        cls = type(self)
        for method in ("tile", "frame", "partition"):
            if getattr(cls, f"process_{method}", None) is not None:
                return method
        raise UDFException(
            f"{cls.__name__} implements none of process_tile, process_frame, process_partition"
        )

    def process_function(self) -> Callable[..., Any]:
        """The bound ``process_*`` method :meth:`get_method` picks."""
        return getattr(self, f"process_{self.get_method()}")

    @classmethod
    def overrides(cls, name: str) -> bool:
        """Whether this UDF class implements ``name`` itself (``merge``, ``merge_all``, ...), not the base's."""
        return getattr(cls, name) is not getattr(UDF, name)

    @staticmethod
    def buffer(kind: BufferKind, extra_shape: tuple = (), dtype: Any = "float32", where: BufferLocation = None,
               use: BufferUse = None) -> BufferWrapper:
        """Declare a result buffer (see :class:`~raytile.udf.buffers.BufferWrapper`); a ``result_only``
        one is a :class:`~raytile.udf.buffers.PlaceholderBufferWrapper` (never allocated)."""
        cls = PlaceholderBufferWrapper if use == "result_only" else BufferWrapper
        return cls(kind, extra_shape, dtype, where, use)

    @classmethod
    def aux_data(cls, data: np.ndarray, kind: BufferKind = "nav", extra_shape: tuple = (),
                 dtype: Any = "float32") -> AuxBufferWrapper:
        """Wrap per-frame data to pass as a parameter; the UDF sees the current frame's/tile's part.

        >>> udf = MyUDF(offsets=MyUDF.aux_data(offsets, kind="nav", extra_shape=(2,)))
        """
        return AuxBufferWrapper(data, kind, extra_shape, dtype)

    @staticmethod
    def with_mask(data: np.ndarray, mask: np.ndarray | bool) -> ArrayWithMask:
        """Return from ``get_results`` to give a result its own validity mask."""
        return ArrayWithMask(data, mask)

    # -- running -------------------------------------------------------------
    @property
    def meta(self) -> UDFMeta:
        if self._meta is None:
            raise UDFException(f"{type(self).__name__}.meta is only available while the UDF runs")
        return self._meta

    def set_meta(self, meta: UDFMeta) -> None:
        self._meta = meta
        self._results.bind_meta(meta)

    def set_backend(self, backend: str) -> None:
        self._backend = backend

    @property
    def xp(self):
        """The array module for the current backend: numpy, or cupy on a GPU."""
        if self._backend in (BACKEND_CUPY, BACKEND_CUPY_SCIPY_CSR, BACKEND_CUPY_SCIPY_CSC):
            import cupy

            return cupy
        return np

    def forbuf(self, arr, target):
        """Bring ``arr`` into the array type of the result buffer view ``target``.

        Sparse arrays/matrices and ``np.matrix`` become plain numpy arrays for
        numpy buffers (cupy arrays for cupy buffers); 2D scipy results of a
        matching size are reshaped to ``target.shape``.
        """
        if isinstance(target, np.ndarray):
            if isinstance(arr, np.matrix):
                arr = np.asarray(arr)
            elif not isinstance(arr, np.ndarray) and not np.isscalar(arr):
                from sparseconverter import NUMPY, for_backend

                arr = np.asarray(for_backend(arr, NUMPY))
        elif type(target).__module__.startswith("cupy") and type(arr).__module__.startswith("scipy"):
            arr = self.xp.asarray(arr.toarray())
        shape = getattr(target, "shape", None)
        arr_shape = getattr(arr, "shape", None)
        if (shape is not None and arr_shape is not None and tuple(arr_shape) != tuple(shape)
                and int(np.prod(arr_shape)) == int(np.prod(shape)) and len(arr_shape) == 2
                and 1 in arr_shape):
            arr = arr.reshape(shape)
        return arr

    @property
    def requires_custom_merge(self) -> bool:
        """True if the UDF has buffers the default merge cannot combine (kind sig or single, not
        result_only): it must implement ``merge``. A property, as in LiberTEM."""
        return any(
            buf.kind != "nav" and buf.use != "result_only" for buf in self.get_result_buffers().values()
        )

    def merge(self, dest: MergeAttrMapping, src: MergeAttrMapping) -> None:
        """Merge a partition's results ``src`` into the full results ``dest``.

        The default copies nav buffers, which is all a nav-only UDF needs.
        UDFs with sig or single buffers must implement their own merge.
        """
        for name in src:
            buf = self.results.get_buffer(name)
            if buf.kind != "nav":
                raise UDFException(
                    f"{type(self).__name__} has a {buf.kind!r} buffer {name!r}: implement "
                    f"{type(self).__name__}.merge(dest, src) to combine partitions"
                )
            part, whole = getattr(src, name), getattr(dest, name)
            if np.shape(part)[1:] != np.shape(whole)[1:]:  # never broadcast one into the other
                raise UDFException(
                    f"{type(self).__name__}: a partition's {name!r} has shape {np.shape(part)[1:]} per frame, "
                    f"the result {np.shape(whole)[1:]}: get_result_buffers declared a different extra_shape "
                    "where the partition ran than where the results are merged"
                )
            check_cast(part, whole, f"{type(self).__name__}.{name}")
            whole[...] = part

    def merge_all(self, ordered_results: Mapping[Any, MergeAttrMapping]) -> dict[str, np.ndarray]:
        """Combine all partitions' results at once (nav buffers only by default).

        ``ordered_results`` maps partition slices, in nav order, to their results.
        """
        merged: dict[str, list] = {}
        for part in ordered_results.values():
            for name, arr in part.items():
                buf = self.results.get_buffer(name)
                if buf.kind != "nav":
                    raise UDFException(
                        f"{type(self).__name__} has a {buf.kind!r} buffer {name!r}: implement merge_all"
                    )
                merged.setdefault(name, []).append(arr)
        return {k: np.concatenate(v, axis=0) for k, v in merged.items()}

    def get_results(self) -> dict[str, Any]:
        """Final results from the merged buffers; override to compute derived values.

        Return nav results in the ROI-compressed shape (as buffers hold them),
        optionally wrapped with :meth:`with_mask`. ``result_only`` buffers must
        be returned here.
        """
        out = {}
        for name, buf in self.results.buffers():
            if buf.use == "private":
                continue
            if buf.use == "result_only":
                raise UDFException(  # with LiberTEM's words
                    f"{type(self).__name__}: buffer {name!r} is result_only; compute it in get_results "
                    f"(don't know how to set use='result_only' buffer {name!r}; please implement `get_results`)"
                )
            out[name] = buf.data
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())})"

    # Subclasses implement one of these as methods (left as None so get_method
    # can tell; callers check for None before calling): ``process_tile(tile)``,
    # ``process_frame(frame)``, ``process_partition(partition)``,
    # ``preprocess()`` and ``postprocess()``.
    process_tile: Callable[[Any], Any] | None = None
    process_frame: Callable[[Any], Any] | None = None
    process_partition: Callable[[Any], Any] | None = None
    preprocess: Callable[[], Any] | None = None
    postprocess: Callable[[], Any] | None = None


def check_method(udf: "UDF") -> UDFMethod:
    """``udf.get_method()``, checked before any task runs: a known value whose ``process_*`` exists.

    Raises :class:`UDFException` naming the UDF and what to implement
    (otherwise a worker fails later with "'NoneType' object is not callable").
    """
    name = type(udf).__name__
    method = udf.get_method()
    known = ("tile", "frame", "partition")
    value = getattr(method, "value", method)
    if value not in known:
        raise UDFException(f"{name}.get_method() returned {method!r}; it must return one of {known} "
                           "(or UDF.UDF_METHOD.TILE/FRAME/PARTITION)")
    if getattr(type(udf), f"process_{value}", None) is None:
        raise UDFException(f"{name}.get_method() returned {value!r} but {name} does not implement "
                           f"process_{value}: implement {name}.process_{value} or return another method")
    return value


def check_cast(src: Any, dest: Any, name: str | None = None) -> None:
    """Refuse to merge a partial result ``src`` that would lose precision in the result buffer ``dest``.

    LiberTEM's ``check_cast(fromvar, tovar)``; ``name`` (the UDF and buffer)
    goes into the message. Raises :class:`~raytile.common.errors.UnsafeCastError`,
    a ``UDFException`` and, as LiberTEM's, a ``TypeError``.

    >>> check_cast(np.zeros(2, np.float32), np.zeros(2, np.float64))  # widening is fine
    """
    src_dtype = getattr(src, "dtype", None)
    dest_dtype = getattr(dest, "dtype", None)
    if src_dtype is None or dest_dtype is None:
        return
    if not np.can_cast(src_dtype, dest_dtype, casting="safe"):
        what = "" if name is None else f" {name}"
        raise UnsafeCastError(f"cannot merge{what}: {src_dtype} does not fit safely into {dest_dtype}")


def __getattr__(name: str) -> Any:
    """``NoOpUDF`` at LiberTEM's path ``libertem.udf.base`` (it lives in udf/noop.py, which imports this)."""
    if name == "NoOpUDF":
        from raytile.udf.noop import NoOpUDF

        return NoOpUDF
    if name == "UDFProtocol":  # LiberTEM's interface of a UDF (its constants): raytile's UDF class
        return UDF
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
