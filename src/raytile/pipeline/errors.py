"""Exceptions a running pipeline raises (configuration errors are
:class:`raytile.common.errors.ConfigValidationError`).

>>> try:
...     pipeline.step()
... except StageFailed as e:
...     print(e.stage, e.stage_traceback)
"""

from __future__ import annotations

from raytile.common.errors import ExecutorError, RaytileError

__all__ = ["StageFailed", "PipelineStateError", "StageActorDied"]


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

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # keeps stage and traceback when it crosses a process boundary (Ray actors)
        return (StageFailed, (self.stage, self.method, super().__str__().split(": ", 1)[-1], self.stage_traceback))


class PipelineStateError(RaytileError):
    """An operation does not fit the pipeline's state (stepping a failed or stopped pipeline...)."""


class StageActorDied(ExecutorError):
    """The Ray actor hosting a placement group of stages died; names the group and its stages."""

    def __init__(self, group: str, stages: list[str], cause: str = ""):
        super().__init__(f"actor of placement group {group!r} (stages {', '.join(stages)}) died"
                         + (f": {cause}" if cause else "") + "; call restart() to rebuild it")
        self.group = group
        self.stages = list(stages)
