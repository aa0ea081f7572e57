"""``raytile.udf.sumsigudf``: where LiberTEM keeps ``SumSigUDF`` (``libertem.udf.sumsigudf``), for ports."""

from raytile.udf.sumsig import SumSigUDF

__all__ = ["SumSigUDF"]
