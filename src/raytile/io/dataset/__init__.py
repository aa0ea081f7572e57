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

The package holds one concept a module: :mod:`.meta` (``DataSetMeta``),
:mod:`.partition` (``Partition``, ``FrameDelivery``, splitting the nav axis),
:mod:`.roi` (``validate_roi``, ``ds.roi[...]``), :mod:`.tiles` (tiling an
array-like source) and :mod:`.dataset` (``DataSet``, its parameters and
lifecycle). The other modules here are LiberTEM's ``libertem.io.dataset.*``
at their ported paths (``from libertem.io.dataset.memory import
MemoryDataSet`` becomes ``from raytile.io.dataset.memory import
MemoryDataSet``): they hold LiberTEM's names and parameters, while the
formats themselves live in :mod:`raytile.io.formats`.
"""

from raytile.io.dataset.dataset import DataSet, DataSetType, WorkerAccess, dataset_from_json, get_dataset_cls
from raytile.io.dataset.meta import DataSetMeta
from raytile.io.dataset.partition import (
    DEFAULT_PARTITION_BYTES, NUMPY_BACKENDS, FrameDelivery, Partition, TakesFrames, check_array_backend,
    choose_num_partitions, partition_slices,
)
from raytile.io.dataset.roi import RoiHelper, RoiLike, roi_nav_indices, validate_roi
from raytile.io.dataset.tiles import iter_array_tiles

__all__ = [
    "DataSet", "DataSetType", "DataSetMeta", "Partition", "FrameDelivery", "TakesFrames", "WorkerAccess", "dataset_from_json",
    "RoiLike", "validate_roi", "partition_slices", "choose_num_partitions", "iter_array_tiles", "DEFAULT_PARTITION_BYTES",
    "NUMPY_BACKENDS", "check_array_backend", "get_dataset_cls", "RoiHelper", "roi_nav_indices", "detect",
    "get_extensions",
]


def __getattr__(name: str) -> object:
    """LiberTEM's ``detect`` and ``get_extensions`` at ``libertem.io.dataset``'s ported path: they live
    with the format registry (:mod:`raytile.io.formats`), which imports this package, so they are
    looked up when asked for."""
    if name == "detect":
        from raytile.io.formats.auto import detect
        return detect
    if name == "get_extensions":
        from raytile.io.formats import get_extensions
        return get_extensions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
