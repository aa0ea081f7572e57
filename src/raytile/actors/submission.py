"""`Submitter`: sends partition tasks to worker actors and counts them in flight.

A task goes to the worker the dispatch policy prefers
(:mod:`raytile.runtime.dispatch_policy`: the node holding its frames, the
worker whose segment it extends, the least busy) as one
:class:`~raytile.actors.task_message.TaskMessage`, with the values that
actor sees for the first time (:mod:`raytile.actors.shipping`) and the
frames it carries (:mod:`raytile.actors.frame_sharing`). Each task's
future wakes its run's coordinator when it finishes
(:mod:`raytile.actors.wakeups`), so nothing polls Ray.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Collection

from raytile.actors.frame_sharing import FrameSharing
from raytile.actors.frame_slab import SlabFrames
from raytile.actors.pool import Slot, WorkerPool
from raytile.actors.shipping import ParamsHandle, forget_shipped, to_ship
from raytile.actors.task_message import TaskMessage
from raytile.actors.wakeups import RunWakeups
from raytile.runtime.dispatch_policy import DispatchPolicy
from raytile.runtime.executor import NoWorkerReady, ProgressSink, TaskHandle
from raytile.runtime.params import PartitionTask

__all__ = ["RayTaskHandle", "Submitter"]


class RayTaskHandle(TaskHandle):
    """A submitted task: its object ref, and a future of it whose callback wakes the run's coordinator."""

    def __init__(self, task: PartitionTask | None, version: int, ref: Any, slot: Slot, actor: Any, run_id: str,
                 sink: ProgressSink | None, expected: Collection[int] = ()):
        super().__init__(task, version, expected)
        self.ref = ref
        self.future = ref.future()
        self.slot = slot
        self.actor = actor
        self.run_id = run_id
        self.sink = sink
        self.settled = False


class Submitter:
    """Submits tasks to ``pool``'s ready workers as ``policy`` prefers; counts each slot's tasks in
    flight until the task is settled."""

    def __init__(self, pool: WorkerPool, frames: FrameSharing, wakeups: RunWakeups, policy: DispatchPolicy):
        self.pool = pool
        self.frames = frames
        self.wakeups = wakeups
        self.policy = policy
        self._lock = threading.Lock()  # guards the slots' in-flight counts and shipping ledgers

    def submit(self, task: PartitionTask, params: ParamsHandle, version: int, progress_actor: Any = None,
               sink: ProgressSink | None = None) -> RayTaskHandle:
        """Send ``task`` to a worker; raises :class:`NoWorkerReady` if none can take it now."""
        frames = task.frames  # a stream partition's object ref: an argument of this task alone
        send, data_ref = self.frames.strip(task if frames is None else dataclasses.replace(task, frames=None))
        data_key = None if data_ref is None else data_ref.hex()
        message = TaskMessage(send, params.key, data_key).packed()
        with self._lock:
            node = self.policy.locality.home_node(data_ref is not None or isinstance(frames, SlabFrames),
                                                  self.frames.node)
            slot = self.pool.pick(task.device_class, params.run_id, task.idx, node=node)
            if slot is None:
                raise NoWorkerReady(f"no {task.device_class} worker is ready for {task.describe()}")
            slot.in_flight += 1
            actor = slot.actor
            shipped = to_ship(slot, params, data_key, data_ref)
        ref = actor.run_task.remote(message, shipped, progress_actor, self.frames.frames_for(frames, slot))
        handle = RayTaskHandle(task, version, ref, slot, actor, params.run_id, sink)
        self.wakeups.ring_when_done(handle.future, params.run_id)
        return handle

    def settle(self, handle: RayTaskHandle) -> None:
        """The handle's task is done with (returned, lost or cancelled): its slot has room again."""
        with self._lock:
            if not handle.settled:
                handle.settled = True
                if handle.slot.actor is handle.actor:
                    handle.slot.in_flight = max(0, handle.slot.in_flight - 1)

    def missing(self, handle: RayTaskHandle, kind: str, key: Any) -> None:
        """The handle's worker lacked a value its ledger lists: ship it with the resubmitted task."""
        with self._lock:
            forget_shipped(handle.slot, kind, key)
