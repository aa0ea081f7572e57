"""`RayPlacement`: each placement group of stages runs in one Ray actor; a step channel carries the
values that groups pass to each other in a step.

Each actor is a :class:`~raytile.pipeline.group_host.GroupHost` holding a
:class:`~raytile.pipeline.engine.GraphEngine` for its group's stages. Its ``step(t, *received)``
takes what other groups sent for step ``t`` and returns the values of the
streams that other groups read (``None`` for a value not refreshed since it
was last sent, with its generation time). How those travel is the channel's
business (:mod:`raytile.pipeline.ray_channels`): plain actor calls with
several steps in flight (``"ray"``, the default; ``"ray-classic"`` one step
at a time) or a Ray Compiled Graph (``"ray-compiled"``, deprecated upstream,
an option while Ray ships it). Stream reads, metrics and parameter updates
are actor calls made between steps (after the steps in flight are done).

Actors ask for one GPU per distinct ``target_device_idx >= 0`` among their
stages (which then use the actor's GPUs, renumbered from 0), else for no CPU reservation
(``num_cpus=0``) so that a loop is never starved by the cluster's UDF
workers. A dead actor surfaces as :class:`StageActorDied` naming its group
and stages; :meth:`RayPlacement.restart` replaces the dead actors (their
stages start over from the config, living groups keep their state) and
opens the channel again.

>>> p = Pipeline.from_yaml("examples/ao_loop.yaml", placement="ray").build()
>>> p.step(100); p.read("commands")
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from raytile.common.errors import ExecutorError, PipelineStateError, RaytileError, StageActorDied, StageFailed
from raytile.pipeline.config import PipelineConfig
from raytile.pipeline.group_host import GroupHost, SentValues
from raytile.pipeline.placement import Placement
from raytile.pipeline.ray_channels import make_channel
from raytile.pipeline.registry import get_stage_class
from raytile.pipeline.topology import group_topology

__all__ = ["RayPlacement", "STEP_TIMEOUT_S", "ensure_ray"]

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


class RayPlacement(Placement):
    """Placement groups on Ray actors, stepped over the channel its name picks (``ray``: node-local sockets)."""

    def __init__(self, config: PipelineConfig, levels: list[tuple[str, ...]], groups: list[str],
                 placement: str = "ray", step_timeout_s: float = STEP_TIMEOUT_S):
        self.config = config
        self.levels = levels
        self.groups = groups
        self.name = placement
        self.step_timeout_s = step_timeout_s
        #: who sends what to whom (a pure function of the config: raytile.pipeline.topology)
        self.topology = topo = group_topology(config, groups)
        self.members, self.group_of, self.writer_group = topo.members, topo.group_of, topo.writer_group
        self.upstream, self.outbound, self.relayed = topo.upstream, topo.outbound, topo.relayed
        self.relay_streams, self.output_groups = topo.relay_streams, topo.output_groups
        #: the latest (value, generation) of each relayed stream, handed to the next step
        self._relay_values: dict[str, tuple[Any, int]] = {}
        self.actors: dict[str, Any] = {}
        #: how a step's values travel between the actors (raytile.pipeline.ray_channels)
        self.channel = make_channel(placement, config, topo)
        self._pending: deque[tuple[int, Any]] = deque()
        self._channel_open = False
        #: the last step completed on every actor (the pipeline's step counter resumes after it on failure)
        self.last_done: int | None = None
        #: stream -> the writer's output object, for streams carried by a stage's own object
        self._templates: dict[str, Any] = {}

    @property
    def depth(self) -> int:
        """Steps in flight at most (the channel's: it may change when the channel opens)."""
        return self.channel.depth

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
        self._relay_values = {}  # every stage starts over: so do the values relayed between groups
        self._start_actors(self.groups)
        self._open_channel()

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
        if self.channel.is_timeout(e):
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
        """Submit step ``t`` and wait only for the steps beyond the channel's depth (steps overlap across
        actors); :meth:`drain` waits for the rest (reads and updates do it first)."""
        if not self.actors:
            raise PipelineStateError("step(): the Ray placement is closed; call restart()")
        if not self._channel_open:
            raise PipelineStateError("step(): a step failed and its channel is closed; call restart()")
        try:
            self._pending.append((t, self.channel.submit(t, self._relay_values)))
            while len(self._pending) >= self.depth:
                self._complete_oldest()
        except Exception as e:
            self._abandon_steps()
            raise self._translate(e) from e

    def _complete_oldest(self) -> None:
        done_t, handle = self._pending.popleft()
        self._take_results(self.channel.results(handle, self.step_timeout_s))
        self.last_done = done_t

    def _take_results(self, results: list[SentValues]) -> None:
        """Keep the relayed streams' values (copies: a compiled graph's results are views of its buffers),
        for the first step after a restart."""
        if not self.relay_streams:
            return
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
        try:
            while self._pending:
                self._complete_oldest()
        except Exception as e:
            self._abandon_steps()
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

    def _abandon_steps(self) -> None:
        """After a failed step: forget the steps in flight and step no more until :meth:`restart` opens the
        channel again (what they still send would be taken for a later step's). The channel itself is
        closed by close() or restart(): tearing a compiled graph down waits for a stuck actor."""
        self._pending.clear()
        self._channel_open = False

    def _open_channel(self) -> None:
        self.channel.open(self.actors)
        self._channel_open = True

    def _close_channel(self) -> None:
        """Forget steps in flight and close the channel (living actors are free again)."""
        self._pending.clear()
        self._channel_open = False
        self.channel.close()

    def _kill(self, groups: list[str]) -> None:
        import ray

        for g in groups:
            try:
                ray.kill(self.actors.pop(g))
            except Exception:
                pass  # dead already

    def close(self) -> None:
        """Close the channel and kill the actors."""
        self._close_channel()
        self._kill(list(self.actors))

    def restart(self) -> None:
        """Replace dead actors (their stages start over; living groups keep their state), or, when none
        died (a stage raised), rebuild every group from the config. The channel is opened again."""
        dead = self._dead_groups() if self.actors else list(self.groups)
        if not dead or len(dead) == len(self.groups):
            self.close()
            self.build()
            return
        self._close_channel()
        self._kill(dead)
        self._start_actors(dead)
        for g in self.groups:
            if g not in dead:
                self._call(g, "resend")  # the new actors have none of the values sent before
        self._open_channel()

    def describe(self) -> list[str]:
        lines = [f"{self.name}: {len(self.groups)} actors over {self.channel.name}, "
                 f"{self.depth} step{'s' if self.depth > 1 else ''} in flight at most"]
        for g in self.groups:
            res = self._resources(g)
            lines.append(f"  {g}: {', '.join(self.members[g])} (upstream: {', '.join(self.upstream[g]) or '-'}; "
                         f"sends: {', '.join(self.outbound[g]) or '-'}; "
                         + (f"relayed in: {', '.join(s + ':-1' for s in self.relayed[g])}; " if self.relayed[g] else "")
                         + f"{res})")
        return lines
