"""The in-memory detector (``make_connection("memory")``): an array played as an acquisition, LiberTEM-live's API.

>>> with ctx.make_connection("memory").open(data=data) as conn:         # doctest: +SKIP
...     aq = ctx.make_acquisition(conn=conn, hooks=MyHooks())
...     ctx.run_udf(dataset=aq, udf=SumUDF())
"""

from raytile.live.detectors.memory.acquisition import (
    MemoryAcquisition, MemoryConnection, MemoryConnectionBuilder, PendingMemAq,
)
from raytile.live.registry import DetectorSpec, register_detector

__all__ = ["MemoryAcquisition", "MemoryConnectionBuilder", "MemoryConnection", "PendingMemAq"]

#: No URL and no command line: the array is given to ``open(data=...)``.
register_detector(DetectorSpec(name="memory", builder=MemoryConnectionBuilder, hosts=()))
