"""`sink`: keeps the last ``keep`` values of its input (oldest first in :meth:`Sink.values`).

>>> {"kind": "sink", "input": "commands", "params": {"keep": 100}}
>>> pipeline.sink("log")        # (n <= 100, *shape) array
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import numpy as np

from raytile.pipeline.config import StreamSpec
from raytile.pipeline.kernel import Kernel, OutputRule
from raytile.pipeline.kernels._checks import positive_int
from raytile.pipeline.registry import register_stage

__all__ = ["Sink"]


@register_stage
class Sink(Kernel):
    """A ring of the last ``keep`` input values, with the step each arrived at."""

    kind = "sink"
    output_ports: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[Mapping[str, Any]] = {"keep": 1}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        positive_int(params, "keep", where)

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        return None, None

    def configure(self) -> None:
        self.check_params(self.params, f"stage {self.name!r}")
        keep = int(self.params["keep"])
        x = self._trigger_value
        self._ring = self.xp.zeros((keep, *x.shape), dtype=x.dtype)
        self._times = np.full(keep, -1, np.int64)
        self.count = 0

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        i = self.count % len(self._ring)
        self._ring[i] = trigger_input
        self._times[i] = self.current_time
        self.count += 1

    def values(self) -> np.ndarray:
        """The kept values, oldest first, as a host array ``(min(count, keep), *shape)``."""
        keep = len(self._ring)
        n = min(self.count, keep)
        order = [(self.count - n + k) % keep for k in range(n)]
        ring = self._ring if isinstance(self._ring, np.ndarray) else self._ring.get()
        return ring[order].copy()

    def times(self) -> np.ndarray:
        """The step of each kept value, in the order of :meth:`values`."""
        keep = len(self._ring)
        n = min(self.count, keep)
        return self._times[[(self.count - n + k) % keep for k in range(n)]].copy()
