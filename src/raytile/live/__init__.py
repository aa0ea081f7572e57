"""Live acquisition: UDFs on frames streaming from a detector, with LiberTEM-live's API.

>>> from raytile.live import LiveContext
>>> ctx = LiveContext()
>>> conn = ctx.make_connection("merlin").open(data_host="127.0.0.1", api_host="127.0.0.1")

See docs/live.md.
"""

from raytile.live.api import LiveContext
from raytile.live.hooks import DetermineNavShapeEnv, Hooks, ReadyForDataEnv

__all__ = ["LiveContext", "Hooks", "ReadyForDataEnv", "DetermineNavShapeEnv"]
