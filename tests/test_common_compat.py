"""LiberTEM names at mirrored module paths (issue 13, items 1 and 2).

Every name is checked against numpy or a value computed by hand, never
against raytile itself. Imports are written as a port would write them:
``libertem`` replaced by ``raytile``.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import sparse
import sparseconverter

from raytile.common.buffers import reshaped_view, to_numpy, empty_aligned, zeros_aligned, bytes_aligned
from raytile.common.math import prod, count_nonzero, flat_nonzero, make_2D_square, ndenumerate
from raytile.common.sparse import to_dense, to_sparse, sparse_to_coo, is_sparse
from raytile.common.udf import UDFMethod
from raytile import masks
from raytile.udf.base import UDF
import raytile.udf.masks as udf_masks


# -- raytile.common.math ------------------------------------------------------

def test_prod_is_exact_beyond_64_bit():
    assert prod((2**40, 2**40, 3)) == 3 * 2**80
    assert prod([np.int32(2**20), np.uint16(2**10), True]) == 2**30
    assert prod(()) == 1
    assert prod(np.array([512, 512, 256, 256], dtype=np.int32)) == 512 * 512 * 256 * 256


@pytest.mark.parametrize("bad", [(2, 2.0), (np.float32(3),), ("4",)])
def test_prod_rejects_non_integers(bad):
    with pytest.raises(ValueError):
        prod(bad)


def test_count_nonzero_dense_sparse_scipy():
    a = np.array([[0, 1, 2], [0, 0, 3]])
    assert count_nonzero(a) == 3 and isinstance(count_nonzero(a), int)
    assert count_nonzero(sparse.COO.from_numpy(a)) == 3
    assert count_nonzero(sp.csr_matrix(a)) == 3
    assert count_nonzero(np.zeros(5, bool)) == 0


def test_flat_nonzero():
    a = np.array([[0, 1, 0], [4, 0, 5]])
    np.testing.assert_array_equal(flat_nonzero(a), np.flatnonzero(a))
    np.testing.assert_array_equal(flat_nonzero(sparse.COO.from_numpy(a)), [1, 3, 5])


def test_make_2D_square():
    assert make_2D_square((64,)) == (8, 8)
    assert make_2D_square((1,)) == (1, 1)
    assert make_2D_square((63,)) == (63,)
    assert make_2D_square((3, 7)) == (3, 7)
    with pytest.raises(ValueError):
        make_2D_square((0,))


def test_ndenumerate_dense_and_sparse():
    a = np.array([[0, 2], [3, 0]])
    assert [(i, int(v)) for i, v in ndenumerate(a)] == [((0, 0), 0), ((0, 1), 2), ((1, 0), 3), ((1, 1), 0)]
    assert [(i, int(v)) for i, v in ndenumerate(sparse.COO.from_numpy(a))] == [((0, 1), 2), ((1, 0), 3)]


# -- raytile.common.sparse ----------------------------------------------------

def test_sparse_conversions():
    a = np.array([[0, 1.5], [2, 0]])
    coo = to_sparse(a)
    assert isinstance(coo, sparse.COO) and is_sparse(coo) and not is_sparse(a)
    assert is_sparse(sp.csr_matrix(a))
    np.testing.assert_array_equal(to_dense(coo), a)
    np.testing.assert_array_equal(to_dense(sp.csc_matrix(a)), a)
    np.testing.assert_array_equal(to_dense([[1, 2]]), [[1, 2]])
    assert sparse_to_coo(None) is None and sparse_to_coo(a) is a
    assert isinstance(sparse_to_coo(sp.csr_matrix(a)), sparse.COO)


def test_to_sparse_from_coordinates():
    roi = to_sparse([((0, 1), True), ((2, 2), True)], shape=(3, 3)).todense()
    expected = np.zeros((3, 3), bool)
    expected[0, 1] = expected[2, 2] = True
    np.testing.assert_array_equal(roi, expected)
    inverted = to_sparse([((1, 1), False)], shape=(2, 2)).todense()
    np.testing.assert_array_equal(inverted, [[True, True], [True, False]])
    single = to_sparse((1, 0), shape=(2, 2)).todense()
    np.testing.assert_array_equal(single, [[False, False], [True, False]])
    with pytest.raises(ValueError):
        to_sparse([((0, 0), True), ((1, 1), False)], shape=(2, 2))


# -- raytile.common.buffers ---------------------------------------------------

def test_reshaped_view_is_a_view():
    a = np.arange(12.0)
    v = reshaped_view(a, (3, 4))
    assert v.shape == (3, 4) and np.shares_memory(v, a)
    v[2, 3] = -1
    assert a[11] == -1


def test_reshaped_view_refuses_copies():
    with pytest.raises(AttributeError):
        reshaped_view(np.zeros((4, 4))[:, :2], (8,))


def test_aligned_allocations_and_to_numpy():
    e = empty_aligned((3, 5), np.uint16)
    assert e.shape == (3, 5) and e.dtype == np.uint16 and e.ctypes.data % 4096 == 0
    z = zeros_aligned((2, 2), np.float64)
    np.testing.assert_array_equal(z, np.zeros((2, 2)))
    assert zeros_aligned(0, np.float32).shape == (0,)
    assert zeros_aligned(2, object).dtype == object
    assert len(bytes_aligned(100)) == 100
    a = np.ones(3)
    assert to_numpy(a) is a
    with pytest.raises(TypeError):
        to_numpy([1, 2])


def test_buffer_classes_at_libertem_path():
    from raytile.common.buffers import AuxBufferWrapper, ArrayWithMask, BufferWrapper
    from raytile.udf.base import ArrayWithMask as A2
    from raytile.udf.buffers import AuxBufferWrapper as X2, BufferWrapper as B2

    assert (BufferWrapper, AuxBufferWrapper, ArrayWithMask) == (B2, X2, A2)
    import raytile.common.buffers as b
    with pytest.raises(AttributeError):
        b.NoSuchName  # noqa: B018


# -- UDF class constants and UDF_METHOD ---------------------------------------

def test_udf_backend_constants_are_sparseconverter_values():
    expected = {
        "BACKEND_NUMPY": "numpy", "BACKEND_CUPY": "cupy", "BACKEND_CUDA": "cuda",
        "BACKEND_SPARSE_COO": "sparse.COO", "BACKEND_SPARSE_GCXS": "sparse.GCXS", "BACKEND_SPARSE_DOK": "sparse.DOK",
        "BACKEND_SCIPY_COO": "scipy.sparse.coo_matrix", "BACKEND_SCIPY_CSR": "scipy.sparse.csr_matrix",
        "BACKEND_SCIPY_CSC": "scipy.sparse.csc_matrix", "BACKEND_SCIPY_COO_ARRAY": "scipy.sparse.coo_array",
        "BACKEND_SCIPY_CSR_ARRAY": "scipy.sparse.csr_array", "BACKEND_SCIPY_CSC_ARRAY": "scipy.sparse.csc_array",
        "BACKEND_CUPY_SCIPY_COO": "cupyx.scipy.sparse.coo_matrix",
        "BACKEND_CUPY_SCIPY_CSR": "cupyx.scipy.sparse.csr_matrix",
        "BACKEND_CUPY_SCIPY_CSC": "cupyx.scipy.sparse.csc_matrix",
    }
    for name, value in expected.items():
        assert getattr(UDF, name) == value, name
    for name in ("CPU_BACKENDS", "CUDA_BACKENDS", "CUPY_BACKENDS", "SPARSE_BACKENDS", "DENSE_BACKENDS",
                 "ND_BACKENDS", "D2_BACKENDS"):
        assert getattr(UDF, name) == getattr(sparseconverter, name), name
    assert UDF.BACKEND_NUMPY in UDF.CPU_BACKENDS and UDF.BACKEND_CUPY in UDF.CUPY_BACKENDS
    assert UDF.BACKEND_SCIPY_CSR in UDF.D2_BACKENDS and UDF.BACKEND_SPARSE_COO in UDF.ND_BACKENDS
    assert UDF.CUPY_BACKENDS <= UDF.CUDA_BACKENDS
    assert UDF.SPARSE_BACKENDS.isdisjoint(UDF.DENSE_BACKENDS)


def test_udf_method_enum_behaves_as_the_method_name():
    assert UDF.UDF_METHOD is UDFMethod
    assert [m.value for m in UDFMethod] == ["tile", "frame", "partition"]
    assert UDFMethod.TILE == "tile" and "frame" == UDFMethod.FRAME
    assert f"process_{UDFMethod.PARTITION}" == "process_partition"
    assert "tile" in {UDFMethod.TILE} and UDFMethod.FRAME in {"frame"}
    assert {"partition": 1}[UDFMethod.PARTITION] == 1
    assert pickle.loads(pickle.dumps(UDFMethod.TILE)) is UDFMethod.TILE


# -- raytile.masks (libertem.masks) -------------------------------------------

def _dist2(cx, cy, w, h):
    y, x = np.mgrid[0:h, 0:w]
    return (y - cy) ** 2 + (x - cx) ** 2


@pytest.mark.parametrize("cx, cy, w, h, r", [(4, 3, 9, 7, 2), (4.3, 2.7, 12, 9, 3.3), (0, 0, 5, 6, 10)])
def test_circular_and_ring_against_distances(cx, cy, w, h, r):
    d2 = _dist2(cx, cy, w, h)
    m = masks.circular(cx, cy, w, h, r)
    assert m.shape == (h, w) and m.dtype == bool
    np.testing.assert_array_equal(m, d2 <= r * r)
    np.testing.assert_array_equal(masks._make_circular_mask(cx, cy, w, h, r), d2 <= r * r)
    ri = r / 2
    np.testing.assert_array_equal(masks.ring(cx, cy, w, h, r, ri), (d2 <= r * r) & (d2 > ri * ri))


def test_circular_by_hand():
    expected = np.array([
        [0, 0, 1, 0, 0],
        [0, 1, 1, 1, 0],
        [1, 1, 1, 1, 1],
        [0, 1, 1, 1, 0],
        [0, 0, 1, 0, 0],
    ], bool)
    np.testing.assert_array_equal(masks.circular(2, 2, 5, 5, 2), expected)


def test_antialiased_disk_sums_to_area():
    m = masks.circular(32, 32, 64, 64, 10, antialiased=True)
    assert m.dtype == np.float64 and m.max() == 1 and m.min() == 0
    assert abs(m.sum() - np.pi * 10**2) < 0.01 * np.pi * 10**2
    # one-pixel ramp: fully inside below r - 0.5, fully outside above r + 1
    d = np.sqrt(_dist2(32, 32, 64, 64))
    assert np.all(m[d < 9.5] == 1) and np.all(m[d > 11] == 0)


def test_antialiased_ring_between_radii():
    m = masks.ring(20, 20, 41, 41, radius=10, radius_inner=5, antialiased=True)
    d = np.sqrt(_dist2(20, 20, 41, 41))
    assert np.all(m[(d > 6) & (d < 9)] == 1) and np.all(m[d < 4] == 0) and np.all(m[d > 11] == 0)
    assert abs(m.sum() - np.pi * (10**2 - 5**2)) < 0.02 * np.pi * (10**2 - 5**2)


def test_rectangular_like_libertem_tests():
    rect = np.zeros((5, 5))
    r4 = rect.copy()
    r4[2:5, 2:5] = 1
    r3 = rect.copy()
    r3[2:5, 0:3] = 1
    r2 = rect.copy()
    r2[0:3, 2:5] = 1
    r1 = rect.copy()
    r1[0:3, 0:3] = 1
    np.testing.assert_array_equal(masks.rectangular(2, 2, 3, 3, 5, 5), r4)
    np.testing.assert_array_equal(masks.rectangular(2, 2, -3, 3, 5, 5), r3)
    np.testing.assert_array_equal(masks.rectangular(2, 2, 3, -3, 5, 5), r2)
    np.testing.assert_array_equal(masks.rectangular(2, 2, -3, -3, 5, 5), r1)
    for args in [(2, 2, 0, 3, 5, 5), (2, 2, 3, 0, 5, 5), (2, 2, 0, 0, 5, 5)]:
        assert not masks.rectangular(*args).any()
    # both corners included: Width=2 covers columns 1, 2 and 3
    m = masks.rectangular(1, 0, 2, 1, 6, 4)
    assert m.dtype == bool and m.shape == (4, 6)
    np.testing.assert_array_equal(np.argwhere(m.any(axis=0)).ravel(), [1, 2, 3])
    np.testing.assert_array_equal(np.argwhere(m.any(axis=1)).ravel(), [0, 1])


def test_radial_gradient():
    for aa in (False, True):
        t = masks.radial_gradient(centerX=30, centerY=33, imageSizeX=65, imageSizeY=66, radius=17, antialiased=aa)
        assert t.shape == (66, 65)
        for i in range(17):
            for y, x in ((33, 30 + i), (33, 30 - i), (33 + i, 30), (33 - i, 30)):
                assert np.isclose(t[y, x], i / 17)
        for i in range(18, 30):
            assert t[33, 30 + i] == 0 and t[33 + i, 30] == 0


def test_radial_gradient_background_subtraction_by_hand():
    r = np.array([0.0, 1.0, 1.75, 2.0, 2.25, 3.0, 4.0])
    out = masks.radial_gradient_background_subtraction(r, r0=2, r_outer=3)
    np.testing.assert_allclose(out, [0, 0.5, 0.5, 0, -0.5, -1, 0])


def test_polar_map_against_numpy():
    r, phi = masks.polar_map(centerX=3, centerY=2, imageSizeX=7, imageSizeY=5)
    y, x = np.mgrid[0:5, 0:7]
    np.testing.assert_allclose(r, np.hypot(y - 2, x - 3))
    np.testing.assert_allclose(phi, np.arctan2(y - 2, x - 3))
    # stretched by 2 along y (angle 0): radius of (dy, dx) is hypot(dy / 2, dx)
    r2, _ = masks.polar_map(3, 2, 7, 5, stretchY=2.0)
    np.testing.assert_allclose(r2, np.hypot((y - 2) / 2, x - 3))
    # rotation keeps the unstretched radius
    r3, _ = masks.polar_map(3, 2, 7, 5, angle=0.7)
    np.testing.assert_allclose(r3, r)


def test_balance_and_background_subtraction():
    t = np.array([2.0, 1.0, -1.0, -3.0])
    np.testing.assert_allclose(masks.balance(t), [2.0, 1.0, -0.75, -2.25])
    m = masks.background_subtraction(10, 10, 20, 20, 5, 3)
    assert np.isclose(m.sum(), 0)
    d2 = _dist2(10, 10, 20, 20)
    assert np.all(m[d2 <= 9] == 1) and np.all(m[d2 > 25] == 0) and np.all(m[(d2 > 9) & (d2 <= 25)] < 0)


def test_bounding_radius_covers_frame():
    assert masks.bounding_radius(0, 0, 3, 4) == 6  # ceil(hypot(4, 3)) + 1
    r = masks.bounding_radius(10, 5, 64, 32)
    assert r == int(np.ceil(np.hypot(27, 54))) + 1
    assert np.sqrt(_dist2(10, 5, 64, 32)).max() < r


@pytest.mark.parametrize("use_sparse", [None, True, False])
def test_radial_bins_partition_of_unity(use_sparse):
    bins = masks.radial_bins(35, 37, 80, 80, n_bins=42, use_sparse=use_sparse)
    assert bins.shape == (42, 80, 80)
    if use_sparse is not False:
        assert isinstance(bins, sparse.COO)
    total = to_dense(bins).sum(axis=0)
    np.testing.assert_allclose(total, 1)


def test_radial_bins_normalize_and_dtype():
    bins = masks.radial_bins(20, 20, 41, 41, radius=15, radius_inner=3, n_bins=4, normalize=True,
                             use_sparse=False, dtype=np.float32)
    assert bins.dtype == np.float32 and bins.shape == (4, 41, 41)
    np.testing.assert_allclose(bins.sum(axis=(1, 2)), 1, rtol=1e-5)
    # radius_inner >= 0.5: the centre pixel stays outside every bin
    assert np.all(bins[:, 20, 20] == 0)


def test_sparse_template_multi_stack():
    stack = masks.sparse_template_multi_stack(mask_index=(0, 1, 2), offsetX=(15, 14, 13), offsetY=(13, 14, 15),
                                              template=np.ones((2, 3)), imageSizeX=32, imageSizeY=32)
    assert isinstance(stack, sparse.COO) and stack.shape == (3, 32, 32)
    for i, (y, x) in enumerate([(13, 15), (14, 14), (15, 13)]):
        expected = np.zeros((32, 32))
        expected[y:y + 2, x:x + 3] = 1
        np.testing.assert_array_equal(stack[i].todense(), expected)
    clipped = masks.sparse_template_multi_stack((0,), (-1,), (3,), np.arange(6.0).reshape(2, 3), 4, 4)
    expected = np.zeros((1, 4, 4))
    expected[0, 3, 0:2] = [1, 2]
    np.testing.assert_array_equal(clipped.todense(), expected)


def test_sparse_circular_multi_stack():
    stack = masks.sparse_circular_multi_stack((0, 1), centerX=(3, 10), centerY=(4, 9), imageSizeX=16,
                                              imageSizeY=12, radius=2.5)
    assert stack.shape == (2, 12, 16)
    np.testing.assert_array_equal(stack[0].todense(), _dist2(3, 4, 16, 12) <= 2.5**2)
    np.testing.assert_array_equal(stack[1].todense(), _dist2(10, 9, 16, 12) <= 2.5**2)


def test_gradients():
    gx = masks.gradient_x(5, 3)
    gy = masks.gradient_y(5, 3)
    y, x = np.mgrid[0:3, 0:5]
    np.testing.assert_array_equal(gx, x)
    np.testing.assert_array_equal(gy, y)
    assert gx.dtype == gy.dtype == np.float32
    assert masks.gradient_x(4, 2, dtype=np.int16).dtype == np.int16


def test_masks_reexports():
    assert masks.to_dense is to_dense and masks.to_sparse is to_sparse and masks.is_sparse is is_sparse


def test_udf_masks_share_the_implementation():
    d2 = _dist2(6, 5, 13, 11)
    np.testing.assert_array_equal(udf_masks.disk(5, 6, 3, (11, 13)), (d2 <= 9).astype(np.float32))
    np.testing.assert_array_equal(udf_masks.ring(5, 6, 2, 4, (11, 13)), ((d2 <= 16) & (d2 > 4)).astype(np.float32))
    assert udf_masks.disk(5, 6, 3, (11, 13)).dtype == np.float32
    with pytest.raises(ValueError):
        udf_masks.disk(1, 1, 1, (3, 3, 3))
