"""`DataSet`: nav x sig frames of one dtype, split into partitions; its lifecycle (``initialize``, on a
worker for files), its parameter schema, and the format registry's entry points
(:func:`dataset_from_json`, :func:`get_dataset_cls`)."""

from __future__ import annotations

import inspect
import warnings
from abc import ABCMeta, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Literal, Protocol, TypeVar, cast, runtime_checkable

import numpy as np

from raytile.common.errors import ConfigValidationError, DataSetException, DataSetWarning
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.io.corrections import CorrectionSet
from raytile.io.dataset.meta import DataSetMeta
from raytile.io.dataset.partition import (
    DEFAULT_PARTITION_BYTES, NUMPY_BACKENDS, Partition, choose_num_partitions, partition_slices,
)
from raytile.io.dataset.roi import RoiHelper
from raytile.io.params import ParamSpec, validate_params

if TYPE_CHECKING:
    from raytile.io.partition_source import PartitionSource

__all__ = ["DataSet", "DataSetType", "WorkerAccess", "dataset_from_json", "get_dataset_cls"]

T = TypeVar("T")


@runtime_checkable
class WorkerAccess(Protocol):
    """What :meth:`DataSet.initialize` needs of the Context's executor: how many workers it has (a data
    set picks at least that many partitions) and a way to run a function on one (to read headers where
    the files are). Executors and the Context's run hosts provide both."""

    @property
    def num_workers(self) -> int: ...

    def run_function(self, fn: Callable[..., T], *args: Any) -> T: ...


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

    #: Extensions (lower case, without the dot) of this format's files, as LiberTEM's
    #: ``get_supported_extensions()`` gives them; ``auto`` and :func:`raytile.io.formats.get_extensions`
    #: read them. Formats found by magic bytes alone, or without files, list none.
    file_extensions: tuple[str, ...] = ()

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

    @classmethod
    def detect_params(cls, path: str, executor: Any = None) -> dict[str, Any] | Literal[False]:
        """LiberTEM's answer to "is ``path`` this format's file?": ``{"parameters": {...}, "info": {...}}``
        or False.

        ``parameters`` are the constructor parameters :meth:`_detect_params` finds; ``info`` holds
        ``image_count`` and ``native_sig_shape`` where the parameters give the shapes. A file this
        format refuses (also one that is broken) gives False, as in LiberTEM; ``ctx.load("auto", ...)``
        asks :meth:`_detect_params` to keep the reason. ``executor`` (LiberTEM's argument) is accepted
        and not used: the header is read where this is called.

        >>> NPYDataSet.detect_params("scan.npy")  # doctest: +SKIP
        {'parameters': {'path': 'scan.npy', 'nav_shape': (16, 16), 'sig_shape': (128, 128)},
         'info': {'image_count': 256, 'native_sig_shape': (128, 128)}}
        """
        try:
            params = cls._detect_params(path)
        except (DataSetException, OSError, ValueError, TypeError):
            return False
        if params is None:
            return False
        info: dict[str, Any] = {}
        if params.get("nav_shape") is not None:
            info["image_count"] = int(np.prod(params["nav_shape"]))
        if params.get("sig_shape") is not None:
            info["native_sig_shape"] = tuple(params["sig_shape"])
        return {"parameters": dict(params), "info": info}

    @classmethod
    def _detect_params(cls, path: str) -> dict[str, Any] | None:
        """The constructor parameters this format finds in the file at ``path``, or None if not its file.

        Used by ``ctx.load("auto", path=...)`` (:mod:`raytile.io.formats.auto`) and
        :meth:`detect_params`: formats look at the extension, magic bytes and header only (no full
        read) and return at least ``{"path": ...}``. A file that is clearly this format's but broken
        may raise DataSetException naming the problem. The base class places no file.
        """
        return None

    @classmethod
    def get_supported_extensions(cls) -> set[str]:
        """LiberTEM's name for :attr:`file_extensions`: the extensions of this format's files, as a set."""
        return set(cls.file_extensions)

    @classmethod
    def has_file_extension(cls, path: str) -> bool:
        """Whether ``path`` ends in one of :attr:`file_extensions` (any case)."""
        return str(path).lower().endswith(tuple("." + ext for ext in cls.file_extensions))

    @abstractmethod
    def _do_initialize(self) -> DataSetMeta:
        """Read headers and return the data set's meta (may run on a worker)."""

    def check_valid(self) -> bool | None:
        """Raise DataSetException if the data set cannot be read as declared (formats at LiberTEM's paths
        whose LiberTEM ``check_valid`` answers True return True)."""

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

    def get_num_partitions(self) -> int:
        """LiberTEM's name for :attr:`num_partitions`: how many partitions a run of this data set reads."""
        return self.num_partitions

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

