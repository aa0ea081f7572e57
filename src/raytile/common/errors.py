"""All exceptions raised by raytile, in one place.

Every error names its cause: the UDF, the partition, the path or the
parameter that was wrong, so a user can act on the message alone.
"""

from __future__ import annotations

__all__ = [
    "RaytileError", "DataSetException", "UDFException", "udf_exception_class", "UnsafeCastError", "UDFRunCancelled", "BackendError",
    "ExecutorError", "CoordinatorDied", "ConfigValidationError", "MissingParameterError", "RepairValueError", "CorrectError", "StageFailed", "PipelineStateError", "StreamRebound", "StageActorDied",
    "DataSetWarning", "DataSetShapeError", "InvalidMaskError", "UnsupportedIOBackend",
    "AcquisitionError",
    "RunEnded",
]


class RaytileError(Exception):
    """Base class of every exception raised by raytile."""


class DataSetException(RaytileError):
    """A data set cannot be opened or read: wrong shape, missing file, bad dtype..."""


class DataSetShapeError(DataSetException, ValueError):
    """A data set's shape parameters contradict each other or the data: ``sig_shape`` of another length
    than ``sig_dims``, data whose size is no multiple of the frame size. Also a ``ValueError``, which
    LiberTEM raises for these, so ported ``except``/``pytest.raises`` clauses keep working."""


class DataSetWarning(UserWarning):
    """A data set opens, but maybe not as meant: e.g. a raw file holds more frames than ``nav_shape``
    reads. Raised in the driver by ``Context.load`` (also when the files were opened on a worker)."""


class UDFException(RaytileError):
    """A UDF is malformed (no process method, bad buffers) or raised while running.

    When a UDF raises inside a task, the message names the UDF class, the
    partition and carries the worker's formatted traceback in ``worker_traceback``.
    """

    #: The type of the exception the UDF raised, for the classes :func:`udf_exception_class` makes.
    raised_type: type[BaseException] | None = None

    def __init__(self, message: str, worker_traceback: str | None = None):
        super().__init__(message)
        self.worker_traceback = worker_traceback

    def __str__(self) -> str:
        base = BaseException.__str__(self)  # not KeyError's quoting, for the classes made below
        if self.worker_traceback:
            return f"{base}\n\nWorker traceback:\n{self.worker_traceback}"
        return base

    def __reduce__(self) -> tuple:
        # the classes made by udf_exception_class are rebuilt by name of the raised type (they are not
        # importable themselves): such an error crosses from a Ray worker like any other
        return (_rebuild_udf_exception, (self.raised_type, BaseException.__str__(self), self.worker_traceback),
                self.__dict__)


_UDF_EXCEPTION_CLASSES: dict[type, type[UDFException]] = {}


def udf_exception_class(raised: type[BaseException]) -> type[UDFException]:
    """A subclass of both :class:`UDFException` and ``raised``: what a UDF method raised stays catchable as
    its own type (``except KeyError`` around ``run_udf``, as in LiberTEM) while carrying raytile's context.

    Plain :class:`UDFException` for types that cannot be combined (not an ``Exception``, a layout
    conflict, a type that refuses a message argument).

    >>> issubclass(udf_exception_class(KeyError), (UDFException, KeyError))
    True
    """
    if not issubclass(raised, Exception) or issubclass(raised, UDFException):
        return UDFException
    cls = _UDF_EXCEPTION_CLASSES.get(raised)
    if cls is None:
        try:
            cls = type(f"UDFException[{raised.__name__}]", (UDFException, raised),
                       {"__module__": __name__, "raised_type": raised})
            cls("probe")
        except Exception:
            cls = UDFException
        _UDF_EXCEPTION_CLASSES[raised] = cls
    return cls


def _rebuild_udf_exception(raised: type[BaseException] | None, message: str,
                           worker_traceback: str | None) -> UDFException:
    cls = UDFException if raised is None else udf_exception_class(raised)
    return cls(message, worker_traceback=worker_traceback)


class UnsafeCastError(UDFException, TypeError):
    """A partial result would lose precision in its result buffer (``check_cast``).

    Also a ``TypeError``, the exception LiberTEM's ``check_cast`` raises, so
    ported code that catches that keeps working.
    """


class InvalidMaskError(RaytileError):
    """A validity mask (``UDF.with_mask``) that does not fit its result: a shape that does not broadcast to
    the result's, or a dtype other than bool. At LiberTEM's path ``libertem.common.buffers``."""


class UDFRunCancelled(RaytileError):
    """A run was cancelled by ``run.cancel()``, by leaving the loop or by task cancellation."""


class RunEnded(RaytileError):
    """A live patch came after its run ended: its consumer had read the end, or the run was cancelled or
    failed. (A recompute patch that comes after the last merge but before the consumer read the end
    is not refused: the run computes again.)"""


class BackendError(UDFException):
    """The UDFs' array backends cannot be served on the available devices."""


class ExecutorError(RaytileError):
    """The executor (Ray cluster, worker actors) failed in a way that is not the UDF's fault."""


class ConfigValidationError(RaytileError):
    """A configuration (data set parameters, pipeline config) does not validate."""


class MissingParameterError(ConfigValidationError, TypeError):
    """A required data set parameter is not given. Also a ``TypeError``, what LiberTEM's data set
    constructors raise then (Python's "missing 1 required argument")."""


class CorrectError(RaytileError):
    """``detector.correct`` cannot work on the buffer given: it is not C-contiguous (LiberTEM's
    ``libertem.io.corrections.detector.CorrectError``)."""


class UnsupportedIOBackend(ConfigValidationError, ValueError):
    """A format that reads with raytile's own IO backends only was given another ``io_backend`` object.

    Also a ``ValueError``, as LiberTEM's ``H5DataSet`` raises for an ``io_backend`` it cannot use.
    """


class RepairValueError(ConfigValidationError, ValueError):
    """Excluded pixels of a ``CorrectionSet`` have no neighbour to be repaired from (``allow_empty=False``).

    Also a ``ValueError``, as LiberTEM's ``RepairValueError``, so ported ``except`` clauses keep working.
    """


class StageFailed(RaytileError):
    """A stage raised while it ran; names the stage, the life-cycle method and carries its traceback."""

    def __init__(self, stage: str, method: str, message: str, stage_traceback: str = ""):
        super().__init__(f"stage {stage!r} failed in {method}(): {message}")
        self.stage = stage
        self.method = method
        self.stage_traceback = stage_traceback

    def __str__(self) -> str:
        base = super().__str__()
        if self.stage_traceback:
            return f"{base}\n\nStage traceback:\n{self.stage_traceback}"
        return base

    def __reduce__(self) -> tuple[type["StageFailed"], tuple[str, str, str, str]]:
        # keeps stage and traceback when it crosses a process boundary (Ray actors)
        return (StageFailed, (self.stage, self.method, super().__str__().split(": ", 1)[-1], self.stage_traceback))


class PipelineStateError(RaytileError):
    """An operation does not fit the pipeline's state (stepping a failed or stopped pipeline...)."""


class StreamRebound(PipelineStateError, AttributeError):
    """A pipeline stream's array was assigned anew; it is refilled in place (an AttributeError too, as
    assigning a read-only attribute is)."""


class CoordinatorDied(ExecutorError):
    """The coordinator actor of a Context (``coordinator="actor"``) died; its runs in flight end with this.

    The Context starts a new one for its next call (and shares its loaded
    memory data sets with it again).
    """


class StageActorDied(ExecutorError):
    """The Ray actor hosting a placement group of stages died; names the group and its stages."""

    def __init__(self, group: str, stages: list[str], cause: str = ""):
        super().__init__(f"actor of placement group {group!r} (stages {', '.join(stages)}) died"
                         + (f": {cause}" if cause else "") + "; call restart() to rebuild it")
        self.group = group
        self.stages = list(stages)


class AcquisitionError(DataSetException):
    """A live acquisition ended before its frames were all received: the sender closed the
    connection, went silent past the timeout, or started a new acquisition mid-scan (an abort).

    The message names the detector's address and how many frames of how many arrived."""


class UndeadException(RaytileError):
    """A simulator's or receiver's thread did not end when asked to stop (LiberTEM-live's
    ``libertem_live.detectors.common.UndeadException``); the message names the threads."""


class NavShapeError(ConfigValidationError, ValueError):
    """A live acquisition's nav shape (given, or from a hook) is malformed or does not fit its image count;
    a ``ValueError`` as LiberTEM-live's."""


class NavShapeUnknown(ConfigValidationError, RuntimeError):
    """A live acquisition's nav shape cannot be found (active mode without one, or an image count that is
    no square and nothing else says the shape); a ``RuntimeError`` as LiberTEM-live's."""


class RemovedAPIError(RaytileError, RuntimeError):
    """A call LiberTEM or LiberTEM-live removed (e.g. ``LiveContext.prepare_acquisition``); a
    ``RuntimeError`` as theirs, naming what replaced it."""


class AcquisitionCancelled(AcquisitionError, UDFRunCancelled):
    """A live acquisition has fewer images than the run's nav shape, or ended before them: the run is
    cancelled, as LiberTEM-live cancels it (``except UDFRunCancelled`` catches it, and so does
    ``except AcquisitionError``). The connection stays usable for the next acquisition."""


# (listed here rather than in __all__ above: the live errors were added by one change, kept together)
__all__ += ["UndeadException", "NavShapeError", "NavShapeUnknown", "RemovedAPIError", "AcquisitionCancelled"]
