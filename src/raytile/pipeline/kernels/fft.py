"""`fft_magnitude`: ``abs(fft2(x))`` over the last two axes, optionally fft-shifted.

>>> {"kind": "fft_magnitude", "input": "frame", "output": "spectrum", "params": {"shift": true}}
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StreamSpec
from raytile.pipeline.kernel import Kernel, OutputRule
from raytile.pipeline.registry import register_stage

__all__ = ["FFTMagnitude"]


@register_stage
class FFTMagnitude(Kernel):
    """Magnitude of the 2-D FFT; ``shift: true`` puts the zero frequency in the centre."""

    kind = "fft_magnitude"
    capturable = True
    output_dtype = "float"
    defaults: ClassVar[Mapping[str, Any]] = {"shift": False}

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        if not isinstance(params["shift"], bool):
            raise ConfigValidationError(f"{where}: field 'params.shift': expected true or false, "
                                        f"got {params['shift']!r}")

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        if len(input_spec.shape) < 2:
            raise ConfigValidationError(f"{where}: field 'input': stream {input_spec.name!r} needs >= 2 dims, "
                                        f"got {list(input_spec.shape)}")
        return input_spec.shape, None

    def configure(self) -> None:
        self.check_params(self.params, f"stage {self.name!r}")
        self._shift = self.params["shift"]

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        xp = self.xp
        spectrum = xp.fft.fft2(trigger_input)
        if self._shift:
            spectrum = xp.fft.fftshift(spectrum, axes=(-2, -1))
        xp.abs(spectrum, out=output, casting="unsafe")
