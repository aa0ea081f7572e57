"""Names of ``libertem.io.dataset`` and its format modules at their ported paths (issue 36), each against
LiberTEM 0.16's own result on the same input.

They are what stopped LiberTEM's own test modules at import (test_base, test_detect, the detector
formats' modules); imported here as the ported code imports them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.io.dataset as lt_dataset  # noqa: E402
from libertem.common import Shape as LtShape, Slice as LtSlice  # noqa: E402
from libertem.executor.inline import InlineJobExecutor as LtInline  # noqa: E402
from libertem.io.dataset.base import Partition as LtPartition, _roi_to_nd_indices as lt_roi_to_nd  # noqa: E402

from raytile.common import Shape, Slice  # noqa: E402
from raytile.io.dataset import detect, get_extensions  # noqa: E402
from raytile.io.dataset.base import Partition, _roi_to_nd_indices  # noqa: E402


def test_get_extensions_holds_libertems():
    """Every extension LiberTEM's formats read is one of raytile's (raytile reads a few more: mrcs, map)."""
    lt = lt_dataset.get_extensions()
    ours = get_extensions()
    assert lt <= ours
    assert ours - lt <= {"mrcs", "map"}


def test_detect_as_libertem(tmp_path):
    """``detect(path, executor)`` gives the format LiberTEM's gives, the path among the parameters; a file no
    format places gives ``{}`` in both."""
    path = str(tmp_path / "scan.npy")
    np.save(path, np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5))
    lt = lt_dataset.detect(path, executor=LtInline())
    ours = detect(path, executor=None)
    assert ours["type"] == lt["type"] == "npy"
    assert ours["parameters"]["path"] == lt["parameters"]["path"] == path
    assert set(ours) == set(lt)
    other = tmp_path / "notes.txt"
    other.write_text("no detector wrote this")
    assert detect(str(other)) == lt_dataset.detect(str(other), executor=LtInline()) == {}
    missing = str(tmp_path / "gone.npy")
    assert detect(missing) == lt_dataset.detect(missing, executor=LtInline()) == {}


@pytest.mark.parametrize("seed", range(5))
def test_roi_to_nd_indices_as_libertem(seed):
    rng = np.random.default_rng(seed)
    nav = (7, 9)
    roi = rng.random(nav) < 0.4
    start = int(rng.integers(0, 5))
    rows = int(rng.integers(1, nav[0] - start + 1))
    ours = list(_roi_to_nd_indices(roi, Slice(origin=(start, 0, 0, 0), shape=Shape((rows, nav[1], 4, 4), sig_dims=2))))
    lt = list(lt_roi_to_nd(roi, LtSlice(origin=(start, 0, 0, 0), shape=LtShape((rows, nav[1], 4, 4), sig_dims=2))))
    assert ours == lt
    assert ours == [tuple(i) for i in np.argwhere(roi) if start <= i[0] < start + rows]


@pytest.mark.parametrize("frames,parts,sync", [(100, 7, 0), (333, 40, -5), (17, 17, 3), (16, 1, 0), (12, 0, 2)])
def test_make_slices_as_libertem(frames, parts, sync):
    ours = list(Partition.make_slices(Shape((frames, 8, 8), sig_dims=2), parts, sync_offset=sync))
    lt = list(LtPartition.make_slices(LtShape((frames, 8, 8), sig_dims=2), parts, sync_offset=sync))
    assert [(tuple(s.origin), tuple(s.shape), a, b) for s, a, b in ours] == \
        [(tuple(s.origin), tuple(s.shape), a, b) for s, a, b in lt]


def test_make_slices_warns_as_libertem_when_partitions_outnumber_frames():
    with pytest.warns(RuntimeWarning):
        lt = list(LtPartition.make_slices(LtShape((3, 8, 8), sig_dims=2), 5))
    with pytest.warns(RuntimeWarning):
        ours = list(Partition.make_slices(Shape((3, 8, 8), sig_dims=2), 5))
    assert [(a, b) for _, a, b in ours] == [(a, b) for _, a, b in lt] == [(0, 1), (1, 2), (2, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(Partition.make_slices(Shape((3, 8, 8), sig_dims=2), 3))
