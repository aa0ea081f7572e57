"""`iter_frame_blocks` / `SequentialFrames`: a data set's frames in order, in bounded blocks, equal to
numpy on the file (a raw file read through its partitions, several partitions)."""

from __future__ import annotations

import numpy as np
import pytest

from raytile.io.frame_blocks import SequentialFrames, iter_frame_blocks


@pytest.fixture
def raw(inline_ctx, tmp_path):
    data = np.random.default_rng(5).integers(0, 60000, size=(6, 10, 16, 12)).astype(np.uint16)
    data.tofile(tmp_path / "scan.raw")
    ds = inline_ctx.load("raw", path=str(tmp_path / "scan.raw"), nav_shape=(6, 10), sig_shape=(16, 12),
                         dtype="uint16", num_partitions=4)
    return ds, data.reshape(60, 16, 12)


def test_blocks_are_the_frames_in_order(raw):
    ds, flat = raw
    assert len(ds.get_partitions()) == 4
    blocks = [np.array(b) for b in iter_frame_blocks(ds, depth=7)]
    assert max(len(b) for b in blocks) <= 7
    assert np.array_equal(np.concatenate(blocks), flat)


def test_sequential_reads_in_order_out_of_order_and_cast(raw):
    ds, flat = raw
    frames = SequentialFrames(ds, depth=8)
    assert (frames.num_frames, frames.sig_shape, frames.dtype) == (60, (16, 12), np.uint16)
    got = [frames.read(a, b) for a, b in [(0, 5), (5, 5), (5, 23), (30, 41), (41, 60)]]  # a gap: frames skipped
    assert np.array_equal(np.concatenate(got), np.concatenate([flat[0:23], flat[30:60]]))
    assert np.array_equal(frames.read(3, 9), flat[3:9])  # back: read again from the start
    as_float = SequentialFrames(ds, depth=8, dtype=np.float32).read(10, 30)
    assert as_float.dtype == np.float32 and np.array_equal(as_float, flat[10:30].astype(np.float32))
    with pytest.raises(IndexError):
        frames.read(50, 61)
