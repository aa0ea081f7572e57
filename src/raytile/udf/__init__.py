"""The UDF interface and the built-in UDFs. Never imports ray.

>>> from raytile.udf import UDF, SumUDF, SumSigUDF
"""

from raytile.udf.base import UDF, ArrayWithMask, MergeAttrMapping, UDFData, UDFRunCancelled, check_cast
from raytile.udf.protocols import (
    UDFFrameMixin, UDFPartitionMixin, UDFPostprocessMixin, UDFPreprocessMixin, UDFTileMixin,
)
from raytile.udf.buffers import AuxBufferWrapper, BufferWrapper
from raytile.udf.meta import UDFMeta
from raytile.udf.noop import NoOpUDF
from raytile.udf.sum import SumUDF
from raytile.udf.sumsig import SumSigUDF
from raytile.udf.stddev import StdDevUDF
from raytile.udf.logsum import LogsumUDF
from raytile.udf.applymasks import ApplyMasksUDF
from raytile.udf.com import CoMUDF
from raytile.udf.pick import PickUDF
from raytile.udf.auto import AutoUDF
from raytile.udf.signalmax import SignalMaxUDF
from raytile.udf.record import RecordUDF
from raytile.udf.FEM import FEMUDF
from raytile.udf.crystallinity import CrystallinityUDF
from raytile.udf import masks

__all__ = [
    "UDF", "UDFMeta", "UDFData", "MergeAttrMapping", "ArrayWithMask", "BufferWrapper", "check_cast",
    "UDFRunCancelled", "UDFFrameMixin", "UDFTileMixin", "UDFPartitionMixin", "UDFPreprocessMixin",
    "UDFPostprocessMixin",
    "AuxBufferWrapper", "NoOpUDF", "SumUDF", "SumSigUDF", "StdDevUDF", "LogsumUDF", "ApplyMasksUDF",
    "CoMUDF", "PickUDF", "AutoUDF", "SignalMaxUDF", "RecordUDF", "FEMUDF", "CrystallinityUDF", "masks",
]
