"""`reduce`: sum, mean, max, min or std over some axes (all: output shape ``[1]``).

>>> {"kind": "reduce", "input": "frame", "output": "row_sums", "params": {"op": "sum", "axis": 1}}
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StreamSpec
from raytile.pipeline.kernel import Kernel, OutputRule
from raytile.pipeline.registry import register_stage

__all__ = ["Reduce", "OPS"]

OPS = ("sum", "mean", "max", "min", "std")


def _axes(axis: Any, ndim: int, where: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, (list, tuple)) else [axis]
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, int) or not -ndim <= a < ndim:
            raise ConfigValidationError(f"{where}: field 'params.axis': {axis!r} is not an axis of a "
                                        f"{ndim}-D input")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ConfigValidationError(f"{where}: field 'params.axis': {axis!r} repeats an axis")
    return tuple(sorted(out))


@register_stage
class Reduce(Kernel):
    """``out = op(x, axis)``; ``axis`` None reduces everything into shape ``[1]``."""

    kind = "reduce"
    capturable = True
    defaults: ClassVar[Mapping[str, Any]] = {"op": "sum", "axis": None}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        if params["op"] not in OPS:
            raise ConfigValidationError(f"{where}: field 'params.op': expected one of {OPS}, got {params['op']!r}")

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        axes = _axes(params["axis"], len(input_spec.shape), where)
        shape = tuple(s for i, s in enumerate(input_spec.shape) if i not in axes) or (1,)
        return shape, None

    def configure(self) -> None:
        where = f"stage {self.name!r}"
        self.check_params(self.params, where)
        self._axes = _axes(self.params["axis"], self._trigger_value.ndim, where)
        self._fn = getattr(self.xp, self.params["op"])
        self._dest = self._out.reshape(()) if len(self._axes) == self._trigger_value.ndim else self._out

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        self._fn(trigger_input, axis=self._axes, out=self._dest)
