"""ASI Timepix3's :class:`~raytile.live.registry.DetectorSpec` (:data:`SPEC`): its connection builder,
its data port (8283, LiberTEM-live's default; a URL's port sets it), and ``raytile live sim asi_tpx3``:
the simulator and its synthetic frames (sparse events: most pixels zero).

    raytile live sim asi_tpx3 --nav-shape 64,64 --sig-shape 512,512
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from raytile.live.detectors.asi_tpx3.connection import AsiTpx3ConnectionBuilder
from raytile.live.registry import DetectorSpec, SimulatorSpec

__all__ = ["SPEC", "SIMULATOR"]

#: Share of the synthetic frames' pixels that hold an event.
EVENT_DENSITY = 0.002


def _synthetic(rng: np.random.Generator, size: tuple[int, ...], args: argparse.Namespace) -> np.ndarray:
    hits = rng.random(size) < EVENT_DENSITY
    return hits * rng.integers(1, 1024, size=size)


def _make(args: argparse.Namespace, frames: Any, nav: tuple[int, ...], n: int) -> Any:
    from raytile.live.detectors.asi_tpx3.sim import AsiTpx3Simulator

    return AsiTpx3Simulator(frames, nav_shape=nav, host=args.host, data_port=args.data_port,
                            frame_rate=args.frame_rate, acquisitions=args.acquisitions, num_frames=n)


#: ``raytile live sim asi_tpx3``.
SIMULATOR = SimulatorSpec(make=_make, frame_dtype=lambda args: np.dtype(np.uint32), synthetic=_synthetic,
                          describe=lambda args, dtype: f"{dtype} events (CSR chunks)", api=None)

#: What raytile knows of the ASI Timepix3 detector: registered by the package.
SPEC = DetectorSpec(name="asi_tpx3", title="ASI Timepix3", builder=AsiTpx3ConnectionBuilder, url_port="data_port",
                    hosts=("data_host",), ports={"data_port": 8283}, simulator=SIMULATOR)
