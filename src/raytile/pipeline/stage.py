"""`Stage`: a processing object with inputs, preallocated outputs and a triggered life cycle.

Life cycle (after SPECULA's processing objects): ``__init__`` (allocate
outputs once with ``self.xp``) -> connection (the framework wires inputs to
the writers' outputs) -> :meth:`setup` -> per step :meth:`check_ready`,
:meth:`prepare_trigger`, :meth:`trigger_code`, :meth:`post_trigger` ->
:meth:`finalize`. Ports and parameters are declared on the class so that a
configuration is validated before any stage is built.

>>> class Doubler(Stage):
...     kind = "doubler"
...     input_ports = {"input": Port()}
...     output_ports = ("output",)
...     def trigger_code(self):
...         self.xp.multiply(self.local_inputs["input"], 2, out=self.outputs["output"].value)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StageSpec, StreamSpec
from raytile.pipeline.connections import InputList, InputValue, StreamValue
from raytile.pipeline.device import Device, resolve_device, storage_of

__all__ = ["Stage", "Port", "StageContext", "REQUIRED"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: Default of a parameter that the config must give.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Port:
    """An input port: one stream, or a list (``many``); ``trigger=False`` inputs never trigger the stage."""

    many: bool = False
    optional: bool = False
    trigger: bool = True


@dataclass(frozen=True)
class StageContext:
    """What a stage learns at construction: its spec and the streams on its ports."""

    spec: StageSpec
    streams: Mapping[str, StreamSpec]
    base_dir: str = "."

    @property
    def name(self) -> str:
        return self.spec.name

    def input_specs(self, port: str) -> tuple[StreamSpec, ...]:
        return tuple(self.streams[r.stream] for r in self.spec.inputs.get(port, ()))

    def output_spec(self, port: str = "output") -> StreamSpec:
        return self.streams[self.spec.outputs[port]]


class Stage:
    """Base class of every stage. Subclasses set ``kind``, ports, ``defaults`` and implement :meth:`trigger_code`.

    ``defaults`` maps parameter names to defaults (:data:`REQUIRED` for
    parameters without one); the config's ``params`` land in ``self.params``.
    ``storage`` is ``"cpu"``/``"gpu"`` for stages bound to one, or None to
    follow ``target_device_idx``.
    """

    kind: ClassVar[str] = "stage.base"
    storage: ClassVar[str | None] = None
    #: True for stages that move data between devices: their inputs may have any storage.
    any_input_storage: ClassVar[bool] = False
    input_ports: ClassVar[Mapping[str, Port]] = {}
    output_ports: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: On a GPU: capture ``trigger_code`` into a CUDA graph once and replay it (see pipeline/capture.py).
    capturable: ClassVar[bool] = False

    def __init__(self, context: StageContext, target_device_idx: int | None = None,
                 precision: str | None = None, **params: Any):
        self.context = context
        self.name = context.name
        self.device: Device = resolve_device(target_device_idx, precision, where=f"stage {context.name!r}")
        self.target_device_idx = self.device.idx
        self.xp = self.device.xp
        self.dtype = self.device.dtype
        self.complex_dtype = self.device.complex_dtype
        self.params: dict[str, Any] = self.resolve_params(params, f"stage {context.name!r}")
        self.graph: Any = None
        if self.device.is_gpu:
            self.xp.cuda.Device(self.device.idx).use()  # outputs below are allocated on this GPU
        self.inputs: dict[str, InputValue | InputList] = {
            port: (InputList if p.many else InputValue)(optional=p.optional) for port, p in self.input_ports.items()}
        self.local_inputs: dict[str, Any] = {}
        self.outputs: dict[str, StreamValue] = {}
        for port in self.output_ports:
            if port in context.spec.outputs:
                spec = context.output_spec(port)
                self.outputs[port] = StreamValue(spec.name, self.xp.zeros(spec.shape, dtype=spec.dtype))
        self.current_time = -1
        self.refreshed = True  # set False in trigger_code to leave the outputs un-refreshed this step
        self._transfers: dict[str, Any] = {}
        self._stream: Any = None
        self._connected: tuple[InputValue | InputList, ...] = ()
        self._triggering: tuple[InputValue | InputList, ...] = ()

    # -- parameters -------------------------------------------------------------
    @classmethod
    def resolve_params(cls, params: Mapping[str, Any], where: str) -> dict[str, Any]:
        """Defaults overlaid with ``params``; unknown or missing names raise ConfigValidationError."""
        unknown = set(params) - set(cls.defaults)
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigValidationError(f"{where}: field 'params.{name}': unknown parameter of kind {cls.kind!r} "
                                        f"(known: {sorted(cls.defaults)})")
        out = dict(cls.defaults)
        out.update(params)
        for k, v in out.items():
            if v is REQUIRED:
                raise ConfigValidationError(f"{where}: field 'params.{k}': required by kind {cls.kind!r}")
        return out

    def update_parameters(self, **params: Any) -> None:
        """Change parameters between steps; :meth:`configure` runs again with the new values."""
        self.params = self.resolve_params({**self.params, **params}, f"stage {self.name!r}")
        self.configure()
        if self.graph is not None:
            self.graph.reset()  # values baked into a captured graph changed

    def configure(self) -> None:
        """Derive state from ``self.params`` (called after construction and after each update)."""

    # -- validation before build ---------------------------------------------------
    @classmethod
    def validate_config(cls, spec: StageSpec, streams: Mapping[str, StreamSpec]) -> None:
        """Check ports, storage and parameter names of ``spec`` against this class; subclasses add checks."""
        where = spec.where()
        for port in spec.inputs:
            if port not in cls.input_ports:
                fld = port if port in ("input", "auxiliary") else f"inputs.{port}"
                raise ConfigValidationError(f"{where}: field {fld!r}: kind {cls.kind!r} has no input port "
                                            f"{port!r} (ports: {sorted(cls.input_ports)})")
        for port, p in cls.input_ports.items():
            refs = spec.inputs.get(port, ())
            fld = port if port in ("input", "auxiliary") else f"inputs.{port}"
            if not refs and not p.optional:
                raise ConfigValidationError(f"{where}: field {fld!r}: kind {cls.kind!r} needs this input")
            if len(refs) > 1 and not p.many:
                raise ConfigValidationError(f"{where}: field {fld!r}: kind {cls.kind!r} takes one stream here, "
                                            f"got {len(refs)}")
        for port in spec.outputs:
            if port not in cls.output_ports:
                fld = "output" if port == "output" else f"outputs.{port}"
                raise ConfigValidationError(f"{where}: field {fld!r}: kind {cls.kind!r} has no output port "
                                            f"{port!r} (ports: {list(cls.output_ports)})")
        for port in cls.output_ports:
            if port not in spec.outputs:
                fld = "output" if port == "output" else f"outputs.{port}"
                raise ConfigValidationError(f"{where}: field {fld!r}: kind {cls.kind!r} writes this output")
        storage = cls.storage or storage_of(spec.target_device_idx)
        for port, ref in spec.all_input_refs():
            s = streams[ref.stream]
            if s.storage != storage and not cls.any_input_storage:
                fld = port if port in ("input", "auxiliary") else f"inputs.{port}"
                raise ConfigValidationError(f"{where}: field {fld!r}: stream {ref.stream!r} has storage "
                                            f"{s.storage!r}, kind {cls.kind!r} here needs {storage!r}")
        for port, name in spec.outputs.items():
            if streams[name].storage != storage:
                fld = "output" if port == "output" else f"outputs.{port}"
                raise ConfigValidationError(f"{where}: field {fld!r}: stream {name!r} has storage "
                                            f"{streams[name].storage!r}, kind {cls.kind!r} here needs {storage!r}")
        cls.resolve_params(spec.params, where)

    # -- life cycle ---------------------------------------------------------------
    def setup(self) -> None:
        """Check mandatory inputs are connected, prepare device transfers and the GPU stream."""
        for port, inp in self.inputs.items():
            if not inp.connected and not inp.optional:
                raise ConfigValidationError(f"stage {self.name!r}: input {port!r} is not connected")
        for port, inp in self.inputs.items():
            if isinstance(inp, InputValue):
                self.local_inputs[port] = self._local(port, inp.get())
            else:
                self.local_inputs[port] = [self._local(f"{port}[{i}]", v) for i, v in enumerate(inp.get())]
        if self.device.is_gpu:
            from raytile.pipeline.capture import TriggerGraph

            self.xp.cuda.Device(self.device.idx).use()
            self._stream = self.xp.cuda.Stream(non_blocking=True)
            self.graph = TriggerGraph(self.trigger_code, self._stream, capture=self.capturable)
            self.trigger = self.graph.run  # type: ignore[method-assign]
        self._connected = tuple(inp for inp in self.inputs.values() if inp.connected)
        self._triggering = tuple(inp for port, inp in self.inputs.items()
                                 if self.input_ports[port].trigger and inp.connected)
        if not self.device.is_gpu:
            self.trigger = self.trigger_code  # type: ignore[method-assign]  # one call less each step
        self.bind_locals()
        self.configure()

    def bind_locals(self) -> None:
        """Hook between connection and :meth:`configure`: keep references to input arrays (they never move)."""

    def _local(self, key: str, value: Any) -> Any:
        """``value`` if it lives on this stage's device, else a buffer here refilled each step."""
        if value is None:
            return None
        on_gpu = not isinstance(value, np.ndarray)
        if on_gpu == self.device.is_gpu:
            return value
        buf = self.xp.empty(value.shape, dtype=value.dtype)
        self._transfers[key] = (value, buf)
        return buf

    def check_ready(self, t: int) -> bool:
        """True if a triggering input was refreshed since the last trigger, or the stage has none."""
        triggering = self._triggering
        if not triggering:
            return True
        for inp in triggering:
            if inp.refreshed():
                return True
        return False

    def prepare_trigger(self, t: int) -> None:
        """Note the time, mark inputs consumed, copy inputs that live on another device."""
        self.current_time = t
        self.refreshed = True
        for inp in self._connected:
            inp.consume()
        if self._transfers:
            for src, dst in self._transfers.values():
                if isinstance(dst, np.ndarray):
                    src.get(out=dst)
                else:
                    dst.set(src, stream=self._stream)  # ordered before trigger_code on the same stream

    def trigger(self) -> None:
        """What the framework calls each step: ``trigger_code`` here; on a GPU, on the stage's private
        stream, captured into a CUDA graph when the class is ``capturable`` (see pipeline/capture.py)."""
        self.trigger_code()

    def trigger_code(self) -> None:
        """The step's computation on preallocated arrays (no base implementation)."""
        raise NotImplementedError(f"stage kind {self.kind!r} does not implement trigger_code()")

    def post_trigger(self) -> None:
        """Wait for the GPU stream, then stamp refreshed outputs with the current time."""
        if self._stream is not None:
            self._stream.synchronize()
        if self.refreshed:
            for out in self.outputs.values():
                out.generation_time = self.current_time

    def finalize(self) -> None:
        """Release resources at the end of the run (default: nothing)."""

    def describe(self) -> str:
        return f"{self.name} ({self.kind})"
