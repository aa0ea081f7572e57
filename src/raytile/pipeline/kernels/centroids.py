"""`centroids`: Shack-Hartmann subaperture centroids of a 2-D frame, as slopes.

The frame is cut into ``n_sub`` x ``n_sub`` subapertures of ``p`` x ``p``
pixels (``p = frame side / n_sub``). For each, after subtracting
``threshold`` and clipping at zero (when ``threshold`` > 0), the centroid
relative to the subaperture centre is ``sum(w * (i - (p-1)/2)) / sum(w)``
in pixels (0 where the flux is 0). The output holds the x slopes of all
subapertures (row-major), then the y slopes: shape ``(2 * n_sub**2,)``.

>>> {"kind": "centroids", "input": "calibrated", "output": "slopes", "params": {"n_sub": 16}}
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StreamSpec
from raytile.pipeline.kernel import Kernel, OutputRule
from raytile.pipeline.kernels._checks import number, positive_int
from raytile.pipeline.registry import register_stage

__all__ = ["Centroids"]


@register_stage
class Centroids(Kernel):
    """Shack-Hartmann centroids -> slopes ``[x..., y...]`` in pixels."""

    kind = "centroids"
    capturable = True
    output_dtype = "float"
    defaults: ClassVar[Mapping[str, Any]] = {"n_sub": 16, "threshold": 0.0}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        positive_int(params, "n_sub", where)
        number(params, "threshold", where)

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        n = params["n_sub"]
        if len(input_spec.shape) != 2 or input_spec.shape[0] != input_spec.shape[1] or input_spec.shape[0] % n:
            raise ConfigValidationError(f"{where}: field 'params.n_sub': {n} subapertures do not tile the input "
                                        f"{input_spec.name!r} {list(input_spec.shape)} (a square frame is needed)")
        return (2 * n * n,), None

    def configure(self) -> None:
        self.check_params(self.params, f"stage {self.name!r}")
        xp = self.xp
        n = self.params["n_sub"]
        side = self._trigger_value.shape[0]
        p = side // n
        self._n, self._p = n, p
        self._threshold = float(self.params["threshold"])
        dt = self._out.dtype
        self._offsets = xp.arange(p, dtype=dt) - (p - 1) / 2.0
        self._work = xp.empty((side, side), dtype=dt)
        self._rows = xp.empty((n, p, n), dtype=dt)     # summed over x within a subaperture
        self._cols = xp.empty((n, n, p), dtype=dt)     # summed over y
        self._flux = xp.empty((n, n), dtype=dt)
        self._sx = xp.empty((n, n), dtype=dt)
        self._sy = xp.empty((n, n), dtype=dt)
        self._nonzero = xp.empty((n, n), dtype=bool)
        self._zero = xp.empty((n, n), dtype=bool)
        self._denom = xp.empty((n, n), dtype=dt)

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        xp, n, p = self.xp, self._n, self._p
        w = self._work
        if self._threshold > 0:
            xp.subtract(trigger_input, self._threshold, out=w, casting="unsafe")
            xp.maximum(w, 0, out=w)
        else:
            xp.copyto(w, trigger_input, casting="unsafe")
        sub = w.reshape(n, p, n, p)                      # (sub row, y, sub col, x)
        xp.sum(sub, axis=3, out=self._rows)              # (n, p, n)
        xp.sum(sub, axis=1, out=self._cols)              # (n, n, p)
        xp.sum(self._cols, axis=2, out=self._flux)
        xp.matmul(self._cols, self._offsets, out=self._sx)
        xp.matmul(self._rows.transpose(0, 2, 1), self._offsets, out=self._sy)
        # slope = s / flux where flux > 0, else 0; without boolean indexing or `where=` (GPU, capture)
        xp.greater(self._flux, 0, out=self._nonzero)
        xp.multiply(self._flux, self._nonzero, out=self._denom)
        xp.logical_not(self._nonzero, out=self._zero)
        xp.add(self._denom, self._zero, out=self._denom)      # 1 where the flux is not positive
        nn = n * n
        ox = output[:nn].reshape(n, n)
        oy = output[nn:].reshape(n, n)
        xp.divide(self._sx, self._denom, out=ox)
        xp.multiply(ox, self._nonzero, out=ox)
        xp.divide(self._sy, self._denom, out=oy)
        xp.multiply(oy, self._nonzero, out=oy)
