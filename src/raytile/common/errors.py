"""All exceptions raised by raytile, in one place.

Every error names its cause: the UDF, the partition, the path or the
parameter that was wrong, so a user can act on the message alone.
"""

from __future__ import annotations

__all__ = [
    "RaytileError", "DataSetException", "UDFException", "UDFRunCancelled", "BackendError", "ExecutorError",
    "ConfigValidationError",
]


class RaytileError(Exception):
    """Base class of every exception raised by raytile."""


class DataSetException(RaytileError):
    """A data set cannot be opened or read: wrong shape, missing file, bad dtype..."""


class UDFException(RaytileError):
    """A UDF is malformed (no process method, bad buffers) or raised while running.

    When a UDF raises inside a task, the message names the UDF class, the
    partition and carries the worker's formatted traceback in ``worker_traceback``.
    """

    def __init__(self, message: str, worker_traceback: str | None = None):
        super().__init__(message)
        self.worker_traceback = worker_traceback

    def __str__(self) -> str:
        base = super().__str__()
        if self.worker_traceback:
            return f"{base}\n\nWorker traceback:\n{self.worker_traceback}"
        return base


class UDFRunCancelled(RaytileError):
    """A run was cancelled by ``run.cancel()``, by leaving the loop or by task cancellation."""


class BackendError(UDFException):
    """The UDFs' array backends cannot be served on the available devices."""


class ExecutorError(RaytileError):
    """The executor (Ray cluster, worker actors) failed in a way that is not the UDF's fault."""


class ConfigValidationError(RaytileError):
    """A configuration (data set parameters, pipeline config) does not validate."""
