"""ASI Timepix3 (Accos, passive mode): its event stream of CSR chunks over TCP, LiberTEM-live's API.

>>> with ctx.make_connection("asi_tpx3").open(data_port=8283) as conn:   # doctest: +SKIP
...     aq = ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0))
"""

from raytile.live.detectors.asi_tpx3 import detector
from raytile.live.detectors.asi_tpx3.acquisition import AsiTpx3Acquisition
from raytile.live.detectors.asi_tpx3.connection import (
    AsiTpx3ConnectionBuilder, AsiTpx3DetectorConnection, AsiTpx3PendingAcquisition,
)
from raytile.live.detectors.asi_tpx3.sim import AsiTpx3Simulator
from raytile.live.registry import register_detector

__all__ = ["AsiTpx3Acquisition", "AsiTpx3ConnectionBuilder", "AsiTpx3DetectorConnection", "AsiTpx3PendingAcquisition",
           "AsiTpx3Simulator"]

register_detector(detector.SPEC)
