"""The driver's shared-memory slots for stream partitions (raytile.actors.frame_slab), without Ray:
what a worker reads through a handle equals what the driver shared, a slot is reused only after its
handle is gone, and a full slab says so (the executor then uses the object store)."""

from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pytest

from raytile.actors.frame_slab import FrameSlab, SlabReader
from raytile.runtime.stream_feed import BufferRecycler

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")


def _frames(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4000, size=(16, 64, 64)).astype(np.uint16)  # 128 KiB


def test_worker_reads_what_the_driver_shared_zero_copy():
    slab, reader = FrameSlab(max_bytes=1 << 20), SlabReader()
    try:
        a = _frames(1)
        handle = slab.share(a)
        sent = pickle.loads(pickle.dumps(handle))  # what a task carries to the worker
        view = reader.view(sent)
        np.testing.assert_array_equal(view, a)
        assert not view.flags.writeable and not view.flags.owndata
        part = slab.allocate(a.shape, a.dtype)  # assembled in place: sharing it copies nothing
        part[:] = a[::-1]
        np.testing.assert_array_equal(reader.view(pickle.loads(pickle.dumps(slab.share(part)))), a[::-1])
    finally:
        slab.close()


def test_a_slot_is_reused_only_after_its_handle_is_gone_and_a_full_slab_refuses():
    a, b = _frames(2), _frames(3)
    slab, reader = FrameSlab(max_bytes=2 * a.nbytes), SlabReader()
    try:
        h1, h2 = slab.share(a), slab.share(b)
        assert slab.slots == 2 and slab.share(a) is None and slab.allocate(a.shape, a.dtype) is None
        worker_copy = pickle.loads(pickle.dumps(h1))  # holds no slot
        del h1
        gc.collect()
        h3 = slab.share(b)  # h1's slot, refilled
        assert h3 is not None and h3.path == worker_copy.path and slab.slots == 2
        np.testing.assert_array_equal(reader.view(worker_copy), b)
        np.testing.assert_array_equal(reader.view(h2), b)
        lent = slab.allocate(a.shape, a.dtype)  # none free: h2 and h3 hold both
        assert lent is None
    finally:
        slab.close()
    assert not [f for f in os.listdir("/dev/shm") if os.path.basename(h2.path) == f]


def test_buffer_recycler_reuses_only_its_own_arrays():
    buffers = BufferRecycler()
    a = buffers.take((4, 8), np.dtype("uint16"))
    buffers.give(a)
    assert buffers.take((4, 8), np.dtype("uint16")) is a and buffers.reused == 1
    user = np.zeros((4, 8), np.uint16)  # a source's batch handed on as it is: never refilled
    buffers.give(user)
    assert buffers.take((4, 8), np.dtype("uint16")) is not user


@pytest.mark.ray
def test_a_stream_on_ray_goes_through_the_slab_and_equals_numpy(ray_context):
    import raytile as rt

    frames = np.random.default_rng(4).integers(0, 4000, size=(64, 32, 32)).astype(np.uint16)
    slab = ray_context.executor.slab
    before = slab.shared
    batches = (frames[i:i + 5] for i in range(0, 64, 5))  # batches that do not fill partitions exactly
    ds = ray_context.load("stream", frames=batches, nav_shape=(8, 8), sig_shape=(32, 32), dtype="uint16",
                          frames_per_partition=16)
    res = ray_context.run_udf(dataset=ds, udf=rt.SumUDF())
    np.testing.assert_allclose(res["intensity"].data, frames.sum(axis=0))
    assert slab.shared - before == 4  # every partition went to the workers through a slot
