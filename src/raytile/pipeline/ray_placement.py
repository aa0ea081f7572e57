"""`RayPlacement`: each placement group of stages runs in one Ray actor; groups pass stream values over
Ray Compiled Graph channels (or, as a baseline, one classic actor call per group and step).

Each actor holds a :class:`GraphEngine` for its group's stages. A step is one
execution of a compiled graph::

    with InputNode() as inp:                       # inp = (step, relayed values)
        sensor = sensor_actor.step.bind(inp)
        control = control_actor.step.bind(inp, sensor)
    dag = control.experimental_compile()
    ray.get(dag.execute((step, {})))

Each actor's ``step`` returns the values of the streams that later groups
read (``None`` for a value not refreshed since it was last sent, with its
generation time), over shared-memory channels on one node. A delayed input
(``name:-1``) read from another group is relayed by the driver: the writer's
value after step t-1 travels in the graph input of step t (such pipelines
keep one step in flight; others two). Stream reads,
metrics and parameter updates are classic actor calls made between steps.

Actors ask for one GPU per distinct ``target_device_idx >= 0`` among their
stages (which then use the actor's GPUs, renumbered from 0), else for no CPU reservation
(``num_cpus=0``) so that a loop is never starved by the cluster's UDF
workers. A dead actor surfaces as :class:`StageActorDied` naming its group
and stages; :meth:`RayPlacement.restart` replaces the dead actors (their
stages start over from the config, living groups keep their state) and
compiles the graph again.

>>> p = Pipeline.from_yaml("examples/ao_loop.yaml", placement="ray").build()
>>> p.step(100); p.read("commands")
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from typing import Any

import numpy as np

from raytile.common.errors import ExecutorError, RaytileError
from raytile.pipeline.config import PipelineConfig
from raytile.pipeline.engine import GraphEngine
from raytile.common.errors import PipelineStateError, StageActorDied, StageFailed
from raytile.pipeline.placement import Placement
from raytile.pipeline.registry import get_stage_class, register_stage
from raytile.pipeline.topology import group_topology

__all__ = ["RayPlacement", "GroupHost", "STEP_TIMEOUT_S", "ensure_ray"]

#: How long the driver waits for one step (or a control call) before reporting the actors.
STEP_TIMEOUT_S = 60.0
#: How long building a group's actor (process start, imports, stage setup) may take at least.
BUILD_TIMEOUT_S = 120.0


def ensure_ray() -> None:
    """Join the local Ray cluster that is running, or start one (all cores, no dashboard), unless this
    process is connected already (:func:`raytile.actors.ray_start.start_ray`, Ray's convention: a joined
    cluster is named in one log line)."""
    from raytile.actors.ray_start import start_ray

    start_ray(None, need_workers=False, init_kwargs={"log_to_driver": False})


class GroupHost:
    """The stages of one placement group, stepped inside a Ray actor (made remote by :class:`RayPlacement`)."""

    def __init__(self, config: PipelineConfig, classes: dict[str, type], stage_names: list[str],
                 levels: list[tuple[str, ...]], outbound: list[str], gpu_map: dict[int, int] | None = None,
                 relayed: list[str] | None = None):
        for kind, cls in classes.items():
            register_stage(cls, kind=kind)  # custom stage classes travel with the config
        if gpu_map:  # Ray shows the actor only its own GPUs, numbered from 0
            stages = tuple(dataclasses.replace(st, target_device_idx=gpu_map[st.target_device_idx])
                           if st.target_device_idx is not None and st.target_device_idx >= 0 else st
                           for st in config.stages)
            config = dataclasses.replace(config, stages=stages)
        from threadpoolctl import threadpool_limits

        # one BLAS thread an actor: a loop actor shares its node (measured in-process on 2 cores:
        # p99 0.98 ms with the default BLAS threads, 0.42 ms with one)
        self._blas = threadpool_limits(1)
        self.engine = GraphEngine(config, stage_names, levels, relayed=relayed or ())
        self.outbound = outbound
        self._sent: dict[str, int] = {n: -2 for n in outbound}
        self._lock = threading.Lock()

    def build(self) -> list[str]:
        self.engine.build()
        return sorted(self.engine.external)

    def construct(self) -> dict[str, Any]:
        """Construct the stages; the output objects other groups need as templates (see GraphEngine)."""
        return {n: obj for n, obj in self.engine.construct().items() if n in self.outbound}

    def connect(self, templates: dict[str, Any]) -> list[str]:
        self.engine.connect(templates)
        return sorted(self.engine.external)

    def step(self, inp: tuple[int, dict[str, tuple[Any, int]]],
             *upstream: dict[str, tuple[Any, int]]) -> dict[str, tuple[Any, int]]:
        """One step: ``inp`` is (step, values of delayed inputs from other groups, as of the previous step);
        ``upstream`` the outputs of the groups before this one in this step."""
        t, relayed = inp
        with self._lock:
            eng = self.engine
            for values in (relayed, *upstream):
                for name, (value, gen) in values.items():
                    if name in eng.external:
                        eng.set_external(name, value, gen)
            eng.step(t)
            out: dict[str, tuple[Any, int]] = {}
            for name in self.outbound:
                sv = eng.streams[name]
                gen = sv.generation_time
                if gen != self._sent[name]:
                    self._sent[name] = gen
                    out[name] = (sv.value, gen)
                else:
                    out[name] = (None, gen)
            return out

    def resend(self) -> None:
        """Send every outbound value with the next step (a downstream actor was replaced)."""
        with self._lock:
            self._sent = {n: -2 for n in self.outbound}

    def read(self, name: str) -> tuple[np.ndarray, int]:
        with self._lock:
            sv = self.engine.streams[name]
            v = sv.value
            return (v.copy() if isinstance(v, np.ndarray) else v.get()), sv.generation_time

    def generation(self, name: str) -> int:
        return self.engine.streams[name].generation_time

    def update_parameters(self, stage: str, params: dict[str, Any]) -> None:
        with self._lock:
            self.engine.stages[stage].update_parameters(**params)

    def metrics(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return self.engine.metrics_snapshot()

    def sink_values(self, stage: str) -> np.ndarray:
        with self._lock:
            return self.engine.stages[stage].values()  # type: ignore[attr-defined]

    def finalize(self) -> None:
        with self._lock:
            self.engine.finalize()

    def ping(self) -> bool:
        return True


class RayPlacement(Placement):
    """Placement groups on Ray actors, stepped through a compiled graph (``compiled=True``) or classic calls."""

    def __init__(self, config: PipelineConfig, levels: list[tuple[str, ...]], groups: list[str],
                 compiled: bool = True, step_timeout_s: float = STEP_TIMEOUT_S, depth: int = 2):
        self.config = config
        self.levels = levels
        self.groups = groups
        self.compiled = compiled
        self.name = "ray" if compiled else "ray-classic"
        self.step_timeout_s = step_timeout_s
        #: who sends what to whom (a pure function of the config: raytile.pipeline.topology)
        self.topology = topo = group_topology(config, groups)
        self.members, self.group_of, self.writer_group = topo.members, topo.group_of, topo.writer_group
        self.upstream, self.outbound, self.relayed = topo.upstream, topo.outbound, topo.relayed
        self.relay_streams, self.output_groups = topo.relay_streams, topo.output_groups
        #: the latest (value, generation) of each relayed stream, handed to the next step
        self._relay_values: dict[str, tuple[Any, int]] = {}
        self.actors: dict[str, Any] = {}
        self._dag: Any = None
        #: compiled steps in flight at most (2: one actor works on step t+1 while the next finishes t)
        self.depth = depth if compiled and not self.relay_streams else 1  # a relay needs the previous step
        self._pending: deque[tuple[int, Any]] = deque()
        #: the last step completed on every actor (the pipeline's step counter resumes after it on failure)
        self.last_done: int | None = None
        #: stream -> the writer's output object, for streams carried by a stage's own object
        self._templates: dict[str, Any] = {}

    # -- build -------------------------------------------------------------------------------
    def _gpu_map(self, group: str) -> dict[int, int]:
        """The group's GPU indices in the config -> the actor's own devices 0, 1, ... (one Ray GPU each)."""
        ids = sorted({idx for n in self.members[group]
                      if (idx := self.config.stage(n).target_device_idx) is not None and idx >= 0})
        return {g: i for i, g in enumerate(ids)}

    def _resources(self, group: str) -> dict[str, Any]:
        gpus = len(self._gpu_map(group))
        return {"num_gpus": gpus, "num_cpus": 0} if gpus else {"num_cpus": 0}

    def build(self) -> None:
        ensure_ray()
        self._start_actors(self.groups)
        if self.compiled:
            self._compile()

    def _start_actors(self, groups: list[str]) -> None:
        """Create and build the actors of ``groups``."""
        import ray

        classes = {st.kind: get_stage_class(st.kind) for st in self.config.stages}
        remote_cls = ray.remote(GroupHost)
        for g in groups:
            self.actors[g] = remote_cls.options(**self._resources(g)).remote(
                self.config, classes, self.members[g], self.levels, self.outbound[g], self._gpu_map(g),
                self.relayed[g])
        timeout = max(self.step_timeout_s, BUILD_TIMEOUT_S)
        for g in groups:  # actor start-up (a new worker process, imports) may take far longer than a step
            self._templates.update(self._call(g, "construct", timeout=timeout))
        for g in groups:  # then connect: a typed input across groups gets a copy of the writer's object
            self._call(g, "connect", self._templates, timeout=timeout)

    def _compile(self) -> None:
        from ray.dag import InputNode, MultiOutputNode

        nodes: dict[str, Any] = {}
        with InputNode() as step_input:
            for g in self.groups:
                nodes[g] = self.actors[g].step.bind(step_input, *[nodes[u] for u in self.upstream[g]])
            outputs = [nodes[g] for g in self.output_groups]
            out = outputs[0] if len(outputs) == 1 else MultiOutputNode(outputs)
        crossing = sum(self.config.streams[s].nbytes for g in self.groups for s in self.outbound[g])
        self._dag = out.experimental_compile(_buffer_size_bytes=max(1 << 20, 2 * crossing + (64 << 10)))

    # -- errors --------------------------------------------------------------------------------
    def _dead_groups(self) -> list[str]:
        import ray

        dead = []
        for g, a in self.actors.items():
            try:
                ray.get(a.ping.remote(), timeout=5)
            except Exception:
                dead.append(g)
        return dead

    def _translate(self, e: BaseException) -> BaseException:
        import ray.exceptions as rex

        cause = getattr(e, "cause", None)
        if isinstance(e, StageFailed):
            return e
        if isinstance(e, rex.RayTaskError) and isinstance(cause, StageFailed):
            return cause
        if isinstance(e, RaytileError):
            return e
        dead = self._dead_groups()
        first_line = str(e).splitlines()[0][:200] if str(e) else ""
        if dead:
            g = dead[0]
            return StageActorDied(g, self.members[g], f"{type(e).__name__}: {first_line}")
        if isinstance(e, (rex.GetTimeoutError, rex.RayChannelTimeoutError)):
            return ExecutorError(f"the Ray placement did not answer within {self.step_timeout_s} s (groups "
                                 f"{', '.join(self.groups)}); a stage may hang: metrics() shows which ran last")
        return ExecutorError(f"the Ray placement failed: {type(e).__name__}: {first_line}")

    def _call_all(self, method: str, *args: Any) -> list[Any]:
        import ray

        try:
            return ray.get([getattr(self.actors[g], method).remote(*args) for g in self.groups],
                           timeout=self.step_timeout_s)
        except Exception as e:
            raise self._translate(e) from e

    def _call(self, group: str, method: str, *args: Any, timeout: float | None = None) -> Any:
        import ray

        try:
            return ray.get(getattr(self.actors[group], method).remote(*args), timeout=timeout or self.step_timeout_s)
        except Exception as e:
            raise self._translate(e) from e

    # -- run ------------------------------------------------------------------------------------------
    def step(self, t: int) -> None:
        """Run step ``t``. Compiled: submit it and wait only for step ``t - depth + 1`` (steps overlap
        across actors); :meth:`drain` waits for the rest (reads and updates do it first)."""
        import ray

        if not self.actors:
            raise PipelineStateError("step(): the Ray placement is closed; call restart()")
        try:
            inp = (t, self._relay_values)
            if self._dag is not None:
                self._pending.append((t, self._dag.execute(inp)))
                while len(self._pending) >= self.depth:
                    done_t, ref = self._pending.popleft()
                    self._take_results(ray.get(ref, timeout=self.step_timeout_s))
                    self.last_done = done_t
            else:
                refs: dict[str, Any] = {}
                for g in self.groups:
                    refs[g] = self.actors[g].step.remote(inp, *[refs[u] for u in self.upstream[g]])
                self._take_results(ray.get([refs[g] for g in self.output_groups], timeout=self.step_timeout_s))
                self.last_done = t
        except Exception as e:
            raise self._translate(e) from e

    def _take_results(self, results: Any) -> None:
        """Keep the relayed streams' values (copies: compiled-graph results are views of channel buffers)."""
        if not self.relay_streams:
            return
        if isinstance(results, dict):  # a compiled graph with one output node
            results = [results]
        for values in results:
            for name in self.relay_streams:
                if name in values:
                    value, gen = values[name]
                    if value is None:  # unchanged since it was last sent
                        value = self._relay_values[name][0]
                    else:
                        value = np.array(value, copy=True)
                    self._relay_values[name] = (value, gen)

    def drain(self) -> None:
        """Wait for every submitted step."""
        import ray

        try:
            while self._pending:
                done_t, ref = self._pending.popleft()
                self._take_results(ray.get(ref, timeout=self.step_timeout_s))
                self.last_done = done_t
        except Exception as e:
            self._pending.clear()
            raise self._translate(e) from e

    def read(self, stream: str) -> tuple[np.ndarray, int]:
        self.drain()
        return self._call(self.writer_group[stream], "read", stream)

    def generation(self, stream: str) -> int:
        self.drain()
        return int(self._call(self.writer_group[stream], "generation", stream))

    def update_parameters(self, stage: str, params: dict[str, Any]) -> None:
        self.drain()
        self._call(self.group_of[stage], "update_parameters", stage, params)

    def metrics(self) -> dict[str, dict[str, Any]]:
        self.drain()
        out: dict[str, dict[str, Any]] = {}
        for m in self._call_all("metrics"):
            out.update(m)
        return {s.name: out.get(s.name, {}) for s in self.config.stages}

    def sink_values(self, stage: str) -> np.ndarray:
        self.drain()
        return self._call(self.group_of[stage], "sink_values", stage)

    def finalize(self) -> None:
        self.drain()
        if self.actors and not self._dead_groups():
            self._call_all("finalize")

    def _teardown_graph(self) -> None:
        """Forget steps in flight and tear the compiled graph down (living actors are free again)."""
        self._pending.clear()
        dag, self._dag = self._dag, None
        if dag is not None:
            try:
                dag.teardown()
            except Exception:
                pass  # an actor already dead: the graph is torn down as far as it can be

    def _kill(self, groups: list[str]) -> None:
        import ray

        for g in groups:
            try:
                ray.kill(self.actors.pop(g))
            except Exception:
                pass  # dead already

    def close(self) -> None:
        """Tear the compiled graph down and kill the actors."""
        self._teardown_graph()
        self._kill(list(self.actors))

    def restart(self) -> None:
        """Replace dead actors (their stages start over; living groups keep their state), or, when none
        died (a stage raised), rebuild every group from the config. The compiled graph is made again."""
        dead = self._dead_groups() if self.actors else list(self.groups)
        if not dead or len(dead) == len(self.groups):
            self.close()
            self.build()
            return
        self._teardown_graph()
        self._kill(dead)
        self._start_actors(dead)
        for g in self.groups:
            if g not in dead:
                self._call(g, "resend")  # the new actors have none of the values sent before
        if self.compiled:
            self._compile()

    def describe(self) -> list[str]:
        how = "compiled-graph channels" if self.compiled else "classic actor calls"
        lines = [f"{self.name}: {len(self.groups)} actors over {how}"]
        for g in self.groups:
            res = self._resources(g)
            lines.append(f"  {g}: {', '.join(self.members[g])} (upstream: {', '.join(self.upstream[g]) or '-'}; "
                         f"sends: {', '.join(self.outbound[g]) or '-'}; "
                         + (f"relayed in: {', '.join(s + ':-1' for s in self.relayed[g])}; " if self.relayed[g] else "")
                         + f"{res})")
        return lines
