"""`Reply`: what every raytile actor method that can fail returns across the actor boundary.

A worker or coordinator actor does not raise a UDF's error or a cancel
through Ray (Ray would wrap it in its own ``RayTaskError`` and lose the
worker's traceback and our exception class): it returns a ``Reply`` whose
``status`` says what happened, ``payload`` carries the value (or the
exception), and ``spans`` the tracing spans finished on the way. The caller
decides on the status by name, never by a tuple's position, and
:meth:`Reply.unwrap` turns the failures into our exceptions::

    reply = ray.get(actor.run_function.remote(fn, args))
    value = reply.unwrap("run_function")   # raises the worker's exception, or UDFRunCancelled, ...

The statuses:

- ``OK``: ``payload`` is the value (a task's partition results, a run id, ...);
- ``HELD``: a task ran and its result was merged into the worker's held
  state; ``payload`` is the partition index (sent later, merged);
- ``WAIT``: nothing new within the call's timeout (a long-poll); ``payload``
  may still carry what the caller needs (progress);
- ``CANCELLED``: the task's run was cancelled, the task did not run or stopped;
- ``MISSING``: the worker did not hold a cached value the task refers to;
  ``payload`` is ``(kind, key)``; the caller ships the value and resubmits;
- ``ERROR``: ``payload`` is the exception (picklable; a UDF's error keeps its
  class and the worker's traceback).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Sequence

from raytile.actors.worker_warnings import WarningRecord
from raytile.common.errors import ExecutorError, UDFRunCancelled
from raytile.runtime.executor import TaskNotRun

__all__ = ["Reply", "ReplyStatus"]


class ReplyStatus(enum.Enum):
    """What an actor call did (see the module doc)."""

    OK = "ok"
    HELD = "held"
    WAIT = "wait"
    CANCELLED = "cancelled"
    MISSING = "missing"
    ERROR = "error"


@dataclass(frozen=True)
class Reply:
    """One actor call's answer: its status, its payload and the tracing spans finished during it."""

    status: ReplyStatus
    payload: Any = None
    spans: Sequence[dict] = ()
    #: Warnings the call gave on the worker (:mod:`raytile.actors.worker_warnings`), given again by the caller.
    warnings: Sequence[WarningRecord] = ()

    @classmethod
    def ok(cls, payload: Any = None, spans: Sequence[dict] = ()) -> "Reply":
        return cls(ReplyStatus.OK, payload, tuple(spans))

    @classmethod
    def held(cls, partition: int, spans: Sequence[dict] = ()) -> "Reply":
        return cls(ReplyStatus.HELD, partition, tuple(spans))

    @classmethod
    def wait(cls, payload: Any = None) -> "Reply":
        return cls(ReplyStatus.WAIT, payload)

    @classmethod
    def cancelled(cls, spans: Sequence[dict] = ()) -> "Reply":
        return cls(ReplyStatus.CANCELLED, None, tuple(spans))

    @classmethod
    def missing(cls, kind: str, key: Any) -> "Reply":
        return cls(ReplyStatus.MISSING, (kind, key))

    @classmethod
    def error(cls, exc: BaseException, spans: Sequence[dict] = ()) -> "Reply":
        return cls(ReplyStatus.ERROR, exc, tuple(spans))

    @property
    def failed(self) -> bool:
        """Whether :meth:`unwrap` raises (cancelled, missing, error)."""
        return self.status in (ReplyStatus.CANCELLED, ReplyStatus.MISSING, ReplyStatus.ERROR)

    def unwrap(self, what: str = "the call") -> Any:
        """The payload of a reply that did not fail (OK, HELD, WAIT); else raise: ERROR raises its
        exception, CANCELLED :class:`UDFRunCancelled`, MISSING :class:`TaskNotRun`, each naming
        ``what`` (a task's description, a method)."""
        if self.status is ReplyStatus.ERROR:
            exc = self.payload
            if not isinstance(exc, BaseException):
                raise ExecutorError(f"{what}: an ERROR reply carries {type(exc).__name__}, not an exception")
            raise exc
        if self.status is ReplyStatus.CANCELLED:
            raise UDFRunCancelled(f"{what} was cancelled")
        if self.status is ReplyStatus.MISSING:
            kind, key = self.payload
            raise TaskNotRun(f"{what} did not run: its worker did not hold the {kind} {key!r}")
        return self.payload
