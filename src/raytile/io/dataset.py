"""`DataSet` and `Partition`: the data a run reads, split along the nav axis.

What the generic layers (planning, the part runner, the executors, Serve)
need to know about a format is declared here, with neutral defaults that a
format overrides; nothing above io/ probes a data set with ``getattr`` or
``isinstance``:

===========================================  =============================================  ==================
declaration                                  what it says                                   default
===========================================  =============================================  ==================
``DataSet.array_backends``,                  array backends (sparseconverter names) the     ``("numpy",)``
``Partition.array_backends``                 tiles can come in, native one first; the
                                             execution plan picks one, ``get_tiles`` gets
                                             it as ``array_backend``
``DataSet.corrections``                      the data set's own CorrectionSet (used when    ``None``
                                             a run passes none)
``DataSet.partition_source()``               where a run's partitions come from: the fixed  ``FixedPartitions``
                                             list of ``get_partitions()``, or a stream's
                                             that arrive while the run goes on (see
                                             :mod:`raytile.io.partition_source`)
``Partition.frame_delivery``                 how frames reach the worker:                   ``READ``
                                             :class:`FrameDelivery` READ (read where the
                                             task runs: files), SHARED (in-memory frames
                                             shared once through the executor's store:
                                             ``shared_frames()``/``without_frames()``),
                                             CARRIED (they travel inside the task)
``Partition.get_locations()``                hosts where the partition is local             ``None`` (anywhere)
``Partition.get_base_shape(roi)``            native tile shape: tile shapes are multiples   ``(1, 1, ..., 1)``
``Partition.adjust_tileshape(shape, roi)``   the format's veto on a negotiated tile shape   unchanged
``Partition.get_io_size()``                  bytes one read should fetch; the negotiator's  ``None`` (the
                                             tile size when no UDF asks for one             negotiator's)
``DataSet.frames_dropped()``                 frames the source lost so far (a live stream), ``0``
                                             counted in each partial result
``DataSet.params_schema``                    constructor parameters; ``Context.load``,      base parameters
                                             JSON loading and Serve's JSON schema are
                                             built from it
===========================================  =============================================  ==================

``Partition.get_tiles(tiling_scheme, roi=None, dest_dtype=None,
array_backend=None)`` has this one signature for every format. A format
that overrides it with the older three-argument form is adapted when its
class is made: it yields its native backend, and is asked for no other.
``DataSet.initialize`` takes a :class:`WorkerAccess` (an executor, the
Context's run host, or any object with ``num_workers`` and
``run_function``).
"""

from __future__ import annotations

import enum
import functools
import inspect
import math
import warnings
from abc import ABC, ABCMeta, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence, TypeVar, cast, runtime_checkable

import numpy as np
import sparseconverter

from raytile.common.errors import ConfigValidationError, DataSetException, DataSetWarning
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.sparse import to_dense, to_sparse
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io.corrections import CorrectionSet
from raytile.io.params import ParamSpec, show, validate_params

if TYPE_CHECKING:
    from raytile.io.partition_source import PartitionSource

__all__ = [
    "DataSet", "DataSetType", "DataSetMeta", "Partition", "FrameDelivery", "WorkerAccess", "dataset_from_json",
    "validate_roi", "partition_slices", "choose_num_partitions", "iter_array_tiles", "DEFAULT_PARTITION_BYTES",
    "NUMPY_BACKENDS", "check_array_backend", "get_dataset_cls",
]

#: Partition size aimed for by default, in bytes of raw data.
DEFAULT_PARTITION_BYTES = 128 * 1024 * 1024
#: The array backends of a format that declares none: dense numpy tiles.
NUMPY_BACKENDS: tuple[str, ...] = ("numpy",)

T = TypeVar("T")


class FrameDelivery(enum.Enum):
    """How a partition's frames reach the worker that runs its task (``Partition.frame_delivery``)."""

    #: The partition reads its frames where the task runs (files, a detector's buffers).
    READ = "read"
    #: In-memory frames that an executor shares with its workers once (``Partition.shared_frames``); the
    #: task goes without them (``Partition.without_frames``) and the worker gets them from the share.
    SHARED = "shared"
    #: The frames travel inside the task (small or sparse in-memory data).
    CARRIED = "carried"


@runtime_checkable
class WorkerAccess(Protocol):
    """What :meth:`DataSet.initialize` needs of the Context's executor: how many workers it has (a data
    set picks at least that many partitions) and a way to run a function on one (to read headers where
    the files are). Executors and the Context's run hosts provide both."""

    @property
    def num_workers(self) -> int: ...

    def run_function(self, fn: Callable[..., T], *args: Any) -> T: ...


@dataclass(frozen=True)
class DataSetMeta:
    """What every partition needs to know about its data set."""

    shape: Shape
    raw_dtype: np.dtype
    sync_offset: int = 0
    extra: dict = field(default_factory=dict)
    #: Frames the data holds (LiberTEM's ``image_count``; a file may hold more or fewer than the nav
    #: shape has positions). None: as many as nav positions.
    image_count: int | None = None

    def __post_init__(self) -> None:
        if self.image_count is None:
            object.__setattr__(self, "image_count", self.shape.nav.size)

    @property
    def num_frames(self) -> int:
        return self.shape.nav.size


def partition_slices(shape: Shape, num_partitions: int) -> list[Slice]:
    """Split the flat nav axis of ``shape`` into ``num_partitions`` near-equal slices."""
    n = shape.nav.size
    num_partitions = max(1, min(num_partitions, n))
    bounds = np.linspace(0, n, num_partitions + 1).astype(np.int64)
    sig = shape.sig.to_tuple()
    return [
        Slice((int(a),) + (0,) * len(sig), Shape((int(b - a),) + sig, sig_dims=len(sig)))
        for a, b in zip(bounds[:-1], bounds[1:])
        if b > a
    ]


def choose_num_partitions(
    shape: Shape, dtype: np.dtype, num_workers: int = 1, target_bytes: int = DEFAULT_PARTITION_BYTES
) -> int:
    """Enough partitions to keep each near ``target_bytes``, and at least one per worker."""
    total = shape.size * np.dtype(dtype).itemsize
    return max(1, min(shape.nav.size, max(math.ceil(total / target_bytes), num_workers)))


class RoiHelper:
    """``ds.roi[index]``: a bool array of the data set's nav shape, True at ``index``."""

    def __init__(self, ds: "DataSet"):
        self._ds = ds

    def __getitem__(self, index: Any) -> np.ndarray:
        roi = np.zeros(self._ds.shape.nav.to_tuple(), dtype=bool)
        roi[index] = True
        return roi


def validate_roi(roi: Any, shape: Shape) -> np.ndarray | None:
    """Check an ROI against the nav shape; return it as a flat bool array (or None).

    Accepted as LiberTEM accepts them: a dense array, a sparse array (``sparse.COO``,
    ``scipy.sparse``...), a list of ``((y, x), value)`` entries with one truth value, and
    a non-bool array, cast to bool with LiberTEM's ``UserWarning``.
    """
    if roi is None:
        return None
    nav = shape.nav.to_tuple()
    try:
        if isinstance(roi, (list, tuple)) and roi and _is_coordinate_list(roi):
            roi = to_dense(to_sparse(roi, shape=nav))
        elif not isinstance(roi, np.ndarray) and sparseconverter.get_backend(roi) is not None:
            roi = to_dense(roi)
        roi = np.asarray(roi)
    except ValueError:  # a ragged nested list, coordinates with mixed truth values
        raise DataSetException(f"roi must be a boolean array of the nav shape {nav}, got {show(roi)}") from None
    if roi.dtype != bool:
        if roi.dtype.kind not in "biuf":
            raise DataSetException(f"roi must be a boolean array, got dtype {roi.dtype}")
        warnings.warn(f"ROI dtype is {roi.dtype}, expected bool. Attempting cast to bool.", stacklevel=3)
        roi = roi.astype(bool)
    if roi.shape != nav and roi.shape != (math.prod(nav),):
        raise DataSetException(
            f"roi shape {roi.shape} does not match the data set's nav shape {nav}"
        )
    return roi.reshape(-1)


def _is_coordinate_list(roi: Sequence[Any]) -> bool:
    """``[((y, x), True), ...]`` or one coordinate ``(y, x)``: an ROI given sparsely (see ``to_sparse``)."""
    return all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in roi) or all(
        isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[0], (list, tuple)) for e in roi)


class Partition(ABC):
    """A contiguous run of frames of a data set, read by one task.

    Subclasses provide frame data through :meth:`get_tiles`. The base class
    implements tiling over an array-like source (:meth:`_source`), reading
    "straight" (views, no copy) when no ROI and no dtype conversion is asked
    for, and into a reused buffer otherwise. What a format declares to the
    generic layers is listed in this module's docstring.
    """

    #: Array backends the tiles can come in, native one first (see the module doc).
    array_backends: tuple[str, ...] = NUMPY_BACKENDS
    #: How the frames reach the worker that runs the partition's task.
    frame_delivery: FrameDelivery = FrameDelivery.READ

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("get_tiles")
        if own is not None and "array_backend" not in inspect.signature(own).parameters:
            cls.get_tiles = _with_array_backend(own)  # type: ignore[method-assign]

    @property
    def native_backend(self) -> str:
        """The backend tiles come in unless another is asked for: the first of :attr:`array_backends`."""
        return self.array_backends[0]

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int):
        self.meta = meta
        self.slice = partition_slice
        self.idx = idx

    @property
    def shape(self) -> Shape:
        return self.slice.shape

    @property
    def start(self) -> int:
        return self.slice.origin[0]

    @property
    def stop(self) -> int:
        return self.slice.origin[0] + self.slice.shape[0]

    def get_base_shape(self, roi: np.ndarray | None) -> tuple[int, ...]:
        """Tile shapes are multiples of this; override for natively tiled layouts."""
        return (1,) + (1,) * self.meta.shape.sig_dims

    def adjust_tileshape(self, tileshape: tuple[int, ...], roi: np.ndarray | None) -> tuple[int, ...]:
        """Last word on a tile shape; override to veto shapes the format cannot read."""
        return tileshape

    def get_locations(self) -> Sequence[str] | None:
        """Hosts where this partition is local, or None for anywhere."""
        return None

    def get_io_size(self) -> int | None:
        """Bytes one tile should hold when no UDF asks for a size (the format's best read size), or None
        for the negotiator's default (:data:`raytile.io.negotiator.DEFAULT_TILE_BYTES`)."""
        return None

    def shared_frames(self) -> Any:
        """The frames an executor shares with its workers once (``frame_delivery`` SHARED), else None."""
        return None

    def without_frames(self) -> "Partition":
        """This partition without the frames it carries, to send where they arrive another way (SHARED
        frames); the partition itself when it carries none."""
        return self

    def count_frames(self, roi: np.ndarray | None) -> int:
        if roi is None:
            return self.shape[0]
        return int(np.count_nonzero(roi[self.start:self.stop]))

    def roi_offset(self, roi: np.ndarray | None) -> int:
        """Index of this partition's first frame in the ROI-compressed nav space."""
        if roi is None:
            return self.start
        return int(np.count_nonzero(roi[: self.start]))

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop})"

    @abstractmethod
    def _source(self) -> Any:
        """This partition's frames as an array-like ``(frames, *sig)`` (an mmap view, an ndarray)."""

    def get_tiles(
        self,
        tiling_scheme: TilingScheme,
        roi: np.ndarray | None = None,
        dest_dtype: Any = None,
        array_backend: str | None = None,
    ) -> Iterator[DataTile]:
        """Yield this partition's tiles in nav order, all signal slices per nav block.

        ``array_backend``: one of :attr:`array_backends` (None: the native one).
        Reads "straight" (views of the source, no copy) when there is no ROI
        and no dtype conversion; otherwise gathers and converts into buffers
        reused from tile to tile, so a UDF must not keep a tile past its call.
        """
        check_array_backend(self, array_backend)
        source = self._source()
        dest_dtype = np.dtype(dest_dtype if dest_dtype is not None else self.meta.raw_dtype)
        part_roi = None if roi is None else roi[self.start:self.stop]
        nav_origin = self.roi_offset(roi)
        yield from iter_array_tiles(source, tiling_scheme, part_roi, dest_dtype, nav_origin)


def check_array_backend(partition: Partition, array_backend: str | None) -> None:
    """Raise DataSetException if ``array_backend`` is not one the partition declares."""
    if array_backend is not None and array_backend not in partition.array_backends:
        raise DataSetException(f"{partition.describe()} yields {', '.join(partition.array_backends)} tiles, "
                               f"not array_backend={array_backend!r}")


def _with_array_backend(get_tiles: Callable[..., Iterator[DataTile]]) -> Callable[..., Iterator[DataTile]]:
    """A format's ``get_tiles(tiling_scheme, roi, dest_dtype)`` with the one signature: it yields its
    native backend and is asked for no other (see the module doc)."""

    @functools.wraps(get_tiles)
    def adapted(self: Partition, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        if array_backend not in (None, self.native_backend):
            raise DataSetException(f"{self.describe()} yields only {self.native_backend} tiles, "
                                   f"not array_backend={array_backend!r}")
        return get_tiles(self, tiling_scheme, roi=roi, dest_dtype=dest_dtype)

    return adapted


def _initialize_on_worker(ds: "DataSet"):
    """Body of ``DataSet.initialize`` run on a worker: returns the meta and the state it set."""
    meta = ds._do_initialize()
    ds._meta = meta
    ds.check_valid()
    return meta, ds.__dict__


def dataset_from_json(params: dict[str, Any]) -> "DataSet":
    """A data set from JSON parameters with a ``"type"`` (or ``"format"``) key naming the format."""
    from raytile.io.formats import get_format

    if not isinstance(params, dict):
        raise ConfigValidationError(f"data set parameters must be an object, got {type(params).__name__}")
    name = params.get("type", params.get("format"))
    if not isinstance(name, str):
        raise ConfigValidationError("data set parameters need a 'type' naming the format, e.g. 'raw'")
    try:
        cls = get_format(name)
    except DataSetException as e:
        raise ConfigValidationError(str(e)) from None
    return cls(**{k: v for k, v in params.items() if k not in ("type", "format")})


def iter_array_tiles(
    source, scheme: TilingScheme, roi: np.ndarray | None, dest_dtype: np.dtype, nav_origin: int,
) -> Iterator[DataTile]:
    """Tile an array-like ``(frames, *sig)`` ``source`` by ``scheme``.

    ``roi`` is a flat bool mask over the source's frames (or None);
    ``nav_origin`` is the (ROI-compressed) nav index of the first frame yielded.
    """
    depth = scheme.depth
    sig_dims = len(scheme.sig_shape)
    straight = roi is None and np.dtype(source.dtype) == dest_dtype
    frame_idx = None if roi is None else np.flatnonzero(roi)
    n = source.shape[0] if frame_idx is None else len(frame_idx)
    buffers: dict[tuple, np.ndarray] = {}
    for block_start in range(0, n, depth):
        block_stop = min(block_start + depth, n)
        count = block_stop - block_start
        nav_sl: slice | np.ndarray
        if frame_idx is None:
            nav_sl = slice(block_start, block_stop)
        else:
            idx = frame_idx[block_start:block_stop]
            contiguous = idx[-1] - idx[0] + 1 == len(idx)
            nav_sl = slice(idx[0], idx[-1] + 1) if contiguous else idx
        for scheme_idx, sig_slice in enumerate(scheme.slices):
            tile_slice = Slice(
                (nav_origin + block_start,) + sig_slice.origin,
                Shape((count,) + sig_slice.shape.to_tuple(), sig_dims=sig_dims),
            )
            src = source[(nav_sl,) + sig_slice.get()]
            if straight:
                data = src
            elif not isinstance(src, np.ndarray) and hasattr(src, "astype"):
                # a sparse (or device) source keeps its format: no dense buffer to copy it into
                data = src if np.dtype(src.dtype) == dest_dtype else src.astype(dest_dtype)
            else:
                shape = (count,) + sig_slice.shape.to_tuple()
                buf = buffers.get(shape)
                if buf is None:
                    buf = buffers[shape] = np.empty(shape, dtype=dest_dtype)
                np.copyto(buf, src, casting="unsafe")
                data = buf
            yield DataTile(data, tile_slice, scheme_idx)


def _taking_executor(detect: Callable[..., Any]) -> Callable[..., Any]:
    """A format's ``detect_params(cls, path)`` that also takes LiberTEM's ``executor`` argument."""
    @functools.wraps(detect)
    def detect_params(cls: Any, path: str, executor: Any = None, **kwargs: Any) -> Any:
        return detect(cls, path, **kwargs)

    setattr(detect_params, "takes_executor", True)
    return detect_params


class DataSetType(ABCMeta):
    """Metaclass of :class:`DataSet`: calling a format class validates its arguments first.

    ``Context.load``, :func:`dataset_from_json` and direct construction all
    call the class, so all go through :meth:`DataSet.validate_params`, and
    constructors receive checked values in canonical form.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        params = cast("type[DataSet]", cls).validate_params(*args, **kwargs)
        return super().__call__(**params)


class DataSet(metaclass=DataSetType):
    """A data set: nav x sig frames of one dtype, split into partitions.

    Formats subclass this and implement :meth:`_do_initialize` (open files, read
    headers, check sizes) and :meth:`get_partitions`, and declare every
    constructor parameter in ``params_schema`` (see :mod:`raytile.io.params`).
    """

    #: Name under which ``Context.load`` finds this format.
    format_name: str = ""

    #: Read headers on a worker through ``executor.run_function`` (file formats);
    #: in-memory formats keep it False so their data is not shipped around.
    initialize_on_worker: bool = False

    #: Array backends the tiles can come in, native one first (see the module doc).
    array_backends: tuple[str, ...] = NUMPY_BACKENDS

    #: Constructor parameters, merged along the class hierarchy by :meth:`get_params_schema`:
    #: name -> {"type": a kind of :data:`raytile.io.params.CHECKS`, "required": bool, "min", "max", "choices"}.
    params_schema: dict[str, ParamSpec] = {
        "num_partitions": {"type": "int", "min": 1},
        "partition_bytes": {"type": "int", "min": 1},
        "corrections": {"type": "corrections"},
    }

    def __init__(self, num_partitions: int | None = None, partition_bytes: int = DEFAULT_PARTITION_BYTES,
                 corrections: Any = None):
        self._meta: DataSetMeta | None = None
        self._num_partitions = num_partitions
        self._partition_bytes = partition_bytes
        self._num_workers = 1
        self._corrections = corrections

    @property
    def native_backend(self) -> str:
        """The backend tiles come in unless another is asked for: the first of :attr:`array_backends`."""
        return self.array_backends[0]

    @property
    def corrections(self) -> CorrectionSet | None:
        """The data set's own :class:`~raytile.io.corrections.CorrectionSet` (used when a run passes none)."""
        return self._corrections

    # -- lifecycle ---------------------------------------------------------
    def initialize(self, workers: WorkerAccess | None = None) -> "DataSet":
        """Open the data set and check it; returns ``self``. Called by ``Context.load``.

        ``workers``: the Context's executor or run host (see :class:`WorkerAccess`); the data set
        picks at least ``workers.num_workers`` partitions. With ``initialize_on_worker`` the header
        reading and :meth:`check_valid` run through ``workers.run_function`` (on a worker, where the
        files are), and the state they set comes back to this object.
        """
        self._load_warnings = []
        if workers is not None and not isinstance(workers, WorkerAccess):
            raise DataSetException(f"initialize needs an executor (num_workers and run_function), "
                                   f"got {type(workers).__name__}")
        if workers is not None:
            self._num_workers = max(1, int(workers.num_workers))
        if self.initialize_on_worker and workers is not None:
            meta, state = workers.run_function(_initialize_on_worker, self)
            if state is not None and state is not self.__dict__:
                state = {k: v for k, v in state.items() if k != "_num_workers"}
                self.__dict__.update(state)
            self._meta = meta
        else:
            self._meta = self._do_initialize()
            self.check_valid()
        for message in self._load_warnings:  # here, in the driver, wherever the files were opened
            warnings.warn(message, DataSetWarning, stacklevel=3)  # at the caller of Context.load
        return self

    #: what opening the data set found suspicious (see :meth:`warn_on_load`)
    _load_warnings: list[str] = []

    @property
    def load_warnings(self) -> list[str]:
        """What opening the data set found suspicious, e.g. a raw file with more frames than
        ``nav_shape`` reads: each is also a :class:`~raytile.common.errors.DataSetWarning` raised by
        ``Context.load``, and an entry of ``warnings`` in the Serve stream."""
        return list(self._load_warnings)

    def warn_on_load(self, message: str) -> None:
        """Note ``message`` while opening (in :meth:`_do_initialize`, maybe on a worker); the driver
        raises it as a :class:`~raytile.common.errors.DataSetWarning`."""
        self._load_warnings = [*self._load_warnings, message]

    # -- parameters ----------------------------------------------------------
    @classmethod
    def get_params_schema(cls) -> dict[str, ParamSpec]:
        """The merged parameter schema of this class and its bases."""
        schema: dict[str, ParamSpec] = {}
        for klass in reversed(cls.__mro__):
            schema.update(getattr(klass, "params_schema", {}) or {})
        return schema

    @classmethod
    def validate_params(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Constructor arguments checked against :meth:`get_params_schema`, as keyword arguments.

        Positional arguments are named after the constructor's signature.
        Raises :class:`~raytile.common.errors.ConfigValidationError` naming
        the parameter and the value.
        """
        owner = cls.format_name or cls.__name__
        names = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                 if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
        if len(args) > len(names):
            raise ConfigValidationError(f"{owner}: takes at most {len(names)} positional parameters "
                                        f"({', '.join(names)}), got {len(args)}")
        for name, value in zip(names, args):
            if name in kwargs:
                raise ConfigValidationError(f"{owner}: parameter {name!r} is given twice")
            kwargs[name] = value
        return validate_params(owner, cls.get_params_schema(), kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("detect_params")
        if isinstance(own, classmethod) and not getattr(own.__func__, "takes_executor", False):
            setattr(cls, "detect_params", classmethod(_taking_executor(own.__func__)))

    @classmethod
    def detect_params(cls, path: str) -> dict[str, Any] | None:
        """The constructor parameters this format finds in the file at ``path``, or None if not its file.

        LiberTEM's ``executor`` argument (``detect_params(path, executor)``) is accepted too and not
        used (the header is read where this is called): ``__init_subclass__`` wraps every override.

        Used by ``ctx.load("auto", path=...)`` (:mod:`raytile.io.formats.auto`):
        formats look at the extension, magic bytes and header only (no full
        read) and return at least ``{"path": ...}``. A file that is clearly
        this format's but broken may raise DataSetException naming the
        problem. The base class places no file.

        >>> NPYDataSet.detect_params("scan.npy")  # doctest: +SKIP
        {'path': 'scan.npy'}
        """
        return None

    @abstractmethod
    def _do_initialize(self) -> DataSetMeta:
        """Read headers and return the data set's meta (may run on a worker)."""

    def check_valid(self) -> None:
        """Raise DataSetException if the data set cannot be read as declared."""

    def get_cache_key(self) -> Any:
        """A key that differs between data sets returning different data."""
        return (type(self).__name__, id(self))

    def get_diagnostics(self) -> list[dict[str, Any]]:
        """Name/value pairs describing the data set, for GUIs and logs."""
        return [
            {"name": "shape", "value": str(self.shape.to_tuple())},
            {"name": "dtype", "value": str(self.dtype)},
            {"name": "partitions", "value": str(len(self.get_partitions()))},
        ]

    @property
    def diagnostics(self) -> list[dict[str, Any]]:
        """LiberTEM's ``DataSet.diagnostics``: :meth:`get_diagnostics` and the partitions' shape."""
        parts = self.get_partitions()
        return self.get_diagnostics() + [{"name": "partition shape", "value": str(parts[0].shape.to_tuple())}]

    # -- properties --------------------------------------------------------
    @property
    def meta(self) -> DataSetMeta:
        if self._meta is None:
            raise DataSetException(f"{type(self).__name__} is not initialized; load it with Context.load")
        return self._meta

    @property
    def shape(self) -> Shape:
        return self.meta.shape

    @property
    def dtype(self) -> np.dtype:
        return self.meta.raw_dtype

    @property
    def num_partitions(self) -> int:
        if self._num_partitions is not None:
            return max(1, min(int(self._num_partitions), self.shape.nav.size))
        return choose_num_partitions(self.shape, self.dtype, self._num_workers, self._partition_bytes)

    def set_num_cores(self, cores: int) -> None:
        """LiberTEM's way to say how many workers will read: at least that many partitions by default."""
        self._num_workers = max(1, int(cores))

    def get_slices(self) -> list[Slice]:
        return partition_slices(self.shape.flatten_nav(), self.num_partitions)

    @property
    def roi(self) -> "RoiHelper":
        """ROIs by indexing (LiberTEM's ``ds.roi``): ``ds.roi[0:5, 2:7]`` is a nav-shaped bool array, True
        where the index selects."""
        return RoiHelper(self)

    def get_base_shape(self, roi: np.ndarray | None) -> tuple[int, ...]:
        """The shape tiles of this data set are multiples of (``(depth, *sig)``), as LiberTEM's
        ``DataSet.get_base_shape``: its first partition's."""
        return tuple(self.get_partitions()[0].get_base_shape(roi))

    @abstractmethod
    def get_partitions(self) -> list[Partition]:
        """All partitions, in nav order."""

    def partition_source(self) -> "PartitionSource":
        """Where a run gets its partitions (:mod:`raytile.io.partition_source`): by default the fixed
        list of :meth:`get_partitions`, known at planning (files, memory); a stream returns its
        :class:`~raytile.io.partition_source.StreamedPartitions` (partitions arrive while the run goes
        on), and raises DataSetException if a run read it already."""
        from raytile.io.partition_source import FixedPartitions  # it imports this module

        return FixedPartitions()

    def frames_dropped(self) -> int:
        """Frames the data set's source has lost so far (a live stream whose sender dropped frames past
        its buffer: they read as zero frames, see raytile.live): each partial result of a run counts
        them (``UDFResults.frames_dropped``). 0 for files and memory."""
        return 0

    def __repr__(self) -> str:
        if self._meta is None:
            return f"<{type(self).__name__} (not initialized)>"
        return f"<{type(self).__name__} shape={self.shape.to_tuple()} dtype={self.dtype}>"


def get_dataset_cls(filetype: "str | type[DataSet]") -> type[DataSet]:
    """The data set class of a format name (LiberTEM's ``libertem.io.dataset.get_dataset_cls``); a class
    is returned as it is. DataSetException for an unknown name."""
    if not isinstance(filetype, str):
        return filetype
    from raytile.io.formats import get_format  # the registry imports the formats, which import this module

    return get_format(filetype)


# the base's own detect_params takes LiberTEM's executor argument too (__init_subclass__ wraps subclasses')
setattr(DataSet, "detect_params", classmethod(_taking_executor(DataSet.__dict__["detect_params"].__func__)))

# LiberTEM's modules under ``libertem.io.dataset`` (``.memory``, ``.base``, ``.hdf5``, ``.raw``,
# ``.raw_csr``, ``.npy``) are found at their ported paths (``raytile.io.dataset.memory`` ...) in the
# package io/_dataset: this module stays one module and lends that directory as its package path.
__path__ = [__import__("os").path.join(__import__("os").path.dirname(__file__), "_dataset")]
