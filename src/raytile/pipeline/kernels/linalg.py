"""`matvec`: ``out = M @ x`` with the matrix on an auxiliary stream (an AO reconstructor).

>>> {"kind": "matvec", "input": "slopes", "auxiliary": ["reconstructor"], "output": "modes"}
"""

from __future__ import annotations

from typing import Any, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StreamSpec
from raytile.pipeline.kernel import Kernel, OutputRule
from raytile.pipeline.registry import register_stage

__all__ = ["MatVec"]


@register_stage
class MatVec(Kernel):
    """Matrix (m, n) on the auxiliary stream times the (n,) input -> (m,)."""

    kind = "matvec"
    capturable = True
    auxiliary_arity = 1

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        (m,) = auxiliary_specs
        if len(m.shape) != 2 or len(input_spec.shape) != 1 or m.shape[1] != input_spec.shape[0]:
            raise ConfigValidationError(f"{where}: field 'auxiliary': matrix {m.name!r} {list(m.shape)} cannot "
                                        f"multiply input {input_spec.name!r} {list(input_spec.shape)}")
        return (m.shape[0],), None

    def configure(self) -> None:
        (self._matrix,) = self.aux_values

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        self.xp.matmul(self._matrix, trigger_input, out=output)
