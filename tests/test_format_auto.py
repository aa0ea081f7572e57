"""``ctx.load("auto", path=...)``: formats found from the file alone; overrides; what it says when it cannot."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import DataSetException
from raytile.io.dataset import dataset_from_json
from raytile.io.formats.auto import detecting_formats


def test_auto_hdf5_and_npy(inline_ctx, tmp_path, rng):
    """auto on the seed's file formats: npy by its magic, HDF5 by its signature and largest 3+ dim dataset."""
    h5py = pytest.importorskip("h5py")
    data = rng.integers(0, 100, size=(3, 4, 6, 5)).astype(np.uint16)
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f["small/thing"] = np.zeros((2, 2, 2))
        f["entry/data"] = data
        f["meta"] = np.arange(3)
    ds = inline_ctx.load("auto", path=str(tmp_path / "s.h5"))
    assert type(ds).__name__ == "H5DataSet" and ds.shape.to_tuple() == data.shape
    assert np.array_equal(inline_ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(dtype="float64"))["intensity"].data,
                          data.sum(axis=(0, 1)))
    np.save(tmp_path / "s.npy", data)
    assert inline_ctx.load("auto", path=str(tmp_path / "s.npy")).shape.to_tuple() == data.shape
    with h5py.File(tmp_path / "flat.h5", "w") as f:
        f["x"] = np.zeros(4)
    with pytest.raises(DataSetException, match="flat.h5: .*no numeric dataset of 3 or more dimensions"):
        inline_ctx.load("auto", path=str(tmp_path / "flat.h5"))
    with pytest.raises(DataSetException, match="file not found"):
        inline_ctx.load("auto", path=str(tmp_path / "missing.h5"))



def test_auto_hdf5_two_equal_datacubes_picks_the_first_as_libertem(inline_ctx, tmp_path, rng):
    """Two datacubes of one size: auto takes the first h5py visits, the one LiberTEM's detection takes."""
    h5py = pytest.importorskip("h5py")
    lt_hdf5 = pytest.importorskip("libertem.io.dataset.hdf5")
    from libertem.executor.inline import InlineJobExecutor

    first, second = (rng.integers(0, 100, size=(2, 3, 4, 5)).astype(np.uint16) for _ in range(2))
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["a/cube"] = first
        f["b/cube"] = second
    path = str(tmp_path / "two.h5")
    theirs = lt_hdf5.H5DataSet.detect_params(path, InlineJobExecutor())["parameters"]["ds_path"]
    from raytile.io.formats.auto import detect_format

    assert detect_format(path)[1]["ds_path"].strip("/") == theirs.strip("/") == "a/cube"
    ds = inline_ctx.load("auto", path=path)
    assert np.array_equal(inline_ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(dtype="float64"))["intensity"].data,
                          first.sum(axis=(0, 1)))


def test_auto_from_json_and_what_it_tried(inline_ctx, tmp_path):
    np.save(tmp_path / "j.npy", np.ones((2, 3, 4), dtype=np.float32))
    ds = dataset_from_json({"type": "auto", "path": str(tmp_path / "j.npy")}).initialize()
    assert ds.shape.to_tuple() == (2, 3, 4)
    (tmp_path / "x.bin").write_bytes(b"\0" * 64)
    with pytest.raises(DataSetException) as e:
        inline_ctx.load("auto", path=str(tmp_path / "x.bin"))
    tried = detecting_formats()
    assert {"mib", "raw_csr", "npy", "hdf5"} <= set(tried) and tried[-1] == "hdf5"
    assert all(name in str(e.value) for name in tried) and "x.bin" in str(e.value)
