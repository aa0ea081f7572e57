"""The UDF interface and the built-in UDFs. Never imports ray.

>>> from raytile.udf import UDF, SumUDF, SumSigUDF
"""

from raytile.udf.base import UDF, ArrayWithMask, MergeAttrMapping, UDFData
from raytile.udf.buffers import AuxBufferWrapper, BufferWrapper
from raytile.udf.meta import UDFMeta
from raytile.udf.noop import NoOpUDF
from raytile.udf.sum import SumUDF
from raytile.udf.sumsig import SumSigUDF

__all__ = [
    "UDF", "UDFMeta", "UDFData", "MergeAttrMapping", "ArrayWithMask", "BufferWrapper",
    "AuxBufferWrapper", "NoOpUDF", "SumUDF", "SumSigUDF",
]
