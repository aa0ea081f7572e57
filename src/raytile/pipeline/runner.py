"""`Pipeline`: validate a config, build its stages, step and run them, watch and control the run.

>>> p = Pipeline.from_yaml("examples/ao_loop.yaml").build()
>>> p.step(10)                                  # ten steps in this thread
>>> p.run(steps=1000, background=True)          # one runner thread
>>> p.update_parameters("integrator", gain=0.3) # applied between two steps
>>> p.pause(); p.resume(); p.stop()
>>> p.status()["stages"]["centroids"]["hz"]
>>> for cmd in p.values("commands", steps=50): ...

``placement="in-process"`` runs every stage in one thread; ``"ray"`` runs
each placement group in a Ray actor, the actors of one node linked by
Unix-domain sockets (plain actor calls when they span nodes);
``"ray-compiled"`` the same actors over a Ray Compiled Graph (deprecated
upstream; an option while Ray ships it); ``"ray-classic"`` one plain actor
call a group and step (a baseline for benchmarks). See
:mod:`raytile.pipeline.ray_channels`.
"""

from __future__ import annotations

import enum
import threading
import time
import traceback
from typing import Any, Callable, Collection, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError, RaytileError
from raytile.pipeline.config import PipelineConfig
from raytile.common.errors import PipelineStateError, StageFailed
from raytile.pipeline.local import LocalPlacement
from raytile.pipeline.placement import Placement
from raytile.pipeline.reader import StreamReader
from raytile.pipeline.registry import get_stage_class
from raytile.pipeline.validation import group_order, validate_config

__all__ = ["Pipeline", "PipelineState", "PLACEMENTS", "STATES"]

PLACEMENTS = ("in-process", "ray", "ray-compiled", "ray-classic")


class PipelineState(str, enum.Enum):
    """A pipeline's state; compares equal to its value (``p.state == "built"``), prints as it.

    Changed only by :meth:`Pipeline._transition`, under one lock: the caller's thread and the
    background loop's both change it (build, run, pause, stop, the loop's end, a failure)."""

    CREATED = "created"
    BUILT = "built"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


STATES = tuple(s.value for s in PipelineState)

Until = Callable[["Pipeline"], bool] | float | None


class Pipeline:
    """A validated stage graph and its run. Make one with :meth:`from_dict` or :meth:`from_yaml`."""

    def __init__(self, config: PipelineConfig, placement: str = "in-process", step_timeout_s: float = 60.0):
        if placement not in PLACEMENTS:
            raise ConfigValidationError(f"placement: expected one of {PLACEMENTS}, got {placement!r}")
        self.config = config
        self.levels = validate_config(config)
        self.groups = group_order(config)
        self.placement_name = placement
        if isinstance(step_timeout_s, bool) or not isinstance(step_timeout_s, (int, float)) or step_timeout_s <= 0:
            raise ConfigValidationError(f"step_timeout_s: expected a positive number, got {step_timeout_s!r}")
        #: Ray placements: how long one step (or a control call) may take before the pipeline fails
        self.step_timeout_s = float(step_timeout_s)
        self._state = PipelineState.CREATED
        self._state_lock = threading.Lock()
        self.t = 0
        self.error: BaseException | None = None
        self._placement: Placement | None = None
        self._readers: list[StreamReader] = []
        self._patches: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._resume = threading.Event()
        self._resume.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_step_ns = 0
        self._steps_run = 0
        #: held by the loop around each step: reads from other threads see whole steps
        self._step_lock = threading.RLock()
        self._spacing: list[int] = []
        self._first_step_ns: int | None = None  #: the pipeline's first step, one-time costs included

    # -- state -------------------------------------------------------------------------------------
    @property
    def state(self) -> PipelineState:
        """The pipeline's state (see :class:`PipelineState`)."""
        return self._state

    def _transition(self, to: PipelineState, only_from: Collection[PipelineState] | None = None) -> bool:
        """Change the state to ``to`` (if it is one of ``only_from``, when given); whether it changed."""
        with self._state_lock:
            if only_from is not None and self._state not in only_from:
                return False
            self._state = to
            return True

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], placement: str = "in-process", base_dir: str = ".",
                  step_timeout_s: float = 60.0) -> "Pipeline":
        return cls(PipelineConfig.from_dict(raw, base_dir=base_dir), placement, step_timeout_s)

    @classmethod
    def from_yaml(cls, path: str, placement: str = "in-process", step_timeout_s: float = 60.0) -> "Pipeline":
        return cls(PipelineConfig.from_yaml(path), placement, step_timeout_s)

    # -- describe --------------------------------------------------------------------
    def describe(self) -> str:
        """Streams, trigger levels and placement as text."""
        lines = [f"pipeline {self.config.name!r}: {len(self.config.stages)} stages, "
                 f"{len(self.config.streams)} streams", "streams:"]
        lines += [f"  {s.describe()}" for s in self.config.streams.values()]
        lines.append("trigger order:")
        for i, lvl in enumerate(self.levels):
            lines.append(f"  level {i}: " + ", ".join(
                f"{n} ({self.config.stage(n).kind})" for n in lvl))
        lines.append("placement groups:")
        for g in self.groups:
            members = [s.name for s in self.config.stages if s.group == g]
            lines.append(f"  {g}: {', '.join(members)}")
        lines.append("placement " + "\n  ".join((self._placement or self._make_placement()).describe()))
        return "\n".join(lines)

    def _make_placement(self) -> Placement:
        """The placement object for ``placement_name`` (nothing started until its ``build()``)."""
        if self.placement_name == "in-process":
            return LocalPlacement(self.config, self.levels)
        from raytile.pipeline.ray_placement import RayPlacement

        return RayPlacement(self.config, self.levels, self.groups, self.placement_name,
                            step_timeout_s=self.step_timeout_s)

    # -- build -----------------------------------------------------------------------------
    def build(self) -> "Pipeline":
        """Construct and set up every stage (and the actors for Ray placements); returns self."""
        if self._placement is not None:
            raise PipelineStateError(f"build(): pipeline is already {self.state}")
        placement = self._make_placement()
        try:
            placement.build()
        except BaseException as e:
            placement.close()  # actors started before the failure are not left behind
            self._fail(e)
            raise
        self._placement = placement
        self.error = None
        self._transition(PipelineState.BUILT)
        return self

    def restart(self) -> "Pipeline":
        """Rebuild the stages (and dead actors) from the config; the step counter goes on."""
        if self._thread is not None and self._thread.is_alive():
            raise PipelineStateError("restart(): stop the running loop first")
        if self._placement is None:
            return self.build()
        self._placement.restart()
        self.error = None
        self._transition(PipelineState.BUILT)
        return self

    # -- stepping -------------------------------------------------------------------------------
    def _check_steppable(self, what: str) -> None:
        if self.state is PipelineState.CREATED:
            raise PipelineStateError(f"{what}: call build() first")
        if self.state is PipelineState.FAILED:
            raise PipelineStateError(f"{what}: the pipeline failed: {self.error}") from self.error
        if self._thread is not None and self._thread.is_alive():
            raise PipelineStateError(f"{what}: a background run is going on (stop() it first)")

    def step(self, n: int = 1) -> None:
        """Run ``n`` steps in this thread."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigValidationError(f"step(): n must be a non-negative integer, got {n!r}")
        self._check_steppable("step()")
        self._loop(n, None, set_state=False)

    def run(self, steps: int | None = None, until: Until = None, background: bool = False) -> "Pipeline":
        """Run ``steps`` steps (None: until stopped), or until ``until(pipeline)`` is true / ``until`` seconds passed.

        In the calling thread, or with ``background=True`` in one runner thread
        that :meth:`pause`, :meth:`resume`, :meth:`stop` and :meth:`wait` control.
        """
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
            raise ConfigValidationError(f"run(): steps must be a non-negative integer or None, got {steps!r}")
        if until is not None and not callable(until) and not isinstance(until, (int, float)):
            raise ConfigValidationError(f"run(): until must be a callable or seconds, got {until!r}")
        self._check_steppable("run()")
        if steps is None and until is None and not background:
            raise ConfigValidationError("run(): steps=None and until=None in the foreground would never return; "
                                        "pass background=True or a limit")
        self._stop.clear()
        self._resume.set()
        self._transition(PipelineState.RUNNING)
        if not background:
            self._loop(steps, until, set_state=True)
            return self
        self._thread = threading.Thread(target=self._loop, args=(steps, until, True),
                                        name=f"raytile-pipeline-{self.config.name}", daemon=True)
        self._thread.start()
        return self

    def _loop(self, steps: int | None, until: Until, set_state: bool) -> None:
        """Step until ``steps``, ``until`` or stop(); in phases: hold while paused, patch, step, publish."""
        deadline = time.monotonic() + float(until) if isinstance(until, (int, float)) else None
        predicate = until if callable(until) else None
        placement = self._placement
        assert placement is not None  # _check_steppable: built
        done = 0
        self._last_step_ns = 0
        try:
            while steps is None or done < steps:
                if self._stop.is_set() or not self._hold_while_paused():
                    break
                with self._step_lock:
                    if self._patches:
                        self._apply_patches()
                    t0 = time.perf_counter_ns() if self._first_step_ns is None else 0
                    placement.step(self.t)
                    if self._first_step_ns is None:
                        self._first_step_ns = time.perf_counter_ns() - t0
                    self.t += 1
                    done += 1
                    self._note_spacing()
                    if self._readers:
                        self._publish()
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if predicate is not None and predicate(self):
                    break
            with self._step_lock:
                placement.drain()  # steps still in flight on actors end before the loop returns
        except BaseException as e:
            last_done = placement.last_done
            if last_done is not None and last_done + 1 < self.t:
                self.t = last_done + 1  # steps in flight when an actor failed do not count
            self._fail(e)
            if set_state and self._thread is not None and threading.current_thread() is self._thread:
                return  # the background thread keeps the error for wait()/status()
            raise
        finally:
            self._steps_run += done
        if set_state:
            self._transition(PipelineState.STOPPED if self._stop.is_set() else PipelineState.BUILT)
            for r in list(self._readers):
                r.finish()

    def _hold_while_paused(self) -> bool:
        """Wait while paused; False if stop() came meanwhile."""
        if self._resume.is_set():
            return True
        self._transition(PipelineState.PAUSED)
        while not self._resume.wait(0.05):
            if self._stop.is_set():
                return False
        if self._stop.is_set():
            return False
        self._transition(PipelineState.RUNNING)
        return True

    def _note_spacing(self) -> None:
        now = time.perf_counter_ns()
        if self._last_step_ns:
            self._spacing.append(now - self._last_step_ns)
            if len(self._spacing) > 8192:
                del self._spacing[:4096]
        self._last_step_ns = now

    def _fail(self, e: BaseException) -> None:
        if not isinstance(e, RaytileError) and isinstance(e, Exception):
            e = StageFailed("<pipeline>", "step", f"{type(e).__name__}: {e}", traceback.format_exc())
        self.error = e
        self._transition(PipelineState.FAILED)
        for r in list(self._readers):
            r.finish(e)

    def _built(self, what: str) -> Placement:
        """The placement; PipelineStateError naming ``what`` before :meth:`build`."""
        if self._placement is None:
            raise PipelineStateError(f"{what}: call build() first")
        return self._placement

    def _publish(self) -> None:
        placement = self._built("publish")
        for r in list(self._readers):
            gen = placement.generation(r.stream)
            if gen > r.last_generation:
                value, gen = placement.read(r.stream)
                r.publish(value, gen)

    # -- control -------------------------------------------------------------------------------
    def pause(self) -> None:
        """Hold the background loop between two steps."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    def stop(self, timeout: float = 10.0) -> None:
        """End the background loop after its current step and wait for it (``timeout`` seconds)."""
        self._stop.set()
        self._resume.set()
        self.wait(timeout)
        self._transition(PipelineState.STOPPED,
                         only_from=(PipelineState.RUNNING, PipelineState.PAUSED, PipelineState.BUILT))

    def wait(self, timeout: float | None = None) -> PipelineState:
        """Wait for the background loop to end; return the state. Raises PipelineStateError on timeout."""
        th = self._thread
        if th is not None:
            th.join(timeout)
            if th.is_alive():
                raise PipelineStateError(f"wait(): the loop is still running after {timeout} s")
        return self.state

    def close(self) -> None:
        """Stop, finalize every stage, release actors. Safe to call twice.

        After a failure, finalize errors (a dead or stuck actor) are not raised:
        closing must always release what the pipeline holds.
        """
        if self._placement is None:
            return
        self.stop()
        placement, self._placement = self._placement, None
        try:
            placement.finalize()
        except Exception:
            if self.state is not PipelineState.FAILED:
                raise
        finally:
            placement.close()
            for r in list(self._readers):
                r.finish(self.error)

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- parameters --------------------------------------------------------------------------------
    def update_parameters(self, stage: str, **params: Any) -> None:
        """Change a stage's parameters between two steps (now if no loop is running).

        Names are checked at once: an unknown stage or parameter raises
        ConfigValidationError here, in the caller.
        """
        spec = self.config.stage(stage)
        get_stage_class(spec.kind).resolve_params({**spec.params, **params}, f"stage {stage!r}")
        with self._lock:
            self._patches.append((stage, dict(params)))
        if self._placement is not None and (self._thread is None or not self._thread.is_alive()):
            self._apply_patches()

    def _apply_patches(self) -> None:
        with self._lock:
            patches, self._patches = self._patches, []
        placement = self._built("update_parameters()")
        for stage, params in patches:
            placement.update_parameters(stage, params)

    # -- reading ---------------------------------------------------------------------------------------
    def read(self, stream: str) -> np.ndarray:
        """A copy of a stream's current value (on the host)."""
        self._check_stream(stream)
        if self._placement is None:
            raise PipelineStateError("read(): call build() first")
        with self._step_lock:
            return self._placement.read(stream)[0]

    def generation(self, stream: str) -> int:
        """The step that last refreshed ``stream`` (-1: never)."""
        self._check_stream(stream)
        with self._step_lock:
            return int(self._built("generation()").generation(stream))

    def sink(self, stage: str) -> np.ndarray:
        """The values a ``sink`` stage kept, oldest first (any placement)."""
        if self.config.stage(stage).kind != "sink":
            raise ConfigValidationError(f"stage {stage!r}: field 'kind': sink() needs a 'sink' stage, "
                                        f"got {self.config.stage(stage).kind!r}")
        if self._placement is None:
            raise PipelineStateError("sink(): call build() first")
        with self._step_lock:
            return self._placement.sink_values(stage)

    def stage(self, name: str) -> Any:
        """The stage object (in-process placement only)."""
        if not isinstance(self._placement, LocalPlacement):
            raise PipelineStateError("stage(): stage objects live in this process only with placement='in-process'")
        return self._placement.stage(name)

    def _check_stream(self, stream: str) -> None:
        if stream not in self.config.streams:
            raise ConfigValidationError(f"stream {stream!r}: not declared (streams: {sorted(self.config.streams)})")

    def as_dataset(self, ctx: Any, stream: str, nav_shape: tuple[int, ...], scans: int = 1,
                   frames_per_partition: int | None = None, max_partitions_in_flight: int | None = None) -> Any:
        """A ``stream`` data set of the values this pipeline writes to ``stream``, for UDFs on ``ctx``.

        The run's feeder steps the pipeline and takes every refreshed value (nothing is dropped);
        backpressure is the stream's own. See :func:`raytile.pipeline.stream_source.pipeline_dataset`.

        >>> ds = p.as_dataset(ctx, "binned", nav_shape=(32, 32))
        >>> ctx.run_udf(dataset=ds, udf=SumUDF())
        """
        from raytile.pipeline.stream_source import pipeline_dataset

        return pipeline_dataset(ctx, self, stream, nav_shape, scans=scans, frames_per_partition=frames_per_partition,
                                max_partitions_in_flight=max_partitions_in_flight)

    def values(self, stream: str, steps: int | None = None) -> StreamReader:
        """Iterate (``for`` or ``async for``) over a stream's values as the loop refreshes them.

        If no background loop runs when the iteration starts, one is started
        for ``steps`` steps (None: until :meth:`stop`); leaving the loop early
        stops that run.
        """
        self._check_stream(stream)

        started_here: list[threading.Thread | None] = []

        def start() -> None:
            with self._lock:
                self._readers.append(reader)
            if self.state is PipelineState.FAILED:
                reader.finish(self.error)
            elif self._thread is None or not self._thread.is_alive():
                self.run(steps=steps, background=True)
                started_here.append(self._thread)

        def close(r: StreamReader) -> None:
            with self._lock:
                if r in self._readers:
                    self._readers.remove(r)
            if started_here and started_here[0] is self._thread and self._thread is not None \
                    and self._thread.is_alive():
                self._stop.set()  # leaving the loop early ends the run it started

        reader = StreamReader(stream, start, close)
        return reader

    # -- status ------------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per stage: steps, first_ms (the first step), and mean_ms, p50_ms, p99_ms, jitter_ms, hz of the
        steady state (the steps after the first; see :class:`~raytile.pipeline.metrics.StageMetrics`)."""
        if self._placement is None:
            return {s.name: {"steps": 0} for s in self.config.stages}
        with self._step_lock:
            return self._placement.metrics()

    def loop_metrics(self) -> dict[str, float]:
        """Rate and spacing of whole steps: hz, p50_ms, p99_ms over the latest steps (the spacing of
        steps within one ``step``/``run`` call, so the very first step is not among them), and first_ms,
        the pipeline's first step (its one-time costs)."""
        first = 0.0 if self._first_step_ns is None else self._first_step_ns / 1e6
        sp = np.asarray(self._spacing[-4096:], np.float64) / 1e6
        if sp.size == 0:
            return {"hz": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "steps": float(self._steps_run), "first_ms": first}
        p50, p99 = np.percentile(sp, [50, 99])
        return {"hz": float(1e3 / sp.mean()), "p50_ms": float(p50), "p99_ms": float(p99),
                "steps": float(self._steps_run), "first_ms": first}

    def status(self) -> dict[str, Any]:
        """State of the pipeline and of each stage with its metrics; the error (stage, traceback) if failed."""
        try:
            metrics = self.metrics()
        except Exception:
            if self.state is not PipelineState.FAILED:
                raise
            metrics = {}  # a failed placement (a dead actor) may not answer; the error says why
        failed_stage = self.error.stage if isinstance(self.error, StageFailed) else None
        failed = {failed_stage} if failed_stage else set(getattr(self.error, "stages", ()))
        # a failed pipeline's other stages are built (the failed ones are named below)
        stage_state = PipelineState.BUILT.value if self.state is PipelineState.FAILED else self.state.value
        stages = {}
        for s in self.config.stages:
            st = "failed" if s.name in failed else stage_state
            stages[s.name] = {"state": st, "kind": s.kind, "placement": s.group,
                              **metrics.get(s.name, {})}
        out: dict[str, Any] = {"state": self.state.value, "step": self.t, "placement": self.placement_name,
                               "stages": stages, "loop": self.loop_metrics()}
        if self.error is not None:
            out["error"] = str(self.error)
            out["failed_stage"] = failed_stage or (sorted(failed)[0] if failed else None)
            out["failed_stages"] = sorted(failed)
            out["traceback"] = getattr(self.error, "stage_traceback", "")
        return out
