"""`WorkerPool`: the worker actors of one Context, following the cluster.

Each worker actor holds one CPU slot (``num_cpus=1``) or one GPU. The pool

- starts actors for the cluster's CPUs and GPUs and, in *elastic* mode (no
  fixed ``cpus``/``gpus``), for every node that joins later, pinned to it
  (``NodeAffinitySchedulingStrategy``), up to ``max_workers``;
- gives tasks only to actors that answered a ``ping`` (a replacement that is
  still starting takes none, so nothing queues on an actor that may never
  be placed); a ping's answer promotes its actor at once (a callback on its
  future wakes the executor's monitor thread) and wakes the runs, so a Context need not wait for its workers:
  its first run starts on the first that is ready. If every actor of a pool
  that never had a ready one fails to start, the pool stops trying and
  keeps the error (:attr:`WorkerPool.startup_error`) for the run to raise;
- retires an actor without a process after ``PLACEMENT_TIMEOUT_S`` (or
  not alive after ``STARTUP_TIMEOUT_S`` with one), and the node
  it was meant for is not tried again for ``NODE_BACKOFF_S``;
- retires the actors of a node that left the cluster (or whose raylet
  refuses connections: :mod:`raytile.actors.raylet_watch`) and of an actor that
  died (their tasks fail with a Ray actor error and are retried elsewhere
  by the coordinator), and starts replacements where there is room.

What to start and what to retire is decided by :func:`plan_pool`, a pure
function of the nodes and the slots; :meth:`WorkerPool.refresh` does the
effects. ``RayExecutor`` calls ``refresh`` from a monitor thread every
``REFRESH_S`` and whenever a worker is lost.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Sequence

import ray

from raytile.actors import resources
from raytile.actors.cache import Ledger
from raytile.actors.raylet_watch import RayletWatch
from raytile.actors.worker import DATA_CACHE, PARAMS_CACHE, WorkerActor
from raytile.common.device_class import DeviceClass
from raytile.runtime.dispatch_policy import DISPATCH_POLICY, DispatchPolicy

__all__ = ["WorkerPool", "Slot", "SlotState", "NodeInfo", "PoolPlan", "plan_pool", "PLACEMENT_TIMEOUT_S",
           "STARTUP_TIMEOUT_S",
           "REFRESH_S", "NODE_BACKOFF_S"]

log = logging.getLogger(__name__)

#: How long a new actor may take to be placed (to get a process) before it is retired.
PLACEMENT_TIMEOUT_S = 20.0
#: How long a placed actor (it has a process) may take to start: on a node whose CPUs are saturated a
#: process at Ray's worker niceness (15) needed minutes; retiring it at PLACEMENT_TIMEOUT_S and starting
#: another never got a replacement up (measured with two busy-looping processes on 2 cores).
STARTUP_TIMEOUT_S = 300.0
#: How often the monitor looks at the cluster's nodes.
REFRESH_S = 1.0
#: How long a node where an actor could not be placed is left alone.
NODE_BACKOFF_S = 30.0

_RemoteWorker: Any = ray.remote(concurrency_groups=WorkerActor.CONCURRENCY_GROUPS)(WorkerActor)  # type: ignore[call-overload]  # Ray's stubs lack concurrency_groups


class SlotState(Enum):
    STARTING = "starting"  #: created, not yet answered its ping: takes no tasks
    READY = "ready"        #: takes tasks
    RETIRED = "retired"    #: killed or dead: takes no tasks, forgotten at the next refresh


@dataclass
class Slot:
    """One worker actor and the driver's bookkeeping of it."""

    kind: str
    name: str
    actor: Any
    node_id: str | None  #: the node it is pinned to (elastic) or runs on (learnt from its ping)
    started_at: float
    ping: Any = None  #: the future of its first ping while STARTING
    state: SlotState = SlotState.STARTING
    in_flight: int = 0
    info: dict = field(default_factory=dict)
    last_idx: dict[str, int] = field(default_factory=dict)  #: run_id -> the last partition sent to it
    ledgers: dict[str, Ledger] = field(
        default_factory=lambda: {"params": Ledger(PARAMS_CACHE), "data": Ledger(DATA_CACHE)}
    )

    @property
    def ready(self) -> bool:
        return self.state is SlotState.READY

    @property
    def dead(self) -> bool:
        return self.state is SlotState.RETIRED


@dataclass(frozen=True)
class NodeInfo:
    """An alive node of the cluster, what it offers and where its raylet listens."""

    node_id: str
    cpus: int
    gpus: int
    raylet_host: str = ""
    raylet_port: int = 0


@dataclass(frozen=True)
class PoolPlan:
    """What :meth:`WorkerPool.refresh` should do: start ``(kind, node_id or None)``, retire slots."""

    start: tuple[tuple[str, str | None], ...] = ()
    retire: tuple[Slot, ...] = ()


def plan_pool(*, nodes: Sequence[NodeInfo], slots: Sequence[Slot], fixed: dict[str, int] | None,
              max_workers: int | None, now: float, backoff: dict[str, float],
              placed: frozenset[str] = frozenset()) -> PoolPlan:
    """Decide which actors to start and which to retire.

    ``fixed`` (``{"cpu": n, "cuda": m}``) keeps that many actors anywhere in
    the cluster; ``None`` (elastic) wants one CPU actor per CPU and one GPU
    actor per GPU of every alive node, at most ``max_workers`` in all.
    Slots on nodes that are gone and slots that did not start in time are
    retired: ``PLACEMENT_TIMEOUT_S``, or ``STARTUP_TIMEOUT_S`` for the
    slots named in ``placed`` (their actor has a process, it is starting);
    ``backoff`` (node id -> until when) holds nodes to leave alone.
    """
    alive = {n.node_id: n for n in nodes}
    retire = [s for s in slots if not s.dead and (
        (s.node_id is not None and s.node_id not in alive)
        or (s.state is SlotState.STARTING
            and now - s.started_at > (STARTUP_TIMEOUT_S if s.name in placed else PLACEMENT_TIMEOUT_S))
    )]
    live = [s for s in slots if not s.dead and s not in retire]
    start: list[tuple[str, str | None]] = []
    if fixed is not None:
        for kind, want in fixed.items():
            have = sum(1 for s in live if s.kind == kind)
            start += [(kind, None)] * max(0, want - have)
        return PoolPlan(tuple(start), tuple(retire))
    room = None if max_workers is None else max(0, max_workers - len(live))
    for node in sorted(nodes, key=lambda n: n.node_id):
        if backoff.get(node.node_id, 0.0) > now:
            continue
        for kind, offered in (("cpu", node.cpus), ("cuda", node.gpus)):
            have = sum(1 for s in live if s.kind == kind and s.node_id == node.node_id)
            for _ in range(max(0, offered - have)):
                if room is not None:
                    if room <= 0:
                        return PoolPlan(tuple(start), tuple(retire))
                    room -= 1
                start.append((kind, node.node_id))
    return PoolPlan(tuple(start), tuple(retire))


def alive_nodes() -> list[NodeInfo]:
    """The cluster's alive nodes with their CPUs and GPUs (``ray.nodes()``)."""
    return [
        NodeInfo(n["NodeID"], int(n["Resources"].get("CPU", 0)), int(n["Resources"].get("GPU", 0)),
                 str(n.get("NodeManagerAddress") or ""), int(n.get("NodeManagerPort") or 0))
        for n in ray.nodes() if n.get("Alive")
    ]


def _with_process(slots: Sequence[Slot]) -> frozenset[str]:
    """Names of the slots whose actor has a process already (placed, still starting), from the GCS's
    actor table; none if it cannot be read."""
    placed = set()
    for slot in slots:
        try:
            from ray._private import state

            if state.actors(slot.actor._actor_id.hex()).get("Pid"):
                placed.add(slot.name)
        except Exception as e:  # noqa: BLE001  (an internal API: then the placement timeout applies)
            log.debug("actor table unavailable for %s: %s", slot.name, e)
    return frozenset(placed)


class WorkerPool:
    """The Context's worker actors. ``fixed`` counts per kind, or None to follow the cluster."""

    def __init__(self, fixed: dict[str, int] | None, cpu_share: float = 1.0, max_workers: int | None = None,
                 on_change: Callable[[], None] | None = None,
                 on_nodes_lost: Callable[[set[str]], None] | None = None,
                 policy: DispatchPolicy = DISPATCH_POLICY):
        """``on_change()`` is called when the ready workers changed, ``on_nodes_lost(node_ids)`` when
        workers were retired because their nodes are gone; ``policy`` says which worker a task would
        rather have (its ``locality`` and ``in_flight`` policies)."""
        self._fixed = fixed
        self._cpu_share = cpu_share
        self._max_workers = max_workers
        self._on_change = on_change
        self._on_nodes_lost = on_nodes_lost
        self._lock = threading.RLock()
        self._slots: list[Slot] = []
        self._backoff: dict[str, float] = {}
        self._counter = itertools.count()
        self._raylets = RayletWatch()
        self.policy = policy
        self._ever_ready = False
        #: set from Ray's callback thread when a starting actor's ping is answered (see :meth:`promote`)
        self.answered = threading.Event()
        self._start_errors: list[str] = []  #: why actors failed to start, newest last (a few)
        #: set when every actor failed to start before any was ready: then none is started again
        self.startup_error: str | None = None
        self.closed = False

    # -- views -------------------------------------------------------------------
    @property
    def slots(self) -> list[Slot]:
        with self._lock:
            return [s for s in self._slots if not s.dead]

    @property
    def ready(self) -> list[Slot]:
        with self._lock:
            return [s for s in self._slots if s.ready]

    def kinds(self) -> frozenset[DeviceClass]:
        """Kinds of worker the pool has or is starting (CPU, CUDA)."""
        with self._lock:
            kinds = {s.kind for s in self._slots if not s.dead}
        if self._fixed is not None:
            kinds |= {k for k, n in self._fixed.items() if n > 0}
        return frozenset(DeviceClass(k) for k in kinds)

    def pick(self, device_class: str, run_id: str = "", idx: int = -1, node: str | None = None) -> Slot | None:
        """The ready slot for a task of ``device_class`` with the fewest tasks in flight, or None.

        Among slots with room, the first the policy's wishes
        (:meth:`Locality.wishes <raytile.runtime.dispatch_policy.Locality.wishes>`) prefer: one on
        ``node`` (where the task's frames are, for in-memory data) whose last task of ``run_id`` was
        partition ``idx - 1`` (its merged results then grow one segment, see runtime/segments.py),
        then any on ``node``, then any extending a segment. Notes ``idx`` as the slot's last of the run.
        """
        wishes = self.policy.locality.wishes(node, run_id, idx)
        with self._lock:
            slot = resources.pick([s for s in self._slots if s.ready], device_class, prefer=wishes,
                                  has_room=self.policy.in_flight.has_room)
            if slot is not None and run_id:
                slot.last_idx[run_id] = idx
                while len(slot.last_idx) > 64:
                    slot.last_idx.pop(next(iter(slot.last_idx)))
            return slot

    def last_sent(self, run_id: str) -> list[int]:
        """The last partition of ``run_id`` sent to each ready slot with room (the ends of their segments)."""
        has_room = self.policy.in_flight.has_room
        with self._lock:
            return [s.last_idx[run_id] for s in self._slots
                    if s.ready and has_room(s.in_flight) and run_id in s.last_idx]

    # -- effects -----------------------------------------------------------------
    def refresh(self, nodes: Sequence[NodeInfo] | None = None) -> bool:
        """Promote started actors, retire lost ones, start what :func:`plan_pool` asks for.

        Returns True if the set of ready actors changed.
        """
        if self.closed or self.startup_error is not None:
            return False
        changed = self._promote()
        nodes = self._without_lost_raylets(alive_nodes()) if nodes is None else nodes
        with self._lock:
            now = time.monotonic()
            overdue = [s for s in self._slots
                       if s.state is SlotState.STARTING and now - s.started_at > PLACEMENT_TIMEOUT_S]
        placed = _with_process(overdue)
        alive = {n.node_id for n in nodes}
        with self._lock:
            plan = plan_pool(nodes=nodes, slots=self._slots, fixed=self._fixed, max_workers=self._max_workers,
                             now=now, backoff=self._backoff, placed=placed)
            lost_nodes = {s.node_id for s in plan.retire if s.ready and s.node_id is not None and s.node_id not in alive}
            for slot in plan.retire:
                if slot.state is SlotState.STARTING and slot.node_id is not None:
                    self._backoff[slot.node_id] = now + NODE_BACKOFF_S
                changed |= slot.ready
                self._retire(slot, "its node left the cluster" if slot.ready else "it was not placed in time")
            self._slots = [s for s in self._slots if not s.dead]
            new = [self._start(kind, node_id) for kind, node_id in plan.start]
            self._slots += new
        for slot in new:  # outside the lock: a future already done runs its callback here
            slot.ping.add_done_callback(self._ping_done)
        if changed and self._on_change is not None:
            self._on_change()
        if lost_nodes and self._on_nodes_lost is not None:
            self._on_nodes_lost(lost_nodes)
        return changed

    def _without_lost_raylets(self, nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
        """``nodes`` less those hosting workers of this pool whose raylet is gone (see
        :mod:`raytile.actors.raylet_watch`): Ray still calls them alive for 10-30 s."""
        gone = self._raylets.gone((n.node_id, n.raylet_host, n.raylet_port) for n in nodes)
        with self._lock:
            hosting = {s.node_id for s in self._slots if not s.dead}
        for node_id in gone & hosting:
            log.warning("the raylet of node %s refuses connections: its workers are retired", node_id[:12])
        return [n for n in nodes if n.node_id not in gone]

    def wait_ready(self, timeout: float) -> None:
        """Block until every slot started so far is ready or retired, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._promote()
            with self._lock:
                if not any(s.state is SlotState.STARTING for s in self._slots):
                    return
            time.sleep(0.02)

    def _ping_done(self, _future: Any) -> None:
        """A starting actor answered its ping (or failed to start): wake whoever promotes (the
        executor's monitor thread, see :meth:`promote`). Called from Ray's callback thread, which must
        not wait for a lock or make Ray calls (a ``ray.kill`` from it hung)."""
        self.answered.set()

    def promote(self) -> bool:
        """Promote the actors that answered their ping, retire those that failed to start, and tell
        the runs (``on_change``) if any did. Returns True if any did."""
        changed = self._promote()
        if changed and self._on_change is not None:
            self._on_change()
        return changed

    def lost(self, slot: Slot, actor: Any) -> None:
        """A task found ``actor`` dead: retire its slot (a replacement starts at the next refresh)."""
        with self._lock:
            if slot.actor is actor and not slot.dead:
                log.warning("worker %s died; a replacement starts where there is room", slot.name)
                self._retire(slot, "it died")
        if self._on_change is not None:
            self._on_change()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            for slot in self._slots:
                self._retire(slot, "the Context closed")
            self._slots = []

    def _start(self, kind: str, node_id: str | None) -> Slot:
        name = f"{kind}-{next(self._counter)}"
        opts = resources.actor_options(kind, self._cpu_share, node_id)
        actor = _RemoteWorker.options(**opts).remote(kind, 1, name)
        return Slot(kind, name, actor, node_id, time.monotonic(), ping=actor.ping.remote().future())

    def _promote(self) -> bool:
        changed = False
        with self._lock:
            for slot in self._slots:
                if slot.state is not SlotState.STARTING or not slot.ping.done():
                    continue
                try:
                    slot.info = slot.ping.result()
                except Exception as e:  # noqa: BLE001  (it died while starting)
                    self._failed_to_start(slot, e)
                    changed = True  # the runs look again: they raise startup_error if all failed
                    continue
                slot.node_id = slot.node_id or slot.info.get("node_id")
                slot.state = SlotState.READY
                self._ever_ready = True
                changed = True
        return changed

    def _failed_to_start(self, slot: Slot, error: BaseException) -> None:
        """Retire ``slot``, whose actor failed to start, and keep why; if no actor of this pool was ever
        ready and none is left starting, the pool gives up (:attr:`startup_error`). Holds the lock."""
        why = f"{type(error).__name__}: {error}".strip()
        log.warning("worker %s failed to start: %s", slot.name, why.splitlines()[0] if why else why)
        self._start_errors = (self._start_errors + [f"{slot.name}: {why}"])[-3:]
        self._retire(slot, "it failed to start")
        if not self._ever_ready and not any(not s.dead for s in self._slots):
            self.startup_error = "\n".join(self._start_errors)

    def _retire(self, slot: Slot, why: str) -> None:
        if slot.dead:
            return
        log.debug("retiring worker %s: %s", slot.name, why)
        slot.state = SlotState.RETIRED
        slot.in_flight = 0
        try:
            ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001  (already gone)
            pass
