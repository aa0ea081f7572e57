"""``libertem_live.udf.record`` at its ported path: :class:`RecordUDF`, the input data as a ``.npy`` file.

LiberTEM-live's ``RecordUDF`` is LiberTEM's (``filename``, the internal ``_is_master``); raytile's is
:class:`raytile.udf.record.RecordUDF`, the one class at both paths.
"""

from raytile.udf.record import RecordUDF

__all__ = ["RecordUDF"]
