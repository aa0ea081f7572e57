"""`Placement`: where a pipeline's stages run, as one interface with two implementations.

:class:`~raytile.pipeline.local.LocalPlacement` runs every stage in the
calling thread; :class:`~raytile.pipeline.ray_placement.RayPlacement` runs
each group of stages in a Ray actor, the values that cross groups carried
by a step channel (:mod:`raytile.pipeline.ray_channels`: plain actor calls
by default, a Ray Compiled Graph as an option). :class:`~raytile.pipeline.runner.Pipeline`
drives either through these methods only (its state machine, loop, patches
and readers are the same for both). "Placement" here means this: where the
stages run. A stage's group (its config's ``placement`` field) is a *group*
(:mod:`raytile.pipeline.topology`); where a Context coordinates runs is its
*coordinator*.

>>> placement = LocalPlacement(config, levels)          # doctest: +SKIP
>>> placement.build(); placement.step(0); placement.read("commands")  # doctest: +SKIP
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

__all__ = ["Placement"]


class Placement(ABC):
    """Builds a pipeline's stages somewhere, steps them, and answers reads, updates and metrics."""

    #: The name ``Pipeline(placement=...)`` uses for it ("in-process", "ray", "ray-compiled", "ray-classic").
    name: str = ""
    #: The last step completed everywhere, when steps may still be in flight after ``step`` returned
    #: (the pipeline's counter resumes after it when a step fails); None: every step is done on return.
    last_done: int | None = None

    @abstractmethod
    def build(self) -> None:
        """Construct and set up every stage (start what runs them)."""

    @abstractmethod
    def step(self, t: int) -> None:
        """Run step ``t`` (or submit it: see :meth:`drain`)."""

    def drain(self) -> None:
        """Wait for every submitted step (placements that overlap steps); nothing to wait for by default."""

    @abstractmethod
    def read(self, stream: str) -> tuple[np.ndarray, int]:
        """A copy of the stream's value (on the host) and its generation time."""

    @abstractmethod
    def generation(self, stream: str) -> int:
        """The step that last refreshed ``stream`` (-1: never)."""

    @abstractmethod
    def update_parameters(self, stage: str, params: dict[str, Any]) -> None:
        """Change a stage's parameters (between two steps)."""

    @abstractmethod
    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per stage: steps and timing (see :class:`~raytile.pipeline.metrics.StageMetrics`)."""

    @abstractmethod
    def sink_values(self, stage: str) -> np.ndarray:
        """The values a ``sink`` stage kept, oldest first."""

    @abstractmethod
    def finalize(self) -> None:
        """Finalize every stage (the end of the run)."""

    @abstractmethod
    def close(self) -> None:
        """Release what :meth:`build` started (after :meth:`finalize`, or after a failure)."""

    @abstractmethod
    def restart(self) -> None:
        """Build again from the config what failed (every stage, or the dead actors)."""

    @abstractmethod
    def describe(self) -> list[str]:
        """Lines saying where the stages run."""
