"""`binning`: sum (or mean) over ``factor`` x ``factor`` blocks of a 2-D frame.

>>> {"kind": "binning", "input": "frame", "output": "binned", "params": {"factor": 2, "mode": "mean"}}
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StreamSpec
from raytile.pipeline.kernel import Kernel, OutputRule
from raytile.pipeline.kernels._checks import positive_int
from raytile.pipeline.registry import register_stage

__all__ = ["Binning"]


@register_stage
class Binning(Kernel):
    """``out[i, j] = x[i*f:(i+1)*f, j*f:(j+1)*f].sum()`` (``mode: mean`` divides by ``f*f``)."""

    kind = "binning"
    capturable = True
    defaults: ClassVar[Mapping[str, Any]] = {"factor": 2, "mode": "sum"}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        positive_int(params, "factor", where)
        if params["mode"] not in ("sum", "mean"):
            raise ConfigValidationError(f"{where}: field 'params.mode': expected 'sum' or 'mean', "
                                        f"got {params['mode']!r}")

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        f = params["factor"]
        if len(input_spec.shape) != 2 or any(s % f for s in input_spec.shape):
            raise ConfigValidationError(f"{where}: field 'params.factor': factor {f} does not divide the 2-D "
                                        f"input {input_spec.name!r} {list(input_spec.shape)}")
        return (input_spec.shape[0] // f, input_spec.shape[1] // f), None

    def configure(self) -> None:
        where = f"stage {self.name!r}"
        self.check_params(self.params, where)
        f = self.params["factor"]
        h, w = self._trigger_value.shape
        if h % f or w % f:
            raise ConfigValidationError(f"{where}: field 'params.factor': factor {f} does not divide {[h, w]}")
        self._f = f
        self._shape4 = (h // f, f, w // f, f)
        self._scratch = self.xp.empty((h // f, f, w // f), dtype=self._out.dtype)
        self._mean = self.params["mode"] == "mean"

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        blocks = trigger_input.reshape(self._shape4)
        self.xp.sum(blocks, axis=3, out=self._scratch)
        self.xp.sum(self._scratch, axis=1, out=output)
        if self._mean:
            output /= self._f * self._f
