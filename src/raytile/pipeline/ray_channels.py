"""Step channels: how one step's values travel between the group actors of a Ray placement.

:class:`~raytile.pipeline.ray_placement.RayPlacement` owns the actors (one
:class:`~raytile.pipeline.group_host.GroupHost` a group), their control calls
and their failures; a :class:`StepChannel` only carries steps: ``submit(t)``
starts step ``t`` on every group, ``results(handle)`` waits for it. Three kinds:

* :class:`SocketChannel` (placement ``ray``, the default): Unix-domain
  sockets between the driver and the actors of one node, each actor stepping
  in a loop thread (:mod:`raytile.pipeline.socket_link`); two steps in flight
  (one with a delayed input across groups: the driver relays it). When the
  actors are not all on the driver's node it uses actor calls instead.
* :class:`ActorCallChannel` (``ray-classic``: one step at a time; the
  fallback of ``ray``: eight): plain actor calls, one a group and step. A
  group's result goes to the groups that read it as an ``ObjectRef``
  argument, so Ray hands it over (inline when small, through the object
  store when large) without the driver waiting; a delayed input
  (``name:-1``) is the writer's result of step t-1, passed the same way.
* :class:`CompiledGraphChannel` (placement ``ray-compiled``): one execution
  of a Ray Compiled Graph a step, over its shared-memory channels. Ray has
  deprecated Compiled Graphs (ray-project/ray#65098); this channel stays an
  option while Ray ships them. Ray leaves named semaphores of those
  channels in ``/dev/shm`` (20 a pipeline); :meth:`CompiledGraphChannel.close`
  removes the ones its graph created.

Measured on the 2-core development machine (AO example, 2 actors, one step a
call as ``raytile pipeline bench`` does, both in the same run, six runs at
load 10-23): sockets median 1,140 Hz (p50 0.78 ms), compiled graph median
308 Hz (p50 1.58 ms; its reader spins with ``sched_yield`` while it waits,
which a loaded machine punishes); one actor call a group 224-354
Hz. Actor calls in a loop with steps in flight (``Pipeline.run``): one step
263-329 Hz, two 415-486, four 541-597, eight 579-705, sixteen 645-762; Ray's
task events off (a message to the GCS per call) took eight from 359-477 to
601-706 Hz. Deeper queues add latency (a read waits for every step in flight)
for little rate.

>>> ch = make_channel("ray", config, topology); ch.open(actors)        # doctest: +SKIP
>>> ch.results(ch.submit(0, {}), timeout=60.0)                          # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from abc import ABC, abstractmethod
from typing import Any, Mapping

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import PipelineConfig
from raytile.pipeline import socket_link as link
from raytile.pipeline.group_host import SentValues
from raytile.pipeline.topology import GroupTopology

__all__ = ["StepChannel", "ActorCallChannel", "SocketChannel", "CompiledGraphChannel", "CHANNEL_PLACEMENTS", "make_channel"]

#: Steps in flight over actor calls when ``ray`` spans nodes (see the module docstring for the measurement).
DEFAULT_DEPTH = 8


class StepChannel(ABC):
    """Starts steps on a Ray placement's group actors and waits for their results."""

    #: What :meth:`describe` of the placement says the actors talk over.
    name: str = ""

    def __init__(self, config: PipelineConfig, topology: GroupTopology, depth: int = 1):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ConfigValidationError(f"depth: expected a positive integer, got {depth!r}")
        self.config = config
        self.topology = topology
        #: steps in flight at most (the placement waits for the oldest when a new one would exceed it)
        self.depth = depth

    @abstractmethod
    def open(self, actors: Mapping[str, Any]) -> None:
        """Get ready to carry steps between ``actors`` (group -> actor handle); again after a restart."""

    @abstractmethod
    def submit(self, t: int, relayed: SentValues) -> Any:
        """Start step ``t``; ``relayed``: the driver's latest values of the relayed streams (used when
        the channel has no earlier step of its own to take them from). Returns a handle for :meth:`results`."""

    @abstractmethod
    def results(self, handle: Any, timeout: float) -> list[SentValues]:
        """Wait for a submitted step: what each output group sent (``topology.output_groups`` order)."""

    def close(self) -> None:
        """Forget the steps in flight and release what :meth:`open` made (the actors stay)."""

    def is_timeout(self, e: BaseException) -> bool:
        """Whether ``e`` says a step did not answer in time."""
        import ray.exceptions as rex

        return isinstance(e, rex.GetTimeoutError)


class ActorCallChannel(StepChannel):
    """One plain actor call a group and step, results passed on as ObjectRefs, ``depth`` steps in flight."""

    name = "actor calls"

    def __init__(self, config: PipelineConfig, topology: GroupTopology, depth: int = DEFAULT_DEPTH):
        super().__init__(config, topology, depth)
        groups = topology.groups
        #: group -> the groups writing the streams it reads delayed
        self.relay_sources = {g: sorted({topology.writer_group[s] for s in topology.relayed[g]}, key=groups.index)
                              for g in groups}
        self._relay_writers = sorted({w for ws in self.relay_sources.values() for w in ws}, key=groups.index)
        self._step: dict[str, Any] = {}
        #: relay writer -> the ObjectRef of its last submitted step's result (what the next step reads delayed)
        self._last: dict[str, Any] = {}

    def open(self, actors: Mapping[str, Any]) -> None:
        # no task events: they are one more message to the GCS per call, and a loop makes thousands a second
        self._step = {g: actors[g].step.options(enable_task_events=False) for g in self.topology.groups}
        self._last = {}

    def submit(self, t: int, relayed: SentValues) -> list[Any]:
        topo = self.topology
        refs: dict[str, Any] = {}
        for g in topo.groups:
            args: list[Any] = [refs[u] for u in topo.upstream[g]]
            if self.relay_sources[g]:
                if self._last:
                    args += [self._last[w] for w in self.relay_sources[g]]
                else:  # the first step since open(): the driver's copies
                    args.append(relayed)
            refs[g] = self._step[g].remote(t, *args)
        self._last = {w: refs[w] for w in self._relay_writers}
        return [refs[g] for g in topo.output_groups]

    def results(self, handle: list[Any], timeout: float) -> list[SentValues]:
        import ray

        return list(ray.get(handle, timeout=timeout))

    def close(self) -> None:
        self._step = {}
        self._last = {}


class SocketChannel(StepChannel):
    """Unix-domain sockets between the driver and the group actors of one node (:mod:`raytile.pipeline.socket_link`);
    plain actor calls (:class:`ActorCallChannel`) when the actors are not all on the driver's node."""

    name = "node-local sockets"

    def __init__(self, config: PipelineConfig, topology: GroupTopology, depth: int = 2):
        # a relay goes through the driver: step t needs step t-1's result first
        super().__init__(config, topology, 1 if topology.relay_streams else depth)
        self._socket_depth = self.depth
        self._inputs: dict[str, socket.socket] = {}
        self._outputs: list[socket.socket] = []
        self._timeout: float | None = None
        #: the channel used instead when the actors span nodes
        self.fallback: ActorCallChannel | None = None
        #: how long connecting the links may take
        self.link_timeout_s = 60.0

    def _one_node(self, actors: Mapping[str, Any]) -> bool:
        """Whether the driver and every actor run on one node (and this platform has Unix sockets)."""
        import ray

        if not hasattr(socket, "AF_UNIX"):
            return False
        try:
            here = ray.get_runtime_context().get_node_id()
        except Exception:
            return False  # a Ray Client driver: not on a node of the cluster
        nodes = ray.get([actors[g].node_id.remote() for g in self.topology.groups], timeout=self.link_timeout_s)
        return all(n == here for n in nodes)

    def open(self, actors: Mapping[str, Any]) -> None:
        import ray

        self.close()
        if not self._one_node(actors):
            self.fallback = ActorCallChannel(self.config, self.topology)
            self.fallback.open(actors)
            self.name, self.depth = "actor calls (the actors span nodes)", self.fallback.depth
            return
        self.fallback = None
        self.name, self.depth = SocketChannel.name, self._socket_depth
        topo, timeout = self.topology, self.link_timeout_s
        folder = tempfile.mkdtemp(prefix="raytile-pipe-")  # private (0700): only this user's processes connect
        if len(folder) > 80:  # a Unix socket's path has ~100 bytes at most
            shutil.rmtree(folder, ignore_errors=True)
            folder = tempfile.mkdtemp(prefix="raytile-pipe-", dir="/tmp")
        try:
            paths = {g: os.path.join(folder, f"g{i}") for i, g in enumerate(topo.groups)}
            driver_path = os.path.join(folder, "driver")
            srv = link.listen(driver_path)
            try:
                ray.get([actors[g].listen.remote(paths[g]) for g in topo.groups], timeout=timeout)
                self._inputs = {g: link.connect(paths[g], "driver", timeout) for g in topo.groups}
                linked = [actors[g].link.remote(
                    g, topo.upstream[g], [paths[d] for d in topo.groups if g in topo.upstream[d]]
                    + ([driver_path] if g in topo.output_groups else []), timeout) for g in topo.groups]
                outs = link.accept_named(srv, set(topo.output_groups), timeout)
                self._outputs = [outs[g] for g in topo.output_groups]
                ray.get(linked, timeout=timeout)
            finally:
                srv.close()
        except BaseException:
            self.close()
            raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # connected sockets need no file

    def submit(self, t: int, relayed: SentValues) -> Any:
        if self.fallback is not None:
            return self.fallback.submit(t, relayed)
        for g, sock in self._inputs.items():
            link.send_msg(sock, (t, relayed if self.topology.relayed[g] else {}))
        return t

    def results(self, handle: Any, timeout: float) -> list[SentValues]:
        if self.fallback is not None:
            return self.fallback.results(handle, timeout)
        if timeout != self._timeout:
            for sock in self._outputs:
                sock.settimeout(timeout)
            self._timeout = timeout
        got = [link.recv_msg(sock) for sock in self._outputs]
        for r in got:
            if isinstance(r, link.StepError):
                raise r.error
        return got

    def is_timeout(self, e: BaseException) -> bool:
        return super().is_timeout(e) or isinstance(e, TimeoutError)

    def close(self) -> None:
        """Close the driver's links: each actor's step loop sees the end of its input and ends."""
        if self.fallback is not None:
            self.fallback.close()
        for sock in (*self._inputs.values(), *self._outputs):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._inputs, self._outputs, self._timeout = {}, [], None


#: Ray's named semaphores of shared-memory channels: /dev/shm/sem.hdr<pid>-<ns> and sem.obj<pid>-<ns>,
#: <ns> the wall-clock time of their creation
_RAY_SEMAPHORE = re.compile(r"sem\.(?:hdr|obj)\d+-(\d+)")
_SHM = "/dev/shm"


def _ray_semaphores(since_ns: int, until_ns: int) -> list[str]:
    """Ray's channel semaphores in /dev/shm created between the two times (none where there is no /dev/shm)."""
    try:
        names = os.listdir(_SHM)
    except OSError:
        return []
    return [n for n in names if (m := _RAY_SEMAPHORE.fullmatch(n)) and since_ns <= int(m.group(1)) <= until_ns]


class CompiledGraphChannel(StepChannel):
    """A Ray Compiled Graph, one execution a step (deprecated upstream: an option while Ray ships it)."""

    name = "compiled-graph channels"

    def __init__(self, config: PipelineConfig, topology: GroupTopology, depth: int = 2):
        # a relay goes through the driver: step t needs step t-1's result first
        super().__init__(config, topology, 1 if topology.relay_streams else depth)
        self._dag: Any = None
        #: when the graph was compiled (Ray creates every semaphore of its channels then: measured)
        self._compiled_ns = (0, 0)

    def open(self, actors: Mapping[str, Any]) -> None:
        from ray.dag import InputNode, MultiOutputNode

        topo = self.topology
        start_ns = time.time_ns()
        nodes: dict[str, Any] = {}
        with InputNode() as inp:  # inp[0]: the step, inp[1]: the relayed values
            for g in topo.groups:
                nodes[g] = actors[g].step.bind(inp[0], inp[1], *[nodes[u] for u in topo.upstream[g]])
            outputs = [nodes[g] for g in topo.output_groups]
            out = outputs[0] if len(outputs) == 1 else MultiOutputNode(outputs)
        crossing = sum(self.config.streams[s].nbytes for g in topo.groups for s in topo.outbound[g])
        self._dag = out.experimental_compile(_buffer_size_bytes=max(1 << 20, 2 * crossing + (64 << 10)))
        self._compiled_ns = (start_ns, time.time_ns())

    def submit(self, t: int, relayed: SentValues) -> Any:
        return self._dag.execute(t, relayed)

    def results(self, handle: Any, timeout: float) -> list[SentValues]:
        import ray

        got = ray.get(handle, timeout=timeout)
        return [got] if len(self.topology.output_groups) == 1 else list(got)

    def is_timeout(self, e: BaseException) -> bool:
        import ray.exceptions as rex

        return super().is_timeout(e) or isinstance(e, rex.RayChannelTimeoutError)

    def close(self) -> None:
        """Tear the graph down (living actors are free again) and remove the semaphores Ray left of it
        (those created while it compiled: another graph compiled at the same moment would lose its names)."""
        dag, self._dag = self._dag, None
        if dag is None:
            return
        try:
            dag.teardown()
        except Exception:
            pass  # an actor already dead: the graph is torn down as far as it can be
        for name in _ray_semaphores(*self._compiled_ns):
            try:
                os.unlink(os.path.join(_SHM, name))
            except OSError:
                pass  # removed meanwhile


#: Ray placement name -> how to make its channel (``Pipeline(placement=...)``).
CHANNEL_PLACEMENTS = {
    "ray": lambda config, topology: SocketChannel(config, topology),
    "ray-compiled": lambda config, topology: CompiledGraphChannel(config, topology),
    "ray-classic": lambda config, topology: ActorCallChannel(config, topology, depth=1),
}


def make_channel(placement: str, config: PipelineConfig, topology: GroupTopology) -> StepChannel:
    """The step channel of a Ray placement name (``ray``, ``ray-compiled`` or ``ray-classic``)."""
    try:
        factory = CHANNEL_PLACEMENTS[placement]
    except KeyError:
        raise ConfigValidationError(f"placement: expected one of {tuple(CHANNEL_PLACEMENTS)}, "
                                    f"got {placement!r}") from None
    return factory(config, topology)
