"""The array backends raytile's built-in UDFs declare, and their results on those backends, against LiberTEM's.

LiberTEM's ``SumUDF``, ``SumSigUDF`` and ``CoMUDF`` take every backend (the scipy.sparse matrices and
arrays too), ``ApplyMasksUDF`` the scipy.sparse matrices (``coo_matrix`` included) and ``LogsumUDF`` the
pydata ``sparse.COO``/``GCXS`` arrays. A ported test that runs a UDF on each of its backends (as
LiberTEM's ``test_com``/``test_logsum`` do) needs raytile's UDFs to declare the same CPU backends and to
compute the same numbers on sparse tiles.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")
sparse = pytest.importorskip("sparse")

from libertem.api import Context as LtContext  # noqa: E402
from libertem.io.dataset.memory import MemoryDataSet as LtMemoryDataSet  # noqa: E402
from libertem.udf import com as lt_com  # noqa: E402
from libertem.udf import logsum as lt_logsum  # noqa: E402
from libertem.udf import masks as lt_masks  # noqa: E402
from libertem.udf import sum as lt_sum  # noqa: E402
from libertem.udf import sumsigudf as lt_sumsig  # noqa: E402
from sparseconverter import CPU_BACKENDS  # noqa: E402

from raytile.api import Context  # noqa: E402
from raytile.io.dataset.memory import MemoryDataSet  # noqa: E402
from raytile.udf import com, logsum, masks, sum as rt_sum, sumsigudf  # noqa: E402

SHAPE = (6, 5, 16, 12)
# sparse frames of random floats (with negative values: a frame's minimum below zero matters to Logsum)
DATA = (sparse.random(SHAPE, density=0.2, random_state=2)
        - 0.3 * sparse.random(SHAPE, density=0.1, random_state=3)).astype(np.float32)
MASKS = np.random.default_rng(5).random((2,) + SHAPE[2:]).astype(np.float32)


def _mask_factories():
    return [lambda: MASKS[0], lambda: MASKS[1]]


# name: (raytile's UDF, LiberTEM's UDF), made fresh for each run
UDFS = {
    "sum": (lambda: rt_sum.SumUDF(), lambda: lt_sum.SumUDF()),
    "sumsig": (lambda: sumsigudf.SumSigUDF(), lambda: lt_sumsig.SumSigUDF()),
    "com": (lambda: com.CoMUDF(), lambda: lt_com.CoMUDF()),
    "masks": (lambda: masks.ApplyMasksUDF(mask_factories=_mask_factories()),
              lambda: lt_masks.ApplyMasksUDF(mask_factories=_mask_factories())),
    "logsum": (lambda: logsum.LogsumUDF(), lambda: lt_logsum.LogsumUDF()),
}


@pytest.fixture(scope="module")
def ctx():
    return Context.make_with("inline")


@pytest.fixture(scope="module")
def lt_ctx():
    return LtContext.make_with("inline")


@pytest.mark.parametrize("name", sorted(UDFS))
def test_cpu_backends_as_libertem(name):
    """Every CPU backend LiberTEM's UDF declares is declared by raytile's."""
    make_rt, make_lt = UDFS[name]
    lt_cpu = set(make_lt().get_backends()) & CPU_BACKENDS
    missing = lt_cpu - set(make_rt().get_backends())
    assert not missing, f"{name}: LiberTEM declares {sorted(missing)}, raytile does not"


def _cases():
    for name, (make_rt, make_lt) in UDFS.items():
        for backend in make_lt().get_backends():
            if backend in CPU_BACKENDS:
                yield pytest.param(name, backend, id=f"{name}-{backend}")


@pytest.mark.parametrize(("name", "backend"), list(_cases()))
def test_results_as_libertem(ctx, lt_ctx, name, backend):
    """Each UDF on each of LiberTEM's CPU backends gives LiberTEM's numbers on the same sparse data.

    LiberTEM computes CoM and the masks in float32; raytile's CoM in float64, so the tolerance is
    float32's, relative to the values' scale.
    """
    make_rt, make_lt = UDFS[name]
    data = DATA if backend.startswith("sparse.") else DATA.todense()  # the pydata arrays; scipy is 2D
    ds = MemoryDataSet(data=data, num_partitions=2, sig_dims=2, array_backends=(backend,))
    lt_ds = LtMemoryDataSet(data=data, num_partitions=2, sig_dims=2, array_backends=(backend,))
    res = ctx.run_udf(dataset=ds, udf=make_rt())
    lt_res = lt_ctx.run_udf(dataset=lt_ds, udf=make_lt())
    names = [k for k in lt_res if k in res and k != "regression"]
    assert names
    for key in names:
        got, want = np.asarray(res[key].data), np.asarray(lt_res[key].data)
        assert got.shape == want.shape, key
        scale = np.nanmax(np.abs(want)) or 1.0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=f"{name} {key} {backend}")


@pytest.mark.parametrize("backend", ["sparse.COO", "sparse.GCXS", "numpy"])
def test_run_logsum_as_libertem(ctx, lt_ctx, backend):
    """``run_logsum(ctx, dataset, roi)`` at LiberTEM's path, with an ROI, on sparse and dense tiles."""
    data = DATA if backend.startswith("sparse.") else DATA.todense()
    roi = np.random.default_rng(1).random(SHAPE[:2]) < 0.5
    res = logsum.run_logsum(ctx, MemoryDataSet(data=data, num_partitions=2, sig_dims=2,
                                               array_backends=(backend,)), roi=roi)
    lt_res = lt_logsum.run_logsum(lt_ctx, LtMemoryDataSet(data=data, num_partitions=2, sig_dims=2,
                                                          array_backends=(backend,)), roi=roi)
    dense = DATA.todense()[roi]
    naive = np.log(dense - dense.min(axis=(1, 2), keepdims=True) + 1).sum(axis=0)
    np.testing.assert_allclose(res["logsum"].data, lt_res["logsum"].data, rtol=1e-5)
    np.testing.assert_allclose(res["logsum"].data, naive, rtol=1e-5)


def test_com_analysis_agrees_with_com_udf(ctx):
    """The CoM analysis computes its moments in float64 as ``CoMUDF`` does, so the two agree as
    LiberTEM's ``test_com`` asserts (rtol 1e-7) on float data, not only to float32's precision."""
    dense = DATA.todense()
    ds = MemoryDataSet(data=dense, num_partitions=2, sig_dims=2)
    udf_field = ctx.run_udf(udf=com.CoMUDF(), dataset=ds)["field"].data
    analysis = ctx.run(ctx.create_com_analysis(dataset=ds))
    np.testing.assert_allclose(udf_field, np.flip(np.moveaxis(analysis.field.raw_data, 0, -1), axis=-1),
                               rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("kwargs", [
    {"mask_factories": lambda: np.ones((5, 6)), "shifts": (1.2, -3.1), "use_sparse": "scipy.sparse"},
    {"mask_factories": [lambda: np.ones((5, 5))], "backends": ("BACKEND_DOES_NOT_EXIST",)},
], ids=["scipy-sparse-with-shifts", "unknown-backend"])
def test_applymasks_refuses_at_construction_as_libertem(kwargs):
    """What LiberTEM's ``ApplyMasksUDF`` refuses when constructed (a ValueError), raytile's refuses there too."""
    with pytest.raises(ValueError):
        lt_masks.ApplyMasksUDF(**kwargs)
    with pytest.raises(ValueError, match="ApplyMasksUDF"):
        masks.ApplyMasksUDF(**kwargs)
