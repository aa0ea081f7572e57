"""Where runs are coordinated: `RunHost`, and `DriverHost` (a thread in this process).

A :class:`~raytile.runtime.context.Context` plans a run in the caller's
process (so bad input fails there, at once) and hands the plan to its host,
which coordinates the run and gives back a :class:`RunSource` that
:class:`~raytile.runtime.run.UDFRun` reads.

- :class:`DriverHost` (``coordinator="driver"``): the run
  (:class:`~raytile.runtime.active_run.ActiveRun`) and its coordinator thread are
  in this process; every merged result travels here.
- ``raytile.actors.coordinator_actor.ActorHost`` (``coordinator="actor"``):
  the coordinator is an async Ray actor on the cluster; results are merged
  there and only snapshots travel to the viewers, of which a run may have
  several (:meth:`RunHost.attach`), and a run may outlive its driver.

See docs/coordinator.md for when to use which.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Protocol, Sequence

from raytile.common.device_class import DeviceClass
from raytile.common.errors import ConfigValidationError, ExecutorError
from raytile.runtime.executor import Executor
from raytile.runtime.active_run import ActiveRun
from raytile.runtime.plan import RunPlan
from raytile.runtime.progress import ProgressReporter

__all__ = ["RunSource", "ResultQueue", "RunHost", "DriverHost", "COORDINATORS", "choose_coordinator"]

#: Values of ``Context(coordinator=...)``.
COORDINATORS = ("driver", "actor", "auto")


def choose_coordinator(coordinator: str, executor: object, address: object) -> str:
    """Where a Context coordinates its runs: ``"driver"`` or ``"actor"`` (see :class:`RunHost`)."""
    if coordinator not in COORDINATORS:
        raise ConfigValidationError(f"coordinator must be one of {COORDINATORS}, got {coordinator!r}")
    on_ray = isinstance(executor, str) and executor == "ray"
    if coordinator == "actor" and not on_ray:
        raise ConfigValidationError(f"coordinator='actor' needs executor='ray', got executor={executor!r}")
    if coordinator == "auto":
        return "actor" if on_ray and isinstance(address, str) and address.startswith("ray://") else "driver"
    return coordinator


class ResultQueue(Protocol):
    """Where a viewer takes a run's next partial result, its end or its exception (see channel.py)."""

    def take(self, timeout: float | None = None) -> Any: ...

    def take_nowait(self) -> Any: ...


class RunSource(Protocol):
    """One viewer's end of a run: what :class:`~raytile.runtime.run.UDFRun` drives."""

    @property
    def run_id(self) -> str: ...

    @property
    def coalesced(self) -> int: ...

    @property
    def finished(self) -> bool: ...

    @property
    def outbox(self) -> ResultQueue: ...

    def join(self, timeout: float | None = None) -> None: ...

    def patch(self, patches: list[dict], recompute: bool) -> None: ...

    def cancel(self) -> None: ...

    def only_final_result(self) -> None: ...

    @property
    def stats(self) -> dict | None: ...


class RunHost(ABC):
    """Coordinates runs of one Context and runs small functions on its workers."""

    #: Where its runs are coordinated, as ``Context(coordinator=...)`` spells it: "driver" or "actor".
    coordinator: str = ""

    @property
    @abstractmethod
    def num_workers(self) -> int:
        """Worker slots; data sets pick at least this many partitions."""

    @property
    @abstractmethod
    def device_classes(self) -> frozenset[DeviceClass]:
        """Device classes with at least one worker ("cpu", "cuda")."""

    @property
    def workers(self) -> list[dict]:
        """What the workers said about themselves (name, kind, pid, host, node); empty inline."""
        return []

    @abstractmethod
    def run_function(self, fn: Callable, *args: Any) -> Any:
        """Run ``fn(*args)`` where the workers are (reading a data set's headers)."""

    @abstractmethod
    def prepare_dataset(self, dataset: Any) -> None:
        """Share a loaded data set's in-memory frames with the workers, once."""

    @abstractmethod
    def start(self, plan: RunPlan, progress: ProgressReporter | None, final_only: bool,
              detached: bool, span: Any = None) -> RunSource:
        """Start coordinating ``plan``; the returned source yields its results. ``span``: the run's
        tracing span, opened around planning."""

    @abstractmethod
    def attach(self, run_id: str) -> tuple[RunSource, Sequence[Any]]:
        """Another viewer of the live run ``run_id``: its source and the run's UDFs."""

    def list_runs(self) -> list[dict]:
        """Runs other processes can attach to (those coordinated by actors on the cluster)."""
        return []

    @abstractmethod
    def close(self) -> None:
        """Release the workers (runs started ``detached`` go on where the host allows it)."""


class DriverHost(RunHost):
    """Runs' coordinators as threads of this process, on ``executor`` (inline or Ray)."""

    coordinator = "driver"

    def __init__(self, executor: Executor):
        self.executor = executor

    @property
    def num_workers(self) -> int:
        return self.executor.num_workers

    @property
    def device_classes(self) -> frozenset[DeviceClass]:
        return self.executor.device_classes

    @property
    def workers(self) -> list[dict]:
        return list(self.executor.workers)

    def run_function(self, fn: Callable, *args: Any) -> Any:
        return self.executor.run_function(fn, *args)

    def prepare_dataset(self, dataset: Any) -> None:
        self.executor.prepare_dataset(dataset)

    def start(self, plan: RunPlan, progress: ProgressReporter | None, final_only: bool,
              detached: bool, span: Any = None) -> RunSource:
        if detached:
            raise ConfigValidationError(
                "detached=True needs the coordinator on the cluster: use "
                "Context.connect(..., coordinator='actor') (a run coordinated in this process ends with it)")
        return ActiveRun(self.executor, plan, progress, span=span, final_only=final_only).start().view()

    def attach(self, run_id: str) -> tuple[RunSource, Sequence[Any]]:
        raise ExecutorError(
            f"cannot attach to run {run_id!r}: this Context coordinates its runs in the driver, where no other "
            "viewer can reach them; start the run from a Context with coordinator='actor'")

    def close(self) -> None:
        self.executor.close()
