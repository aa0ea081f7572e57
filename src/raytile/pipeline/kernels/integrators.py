"""Kernels with state across steps: the leaky integrator and the integrating (multi-rate) stage.

>>> # AO control law: cmd = leak * cmd + gain * modes
>>> {"kind": "leaky_integrator", "input": "modes", "output": "cmd", "params": {"gain": -0.3, "leak": 0.99}}
>>> # an integrating camera: emits the sum of 4 inputs every 4th step; its consumers run at 1/4 rate
>>> {"kind": "integrate", "input": "frame", "output": "long_exposure", "params": {"frames": 4}}
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.kernel import Kernel
from raytile.pipeline.kernels._checks import number, positive_int
from raytile.pipeline.registry import register_stage

__all__ = ["LeakyIntegrator", "Integrate"]


@register_stage
class LeakyIntegrator(Kernel):
    """``out = leak * out + gain * x`` (``out`` starts at zero and keeps its value between steps)."""

    kind = "leaky_integrator"
    capturable = True
    output_dtype = "any"
    defaults: ClassVar[Mapping[str, Any]] = {"gain": 0.5, "leak": 1.0}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        number(params, "gain", where)
        leak = number(params, "leak", where)
        if not 0.0 <= leak <= 1.0:
            raise ConfigValidationError(f"{where}: field 'params.leak': expected 0 <= leak <= 1, got {leak}")

    def configure(self) -> None:
        self.check_params(self.params, f"stage {self.name!r}")
        self._gain = float(self.params["gain"])
        self._leak = float(self.params["leak"])
        self._scratch = self.xp.empty_like(self._out)

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        xp = self.xp
        xp.multiply(trigger_input, self._gain, out=self._scratch, casting="unsafe")
        if self._leak != 1.0:
            output *= self._leak
        output += self._scratch


@register_stage
class Integrate(Kernel):
    """Sum of ``frames`` consecutive inputs, emitted every ``frames`` triggers (output not refreshed between)."""

    kind = "integrate"
    output_dtype = "any"
    defaults: ClassVar[Mapping[str, Any]] = {"frames": 2}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        positive_int(params, "frames", where)

    def configure(self) -> None:
        self.check_params(self.params, f"stage {self.name!r}")
        self._frames = int(self.params["frames"])
        self._acc = self.xp.zeros_like(self._out)
        self._count = 0

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> bool:
        self._acc += trigger_input
        self._count += 1
        if self._count < self._frames:
            return False
        output[...] = self._acc
        self._acc[...] = 0
        self._count = 0
        return True
