"""raytile: run user-defined functions over large N-D detector data sets on Ray.

>>> import raytile as rt
>>> ctx = rt.Context()
>>> ds = ctx.load("raw", path="scan.raw", nav_shape=(64, 64), sig_shape=(256, 256), dtype="uint16")
>>> res = ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(), progress=True)
>>> res["intensity"].data.shape
(256, 256)
"""

from raytile import actors, udf  # actors: registers Ray's run hosts (imports no Ray until used)
from raytile.common.errors import (
    BackendError, ConfigValidationError, DataSetException, DataSetWarning, ExecutorError, RaytileError,
    RunEnded, UDFException, UDFRunCancelled,
)
from raytile.io.corrections import CorrectionSet
from raytile.runtime.context import Context
from raytile.runtime.progress import ProgressReporter
from raytile.runtime.results import ResultBuffer, UDFResults
from raytile.runtime.run import UDFRun
from raytile.udf import (
    UDF, ApplyMasksUDF, AutoUDF, CoMUDF, CrystallinityUDF, FEMUDF, LogsumUDF, NoOpUDF, PickUDF, RecordUDF,
    SignalMaxUDF, StdDevUDF, SumSigUDF, SumUDF,
)

__version__ = "0.1.0"

__all__ = [
    "Context", "UDF", "udf", "SumUDF", "SumSigUDF", "NoOpUDF", "StdDevUDF", "LogsumUDF", "ApplyMasksUDF",
    "CoMUDF", "PickUDF", "AutoUDF", "SignalMaxUDF", "RecordUDF", "FEMUDF", "CrystallinityUDF",
    "UDFResults", "ResultBuffer", "UDFRun",
    "ProgressReporter", "RaytileError", "DataSetException", "UDFException", "UDFRunCancelled",
    "BackendError", "ExecutorError", "ConfigValidationError", "CorrectionSet", "DataSetWarning",
    "RunEnded",
]
