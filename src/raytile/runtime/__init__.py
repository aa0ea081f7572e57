"""Running UDFs: Context, planning, the part runner, coordinator, executors, results."""

from raytile.runtime.context import Context
from raytile.runtime.progress import ProgressReporter
from raytile.runtime.results import ResultBuffer, UDFResults
from raytile.runtime.run import UDFRun

__all__ = ["Context", "ProgressReporter", "ResultBuffer", "UDFResults", "UDFRun"]
