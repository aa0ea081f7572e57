"""`TaskMessage`: the typed message from the executor to ``WorkerActor.run_task``, packed and opened."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

pytest.importorskip("ray")

import ray  # noqa: E402

from raytile.actors.task_message import TaskMessage  # noqa: E402
from raytile.io.formats.memory import MemoryDataSet  # noqa: E402
from raytile.runtime.params import PartitionTask  # noqa: E402


def _task(idx: int = 1) -> PartitionTask:
    data = np.arange(4 * 3 * 5, dtype=np.uint16).reshape(4, 3, 5)
    ds = MemoryDataSet(data=data, sig_dims=2, num_partitions=2).initialize()
    part = ds.get_partitions()[idx]
    return PartitionTask(part.without_frames(), part.idx, num_frames=part.shape.nav.size, dataset_id=id(ds))


def test_a_message_travels_as_bytes_and_opens_to_the_same_fields():
    msg = TaskMessage(_task(), ("run-1", 3), "ab12")
    packed = msg.packed()
    assert isinstance(packed, bytes)
    opened = TaskMessage.unpacked(packed)
    assert (opened.params_key, opened.data_key) == (("run-1", 3), "ab12")
    assert opened.task.idx == 1 and opened.task.num_frames == msg.task.num_frames
    assert opened.task.partition.slice == msg.task.partition.slice
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.data_key = None


def test_a_message_holding_a_ray_ref_goes_to_ray_as_it_is():
    """Pickled outside Ray's serializer a ref loses its ownership: such a message is not packed."""
    task = _task()
    task.frames = ray.ObjectRef.from_random()
    msg = TaskMessage(task, ("run-1", 0))
    assert msg.packed() is msg
    assert TaskMessage.unpacked(msg) is msg


def test_bytes_that_are_no_message_are_refused():
    with pytest.raises(TypeError, match="task message was expected, got tuple"):
        TaskMessage.unpacked(pickle.dumps((_task(), ("run-1", 0), None)))
