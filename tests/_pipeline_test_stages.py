"""Stage classes used by pipeline tests on Ray actors (importable there: tests/ is on the workers' path)."""

from __future__ import annotations

import time
from typing import Any, ClassVar, Mapping

from raytile.pipeline import Kernel, register_stage

__all__ = ["FailAtRay", "SleepAt"]


@register_stage
class FailAtRay(Kernel):
    """Copies its input; raises at step ``fail_at``."""

    kind = "test.fail_at_ray"
    defaults: ClassVar[Mapping[str, Any]] = {"fail_at": 3}

    def compute_into(self, trigger_input, output, auxiliary_inputs):
        if self.current_time == self.params["fail_at"]:
            raise ValueError(f"ray boom at step {self.current_time}")
        output[...] = trigger_input


@register_stage
class SleepAt(Kernel):
    """Copies its input; sleeps ``seconds`` at step ``at`` (a stage that hangs for a while)."""

    kind = "test.sleep_at"
    defaults: ClassVar[Mapping[str, Any]] = {"at": 2, "seconds": 3.0}

    def compute_into(self, trigger_input, output, auxiliary_inputs):
        if self.current_time == self.params["at"]:
            time.sleep(self.params["seconds"])
        output[...] = trigger_input
