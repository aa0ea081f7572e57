"""Backend-capable built-in UDFs under every CPU backend, on dense and sparse data sets.

Each run is forced into one backend with ``backends=[...]`` and compared
with a plain numpy reference computed from the dense array.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import sparse

import raytile as rt
from raytile.io.formats.sparse import save_npz_csr
from raytile.udf import masks

CPU_BACKENDS = ["numpy", "sparse.COO", "sparse.GCXS", "scipy.sparse.csr_matrix", "scipy.sparse.csc_matrix"]
NAV, SIG = (5, 6), (12, 10)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    d = (rng.random(NAV + SIG) < 0.15) * rng.integers(1, 200, NAV + SIG)
    return d.astype(np.float32)


@pytest.fixture(scope="module")
def roi():
    rng = np.random.default_rng(3)
    r = rng.random(NAV) > 0.4
    r[0, 0] = True
    return r


@pytest.fixture(scope="module", params=["memory", "sparse_memory", "scipy_memory", "npz_csr"])
def dataset(request, inline_ctx, data, tmp_path_factory):
    kind = request.param
    if kind == "memory":
        return inline_ctx.load("memory", data=data, num_partitions=3)
    if kind == "sparse_memory":
        return inline_ctx.load("sparse_memory", data=sparse.COO.from_numpy(data), num_partitions=3)
    if kind == "scipy_memory":
        csr = sp.csr_matrix(data.reshape(int(np.prod(NAV)), -1))
        return inline_ctx.load("sparse_memory", data=csr, nav_shape=NAV, sig_shape=SIG, num_partitions=2)
    path = tmp_path_factory.mktemp("npz") / "d.npz"
    save_npz_csr(path, data)
    return inline_ctx.load("npz_csr", path=path, num_partitions=3)


def _mask_udf(sparse_mask: bool):
    cy, cx = SIG[0] / 2, SIG[1] / 2

    def disk():
        m = masks.disk(cy, cx, 3, SIG)
        return sparse.COO.from_numpy(m) if sparse_mask else m

    def ring():
        m = masks.ring(cy, cx, 2, 5, SIG)
        return sp.csr_matrix(m) if sparse_mask else m

    return rt.udf.ApplyMasksUDF(mask_factories=[disk, ring]), np.stack([
        masks.disk(cy, cx, 3, SIG), masks.ring(cy, cx, 2, 5, SIG)])


def _check_all(res, data, roi, mask_stack):
    sel = data[roi] if roi is not None else data.reshape((-1,) + SIG)
    nav_mask = roi if roi is not None else np.ones(NAV, dtype=bool)
    r_sum, r_sumsig, r_dense_masks, r_sparse_masks, r_std = res
    np.testing.assert_allclose(r_sum["intensity"].data, sel.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(r_sumsig["intensity"].data[nav_mask], data.sum(axis=(2, 3))[nav_mask], rtol=1e-5)
    ref = np.einsum("abyx,myx->abm", data, mask_stack)
    for r in (r_dense_masks, r_sparse_masks):
        np.testing.assert_allclose(r["intensity"].data[nav_mask], ref[nav_mask], rtol=1e-5)
    np.testing.assert_allclose(r_std["sum"].data, sel.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(r_std["mean"].data, sel.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r_std["var"].data, sel.var(axis=0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(r_std["std"].data, sel.std(axis=0), rtol=1e-4, atol=1e-3)
    assert int(np.asarray(r_std["num_frames"].data).reshape(-1)[0]) == len(sel)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("with_roi", [False, True])
def test_builtins_under_cpu_backends(inline_ctx, dataset, data, roi, backend, with_roi):
    dense_masks, stack = _mask_udf(False)
    sparse_masks, _ = _mask_udf(True)
    udfs = [rt.SumUDF(), rt.SumSigUDF(), dense_masks, sparse_masks, rt.udf.StdDevUDF()]
    r = roi if with_roi else None
    res = inline_ctx.run_udf(dataset=dataset, udf=udfs, backends=[backend], roi=r)
    _check_all(res, data, r, stack)


class SmallTiles(rt.SumUDF):
    """SumUDF asking for tiny tiles, so that the signal is cut into slices."""

    def get_tiling_preferences(self):
        return {"depth": 2, "total_size": 2 * 4 * 10 * 4}


@pytest.mark.parametrize("backend", ["scipy.sparse.csr_matrix", "sparse.COO", "numpy"])
def test_sparse_tiles_with_signal_slices(inline_ctx, data, roi, backend):
    ds = inline_ctx.load("sparse_memory", data=sparse.COO.from_numpy(data), num_partitions=2)
    from raytile.runtime.plan import make_plan

    plan = make_plan(ds, [SmallTiles(), rt.SumSigUDF()], roi=roi)
    assert len(plan.params.tiling_scheme) > 1
    res = inline_ctx.run_udf(dataset=ds, udf=[SmallTiles(), rt.SumSigUDF()], roi=roi, backends=[backend])
    np.testing.assert_allclose(res[0]["intensity"].data, data[roi].sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(res[1]["intensity"].data[roi], data.sum(axis=(2, 3))[roi], rtol=1e-5)


def test_memory_format_takes_sparse_arrays(ctx, data):
    import pickle

    import scipy.sparse as sp

    from raytile.io.formats.memory import MemoryDataSet
    from raytile.io.formats.sparse import SparseMemoryDataSet

    coo = ctx.load("memory", data=sparse.COO.from_numpy(data), num_partitions=2)
    csr = ctx.load("memory", data=sp.csr_matrix(data.reshape(-1, np.prod(SIG))), nav_shape=NAV, sig_shape=SIG)
    dense = ctx.load("memory", data=data)
    assert isinstance(coo, SparseMemoryDataSet) and isinstance(csr, SparseMemoryDataSet)
    assert type(dense) is MemoryDataSet and type(pickle.loads(pickle.dumps(dense))) is MemoryDataSet
    for ds in (coo, csr):
        res = ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()])
        np.testing.assert_allclose(res[0]["intensity"].data, data.sum(axis=(0, 1)), rtol=1e-5)
        np.testing.assert_allclose(res[1]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)


def test_sparse_dataset_native_backend_and_dtype(inline_ctx, data, tmp_path):
    path = tmp_path / "i.npz"
    ints = data.astype(np.uint16)
    save_npz_csr(path, ints, compressed=True)  # compressed members are loaded, not mapped
    ds = inline_ctx.load("npz_csr", path=path, num_partitions=2)
    assert ds.native_backend == "scipy.sparse.csr_matrix" and ds.dtype == np.uint16
    assert ds.shape.to_tuple() == NAV + SIG
    res = inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    assert res["intensity"].data.dtype == np.int64
    np.testing.assert_array_equal(res["intensity"].data, ints.sum(axis=(0, 1)))


def test_sparse_dataset_errors(inline_ctx, tmp_path):
    from raytile.common.errors import DataSetException

    with pytest.raises(DataSetException, match="does not exist"):
        inline_ctx.load("npz_csr", path=tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    np.savez(bad, indptr=np.array([0, 1, 2]), indices=np.array([0]), values=np.array([1.0]), shape=np.array([2, 2, 2]))
    with pytest.raises(DataSetException, match="indptr runs from 0 to 2"):
        inline_ctx.load("npz_csr", path=bad)
    nokey = tmp_path / "nokey.npz"
    np.savez(nokey, indptr=np.array([0, 1]), indices=np.array([0]))
    with pytest.raises(DataSetException, match="values"):
        inline_ctx.load("npz_csr", path=nokey)
    with pytest.raises(DataSetException, match="sig_shape"):
        inline_ctx.load("sparse_memory", data=sp.csr_matrix(np.eye(4)))
    with pytest.raises(DataSetException, match="cannot be viewed"):
        inline_ctx.load("sparse_memory", data=sp.csr_matrix(np.eye(4)), sig_shape=(3, 3))
