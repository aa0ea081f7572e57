"""`GraphEngine`: builds the stages of a config (or of one placement group) and runs one step.

A step walks the trigger levels; within a level it calls ``prepare_trigger``
on every ready stage, then ``trigger_code`` on all, then ``post_trigger`` on
all. Streams read as ``name:-1`` are copied after each step into a delay
line, so that their readers see the previous step's value whatever the
order. Streams written outside the engine's stages (by another placement
group) are allocated here and refilled by :meth:`GraphEngine.set_external`;
a stream another group's stage carries in its own output object (a
SPECULA-style data object) arrives here as a copy of that object
(``templates``), so that typed inputs see its type.

>>> eng = GraphEngine(cfg); eng.build()
>>> eng.step(0); eng.streams["commands"].value
"""

from __future__ import annotations

import copy
import time
import traceback
from typing import Any, Iterable

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import PipelineConfig
from raytile.pipeline.connections import ObjectStream, StreamValue, stream_value_of
from raytile.pipeline.kernels.sink import Sink
from raytile.common.errors import StageFailed
from raytile.pipeline.metrics import StageMetrics
from raytile.pipeline.order import trigger_levels
from raytile.pipeline.registry import get_stage_class
from raytile.pipeline.stage import Stage, StageContext, build_stage

__all__ = ["GraphEngine"]


class _DelayLine:
    """A copy of a stream as it was at the end of the previous step."""

    __slots__ = ("source", "delayed")

    def __init__(self, source: StreamValue):
        self.source = source
        if isinstance(source, ObjectStream):  # a copy of the writer's object, so typed inputs see its type
            self.delayed: StreamValue = source.copy_object(f"{source.name}:-1")
        else:
            self.delayed = StreamValue(f"{source.name}:-1", source.value.copy())

    def advance(self) -> None:
        src, dst = self.source, self.delayed
        if src.generation_time != dst.generation_time:
            dst.value[...] = src.value
            dst.generation_time = src.generation_time


class GraphEngine:
    """The stages of ``config`` (all, or those named in ``stage_names``) wired and stepped in one thread."""

    def __init__(self, config: PipelineConfig, stage_names: Iterable[str] | None = None,
                 levels: list[tuple[str, ...]] | None = None, relayed: Iterable[str] = ()):
        self.config = config
        names = [s.name for s in config.stages] if stage_names is None else list(stage_names)
        self.stage_names = names
        keep = set(names)
        all_levels = levels if levels is not None else trigger_levels(config)
        self.level_names = [tuple(n for n in lvl if n in keep) for lvl in all_levels]
        self.level_names = [lvl for lvl in self.level_names if lvl]
        self.stages: dict[str, Stage] = {}
        self.levels: list[list[Stage]] = []
        self.streams: dict[str, StreamValue] = {}
        self.external: dict[str, StreamValue] = {}
        self.metrics: dict[str, StageMetrics] = {n: StageMetrics() for n in names}
        self._delays: list[_DelayLine] = []
        #: external streams set with their previous step's value (delayed inputs from another group)
        self.relayed = set(relayed)
        self.built = False

    # -- build -----------------------------------------------------------------------
    def build(self) -> None:
        """Construct every stage, connect inputs to writers' outputs, run ``setup``."""
        self.construct()
        self.connect()

    def construct(self) -> dict[str, Any]:
        """Construct the stages and wire their outputs to streams; return the output objects of the streams
        carried by a stage's own object (hand them to :meth:`connect` of the engines reading them)."""
        cfg = self.config
        keep = set(self.stage_names)
        for st in cfg.stages:
            if st.name not in keep:
                continue
            cls = get_stage_class(st.kind)
            ctx = StageContext(st, cfg.streams, cfg.base_dir)
            stage = self._guard(st.name, "__init__", lambda: build_stage(cls, ctx))
            self.stages[st.name] = stage
            for port in st.inputs:
                if port not in stage.inputs:
                    fld = port if port in ("input", "auxiliary") else f"inputs.{port}"
                    raise ConfigValidationError(f"{st.where()}: field {fld!r}: {type(stage).__name__} has no input "
                                                f"{port!r} (inputs: {sorted(stage.inputs)})")
            carried = []
            for port, name in st.outputs.items():
                fld = "output" if port == "output" else f"outputs.{port}"
                where = f"{st.where()}: field {fld!r}"
                if port not in stage.outputs:
                    raise ConfigValidationError(f"{where}: {type(stage).__name__} has no output {port!r} "
                                                f"(outputs: {sorted(stage.outputs)})")
                spec = cfg.streams[name]
                sv = stream_value_of(stage.outputs[port], name, spec.shape, spec.dtype, where)
                self.streams[name] = sv
                if isinstance(sv, ObjectStream):
                    carried.append((port, sv))
            stage._object_outputs = tuple(carried)
        return {n: sv.obj for n, sv in self.streams.items() if isinstance(sv, ObjectStream)}

    def connect(self, templates: dict[str, Any] | None = None) -> None:
        """Connect inputs to the writers' outputs (streams of other groups: ``templates``' objects when
        given, else plain arrays), then run every stage's ``setup``."""
        cfg = self.config
        keep = set(self.stage_names)
        templates = templates or {}
        delays: dict[str, _DelayLine] = {}
        for st in cfg.stages:
            if st.name not in keep:
                continue
            stage = self.stages[st.name]
            for port, ref in st.all_input_refs():
                src = self.streams.get(ref.stream)
                if src is None:  # written by a stage of another placement group
                    spec = cfg.streams[ref.stream]
                    src = self.external.get(ref.stream)
                    if src is None:
                        obj = templates.get(ref.stream)
                        if obj is not None:  # a copy of its own (arrays from Ray's object store are read-only)
                            obj = copy.deepcopy(obj)
                            src = stream_value_of(obj, ref.stream, spec.shape, spec.dtype,
                                                  f"stream {ref.stream!r}")
                        else:
                            src = StreamValue(ref.stream, np.zeros(spec.shape, spec.dtype))
                        self.external[ref.stream] = src
                if ref.delay and ref.stream in self.relayed:
                    pass  # set_external already holds the previous step's value
                elif ref.delay:
                    line = delays.get(ref.stream)
                    if line is None:
                        line = delays[ref.stream] = _DelayLine(src)
                    src = line.delayed
                fld = port if port in ("input", "auxiliary") else f"inputs.{port}"
                stage.inputs[port].connect(src, f"{st.where()}: field {fld!r}: input {port!r}")
        self._delays = list(delays.values())
        self.streams.update(self.external)
        for name, stage in self.stages.items():
            self._guard(name, "setup", stage.setup)
        self.levels = [[self.stages[n] for n in lvl] for lvl in self.level_names]
        self.built = True

    @staticmethod
    def _guard(name: str, method: str, fn: Any) -> Any:
        try:
            return fn()
        except (StageFailed, ConfigValidationError):
            raise
        except Exception as e:
            raise StageFailed(name, method, f"{type(e).__name__}: {e}", traceback.format_exc()) from e

    # -- run -------------------------------------------------------------------------------
    def set_external(self, name: str, value: Any, generation_time: int) -> None:
        """Refill a stream written by another placement group (``value`` None: unchanged)."""
        sv = self.external[name]
        if value is not None:
            sv.value[...] = value
        sv.generation_time = generation_time

    def step(self, t: int) -> None:
        """Trigger every ready stage once, level by level; StageFailed names the stage that raised."""
        clock = time.perf_counter_ns
        metrics = self.metrics
        stage: Stage | None = None
        method = "check_ready"
        try:
            for level in self.levels:
                method = "check_ready"
                if len(level) == 1:
                    stage = level[0]
                    if not stage.check_ready(t):
                        continue
                    ready = level
                else:
                    ready = []
                    for stage in level:
                        if stage.check_ready(t):
                            ready.append(stage)
                    if not ready:
                        continue
                if len(ready) == 1:  # the common case (constants beside a camera are idle): no lists to build
                    stage = ready[0]
                    t0 = clock()
                    method = "prepare_trigger"
                    stage.prepare_trigger(t)
                    method = "trigger_code"
                    stage.trigger()
                    method = "post_trigger"
                    stage.post_trigger()
                    metrics[stage.name].record(t0, clock() - t0)
                    continue
                spent = [0] * len(ready)
                starts = [0] * len(ready)
                method = "prepare_trigger"
                for i, stage in enumerate(ready):
                    t0 = starts[i] = clock()
                    stage.prepare_trigger(t)
                    spent[i] = clock() - t0
                method = "trigger_code"
                for i, stage in enumerate(ready):
                    t0 = clock()
                    stage.trigger()
                    spent[i] += clock() - t0
                method = "post_trigger"
                for i, stage in enumerate(ready):
                    t0 = clock()
                    stage.post_trigger()
                    metrics[stage.name].record(starts[i], spent[i] + clock() - t0)
            stage = None
            for line in self._delays:
                line.advance()
        except Exception as e:
            name = stage.name if stage is not None else "<engine>"
            raise StageFailed(name, method, f"{type(e).__name__}: {e}", traceback.format_exc()) from e

    def read(self, name: str) -> tuple[np.ndarray, int]:
        """A copy of a stream's value on the host (a GPU stream's copied back) and its generation time."""
        sv = self.streams[name]
        value = sv.value
        return (value.copy() if isinstance(value, np.ndarray) else value.get()), sv.generation_time

    def finalize(self) -> None:
        """Call every stage's ``finalize`` (all of them, even if one raises; the first error is raised)."""
        first: BaseException | None = None
        for name, stage in self.stages.items():
            try:
                stage.finalize()
            except Exception as e:
                if first is None:
                    first = StageFailed(name, "finalize", f"{type(e).__name__}: {e}", traceback.format_exc())
        if first is not None:
            raise first

    def sink_values(self, stage: str) -> np.ndarray:
        """The values the ``sink`` stage ``stage`` kept, oldest first (the runner checked its kind)."""
        sink = self.stages[stage]
        assert isinstance(sink, Sink), stage
        return sink.values()

    def metrics_snapshot(self) -> dict[str, dict[str, Any]]:
        return {n: m.snapshot() for n, m in self.metrics.items()}
