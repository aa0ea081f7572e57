"""Quantum Detectors Merlin: the MPX data stream over TCP and the control port, LiberTEM-live's API.

>>> with ctx.make_connection("merlin").open(api_host="127.0.0.1", data_host="127.0.0.1") as conn:   # doctest: +SKIP
...     aq = ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=(128, 128))
"""

from raytile.live.detectors.merlin import detector
from raytile.live.detectors.merlin.acquisition import MerlinAcquisition
from raytile.live.detectors.merlin.connection import (
    MerlinActiveController, MerlinConnectionBuilder, MerlinDetectorConnection, MerlinPendingAcquisition,
)
from raytile.live.detectors.merlin.control import MerlinCommandError, MerlinControl
from raytile.live.detectors.merlin.sim import MerlinSimulator
from raytile.live.registry import register_detector

__all__ = [
    "MerlinAcquisition",
    "MerlinConnectionBuilder", "MerlinDetectorConnection", "MerlinPendingAcquisition", "MerlinActiveController",
    "MerlinControl", "MerlinCommandError", "MerlinSimulator",
]

register_detector(detector.SPEC)
