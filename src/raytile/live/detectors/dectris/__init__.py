"""DECTRIS detectors (EIGER, ARINA, QUADRO): SIMPLON REST and the ZeroMQ stream, LiberTEM-live's API.

>>> with ctx.make_connection("dectris").open(api_host="127.0.0.1", api_port=8910, data_host="127.0.0.1",
...                                          data_port=9999) as conn:                          # doctest: +SKIP
...     conn.get_api_client().send_detector_command("arm")
...     aq = ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=(128, 128))
"""

from raytile.live.detectors.dectris import detector
from raytile.live.detectors.dectris.acquisition import DectrisAcquisition
from raytile.live.detectors.dectris.connection import (
    DectrisActiveController, DectrisConnectionBuilder, DectrisDetectorConnection, DectrisPendingAcquisition,
)
from raytile.live.detectors.dectris.receiver import DectrisReceiver
from raytile.live.detectors.dectris.sim import DectrisSimulator
from raytile.live.detectors.dectris.simplon import SimplonClient
from raytile.live.registry import register_detector

__all__ = [
    "DectrisAcquisition",
    "DectrisConnectionBuilder", "DectrisDetectorConnection", "DectrisPendingAcquisition", "DectrisActiveController",
    "DectrisReceiver", "DectrisSimulator", "SimplonClient",
]

register_detector(detector.SPEC)
