"""ApplyMasksUDF's input defects of issue #24 item 8: a mask count that does not match, and scipy.sparse masks;
of issue #37: factories that make another number of masks on another call.

``mask_count`` with ``mask_dtype`` used to skip the count check (the main
node makes no masks then) and returned a result with a column of zeros; the
workers now check it. A ``scipy.sparse.csr_matrix`` mask used to go through
sparseconverter's scipy -> pydata path, which JIT-compiles pydata sparse's
GCXS code first (8-28 s in a fresh process); it is converted directly now.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import raytile as rt
from raytile.common.errors import UDFException

NAV = (6, 8)
SIG = (16, 12)


def _data() -> np.ndarray:
    return np.random.default_rng(1).random(NAV + SIG).astype(np.float32)


def _mask() -> np.ndarray:
    m = np.zeros(SIG, dtype=np.float32)
    m[3:9, 2:7] = 1
    m[10, 11] = 2.5
    return m


@pytest.mark.parametrize("mask_dtype", [None, np.float32], ids=["no-dtype", "mask_dtype"])
def test_mask_count_mismatch_raises(ctx, mask_dtype):
    ds = ctx.load("memory", data=_data(), num_partitions=2)
    udf = rt.ApplyMasksUDF(mask_factories=[_mask], mask_count=2, mask_dtype=mask_dtype)
    with pytest.raises(UDFException, match="mask_count=2 but the factories make 1 masks"):
        ctx.run_udf(dataset=ds, udf=udf)


class ShrinkingMasks:
    """A mask factory that makes 3 masks on its first call and 1 on every later one (a factory that reads
    a file someone rewrites). Picklable: a worker's copy carries the count of calls made before."""

    def __init__(self):
        self.calls = 0

    def __call__(self) -> np.ndarray:
        self.calls += 1
        n = 3 if self.calls == 1 else 1
        return np.stack([_mask() * (i + 1) for i in range(n)])


def test_factory_making_another_mask_count_raises(ctx):
    """Issue #37: the first call (the result's shape) gave 3 masks, the partitions' calls 1; the one mask's
    values were broadcast into all 3 channels of the result."""
    ds = ctx.load("memory", data=_data(), num_partitions=2)
    udf = rt.ApplyMasksUDF(mask_factories=ShrinkingMasks())
    with pytest.raises(UDFException, match="made 3 masks on one call .* and 1 on another"):
        ctx.run_udf(dataset=ds, udf=udf)


def test_matching_mask_count_with_dtype_runs(inline_ctx):
    data = _data()
    ds = inline_ctx.load("memory", data=data)
    udf = rt.ApplyMasksUDF(mask_factories=[_mask, lambda: np.ones(SIG)], mask_count=2, mask_dtype=np.float32)
    got = inline_ctx.run_udf(dataset=ds, udf=udf)["intensity"].data
    np.testing.assert_allclose(got[..., 0], (data * _mask()).sum(axis=(2, 3)), rtol=1e-5)
    np.testing.assert_allclose(got[..., 1], data.sum(axis=(2, 3)), rtol=1e-5)


@pytest.mark.parametrize("kind", ["csr", "csc", "coo"])
def test_scipy_sparse_mask_equals_dense(ctx, kind):
    data = _data()
    ds = ctx.load("memory", data=data, num_partitions=2)
    make = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "coo": sp.coo_matrix}[kind]

    def sparse_mask():
        return make(_mask())

    dense = ctx.run_udf(dataset=ds, udf=rt.ApplyMasksUDF(mask_factories=[_mask]))["intensity"].data
    got = ctx.run_udf(dataset=ds, udf=rt.ApplyMasksUDF(mask_factories=[sparse_mask]))["intensity"].data
    np.testing.assert_allclose(got, dense, rtol=1e-5)
    np.testing.assert_allclose(got[..., 0], (data * _mask()).sum(axis=(2, 3)), rtol=1e-5)


_FRESH = """
import gc, time
import numpy as np, scipy.sparse as sp
from numba.core.dispatcher import Dispatcher
from raytile.common.sparse import to_sparse
m = np.zeros((16, 12), np.float32); m[3:9, 2:7] = 1
t = time.perf_counter()
coo = to_sparse(sp.csr_matrix(m))
print(time.perf_counter() - t, float(coo.sum()))
def gcxs_kernel(d):
    try:
        return isinstance(d, Dispatcher) and bool(d.signatures) and "_compressed" in d.py_func.__module__
    except ReferenceError:
        return False
print("compiled", [d.py_func.__qualname__ for d in gc.get_objects() if gcxs_kernel(d)])
"""


def test_scipy_mask_conversion_compiles_nothing():
    """In a fresh process converting a scipy mask compiles none of pydata sparse's GCXS kernels (it did, for
    sparseconverter's probe: 24 s per fresh process). The check is on numba's dispatchers, not on a time."""
    out = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, last = out.stdout.strip().splitlines()
    assert float(first.split()[1]) == 30.0
    assert last == "compiled []", last
