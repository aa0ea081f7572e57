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

A class is built in one of three ways, told apart by its ``__init__``
(:meth:`Stage.init_style`):

* raytile's: ``cls(context, target_device_idx, precision, **params)``,
  parameters declared in ``defaults``;
* shmpipeline's: ``__init__(self, context)`` (or a ``validate_config(cls,
  config, shared_memory)``): ``cls(context)``, parameters in
  ``context.config.parameters``, checked by the kernel's ``validate_config``;
* SPECULA's: ``__init__(self, <params>, target_device_idx=None,
  precision=None)`` calling ``super().__init__(target_device_idx=...,
  precision=...)``: the config's params are its keyword arguments; inputs
  (``self.inputs["x"] = InputValue(type=...)``) and output objects
  (``self.outputs["y"] = obj``) are declared in ``__init__`` and checked when
  the pipeline builds and connects them.
"""

from __future__ import annotations

import contextvars
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StageSpec, StreamSpec
from raytile.pipeline.connections import InputList, InputValue, ObjectStream, StreamValue
from raytile.pipeline.device import Device, resolve_device, storage_of

__all__ = ["Stage", "Port", "StageContext", "KernelContext", "REQUIRED", "build_stage"]

#: The context of the stage being constructed (SPECULA-style classes do not receive one).
_BUILDING: contextvars.ContextVar["StageContext | None"] = contextvars.ContextVar("raytile_stage_building",
                                                                                 default=None)
_STYLES: dict[type, str] = {}


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
    """What a stage learns at construction: its spec and the streams on its ports.

    It answers as shmpipeline's ``KernelContext`` does (``config``,
    ``shared_memory``, ``input_specs``, ``trigger_input_spec``,
    ``auxiliary_specs``, ``output_spec``); :meth:`port_input_specs` and
    :meth:`port_output_spec` give the streams of any named port.

    >>> ctx = Pipeline.from_yaml("examples/ao_loop.yaml").build().stage("matvec").context
    >>> ctx.output_spec.shape, [s.name for s in ctx.input_specs]
    ((1024,), ['slopes', 'recon'])
    """

    spec: StageSpec
    streams: Mapping[str, StreamSpec]
    base_dir: str = "."

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def config(self) -> StageSpec:
        """The stage's spec (shmpipeline's ``KernelConfig``)."""
        return self.spec

    @property
    def shared_memory(self) -> Mapping[str, StreamSpec]:
        """Every stream of the pipeline by name (shmpipeline's ``shared_memory``)."""
        return self.streams

    @property
    def input_specs(self) -> tuple[StreamSpec, ...]:
        """The trigger input's then the auxiliary streams' specs, in config order (``config.all_inputs``)."""
        return tuple(self.streams[n] for n in self.spec.all_inputs)

    @property
    def trigger_input_spec(self) -> StreamSpec:
        """The trigger input's (port ``input``) spec."""
        if self.spec.input is None:
            raise ConfigValidationError(f"stage {self.name!r}: field 'input': this stage has no trigger input")
        return self.streams[self.spec.input]

    @property
    def auxiliary_specs(self) -> tuple[StreamSpec, ...]:
        """The auxiliary streams' specs in config order."""
        return tuple(self.streams[n] for n in self.spec.auxiliary_names)

    @property
    def output_spec(self) -> StreamSpec:
        """The primary output's (port ``output``) spec."""
        if self.spec.output is None:
            raise ConfigValidationError(f"stage {self.name!r}: field 'output': this stage has no output "
                                        f"'output' (outputs: {sorted(self.spec.outputs)})")
        return self.streams[self.spec.output]

    def port_input_specs(self, port: str) -> tuple[StreamSpec, ...]:
        """The specs of the streams on input port ``port``."""
        return tuple(self.streams[r.stream] for r in self.spec.inputs.get(port, ()))

    def port_output_spec(self, port: str = "output") -> StreamSpec:
        """The spec of the stream on output port ``port``."""
        return self.streams[self.spec.outputs[port]]


#: shmpipeline's name for what a kernel gets at construction.
KernelContext = StageContext


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

    def __init__(self, context: StageContext | None = None, target_device_idx: int | None = None,
                 precision: Any = None, **params: Any):
        if not isinstance(context, StageContext):  # SPECULA's super().__init__(target_device_idx, precision)
            if context is not None:
                target_device_idx, precision = context, target_device_idx
            context = _BUILDING.get()
            if context is None:
                raise ConfigValidationError(f"{type(self).__name__}: stages are constructed by a Pipeline "
                                            f"(Pipeline.from_dict(...).build()), which names their streams")
        style = type(self).init_style()
        if target_device_idx is None:
            target_device_idx = context.spec.target_device_idx
        if precision is None:
            precision = context.spec.precision
        if style != "raytile":
            params = dict(context.spec.params)
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
        self.outputs: dict[str, Any] = {}  # StreamValues allocated here; SPECULA-style classes add their objects
        for port in self.output_ports:
            if port in context.spec.outputs:
                spec = context.port_output_spec(port)
                self.outputs[port] = StreamValue(spec.name, self.xp.zeros(spec.shape, dtype=spec.dtype))
        #: the outputs allocated here, stamped by post_trigger (a class stamps the objects it made itself)
        self._own_outputs: tuple[StreamValue, ...] = tuple(self.outputs.values())
        #: (port, stream) of output objects carried by the pipeline (checked for rebinding after each trigger)
        self._object_outputs: tuple[tuple[str, ObjectStream], ...] = ()
        self.allow_parallel = True
        self.ready = False
        self.current_time = -1
        self.refreshed = True  # set False in trigger_code to leave the outputs un-refreshed this step
        self._transfers: dict[str, Any] = {}
        self._stream: Any = None
        self._connected: tuple[InputValue | InputList, ...] = ()
        self._triggering: tuple[InputValue | InputList, ...] = ()

    # -- construction styles ---------------------------------------------------------
    @classmethod
    def init_style(cls) -> str:
        """How the pipeline constructs this class: ``"raytile"``, ``"shmpipeline"`` or ``"specula"``
        (see the module docstring)."""
        style = _STYLES.get(cls)
        if style is None:
            style = _STYLES[cls] = _init_style(cls)
        return style

    @classmethod
    def _init_parameters(cls) -> list[inspect.Parameter]:
        return list(inspect.signature(cls.__init__).parameters.values())[1:]

    # -- parameters -------------------------------------------------------------
    @classmethod
    def resolve_params(cls, params: Mapping[str, Any], where: str) -> dict[str, Any]:
        """Defaults overlaid with ``params``; unknown or missing names raise ConfigValidationError.

        SPECULA-style classes: the names are checked against ``__init__``'s arguments. shmpipeline-style
        kernels without ``defaults``: any names (the kernel's ``validate_config`` checks them)."""
        style = cls.init_style()
        if style == "specula":
            return cls._check_init_params(params, where)
        if style == "shmpipeline" and not cls.defaults:
            return dict(params)
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

    @classmethod
    def _check_init_params(cls, params: Mapping[str, Any], where: str) -> dict[str, Any]:
        ps = cls._init_parameters()
        named = [p for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        known = {p.name for p in named} - {"target_device_idx", "precision"}
        for name in sorted(params):
            if name in ("target_device_idx", "precision"):
                raise ConfigValidationError(f"{where}: field 'params.{name}': give {name} as the stage's own "
                                            f"field, not a parameter")
            if name not in known and not any(p.kind == p.VAR_KEYWORD for p in ps):
                raise ConfigValidationError(f"{where}: field 'params.{name}': {cls.__name__}.__init__ has no "
                                            f"argument {name!r} (arguments: {sorted(known)})")
        for p in named:
            if p.default is p.empty and p.name not in params and p.name not in ("target_device_idx", "precision"):
                raise ConfigValidationError(f"{where}: field 'params.{p.name}': required by "
                                            f"{cls.__name__}.__init__")
        return dict(params)

    def update_parameters(self, **params: Any) -> None:
        """Change parameters between steps; :meth:`configure` runs again with the new values."""
        if self.init_style() == "specula":
            raise ConfigValidationError(f"stage {self.name!r}: {type(self).__name__} takes its parameters in "
                                        f"__init__ (SPECULA-style); change them with a new config and restart()")
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
        if cls.init_style() == "specula" and not cls.input_ports and not cls.output_ports:
            cls._validate_storage(spec, streams)  # ports are declared in __init__: checked at build
            cls.resolve_params(spec.params, where)
            return
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
        cls._validate_storage(spec, streams)
        cls.resolve_params(spec.params, where)

    @classmethod
    def _validate_storage(cls, spec: StageSpec, streams: Mapping[str, StreamSpec]) -> None:
        where = spec.where()
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

    # -- life cycle ---------------------------------------------------------------
    def setup(self) -> None:
        """Check mandatory inputs are connected, prepare device transfers and the GPU stream."""
        for port, inp in self.inputs.items():
            if not inp.connected and not inp.optional:
                raise ConfigValidationError(f"stage {self.name!r}: input {port!r} is not connected")
        for port, inp in self.inputs.items():
            typed = inp.wrapped_type is not None  # SPECULA-style: the writer's object, used where it lives
            if isinstance(inp, InputValue):
                v = inp.get()
                self.local_inputs[port] = v if typed else self._local(port, v)
            else:
                vs = inp.get()
                self.local_inputs[port] = vs if typed else [self._local(f"{port}[{i}]", v) for i, v in enumerate(vs)]
        if self.device.is_gpu:
            from raytile.pipeline.capture import TriggerGraph

            self.xp.cuda.Device(self.device.idx).use()
            self._stream = self.xp.cuda.Stream(non_blocking=True)
            self.graph = TriggerGraph(self.trigger_code, self._stream, capture=self.capturable)
            self.trigger = self.graph.run  # type: ignore[method-assign]
        self._connected = tuple(inp for inp in self.inputs.values() if inp.connected)
        self._triggering = tuple(inp for port, inp in self.inputs.items()
                                 if (port not in self.input_ports or self.input_ports[port].trigger)
                                 and inp.connected)
        if not self.device.is_gpu:
            self.trigger = self.trigger_code  # type: ignore[method-assign]  # one call less each step
        self.bind_locals()
        self.configure()

    _device_streams: ClassVar[dict[int, Any]] = {}

    def build_stream(self, allow_parallel: bool = True) -> None:
        """SPECULA's ``build_stream``: call it in :meth:`setup` (after ``super().setup()``) to have
        ``trigger_code`` captured into a CUDA graph on a GPU. ``allow_parallel=False`` runs it on one
        stream shared by every such stage of the same GPU (their graphs then run one after the other);
        otherwise each stage has its own stream. On the CPU it only records ``allow_parallel`` (stages run
        in the pipeline's thread, one after the other, as SPECULA runs CPU objects)."""
        self.allow_parallel = bool(allow_parallel)
        if not self.device.is_gpu:
            return
        from raytile.pipeline.capture import TriggerGraph

        idx = self.device.idx
        self.xp.cuda.Device(idx).use()
        # blocking streams, as SPECULA's: they wait for work that prepare_trigger queued on the default stream
        if allow_parallel:
            stream = self.xp.cuda.Stream(non_blocking=False)
        else:
            stream = Stage._device_streams.get(idx)
            if stream is None:
                stream = Stage._device_streams[idx] = self.xp.cuda.Stream(non_blocking=False)
        self._stream = stream
        self.graph = TriggerGraph(self.trigger_code, stream, capture=True)
        self.trigger = self.graph.run  # type: ignore[method-assign]

    @property
    def stream(self) -> Any:
        """The CUDA stream ``trigger_code`` runs on (None on the CPU)."""
        return self._stream

    @property
    def cuda_graph(self) -> Any:
        """The captured CUDA graph, once captured (None before, and on the CPU)."""
        return None if self.graph is None else self.graph.graph

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
        for port, obj_stream in self._object_outputs:
            obj_stream.check_not_rebound(self.name, port)
        if self.refreshed:
            for out in self._own_outputs:
                out.generation_time = self.current_time

    def finalize(self) -> None:
        """Release resources at the end of the run (default: nothing)."""

    def describe(self) -> str:
        return f"{self.name} ({self.kind})"


def _shm_validate(cls: type) -> bool:
    """True if ``cls`` (or a base below Stage) defines ``validate_config(cls, config, shared_memory)``."""
    for klass in cls.__mro__:
        if klass.__module__.startswith("raytile.pipeline.") and klass.__name__ in ("Stage", "Kernel"):
            return False
        if "validate_config" in vars(klass):
            names = list(inspect.signature(getattr(cls, "validate_config")).parameters)
            return names[:2] == ["config", "shared_memory"]
    return False


def _init_style(cls: type) -> str:
    init = getattr(cls, "__init__")
    if init is Stage.__init__:
        return "shmpipeline" if _shm_validate(cls) else "raytile"
    ps = list(inspect.signature(init).parameters.values())[1:]
    if ps and ps[0].name == "context":
        rest = [p for p in ps[1:] if p.kind != p.VAR_POSITIONAL]
        if not rest:
            return "shmpipeline"
        return "shmpipeline" if _shm_validate(cls) and all(p.default is not p.empty for p in rest) else "raytile"
    return "specula"


def build_stage(cls: type[Stage], context: StageContext) -> Stage:
    """Construct ``cls`` for ``context`` in the way its ``__init__`` asks (:meth:`Stage.init_style`)."""
    spec = context.spec
    token = _BUILDING.set(context)
    try:
        style = cls.init_style()
        if style == "shmpipeline":
            return cls(context)
        if style == "specula":
            kwargs = dict(spec.params)
            names = {p.name for p in cls._init_parameters()}
            for key, val in (("target_device_idx", spec.target_device_idx), ("precision", spec.precision)):
                if key in names:
                    kwargs[key] = val
            return cls(**kwargs)
        return cls(context, spec.target_device_idx, spec.precision, **spec.params)
    finally:
        _BUILDING.reset(token)
