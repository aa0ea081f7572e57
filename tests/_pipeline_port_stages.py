"""Processing objects and kernels written as SPECULA and shmpipeline users write them, with only the imports
changed (importable on Ray workers: tests/ is on their path). Used by tests/test_pipeline_port.py.

SPECULA's imports were::

    from specula.base_processing_obj import BaseProcessingObj
    from specula.base_data_obj import BaseDataObj
    from specula.base_value import BaseValue
    from specula.connections import InputValue, InputList

shmpipeline's::

    from shmpipeline.config import KernelConfig, SharedMemoryConfig
    from shmpipeline.errors import ConfigValidationError
    from shmpipeline.kernel import Kernel, KernelContext
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.pipeline import BaseDataObj, BaseValue, InputList, InputValue
from raytile.pipeline import Kernel, KernelContext, register_stage
from raytile.pipeline import Stage as BaseProcessingObj
from raytile.pipeline import StageSpec as KernelConfig
from raytile.pipeline import StreamSpec as SharedMemoryConfig

__all__ = ["Slopes", "FrameSource", "SlopeComputer", "ModalRec", "RebindingRec", "LeakyIntegratorCpuKernel",
           "AffineTransformCpuKernel", "FlattenCpuKernel"]


# ---------------------------------------------------------------------------------------------------------
# SPECULA style
# ---------------------------------------------------------------------------------------------------------

class Slopes(BaseDataObj):
    """A custom data object: the slope vector and the index arrays of its x and y halves."""

    def __init__(self, length: int = None, interleave: bool = False, target_device_idx: int = None,
                 precision: int = None):
        super().__init__(target_device_idx=target_device_idx, precision=precision)
        self.slopes = self.xp.zeros(length, dtype=self.dtype)
        self.interleave = interleave
        if self.interleave:
            self.indicesX = self.xp.arange(0, length // 2) * 2
            self.indicesY = self.indicesX + 1
        else:
            self.indicesX = self.xp.arange(0, length // 2)
            self.indicesY = self.indicesX + length // 2

    @property
    def xslopes(self):
        return self.slopes[self.indicesX]

    @xslopes.setter
    def xslopes(self, value):
        self.slopes[self.indicesX] = value

    @property
    def yslopes(self):
        return self.slopes[self.indicesY]

    @yslopes.setter
    def yslopes(self, value):
        self.slopes[self.indicesY] = value


class FrameSource(BaseProcessingObj):
    """A camera without inputs: seeded normal noise plus a tilt that grows with the step."""

    def __init__(self, shape: list, seed: int = 0, target_device_idx: int = None, precision: int = None):
        super().__init__(target_device_idx=target_device_idx, precision=precision)
        self.rng = np.random.default_rng(seed)
        self.ramp = np.arange(shape[1], dtype=np.float64)
        self.frame = BaseValue('camera frame', target_device_idx=target_device_idx)
        self.frame.value = self.xp.zeros(tuple(shape), dtype=self.dtype)
        self.outputs['out_pixels'] = self.frame

    def trigger_code(self):
        self.frame.value[:] = self.rng.standard_normal(self.frame.value.shape) + 0.1 * self.current_time * self.ramp

    def post_trigger(self):
        super().post_trigger()
        self.frame.generation_time = self.current_time


class SlopeComputer(BaseProcessingObj):
    """Column means as x slopes and row means as y slopes, times ``gain``, into a :class:`Slopes`."""

    def __init__(self, n: int, gain: float = 1.0, interleave: bool = False, target_device_idx: int = None,
                 precision: int = None):
        super().__init__(target_device_idx=target_device_idx, precision=precision)
        self.gain = gain
        self.pixels = self.xp.zeros((n, n), dtype=self.dtype)
        self.slopes = Slopes(2 * n, interleave=interleave, target_device_idx=target_device_idx)
        self.inputs['in_pixels'] = InputValue(type=BaseValue)
        self.outputs['out_slopes'] = self.slopes

    def setup(self):
        super().setup()
        self.build_stream()

    def prepare_trigger(self, t):
        super().prepare_trigger(t)
        self.pixels[:] = self.local_inputs['in_pixels'].value

    def trigger_code(self):
        self.slopes.xslopes = self.pixels.mean(axis=0) * self.gain
        self.slopes.yslopes = self.pixels.mean(axis=1) * self.gain

    def post_trigger(self):
        super().post_trigger()
        self.slopes.generation_time = self.current_time


class ModalRec(BaseProcessingObj):
    """Modal reconstructor: ``modes = recmat @ slopes`` from one Slopes input or a list of them."""

    def __init__(self, recmat: list, target_device_idx: int = None, precision: int = None):
        super().__init__(target_device_idx=target_device_idx, precision=precision)
        self.recmat = self.xp.array(recmat, dtype=self.dtype)
        self.modes = BaseValue('output modes from modal reconstructor', target_device_idx=target_device_idx)
        self.modes.value = self.xp.zeros(self.recmat.shape[0], dtype=self.dtype)
        self.inputs['in_slopes'] = InputValue(type=Slopes, optional=True)
        self.inputs['in_slopes_list'] = InputList(type=Slopes, optional=True)
        self.outputs['out_modes'] = self.modes

    def setup(self):
        super().setup()
        slopes = self.inputs['in_slopes'].get(self.target_device_idx)
        slopes_list = self.inputs['in_slopes_list'].get(self.target_device_idx)
        if not slopes and not slopes_list:
            raise ValueError("Either 'slopes' or 'slopes_list' must be given as an input")
        self.build_stream(allow_parallel=False)

    def trigger_code(self):
        slopes = self.local_inputs['in_slopes']
        if slopes is None:
            s = self.xp.hstack([x.slopes for x in self.local_inputs['in_slopes_list']])
        else:
            s = slopes.slopes
        self.modes.value[:] = self.recmat @ s

    def post_trigger(self):
        super().post_trigger()
        self.modes.generation_time = self.current_time


class RebindingRec(ModalRec):
    """Breaks SPECULA's rule "allocate outputs once": assigns a new array to its output each step."""

    def trigger_code(self):
        self.modes.value = self.recmat @ self.local_inputs['in_slopes'].slopes


# ---------------------------------------------------------------------------------------------------------
# shmpipeline style
# ---------------------------------------------------------------------------------------------------------

def require_numeric_parameter(config: KernelConfig, name: str) -> float:
    value = config.parameters.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigValidationError(f"kernel {config.name!r} requires numeric parameter {name!r}")
    return float(value)


class LeakyIntegratorCpuKernel(Kernel):
    """Apply the control law ``u_k = leak * u_{k-1} + gain * e_k``."""

    kind = "porttest.cpu.leaky_integrator"
    storage = "cpu"

    @classmethod
    def validate_config(cls, config: KernelConfig, shared_memory: Mapping[str, SharedMemoryConfig]) -> None:
        super().validate_config(config, shared_memory)
        input_spec = shared_memory[config.input]
        output_spec = shared_memory[config.output]
        if input_spec.shape != output_spec.shape or input_spec.dtype != output_spec.dtype:
            raise ConfigValidationError(f"kernel {config.name!r} requires matching input and output shape/dtype")
        if len(input_spec.shape) != 1 or len(output_spec.shape) != 1:
            raise ConfigValidationError(f"kernel {config.name!r} requires 1D input and output vectors")
        require_numeric_parameter(config, name="leak")
        require_numeric_parameter(config, name="gain")

    def __init__(self, context: KernelContext) -> None:
        super().__init__(context)
        self.leak = require_numeric_parameter(context.config, name="leak")
        self.gain = require_numeric_parameter(context.config, name="gain")
        self.state = np.zeros(self.context.output_spec.shape, dtype=self.context.output_spec.dtype)

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        del auxiliary_inputs
        self.state *= self.leak
        self.state += self.gain * np.asarray(trigger_input)
        output[...] = self.state


class AffineTransformCpuKernel(Kernel):
    """``y = A x + b`` with ``A`` and ``b`` as auxiliary streams, written into ``self.output_buffer``."""

    kind = "porttest.cpu.affine_transform"
    storage = "cpu"
    auxiliary_arity = 2

    @classmethod
    def validate_config(cls, config: KernelConfig, shared_memory: Mapping[str, SharedMemoryConfig]) -> None:
        super().validate_config(config, shared_memory)
        input_spec = shared_memory[config.input]
        matrix_spec, offset_spec = (shared_memory[name] for name in config.auxiliary_names)
        output_spec = shared_memory[config.output]
        if (matrix_spec.shape != (output_spec.shape[0], input_spec.shape[0])
                or offset_spec.shape != output_spec.shape):
            raise ConfigValidationError(f"kernel {config.name!r} requires a (m, n) matrix and a (m,) offset for "
                                        f"a (n,) input and a (m,) output")
        for name in config.all_inputs:
            if shared_memory[name].dtype.kind != "f":
                raise ConfigValidationError(f"kernel {config.name!r} requires float inputs, {name!r} is not")

    def __init__(self, context: KernelContext) -> None:
        super().__init__(context)
        self._matrix_alias = self.context.config.auxiliary_aliases[0]
        self._offset_alias = self.context.config.auxiliary_aliases[1]
        self.input_shapes = [spec.shape for spec in context.input_specs]
        self.aux_shapes = [spec.shape for spec in context.auxiliary_specs]
        self.trigger_shape = context.trigger_input_spec.shape

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        np.matmul(auxiliary_inputs[self._matrix_alias], trigger_input, out=self.output_buffer)
        self.output_buffer += auxiliary_inputs[self._offset_alias]


class FlattenCpuKernel(Kernel):
    """Flatten the input into a 1-D output of the same size (no ``__init__``: parameters-free)."""

    kind = "porttest.cpu.flatten"
    storage = "cpu"

    @classmethod
    def validate_config(cls, config: KernelConfig, shared_memory: Mapping[str, SharedMemoryConfig]) -> None:
        super().validate_config(config, shared_memory)
        input_spec = shared_memory[config.input]
        output_spec = shared_memory[config.output]
        if len(output_spec.shape) != 1 or int(np.prod(input_spec.shape)) != output_spec.shape[0]:
            raise ConfigValidationError(f"kernel {config.name!r} requires a 1D output of the input's size")

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> None:
        output[...] = np.asarray(trigger_input).reshape(-1)


# the registration shmpipeline's registry does; SPECULA classes get a kind here (or are named by import path)
for _cls in (LeakyIntegratorCpuKernel, AffineTransformCpuKernel, FlattenCpuKernel):
    register_stage(_cls)
register_stage(SlopeComputer, kind="porttest.slopec")
register_stage(ModalRec, kind="porttest.modalrec")
register_stage(RebindingRec, kind="porttest.rebinding_rec")
