"""``raytile.udf.raw``: where LiberTEM keeps ``PickUDF`` (``libertem.udf.raw``), for ports."""

from raytile.udf.pick import PickUDF

__all__ = ["PickUDF"]
