"""`Kernel`: a stage that computes one output from a trigger input and auxiliary inputs.

Kernels follow shmpipeline's model: a class sets ``kind``, ``storage`` and
``auxiliary_arity``, checks its configuration in :meth:`Kernel.validate_config`
(before anything is built) and implements :meth:`Kernel.compute_into`, which
writes into the preallocated output. The kernel runs when its trigger input
was refreshed; auxiliary inputs are read as they are (latest value).

>>> class Scale(Kernel):
...     kind = "scale"
...     defaults = {"factor": 2.0}
...     def compute_into(self, trigger_input, output, auxiliary_inputs):
...         np.multiply(trigger_input, self.params["factor"], out=output)

``compute_into`` may return ``False`` to leave the output un-refreshed this
step (an integrating stage that emits every N inputs): its consumers are
then not triggered.

A kernel written for shmpipeline (``__init__(self, context)``, parameters
read from ``context.config.parameters``, ``validate_config(cls, config,
shared_memory)``) runs as it is: ``self.context`` answers as a
``KernelContext``, ``self.output_buffer`` is the output stream's array
(compute into it or into ``output``: they are the same array), and the
``auxiliary_inputs`` mapping is keyed by the auxiliary aliases. Such a
kernel checks its own parameters and output shape (raytile's output rule,
:meth:`Kernel.expected_output`, applies only if it overrides that method).
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StageSpec, StreamSpec
from raytile.pipeline.stage import Port, Stage

__all__ = ["Kernel", "OutputRule"]

#: What :meth:`Kernel.expected_output` returns: (shape, dtype); None in either place means "any".
OutputRule = tuple["tuple[int, ...] | None", "np.dtype | None"]


class Kernel(Stage):
    """Base class of kernels: one trigger input, ``auxiliary_arity`` auxiliary inputs, one output."""

    kind: ClassVar[str] = "kernel.base"
    storage: ClassVar[str | None] = None  # None: follows target_device_idx; "cpu"/"gpu" binds the kernel
    auxiliary_arity: ClassVar[int | None] = 0
    input_ports: ClassVar[Mapping[str, Port]] = {"input": Port(),
                                                 "auxiliary": Port(many=True, optional=True, trigger=False)}
    output_ports: ClassVar[tuple[str, ...]] = ("output",)
    #: The output's dtype: "same" as the trigger input, "float" (any float dtype) or "any".
    output_dtype: ClassVar[str] = "same"

    @classmethod
    def validate_config(cls, spec: StageSpec, streams: Mapping[str, StreamSpec]) -> None:
        """Ports, storage, parameters, auxiliary arity, then output shape/dtype against :meth:`expected_output`."""
        super().validate_config(spec, streams)
        where = spec.where()
        if cls.auxiliary_arity is not None and len(spec.auxiliary) != cls.auxiliary_arity:
            raise ConfigValidationError(f"{where}: field 'auxiliary': kind {cls.kind!r} expects "
                                        f"{cls.auxiliary_arity} auxiliary stream(s), got {len(spec.auxiliary)}")
        params = cls.resolve_params(spec.params, where)
        cls.check_params(params, where)
        if spec.output is None or spec.input is None:
            return
        if cls.init_style() == "shmpipeline" and not any("expected_output" in vars(k) for k in cls.__mro__
                                                         if k is not Kernel):
            return  # shmpipeline kernels check their output themselves
        shape, dtype = cls.expected_output(streams[spec.input], tuple(streams[a] for a in spec.auxiliary), params,
                                           where)
        out = streams[spec.output]
        if shape is not None and tuple(shape) != out.shape:
            raise ConfigValidationError(f"{where}: field 'output': stream {out.name!r} has shape {list(out.shape)}, "
                                        f"kind {cls.kind!r} on input {spec.input!r} "
                                        f"{list(streams[spec.input].shape)} makes {list(shape)}")
        if dtype is not None and np.dtype(dtype) != out.dtype:
            raise ConfigValidationError(f"{where}: field 'output': stream {out.name!r} has dtype {out.dtype}, "
                                        f"kind {cls.kind!r} makes {np.dtype(dtype)}")
        if cls.output_dtype == "float" and out.dtype.kind not in "fc":
            raise ConfigValidationError(f"{where}: field 'output': stream {out.name!r} has dtype {out.dtype}, "
                                        f"kind {cls.kind!r} makes a float dtype")

    @classmethod
    def check_params(cls, params: Mapping[str, Any], where: str) -> None:
        """Check parameter values; raise ConfigValidationError naming ``field 'params.X'``."""

    @classmethod
    def expected_output(cls, input_spec: StreamSpec, auxiliary_specs: tuple[StreamSpec, ...],
                        params: Mapping[str, Any], where: str) -> OutputRule:
        """Output (shape, dtype) this kernel makes from its inputs; default: the trigger input's shape, and
        its dtype if ``output_dtype`` is "same"."""
        return input_spec.shape, (input_spec.dtype if cls.output_dtype == "same" else None)

    def bind_locals(self) -> None:
        self._trigger_value = self.local_inputs["input"]
        #: auxiliary arrays in config order (a stream may appear twice)
        self.aux_values: list[Any] = list(self.local_inputs.get("auxiliary") or [])
        self._aux = dict(zip(self.context.spec.auxiliary_aliases, self.aux_values))
        out = self.outputs.get("output")
        self._out: Any = None if out is None else out.value

    @property
    def output_buffer(self) -> Any:
        """The output stream's array (shmpipeline's reusable ``output_buffer``), allocated once."""
        out = self.outputs.get("output")
        return None if out is None else out.value

    @output_buffer.setter
    def output_buffer(self, value: Any) -> None:
        # ``self.output_buffer += x`` assigns the same array back; anything else would leave the stream behind
        if value is not self.output_buffer:
            raise ConfigValidationError(f"stage {self.name!r}: output_buffer is the output stream's array; "
                                        f"write into it (output_buffer[...] = x) instead of replacing it")

    def trigger_code(self) -> None:
        if self.compute_into(self._trigger_value, self._out, self._aux) is False:
            self.refreshed = False

    def compute_into(self, trigger_input: Any, output: Any, auxiliary_inputs: Mapping[str, Any]) -> bool | None:
        """Compute into ``output`` (preallocated, reused every step); return False to skip refreshing it."""
        raise NotImplementedError(f"kernel kind {self.kind!r} does not implement compute_into()")
