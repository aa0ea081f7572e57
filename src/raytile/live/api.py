"""`LiveContext`: a :class:`raytile.Context` that also runs UDFs on acquisitions from detectors.

LiberTEM-live's API: ``make_connection`` and ``make_acquisition``; an
acquisition is a ``stream`` data set (:mod:`raytile.io.formats.stream`), so
every UDF feature works on it as on a file: several UDFs, ROI, partial
results, live patches, progress, cancel, ``coordinator="actor"`` and attach.

>>> ctx = LiveContext()
>>> with ctx.make_connection("merlin").open(data_host="127.0.0.1", api_host="127.0.0.1") as conn:
...     pending = conn.wait_for_acquisition(10.0)
...     aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=(128, 128))
...     ctx.run_udf(dataset=aq, udf=SumUDF())
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from raytile.common.errors import ConfigValidationError, NavShapeUnknown, RemovedAPIError
from raytile.io.dataset import DataSet
from raytile.live.connection import DataSetConnection, LiveConnection
from raytile.live.hooks import Hooks, ReadyForDataEnv
from raytile.live.nav_shape import determine_nav_shape
from raytile.live.progress import with_dropped_frames
from raytile.live.receiver import live_frames_per_partition
from raytile.live.registry import detector_spec
from raytile.runtime.context import Context
from raytile.runtime.progress import ProgressReporter

__all__ = ["LiveContext", "Hooks", "make_acquisition_on"]


class LiveContext(Context):
    """A Context with :meth:`make_connection` and :meth:`make_acquisition` (LiberTEM-live's names).

    ``run_udf``/``run_udf_iter`` are the Context's; on an acquisition their progress also reports the
    frames the detector lost, and ``aq.stats`` counts them while the run goes on.
    """

    def make_connection(self, detector_type: str) -> Any:
        """A builder whose ``open(...)`` connects to the detector registered as ``detector_type``
        (:mod:`raytile.live.registry`): ``"merlin"``, ``"dectris"``, ``"memory"`` (an array played as an
        acquisition, :mod:`raytile.live.detectors.memory`) or one of your own."""
        return detector_spec(detector_type, "make_connection: parameter 'detector_type'").builder()

    def _prepare_run(self, dataset: DataSet, progress: bool | ProgressReporter) -> bool | ProgressReporter:
        """Every run: an acquisition that is no stream (the memory detector's) is triggered here, as
        LiberTEM-live's ``LiveContext`` does it, and the progress also reports frames the detector lost
        (:mod:`raytile.live.progress`); ``aq.stats`` counts them while the run goes on."""
        _start_acquisition(dataset)
        return with_dropped_frames(progress, dataset)

    def _run_udf_returned(self, dataset: DataSet) -> None:
        _end_acquisition(dataset)

    def prepare_acquisition(self, detector_type: str, *args: Any, trigger: Any = None, **kwargs: Any) -> Any:
        """Removed in LiberTEM-live 0.2; raises its ``RuntimeError`` naming what replaced it."""
        raise RemovedAPIError("`LiveContext.prepare_acquisition` has been replaced with "
                              "`LiveContext.make_connection` and `LiveContext.make_acquisition`; "
                              f"prepare_acquisition({detector_type!r}, ...) does nothing")

    def make_acquisition(self, *, conn: LiveConnection, nav_shape: tuple[int, ...] | None = None,
                         frames_per_partition: int | None = None, controller: Any = None,
                         pending_aq: Any = None, hooks: Hooks | None = None, scans: int = 1,
                         preprocess: Any = None) -> DataSet:
        """An acquisition as a data set for ``run_udf``/``run_udf_iter``.

        Passive mode (``pending_aq`` from ``conn.wait_for_acquisition``): the
        nav shape follows LiberTEM-live's rules (:mod:`raytile.live.nav_shape`).
        Active mode (no ``pending_aq``): ``nav_shape`` must be given; the run
        starts the acquisition (``controller``, default
        ``conn.get_active_controller()``), calls ``hooks.on_ready_for_data``
        and reads it. ``scans`` (raytile's): scans of ``nav_shape`` frames this
        one run reads from a continuous acquisition (0: until it ends), with
        per-scan results; by default one run reads one scan, and the next run
        (on this acquisition object, one run at a time, or on a new one) reads
        the next one, as in LiberTEM-live. ``preprocess``
        (raytile's): a frame transform, e.g. a
        :class:`~raytile.pipeline.frame_stacks.FrameStackPipeline` (dark, gain,
        binning), applied on the workers to each stack of frames before the
        UDFs see them; the acquisition's shape and dtype are its output's.
        ``frames_per_partition`` (default
        :func:`~raytile.live.receiver.live_frames_per_partition`: 256 frames of
        256x256 uint16, at least 4 partitions a scan) sets how often partial
        results come: once a partition's frames arrived.
        """
        return make_acquisition_on(self, conn=conn, nav_shape=nav_shape, frames_per_partition=frames_per_partition,
                                   controller=controller, pending_aq=pending_aq, hooks=hooks, scans=scans,
                                   preprocess=preprocess)


def _start_acquisition(dataset: Any) -> None:
    """A run on ``dataset`` starts: an acquisition that is no stream (the memory detector's) triggers
    here, as LiberTEM-live's ``LiveContext`` does; a stream calls its hook when its frames are read."""
    start = getattr(dataset, "start_acquisition", None)
    if callable(start):
        start()


def _end_acquisition(dataset: Any) -> None:
    end = getattr(dataset, "end_acquisition", None)
    if callable(end):
        end()


def make_acquisition_on(ctx: Context, *, conn: LiveConnection, nav_shape: tuple[int, ...] | None = None,
                        frames_per_partition: int | None = None, controller: Any = None,
                        pending_aq: Any = None, hooks: Hooks | None = None, scans: int = 1,
                        preprocess: Any = None) -> DataSet:
    """:meth:`LiveContext.make_acquisition` for any :class:`~raytile.Context` ``ctx`` (the serve app's,
    e.g.); the parameters are the method's."""
    if isinstance(conn, DataSetConnection):  # e.g. an array in memory: a memory data set, not a stream
        if controller is not None or scans != 1 or preprocess is not None:
            raise ConfigValidationError(f"make_acquisition: a {type(conn).__name__} (its acquisition is no "
                                        f"stream) takes no controller, scans or preprocess")
        return conn.make_acquisition(nav_shape=nav_shape, frames_per_partition=frames_per_partition,
                                     pending_aq=pending_aq, hooks=hooks)
    if not isinstance(conn, LiveConnection):
        raise ConfigValidationError(f"make_acquisition: parameter 'conn' must be an open detector connection, "
                                    f"got {type(conn).__name__}")
    hooks = hooks if hooks is not None else Hooks()
    if pending_aq is None:
        controller = controller if controller is not None else conn.get_active_controller()
        if nav_shape is None or -1 in tuple(nav_shape):
            raise NavShapeUnknown(f"In active mode, please pass the full `nav_shape`: make_acquisition "
                                  f"without pending_aq needs a concrete nav_shape, got {nav_shape!r}")
        shape = tuple(int(s) for s in nav_shape)
    else:
        nimages = pending_aq.nimages
        if nimages == 0 or scans != 1:  # continuous, or several scans: the image count is not one scan
            if nav_shape is None or -1 in tuple(nav_shape):
                raise NavShapeUnknown(f"make_acquisition: a continuous acquisition (no image count) or "
                                      f"scans={scans} needs a concrete nav_shape, the shape of one scan; "
                                      f"got {nav_shape!r}")
            shape = tuple(int(s) for s in nav_shape)
        else:
            shape = determine_nav_shape(nimages, nav_shape, hooks.on_determine_nav_shape, pending_aq.nav_shape)
    sig_shape, dtype = conn.acquisition_geometry(pending_aq)
    if frames_per_partition is None:  # fewer, larger partitions than a file's stream (see the function)
        frames_per_partition = live_frames_per_partition(shape, sig_shape, dtype)
        sparse = getattr(conn, "sparse_frames_per_partition", None)  # events: larger partitions (asi_tpx3)
        if sparse is not None and preprocess is None:
            frames_per_partition = sparse(shape)
    count = None if scans == 0 else scans * math.prod(shape)
    holder: dict[str, Any] = {}

    def ready() -> None:
        ref = holder.get("aq")
        hooks.on_ready_for_data(ReadyForDataEnv(aq=None if ref is None else ref()))

    frames = conn.acquisition_frames(pending_aq, controller, shape, ready, count, dtype)
    ds = ctx.load("stream", frames=frames, nav_shape=shape, sig_shape=sig_shape, dtype=dtype,
                  frames_per_partition=frames_per_partition, scans=scans, preprocess=preprocess)
    holder["aq"] = weakref.ref(ds)  # no cycle ds -> frames -> ready -> ds: dropped, they go at once
    return ds  # its stats are the frames' (aq.stats), and it tells them where to cut (see io/formats/stream.py)
