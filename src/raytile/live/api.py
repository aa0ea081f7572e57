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
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import AcquisitionError, ConfigValidationError
from raytile.io.dataset import DataSet
from raytile.live.detectors.merlin.connection import (
    MerlinActiveController, MerlinConnectionBuilder, MerlinDetectorConnection, MerlinPendingAcquisition,
)
from raytile.live.hooks import Hooks, ReadyForDataEnv
from raytile.live.nav_shape import determine_nav_shape
from raytile.runtime.context import Context

__all__ = ["LiveContext", "Hooks"]

DETECTORS = {"merlin": MerlinConnectionBuilder}


class LiveContext(Context):
    """A Context with :meth:`make_connection` and :meth:`make_acquisition` (LiberTEM-live's names)."""

    def make_connection(self, detector_type: str) -> MerlinConnectionBuilder:
        """A builder whose ``open(...)`` connects to the detector: ``"merlin"``."""
        builder = DETECTORS.get(str(detector_type).lower())
        if builder is None:
            raise ConfigValidationError(f"make_connection: parameter 'detector_type' {detector_type!r} is not "
                                        f"known; known detectors: {', '.join(sorted(DETECTORS))}")
        return builder()

    def make_acquisition(self, *, conn: MerlinDetectorConnection, nav_shape: tuple[int, ...] | None = None,
                         frames_per_partition: int | None = None,
                         controller: MerlinActiveController | None = None,
                         pending_aq: MerlinPendingAcquisition | None = None, hooks: Hooks | None = None,
                         scans: int = 1) -> DataSet:
        """An acquisition as a data set for ``run_udf``/``run_udf_iter``.

        Passive mode (``pending_aq`` from ``conn.wait_for_acquisition``): the
        nav shape follows LiberTEM-live's rules (:mod:`raytile.live.nav_shape`).
        Active mode (no ``pending_aq``): ``nav_shape`` must be given; the run
        calls ``hooks.on_ready_for_data`` and then waits for the acquisition.
        ``scans`` (raytile's): scans of ``nav_shape`` frames this one run
        reads from a continuous acquisition (0: until it ends), with per-scan
        results; by default one run reads one scan, and the next run on a new
        acquisition object reads the next one.
        """
        if not isinstance(conn, MerlinDetectorConnection):
            raise ConfigValidationError(f"make_acquisition: parameter 'conn' must be an open detector connection, "
                                        f"got {type(conn).__name__}")
        hooks = hooks if hooks is not None else Hooks()
        if pending_aq is None:
            controller = controller if controller is not None else conn.get_active_controller()
            if nav_shape is None or -1 in tuple(nav_shape):
                raise ConfigValidationError(f"make_acquisition: active mode (no pending_aq) needs a concrete "
                                            f"nav_shape, got {nav_shape!r}")
            shape = tuple(int(s) for s in nav_shape)
        else:
            nimages = pending_aq.nimages
            if nimages == 0:  # continuous: no image count to derive a shape from
                if nav_shape is None or -1 in tuple(nav_shape):
                    raise ConfigValidationError(f"make_acquisition: a continuous acquisition (no image count) needs "
                                                f"a concrete nav_shape, the shape of one scan; got {nav_shape!r}")
                shape = tuple(int(s) for s in nav_shape)
            else:
                shape = determine_nav_shape(nimages, nav_shape, hooks.on_determine_nav_shape, pending_aq.nav_shape)
        sig_shape, dtype = conn.read_sig_shape(), conn.read_dtype()
        count = None if scans == 0 else scans * math.prod(shape)
        holder: dict[str, Any] = {}
        frames = _acquisition_frames(conn, pending_aq, hooks, holder, count, dtype)
        ds = self.load("stream", frames=frames, nav_shape=shape, sig_shape=sig_shape, dtype=dtype,
                       frames_per_partition=frames_per_partition, scans=scans)
        holder["aq"] = ds
        return ds


def _acquisition_frames(conn: MerlinDetectorConnection, pending: MerlinPendingAcquisition | None, hooks: Hooks,
                        holder: dict[str, Any], count: int | None, dtype: np.dtype) -> Iterator[np.ndarray]:
    """The acquisition's frame stacks; in active mode it first calls the hook and waits for the header.
    Runs when the run starts reading (the stream's feeder thread)."""
    if pending is None:
        receiver = conn.connect()
        hooks.on_ready_for_data(ReadyForDataEnv(aq=holder.get("aq")))
        header = receiver.wait_for_header(receiver_timeout(conn))
        if header is None:
            raise AcquisitionError(f"Merlin {receiver.address}: no acquisition started within "
                                   f"{receiver_timeout(conn):g} s of on_ready_for_data")
        if count is not None and header.nimages and header.nimages < count:
            raise AcquisitionError(f"Merlin {receiver.address}: the acquisition has {header.nimages} images, "
                                   f"nav_shape needs {count}")
    yield from conn.receiver.frames(count, dtype)


def receiver_timeout(conn: MerlinDetectorConnection) -> float:
    return float(conn._receiver_args["timeout"])  # type: ignore[arg-type]
