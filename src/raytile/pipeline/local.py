"""`LocalPlacement`: every stage in this process, stepped by one thread (the fast path).

>>> p = LocalPlacement(cfg, levels); p.build(); p.step(0); p.read("commands")
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.pipeline.config import PipelineConfig
from raytile.pipeline.engine import GraphEngine
from raytile.pipeline.placement import Placement

__all__ = ["LocalPlacement"]


class LocalPlacement(Placement):
    """Runs the whole graph in one :class:`GraphEngine` in the calling thread."""

    name = "in-process"

    def __init__(self, config: PipelineConfig, levels: list[tuple[str, ...]]):
        self.config = config
        self.levels = levels
        self.engine = GraphEngine(config, levels=levels)

    def build(self) -> None:
        self.engine.build()

    def step(self, t: int) -> None:
        self.engine.step(t)

    def read(self, stream: str) -> tuple[np.ndarray, int]:
        """A copy of the stream's value (on the host) and its generation time."""
        return self.engine.read(stream)

    def generation(self, stream: str) -> int:
        return self.engine.streams[stream].generation_time

    def update_parameters(self, stage: str, params: dict[str, Any]) -> None:
        self.engine.stages[stage].update_parameters(**params)

    def metrics(self) -> dict[str, dict[str, Any]]:
        return self.engine.metrics_snapshot()

    def sink_values(self, stage: str) -> np.ndarray:
        return self.engine.sink_values(stage)

    def stage(self, name: str) -> Any:
        return self.engine.stages[name]

    def finalize(self) -> None:
        self.engine.finalize()

    def close(self) -> None:
        """Nothing to release beyond finalize."""

    def restart(self) -> None:
        self.engine = GraphEngine(self.config, levels=self.levels)
        self.engine.build()

    def describe(self) -> list[str]:
        return [f"in-process: all {len(self.config.stages)} stages in one thread"]
