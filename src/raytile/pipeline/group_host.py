"""`GroupHost`: the stages of one placement group, stepped inside a Ray actor.

:class:`~raytile.pipeline.ray_placement.RayPlacement` makes this class remote,
one actor a group, and drives it through a step channel
(:mod:`raytile.pipeline.ray_channels`). Nothing here imports Ray: the host
is a :class:`~raytile.pipeline.engine.GraphEngine` for the group's stages
plus the bookkeeping of what it sent to other groups, so a test can build
one in-process.

>>> host = GroupHost(config, classes, ["camera", "centroids"], levels, outbound=["slopes"])  # doctest: +SKIP
>>> host.build(); host.step(0)          # {"slopes": (array, 0)}  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from typing import Any

import numpy as np

from raytile.pipeline.config import PipelineConfig
from raytile.pipeline.engine import GraphEngine
from raytile.pipeline.registry import register_stage
from raytile.pipeline.socket_link import StepLoop, accept_named, connect, listen

__all__ = ["GroupHost", "SentValues"]

#: What a group sends in one step: stream -> (value, or None when unchanged since last sent; generation).
SentValues = dict[str, tuple[Any, int]]


class GroupHost:
    """The stages of one placement group; a step takes the values other groups sent and returns its own."""

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
        self._listener: socket.socket | None = None
        self._loop: StepLoop | None = None

    def build(self) -> list[str]:
        self.engine.build()
        return sorted(self.engine.external)

    def construct(self) -> dict[str, Any]:
        """Construct the stages; the output objects other groups need as templates (see GraphEngine)."""
        return {n: obj for n, obj in self.engine.construct().items() if n in self.outbound}

    def connect(self, templates: dict[str, Any]) -> list[str]:
        self.engine.connect(templates)
        return sorted(self.engine.external)

    def step(self, t: int, *received: SentValues) -> SentValues:
        """Step ``t``. ``received``: what other groups sent for it (the same step's results of the groups
        before this one, and the delayed inputs as of step t-1). A reading group receives each of a
        writer's step results exactly once, in step order, so "None: unchanged since sent" is exact."""
        with self._lock:
            eng = self.engine
            for values in received:
                for name, (value, gen) in values.items():
                    if name in eng.external:
                        eng.set_external(name, value, gen)
            eng.step(t)
            out: SentValues = {}
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
            return self.engine.read(name)

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
            return self.engine.sink_values(stage)

    def finalize(self) -> None:
        with self._lock:
            self.engine.finalize()

    def ping(self) -> bool:
        return True

    # -- node-local links (raytile.pipeline.ray_channels.SocketChannel) ---------------------------
    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def listen(self, path: str) -> None:
        """Listen at ``path`` for the links of :meth:`link` (the driver's, and the upstream groups')."""
        self.unlink()
        self._listener = listen(path)

    def link(self, me: str, upstream: list[str], downstream: list[str], timeout: float) -> None:
        """Connect to the listeners at ``downstream`` (the groups reading this one's values, the driver),
        accept the driver and the ``upstream`` groups, and start the step loop over those links."""
        listener, self._listener = self._listener, None
        if listener is None:
            raise RuntimeError("link() before listen()")
        outs: list[socket.socket] = []
        try:
            outs = [connect(path, me, timeout) for path in downstream]
            ins = accept_named(listener, {"driver", *upstream}, timeout)
        except BaseException:
            for s in outs:
                s.close()
            raise
        finally:
            listener.close()
        self._loop = StepLoop(self.step, ins["driver"], [ins[u] for u in upstream], outs)
        self._loop.start()

    def unlink(self) -> None:
        """End the step loop and close its links (before a new :meth:`listen`)."""
        if self._loop is not None:
            self._loop.stop()
            self._loop = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
