"""``libertem_live.detectors.memory.acquisition`` at its ported path: an array as a detector.

For trying live code without a detector (notebooks, tests, the docs): ``open(data=array,
extra_kwargs={...})`` takes the array and the parameters of LiberTEM's memory data set
(:class:`raytile.io.dataset.memory.MemoryDataSet`: ``datashape`` for zeros without ``data``,
``tileshape``, ``num_partitions``, ``sig_dims``, ``array_backends`` ...). The acquisition is that
memory data set, with the live calls: in active mode (no ``pending_aq``) ``LiveContext.run_udf``
and ``run_udf_iter`` call ``hooks.on_ready_for_data`` when each run starts, as LiberTEM-live's.
``frames_per_partition`` sets the partitions (LiberTEM-live ignores it) unless ``extra_kwargs`` has
``num_partitions``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.dataset.memory import MemoryDataSet
from raytile.live.detectors.base.connection import DetectorConnection, PendingAcquisition
from raytile.live.hooks import Hooks, ReadyForDataEnv
from raytile.live.nav_shape import determine_nav_shape

__all__ = ["MemoryConnectionBuilder", "MemoryConnection", "PendingMemAq", "MemoryAcquisition"]


class PendingMemAq(PendingAcquisition):
    """The memory detector's acquisition (passive mode): every frame of the array, in its nav shape."""

    def __init__(self, nimages: int, nav_shape: tuple[int, ...]):
        self._nimages = int(nimages)
        self._nav_shape = tuple(nav_shape)

    @property
    def nimages(self) -> int:
        return self._nimages

    @property
    def nav_shape(self) -> tuple[int, ...] | None:
        return self._nav_shape


class MemoryConnection(DetectorConnection):
    """An open memory "detector": the array and the memory data set's parameters."""

    def __init__(self, data: Any, extra_kwargs: dict | None = None):
        if extra_kwargs is not None and not isinstance(extra_kwargs, dict):
            raise ConfigValidationError(f"memory connection: parameter 'extra_kwargs' must be a dict, got "
                                        f"{type(extra_kwargs).__name__}")
        self.data = data
        self.extra_kwargs = dict(extra_kwargs or {})
        shape = np.shape(data) if data is not None else tuple(self.extra_kwargs.get("datashape") or ())
        if not shape:
            raise ConfigValidationError("memory connection: give data (an array) or extra_kwargs={'datashape': ...}")
        sig_dims = int(self.extra_kwargs.get("sig_dims") or 2)
        self._nav_shape = tuple(int(s) for s in shape[:len(shape) - sig_dims])

    def wait_for_acquisition(self, timeout: float | None = None) -> PendingMemAq:
        """The array's acquisition, at once (it is always armed)."""
        return PendingMemAq(math.prod(self._nav_shape), self._nav_shape)

    def close(self) -> None:
        """Nothing to release: the array stays the caller's."""

    def make_acquisition(self, nav_shape: tuple[int, ...] | None = None, frames_per_partition: int | None = None,
                         pending_aq: Any = None, hooks: Hooks | None = None) -> "MemoryAcquisition":
        """What ``LiveContext.make_acquisition(conn=this, ...)`` returns."""
        if nav_shape is not None and -1 in tuple(nav_shape):
            nav_shape = determine_nav_shape(math.prod(self._nav_shape), tuple(nav_shape),
                                            None if hooks is None else hooks.on_determine_nav_shape)
        kwargs = dict(self.extra_kwargs)
        if frames_per_partition is not None and "num_partitions" not in kwargs:
            frames = math.prod(nav_shape if nav_shape is not None else self._nav_shape)
            kwargs["num_partitions"] = max(1, math.ceil(frames / max(1, int(frames_per_partition))))
        aq = MemoryAcquisition(data=self.data, nav_shape=nav_shape, **kwargs)
        aq._pending_aq = pending_aq
        aq._hooks = hooks if hooks is not None else Hooks()
        return aq


class MemoryConnectionBuilder:
    """``make_connection("memory")``: ``open(data, extra_kwargs=None)``."""

    def open(self, data: Any = None, extra_kwargs: dict | None = None) -> MemoryConnection:
        return MemoryConnection(data=data, extra_kwargs=extra_kwargs)


class MemoryAcquisition(MemoryDataSet):
    """The memory detector's acquisition: LiberTEM's memory data set of the connection's array
    (made by :meth:`MemoryConnection.make_acquisition`), with the hooks of its run."""

    _pending_aq: Any = None
    _hooks: Hooks | None = None

    def start_acquisition(self) -> None:
        """A run starts: in active mode, ``hooks.on_ready_for_data`` (the "trigger")."""
        if self._pending_aq is None and self._hooks is not None:
            self._hooks.on_ready_for_data(ReadyForDataEnv(aq=self))

    def end_acquisition(self) -> None:
        """A run ended: nothing to stop."""

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_hooks"] = None  # the user's hooks run on the main node only
        return state
