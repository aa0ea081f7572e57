"""Element-wise kernels: copy, affine, clip, dark/gain calibration.

>>> # out = (frame - dark) * gain, dark and gain are auxiliary streams
>>> {"name": "calib", "kind": "calibrate", "input": "frame", "auxiliary": ["dark", "gain"], "output": "cal"}
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StreamSpec
from raytile.pipeline.kernel import Kernel, OutputRule
from raytile.pipeline.kernels._checks import number, require_float, same_shape
from raytile.pipeline.registry import register_stage

__all__ = ["Copy", "Affine", "Clip", "Calibrate"]


@register_stage
class Copy(Kernel):
    """``out[...] = x`` (casting to the output's dtype); the input may live on another device
    (CPU -> GPU or back): the only built-in that moves data between storages."""

    kind = "copy"
    capturable = True
    any_input_storage = True
    output_dtype = "any"

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        self.xp.copyto(output, trigger_input, casting="unsafe")


@register_stage
class Affine(Kernel):
    """``out = x * scale + offset``."""

    kind = "affine"
    capturable = True
    output_dtype = "any"
    defaults: ClassVar[Mapping[str, Any]] = {"scale": 1.0, "offset": 0.0}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        number(params, "scale", where)
        number(params, "offset", where)

    def configure(self) -> None:
        self.check_params(self.params, f"stage {self.name!r}")
        self._scale = float(self.params["scale"])
        self._offset = float(self.params["offset"])

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        self.xp.multiply(trigger_input, self._scale, out=output, casting="unsafe")
        if self._offset:
            output += self._offset


@register_stage
class Clip(Kernel):
    """``out = clip(x, lo, hi)``."""

    kind = "clip"
    capturable = True
    defaults: ClassVar[Mapping[str, Any]] = {"lo": -1.0, "hi": 1.0}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        lo, hi = number(params, "lo", where), number(params, "hi", where)
        if lo > hi:
            raise ConfigValidationError(f"{where}: field 'params.lo': lo={lo} is above hi={hi}")

    def configure(self) -> None:
        self.check_params(self.params, f"stage {self.name!r}")
        self._lo, self._hi = float(self.params["lo"]), float(self.params["hi"])

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        self.xp.clip(trigger_input, self._lo, self._hi, out=output)


@register_stage
class Calibrate(Kernel):
    """Dark and gain correction: ``out = (x - dark) * gain``; auxiliary streams ``[dark, gain]``."""

    kind = "calibrate"
    capturable = True
    output_dtype = "float"
    auxiliary_arity = 2

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        for aux in auxiliary_specs:
            same_shape(input_spec, aux, where, "auxiliary")
            require_float(aux, where, "auxiliary")
        return input_spec.shape, None

    def configure(self) -> None:
        self._dark, self._gain = self.aux_values

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        self.xp.subtract(trigger_input, self._dark, out=output, casting="unsafe")
        self.xp.multiply(output, self._gain, out=output)
