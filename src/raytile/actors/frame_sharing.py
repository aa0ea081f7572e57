"""`FrameSharing`: how a task's frames reach its worker when they are not read from files.

Two ways, both read zero-copy by the worker:

- an in-memory data set's partitions are put into the object store once per
  DataSet (:class:`~raytile.actors.shared_frames.SharedFrames`); a task
  travels without them (:meth:`FrameSharing.strip`) and names their ref, which
  its actor gets the first time (see :mod:`raytile.actors.shipping`). When a
  node is lost they are put again, and the workers drop their views of a
  released data set's frames;
- a stream's partitions are copied into a reused shared-memory slot of the
  driver's node (:class:`~raytile.actors.frame_slab.FrameSlab`), or when
  none is free put into the object store; a worker on another node gets
  them from the object store (:meth:`FrameSharing.frames_for`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Sequence

import numpy as np
import ray

from raytile.actors.frame_slab import FrameSlab, SlabFrames
from raytile.actors.pool import Slot
from raytile.actors.shared_frames import SharedFrames
from raytile.common.errors import ExecutorError
from raytile.io.dataset import FrameDelivery
from raytile.runtime.params import PartitionTask

__all__ = ["FrameSharing", "this_node"]

log = logging.getLogger(__name__)


class FrameSharing:
    """The frames this driver shares with the workers: in-memory data sets' and a stream's."""

    def __init__(self) -> None:
        self.shared = SharedFrames(ray.put, node=this_node())
        self.slab = FrameSlab()  # a stream's partitions, for the workers of this node

    @property
    def node(self) -> str | None:
        """The node whose object store and slab hold the shared frames (this process's), if any."""
        return self.shared.node

    def forget_released(self, slots: Sequence[Slot]) -> None:
        """Tell the workers to drop their views of released data sets' frames (which pin them)."""
        keys = self.shared.take_released()
        if not keys:
            return
        for slot in slots:
            held = slot.ledgers["data"].forget_all(keys)
            if held:
                try:
                    slot.actor.forget_values.remote("data", held)
                except Exception as e:  # its actor is gone
                    log.debug("forget_values on %s: %s", slot.name, e)

    def renew(self, nodes: set[str]) -> None:
        """Workers on ``nodes`` were retired, their nodes gone: in-memory data sets are put into the object
        store again, so that no worker pulls a copy Ray still lists on a lost node (see
        :meth:`SharedFrames.put_again`). Tasks submitted from now on carry the new refs."""
        t0 = time.monotonic()
        count = self.shared.put_again(ray.get)
        if count:
            log.warning("node(s) %s lost: %d in-memory partitions put into the object store again (%.2f s)",
                        ", ".join(n[:12] for n in sorted(nodes)), count, time.monotonic() - t0)

    def share_frames(self, frames: Any) -> Any:
        """A stream partition's frames as its task carries them: copied into a reused shared-memory
        slot of this node, or when none is free, put into the object store (one ``ray.put``)."""
        handle = self.slab.share(frames) if self.node is not None else None
        return handle if handle is not None else ray.put(frames)

    def stream_buffer(self, shape: tuple, dtype: Any) -> np.ndarray:
        """An array in a free slot of this node's slab (see :meth:`share_frames`), else a new one."""
        buf = self.slab.allocate(shape, dtype) if self.node is not None else None
        return buf if buf is not None else np.empty(shape, dtype=dtype)

    def frames_for(self, frames: Any, slot: Slot) -> Any:
        """A stream partition's frames as ``slot``'s worker can read them: a slab slot only on this
        node; for a worker elsewhere they go into the object store."""
        if isinstance(frames, SlabFrames) and slot.node_id != self.node:
            return ray.put(self.slab.array(frames))
        return frames

    def strip(self, task: PartitionTask) -> tuple[PartitionTask, Any]:
        """The task to send and the ref of its frames (SHARED in-memory frames), else None."""
        part = task.partition
        if part.frame_delivery is not FrameDelivery.SHARED:  # read where it runs, or carried in the task
            return task, None
        ref = self.shared.ref(task.dataset_id, part.idx)
        if ref is None:
            raise ExecutorError(f"{task.describe()}: its data set was not shared with the workers "
                                "(prepare_dataset was not called for it, or it was released)")
        return dataclasses.replace(task, partition=part.without_frames()), ref

    def close(self) -> None:
        """Drop the object store refs and the slab's files."""
        self.shared.clear()
        self.slab.close()


def this_node() -> str | None:
    """The id of the node this process runs on (where its ``ray.put`` objects live), if Ray says."""
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001  (Ray Client drivers have no node of their own)
        return None
