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

from raytile.common import Shape, Slice, SliceUsageError
from raytile.common.buffers import reshaped_view, to_numpy, empty_aligned, zeros_aligned, bytes_aligned, disjoint
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


# -- Shape (libertem.common.shape) --------------------------------------------



def test_shape_properties():
    s = Shape((5, 6, 16, 32), sig_dims=2)
    assert (s.dims, s.nav_dims, s.sig_dims, len(s)) == (4, 2, 2, 4)
    assert s.size == np.empty((5, 6, 16, 32)).size == 5 * 6 * 16 * 32
    assert s.to_tuple() == (5, 6, 16, 32) and tuple(s) == (5, 6, 16, 32)
    assert s.nav == Shape((5, 6), sig_dims=0) and s.nav.nav_dims == 2 and s.nav.sig_dims == 0
    assert s.sig == Shape((16, 32), sig_dims=2) and s.sig.nav_dims == 0 and s.sig.dims == 2
    assert s[0] == 5 and s[-1] == 32 and s[1:3] == (6, 16) and isinstance(s[1:3], tuple)
    assert Shape(s, sig_dims=1) == Shape((5, 6, 16, 32), sig_dims=1)  # a Shape is ShapeLike
    assert Shape(np.array([3, 4]), sig_dims=1).to_tuple() == (3, 4)


def test_shape_flatten_matches_numpy_reshape():
    s = Shape((5, 6, 16, 32), sig_dims=2)
    data = np.zeros(tuple(s))
    assert s.flatten_nav() == Shape(data.reshape((-1, 16, 32)).shape, sig_dims=2)
    assert s.flatten_sig() == Shape(data.reshape((5, 6, -1)).shape, sig_dims=1)
    # no nav (no sig) dims: nothing to flatten
    assert s.sig.flatten_nav() == s.sig and s.nav.flatten_sig() == s.nav


def test_shape_equality_and_hash():
    a = Shape((4, 8, 8), sig_dims=2)
    assert a == Shape((4, 8, 8), sig_dims=2) and hash(a) == hash(Shape((4, 8, 8), sig_dims=2))
    assert a != Shape((4, 8, 8), sig_dims=1)  # same dims, other split
    assert a == (4, 8, 8) and a != (4, 8) and a != [4, 8, 8]
    assert len({a, Shape((4, 8, 8), sig_dims=2), Shape((4, 8, 8), sig_dims=1)}) == 2
    assert pickle.loads(pickle.dumps(a)) == a


def test_shape_arithmetic():
    s = Shape((5, 6, 16, 32), sig_dims=2)
    right = s + (3,)
    assert right == Shape((5, 6, 16, 32, 3), sig_dims=3)
    left = (7, 2) + s
    assert left == Shape((5, 6, 7, 2, 16, 32), sig_dims=2)  # inserted after the nav dims
    assert (9,) + s.sig == Shape((9, 16, 32), sig_dims=2)
    assert s.nav + () == s.nav
    with pytest.raises(TypeError):
        s + [1]  # noqa: B018
    with pytest.raises(TypeError):
        s + s  # noqa: B018


def test_shape_rejects_bad_sig_dims():
    with pytest.raises(ValueError):
        Shape((4, 4), sig_dims=3)


# -- Slice (libertem.common.slice) --------------------------------------------

def _cover(sl: Slice, full: tuple[int, ...]) -> np.ndarray:
    """Bool array of ``full`` that is True inside ``sl`` (numpy does the clipping)."""
    out = np.zeros(full, bool)
    out[sl.get()] = True
    return out


def test_slice_construction_errors():
    with pytest.raises(SliceUsageError):
        Slice((0, 0), Shape((1, 2, 3), sig_dims=2))
    with pytest.raises(SliceUsageError):
        Slice((0, 0), (4, 4))  # type: ignore[arg-type]
    assert issubclass(SliceUsageError, ValueError)


def test_slice_from_shape():
    s = Slice.from_shape((4, 16, 16), sig_dims=2)
    assert s.origin == (0, 0, 0) and s.shape == Shape((4, 16, 16), sig_dims=2)
    data = np.random.default_rng(0).random((4, 16, 16))
    np.testing.assert_array_equal(s.get(data), data)


def test_slice_get_against_numpy_indexing():
    data = np.arange(6 * 7 * 8 * 9).reshape((6, 7, 8, 9))
    s = Slice((1, 2, 3, 4), Shape((2, 3, 4, 5), sig_dims=2))
    np.testing.assert_array_equal(s.get(data), data[1:3, 2:5, 3:7, 4:9])
    assert s.get() == (slice(1, 3), slice(2, 5), slice(3, 7), slice(4, 9))
    assert s.get(sig_only=True) == (slice(3, 7), slice(4, 9))
    assert s.get(nav_only=True) == (slice(1, 3), slice(2, 5))
    # sig_only on an array slices its last dims, whatever leads (a stack of masks, frames)
    stack = np.arange(3 * 8 * 9).reshape((3, 8, 9))
    np.testing.assert_array_equal(s.get(stack, sig_only=True), stack[:, 3:7, 4:9])
    np.testing.assert_array_equal(s.get(data[0, 0], sig_only=True), data[0, 0, 3:7, 4:9])
    # nav_only on an array slices its leading dims and keeps the rest
    np.testing.assert_array_equal(s.get(data, nav_only=True), data[1:3, 2:5])


def test_slice_nav_sig_parts():
    s = Slice((1, 2, 3, 4), Shape((2, 3, 4, 5), sig_dims=2))
    assert s.nav == Slice((1, 2), Shape((2, 3), sig_dims=0))
    assert s.sig == Slice((3, 4), Shape((4, 5), sig_dims=2))
    assert s.sig_dims == 2


def test_intersection_is_null_clip_to_against_numpy():
    rng = np.random.default_rng(42)
    full = (12, 12, 12)
    for _ in range(200):
        o1, o2 = rng.integers(0, 8, 3), rng.integers(0, 8, 3)
        s1, s2 = rng.integers(0, 6, 3), rng.integers(1, 6, 3)
        a, b = Slice(o1, Shape(s1, sig_dims=2)), Slice(o2, Shape(s2, sig_dims=2))
        both = _cover(a, full) & _cover(b, full)
        inter = a.intersection_with(b)
        assert inter.is_null() == (not both.any())
        assert inter == b.intersection_with(a)
        if not inter.is_null():
            np.testing.assert_array_equal(_cover(inter, full), both)
        else:
            assert min(inter.shape) == 0
        clip_shape = Shape(tuple(int(x) for x in rng.integers(1, 10, 3)), sig_dims=2)
        clipped = a.clip_to(clip_shape)
        expected = _cover(a, full)[tuple(slice(0, c) for c in clip_shape)]
        if not clipped.is_null():
            np.testing.assert_array_equal(_cover(clipped, tuple(clip_shape)), expected)
        else:
            assert not expected.any()
    with pytest.raises(SliceUsageError):
        Slice((0, 0), Shape((1, 1), 1)).intersection_with(Slice((0, 0), Shape((1, 1), 2)))
    with pytest.raises(SliceUsageError):
        Slice((0, 0), Shape((1, 1), 1)).intersection_with(Slice((0,), Shape((1,), 1)))


def test_is_null_by_hand():
    assert Slice((3, 0), Shape((0, 4), 1)).is_null()
    assert not Slice((3, 0), Shape((1, 4), 1)).is_null()
    a = Slice((0, 0), Shape((4, 4), 1))
    assert a.intersection_with(Slice((4, 0), Shape((2, 4), 1))).is_null()  # touching, not overlapping
    assert disjoint(a, [Slice((4, 0), Shape((2, 4), 1)), Slice((0, 4), Shape((4, 4), 1))])
    assert not disjoint(a, [Slice((4, 0), Shape((2, 4), 1)), Slice((3, 3), Shape((4, 4), 1))])


def test_shift_and_shift_by():
    tile = Slice((10, 4, 8), Shape((2, 4, 8), sig_dims=2))
    part = Slice((8, 0, 0), Shape((16, 16, 16), sig_dims=2))
    local = tile.shift(part)
    assert local == Slice((2, 4, 8), Shape((2, 4, 8), sig_dims=2))
    data = np.arange(24 * 16 * 16).reshape((24, 16, 16))
    # the tile's data, read from the partition's array in local coordinates
    np.testing.assert_array_equal(local.get(part.get(data)), tile.get(data))
    assert tile.shift_by((1, -4, 2)) == Slice((11, 0, 10), Shape((2, 4, 8), sig_dims=2))
    assert tile.shift_by(np.array([0, 1, 1])).origin == (10, 5, 9)
    with pytest.raises(SliceUsageError):
        tile.shift_by((1, 2))
    with pytest.raises(SliceUsageError):
        tile.shift(Slice((0,), Shape((1,), 1)))


def test_discard_nav():
    s = Slice((7, 3, 0, 8), Shape((1, 5, 16, 8), sig_dims=2))
    d = s.discard_nav()
    assert d == Slice((0, 0, 0, 8), Shape((0, 0, 16, 8), sig_dims=2))
    # tiles of different frames over the same signal region give the same key
    other = Slice((1, 0, 0, 8), Shape((2, 3, 16, 8), sig_dims=2))
    assert other.discard_nav() == d and hash(other.discard_nav()) == hash(d)
    assert s._discard_nav_key() == ((0, 0, 0, 8), (0, 0, 16, 8), 2)


@pytest.mark.parametrize("shape, sub", [((5, 7, 9), (2, 3, 4)), ((4, 8, 8), (4, 8, 8)), ((3, 10), (1, 3)),
                                        ((6, 6, 6), (10, 10, 10))])
def test_subslices_cover_exactly_once(shape, sub):
    origin = (2,) + (1,) * (len(shape) - 1)
    s = Slice(origin, Shape(shape, sig_dims=len(shape) - 1))
    full = tuple(o + n for o, n in zip(origin, shape))
    count = np.zeros(full, int)
    subs = list(s.subslices(sub))
    for piece in subs:
        assert all(1 <= n <= t for n, t in zip(piece.shape, sub))
        count[piece.get()] += 1
    np.testing.assert_array_equal(count, _cover(s, full).astype(int))
    assert len(subs) == np.prod([-(-n // t) for n, t in zip(shape, sub)])
    # C order: the last dim moves fastest
    assert [p.origin for p in subs] == sorted(p.origin for p in subs)


def test_subslices_by_hand_and_errors():
    s = Slice.from_shape((3, 4), sig_dims=1)
    assert [(p.origin, p.shape.to_tuple()) for p in s.subslices((2, 3))] == [
        ((0, 0), (2, 3)), ((0, 3), (2, 1)), ((2, 0), (1, 3)), ((2, 3), (1, 1)),
    ]
    assert list(s.subslices(Shape((3, 4), 1))) == [s]
    with pytest.raises(SliceUsageError):
        list(s.subslices((2,)))


def test_flatten_nav_against_numpy():
    nav, sig = (6, 8), (5, 7)
    data = np.arange(np.prod(nav + sig)).reshape(nav + sig)
    flat = data.reshape((-1,) + sig)
    cases = [
        ((2, 0, 1, 2), (3, 8, 3, 4)),   # whole rows
        ((4, 3, 0, 0), (1, 5, 5, 7)),   # part of one row
        ((0, 0, 0, 0), (6, 8, 5, 7)),   # everything
        ((5, 7, 2, 2), (1, 1, 1, 1)),   # one frame
    ]
    for origin, shape in cases:
        s = Slice(origin, Shape(shape, sig_dims=2))
        f = s.flatten_nav(nav + sig)
        assert f.origin[0] == np.ravel_multi_index(origin[:2], nav)
        assert f.shape == Shape((shape[0] * shape[1],) + shape[2:], sig_dims=2)
        np.testing.assert_array_equal(f.get(flat), s.get(data).reshape((-1,) + shape[2:]))
    for origin, shape in [((1, 2, 0, 0), (2, 3, 5, 7)), ((0, 0, 0, 0), (7, 8, 5, 7))]:
        with pytest.raises(SliceUsageError):
            Slice(origin, Shape(shape, sig_dims=2)).flatten_nav(nav + sig)


def test_adjust_for_roi_against_numpy():
    rng = np.random.default_rng(7)
    roi = rng.random((6, 5)) < 0.5
    flat_roi = roi.reshape(-1)
    data = rng.random((30, 4, 4))
    compressed = data[flat_roi]
    for start, count in [(0, 30), (3, 10), (12, 0), (29, 1), (7, 13)]:
        s = Slice((start, 0, 0), Shape((count, 4, 4), sig_dims=2))
        adj = s.adjust_for_roi(roi)
        assert adj.origin == (int(np.count_nonzero(flat_roi[:start])), 0, 0)
        assert adj.shape == Shape((int(np.count_nonzero(flat_roi[start:start + count])), 4, 4), sig_dims=2)
        # the slice of the compressed data holds this slice's selected frames
        np.testing.assert_array_equal(adj.get(compressed), s.get(data)[flat_roi[start:start + count]])
        assert s.adjust_for_roi(None) is s
        assert s.adjust_for_roi(sparse.COO.from_numpy(roi)) == adj
    with pytest.raises(SliceUsageError):
        Slice((0, 0, 0, 0), Shape((1, 1, 4, 4), 2)).adjust_for_roi(roi)


def test_slice_equality_hash_pickle():
    a = Slice((1, 2, 3), Shape((4, 5, 6), sig_dims=2))
    b = Slice(np.array([1, 2, 3]), Shape((4, 5, 6), sig_dims=2))
    assert a == b and hash(a) == hash(b) and a.origin == (1, 2, 3)
    assert all(type(o) is int for o in b.origin)
    assert a != Slice((1, 2, 3), Shape((4, 5, 6), sig_dims=1))
    assert pickle.loads(pickle.dumps(a)) == a
    assert {a: 1}[b] == 1


# -- MaskContainer (libertem.common.container) --------------------------------

from raytile.common.container import MaskContainer  # noqa: E402
from raytile.common.numba import rmatmul  # noqa: E402
from raytile.common.tiling import TilingScheme  # noqa: E402


SIG = (6, 8)


def _mask_stack() -> np.ndarray:
    rng = np.random.default_rng(3)
    return (rng.random((3,) + SIG) * (rng.random((3,) + SIG) < 0.4)).astype(np.float32)


def _tile(origin_sig=(2, 3), shape_sig=(3, 4), frames=5, first=7) -> Slice:
    return Slice((first,) + origin_sig, Shape((frames,) + shape_sig, sig_dims=2))


def _as_array(m) -> np.ndarray:
    if sp.issparse(m):
        return m.toarray()
    if isinstance(m, sparse.SparseArray):
        return m.todense()
    return np.asarray(m)


def _expected(stack: np.ndarray, tile: Slice, transpose=True) -> np.ndarray:
    """numpy: the masks cut to the tile's signal region, flattened, (pixels, n) if transposed."""
    (y0, x0), (h, w) = tile.origin[1:], tile.shape.to_tuple()[1:]
    flat = stack[:, y0:y0 + h, x0:x0 + w].reshape(len(stack), -1)
    return flat.T if transpose else flat


@pytest.mark.parametrize("make", ["list", "stack"])
def test_mask_container_dense(make):
    stack = _mask_stack()
    factories = [(lambda m=m: m) for m in stack] if make == "list" else (lambda: stack)
    mc = MaskContainer(factories)
    assert len(mc) == 3 and mc.use_sparse is False and mc.dtype == np.float32
    np.testing.assert_array_equal(mc.computed_masks, stack)
    tile = _tile()
    m = mc.get(tile)
    assert isinstance(m, np.ndarray) and m.shape == (12, 3)
    np.testing.assert_array_equal(m, _expected(stack, tile))
    np.testing.assert_array_equal(mc.get(tile, transpose=False), _expected(stack, tile, transpose=False))
    # the result is what a tile's dot product needs: frames @ masks
    frames = np.random.default_rng(1).random((5,) + SIG).astype(np.float32)
    flat_tile = tile.get(np.concatenate([np.zeros((7,) + SIG, np.float32), frames]))
    got = flat_tile.reshape(5, -1) @ m
    want = np.einsum("fyx,nyx->fn", frames[:, 2:5, 3:7], stack[:, 2:5, 3:7])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_mask_container_dtype_and_backend():
    stack = _mask_stack()
    mc = MaskContainer(lambda: stack, dtype=np.float64)
    assert mc.dtype == np.float64
    assert mc.get(_tile()).dtype == np.float64
    assert mc.get(_tile(), dtype=np.complex64).dtype == np.complex64
    # the CUDA device class with numpy arrays gets numpy masks
    assert isinstance(mc.get(_tile(), backend=UDF.BACKEND_CUDA), np.ndarray)


@pytest.mark.parametrize("kind", ["scipy", "coo", "coo-stack"])
def test_mask_container_sparse_masks_stay_sparse(kind):
    stack = _mask_stack()
    if kind == "scipy":
        factories = [(lambda m=m: sp.csr_matrix(m)) for m in stack]
    elif kind == "coo":
        factories = [(lambda m=m: sparse.COO.from_numpy(m)) for m in stack]
    else:
        factories = lambda: sparse.COO.from_numpy(stack)  # noqa: E731
    mc = MaskContainer(factories)
    assert mc.use_sparse == "scipy.sparse" and isinstance(mc.computed_masks, sparse.COO)
    tile = _tile()
    m = mc.get(tile)
    assert isinstance(m, sp.csr_matrix) and m.has_canonical_format
    np.testing.assert_array_equal(m.toarray(), _expected(stack, tile))
    expected_types = {"scipy.sparse.csc": sp.csc_matrix, "scipy.sparse.csr": sp.csr_matrix,
                      "sparse.pydata": sparse.COO, "sparse.pydata.GCXS": sparse.GCXS}
    for fmt, cls in expected_types.items():
        for transpose in (True, False):
            got = mc.get(tile, sparse_backend=fmt, transpose=transpose)
            assert isinstance(got, cls), fmt
            np.testing.assert_array_equal(_as_array(got), _expected(stack, tile, transpose))
    dense = mc.get(tile, sparse_backend=False)
    assert isinstance(dense, np.ndarray)
    np.testing.assert_array_equal(dense, _expected(stack, tile))


@pytest.mark.parametrize("use_sparse, expected", [
    (None, False), (False, False), (True, "scipy.sparse"), ("scipy.sparse.csc", "scipy.sparse.csc"),
    ("sparse.pydata", "sparse.pydata"),
])
def test_mask_container_use_sparse_choices(use_sparse, expected):
    stack = _mask_stack()
    mc = MaskContainer([(lambda m=m: m) for m in stack], use_sparse=use_sparse)
    assert mc.use_sparse == expected
    m = mc.get(_tile())
    np.testing.assert_array_equal(_as_array(m), _expected(stack, _tile()))
    assert sp.issparse(m) or isinstance(m, sparse.SparseArray) or expected is False


def test_mask_container_mixed_masks_are_dense_and_cupy_densifies_pydata():
    stack = _mask_stack()
    mc = MaskContainer([lambda: stack[0], lambda: sp.csc_matrix(stack[1])])
    assert mc.use_sparse is False
    np.testing.assert_array_equal(mc.computed_masks, stack[:2])
    on_gpu = MaskContainer([lambda: sp.csr_matrix(stack[0])], backend=UDF.BACKEND_CUPY,
                           default_sparse="sparse.pydata")
    assert on_gpu.use_sparse is False
    with pytest.raises(ValueError):
        MaskContainer([lambda: stack[0]], use_sparse="dense please")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MaskContainer([lambda: sp.csr_matrix(stack[0])], use_sparse=True).get(
            _tile(), sparse_backend="sparse.pydata", backend=UDF.BACKEND_CUPY)


def test_mask_container_is_lazy_and_caches():
    calls = []

    def factory():
        calls.append(1)
        return _mask_stack()

    mc = MaskContainer(factory, count=3, dtype=np.float32, use_sparse=False)
    assert len(mc) == 3 and mc.dtype == np.float32 and mc.use_sparse is False and calls == []
    tile = _tile()
    first = mc.get(tile)
    assert calls == [1]
    # other frames over the same signal region: the same cached array
    assert mc.get(_tile(first=0, frames=2)) is first
    assert mc.get_for_sig_slice(tile.sig) is first
    assert mc.get(tile, transpose=False) is not first
    assert calls == [1]
    # a list of factories has a length without computing anything
    lazy = MaskContainer([factory, factory])
    assert len(lazy) == 2 and calls == [1]


def test_mask_container_whole_frame_and_single_pixel():
    stack = _mask_stack()
    for use_sparse in (False, True):
        mc = MaskContainer(lambda: stack, use_sparse=use_sparse)
        whole = Slice((0, 0, 0), Shape((4,) + SIG, sig_dims=2))
        np.testing.assert_array_equal(_as_array(mc.get(whole)), stack.reshape(3, -1).T)
        px = _tile(origin_sig=(5, 7), shape_sig=(1, 1))
        np.testing.assert_array_equal(_as_array(mc.get(px)), stack[:, 5, 7].reshape(1, 3))


def test_mask_container_get_for_idx_and_type_check():
    stack = _mask_stack()
    mc = MaskContainer(lambda: stack)
    scheme = TilingScheme.make_for_shape(Shape((2, 3, 8), sig_dims=2), Shape((10,) + SIG, sig_dims=2))
    assert len(scheme) == 2
    for idx, sl in enumerate(scheme):
        (y0, x0), (h, w) = sl.origin, sl.shape.to_tuple()
        np.testing.assert_array_equal(mc.get_for_idx(scheme, idx), stack[:, y0:y0 + h, x0:x0 + w].reshape(3, -1).T)
    with pytest.raises(TypeError):
        mc.get((0, 0, 0))  # type: ignore[arg-type]


def test_mask_container_pickles_without_caches():
    stack = _mask_stack()
    mc = MaskContainer(lambda: stack, use_sparse=True)
    mc.get(_tile())
    clone = pickle.loads(__import__("cloudpickle").dumps(mc))
    assert clone._get_masks_for_slice == {} and clone._flat is None
    np.testing.assert_array_equal(clone.get(_tile()).toarray(), _expected(stack, _tile()))


def test_rmatmul_against_numpy():
    rng = np.random.default_rng(5)
    left = rng.random((7, 12)).astype(np.float32)
    right = rng.random((12, 3)) * (rng.random((12, 3)) < 0.3)
    for fmt in (sp.csr_matrix, sp.csc_matrix):
        got = rmatmul(left, fmt(right))
        assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (7, 3)
        np.testing.assert_allclose(got, left @ right, rtol=1e-6)
    with pytest.raises(ValueError):
        rmatmul(left, sp.csr_matrix(right[:5]))
    with pytest.raises(TypeError):
        rmatmul(left, right)


# -- a UDF written against LiberTEM's interface, imports rewritten -------------
# The idiom of LiberTEM's mask UDFs: a MaskContainer made in get_task_data,
# masks for each tile from self.meta.slice, backend constants in get_backends,
# UDF_METHOD in get_method.

from raytile.udf import UDF as PortUDF  # noqa: E402  ("from libertem.udf import UDF")


class MaskDotUDF(PortUDF):
    def __init__(self, mask_factories, use_sparse=None, **kwargs):
        super().__init__(mask_factories=mask_factories, use_sparse=use_sparse, **kwargs)

    def _masks(self):
        return MaskContainer(self.params.mask_factories, use_sparse=self.params.use_sparse)

    def get_task_data(self):
        return {"masks": self._masks()}

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="nav", extra_shape=(len(self._masks()),), dtype=np.float64)}

    def get_backends(self):
        return tuple(b for b in (self.BACKEND_NUMPY,) if b in self.CPU_BACKENDS and b in self.DENSE_BACKENDS)

    def get_method(self):
        return self.UDF_METHOD.TILE

    def get_tiling_preferences(self):
        # small tiles, so that the signal is cut into several regions
        return {"depth": 2, "total_size": 2 * 2 * 8 * 4}

    def process_tile(self, tile):
        masks = self.task_data.masks.get(self.meta.slice, transpose=True)
        flat = tile.reshape((tile.shape[0], -1))
        self.results.intensity[:] += np.asarray(flat @ masks)


@pytest.mark.parametrize("use_sparse", [None, True])
@pytest.mark.parametrize("with_roi", [False, True])
def test_mask_udf_with_container_against_numpy(use_sparse, with_roi):
    import raytile as rt

    rng = np.random.default_rng(11)
    data = rng.random((4, 5) + SIG).astype(np.float32)
    stack = _mask_stack()
    factories = [(lambda m=m: sp.csr_matrix(m)) for m in stack]
    roi = rng.random((4, 5)) < 0.5 if with_roi else None
    ctx = rt.Context(executor="inline")
    try:
        ds = ctx.load("memory", data=data, num_partitions=3)
        res = ctx.run_udf(dataset=ds, udf=MaskDotUDF(mask_factories=factories, use_sparse=use_sparse), roi=roi)
    finally:
        ctx.close()
    want = np.einsum("abyx,nyx->abn", data.astype(np.float64), stack.astype(np.float64))
    got = res["intensity"].data
    if roi is None:
        np.testing.assert_allclose(got, want, rtol=1e-5)
    else:
        np.testing.assert_allclose(got[roi], want[roi], rtol=1e-5)


# -- raytile.common.numba / exceptions ------------------------------------------

from raytile.common import numba as rt_numba  # noqa: E402


def test_numba_index_helpers_against_numpy():
    dims = np.array([4, 5, 6])
    rng = np.random.default_rng(2)
    multi = np.stack([rng.integers(0, d, 20) for d in dims])
    flat = np.ravel_multi_index(tuple(multi), tuple(dims))
    assert rt_numba.numba_ravel_multi_index_single(multi[:, 0], dims) == flat[0]
    np.testing.assert_array_equal(rt_numba.numba_ravel_multi_index_multi(multi, dims), flat)
    np.testing.assert_array_equal(rt_numba.numba_unravel_index_single(flat[3], dims), multi[:, 3])
    np.testing.assert_array_equal(rt_numba.numba_unravel_index_multi(flat, dims), multi)
    assert np.dtype(np.float32) in rt_numba.numba_dtypes and np.dtype(object) not in rt_numba.numba_dtypes


def test_cached_njit_compiles():
    @rt_numba.cached_njit()
    def add(a, b):
        return a + b

    assert add(2, 3) == 5


def test_exceptions_are_raytiles():
    from raytile.common import errors
    from raytile.common.exceptions import ExecutorSpecException, UDFException, UDFRunCancelled

    assert UDFException is errors.UDFException and UDFRunCancelled is errors.UDFRunCancelled
    assert issubclass(ExecutorSpecException, errors.RaytileError)


# -- a real LiberTEM UDF module, imports rewritten (runs when LiberTEM is installed) --

def _ported_module(name: str):
    """Import LiberTEM's module ``name`` from its source with ``libertem`` replaced by ``raytile``
    in the import lines only, as a user porting it would."""
    import importlib.util
    import re
    import types

    pytest.importorskip("libertem")
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    source = re.sub(r"^(\s*)(from|import) libertem(\.|\s)", r"\1\2 raytile\3", source, flags=re.M)
    module = types.ModuleType("ported_" + name.replace(".", "_"))
    exec(compile(source, spec.origin, "exec"), module.__dict__)  # noqa: S102
    return module


@pytest.mark.parametrize("use_sparse", [None, "sparse.pydata"])
def test_libertem_applymasks_ported(use_sparse):
    import raytile as rt

    ported = _ported_module("libertem.udf.masks")
    rng = np.random.default_rng(4)
    data = rng.random((4, 5) + SIG).astype(np.float32)
    stack = _mask_stack()
    factories = [(lambda m=m: sparse.COO.from_numpy(m)) for m in stack]
    roi = rng.random((4, 5)) < 0.5
    want = np.einsum("abyx,nyx->abn", data.astype(np.float64), stack.astype(np.float64))
    ctx = rt.Context(executor="inline")
    try:
        ds = ctx.load("memory", data=data, num_partitions=3)
        for r in (None, roi):
            udf = ported.ApplyMasksUDF(mask_factories=factories, use_sparse=use_sparse)
            got = ctx.run_udf(dataset=ds, udf=udf, roi=r)["intensity"].data
            sel = np.ones((4, 5), bool) if r is None else r
            np.testing.assert_allclose(got[sel], want[sel], rtol=1e-5)
    finally:
        ctx.close()


def _has_cuda() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.skipif(not _has_cuda(), reason="needs cupy and a CUDA GPU")
def test_mask_container_on_cupy():
    import cupy
    import cupyx.scipy.sparse

    stack = _mask_stack()
    tile = _tile()
    dense = MaskContainer(lambda: stack, backend=UDF.BACKEND_CUPY, use_sparse=False).get(tile)
    assert isinstance(dense, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(dense), _expected(stack, tile))
    for fmt, cls in (("scipy.sparse", cupyx.scipy.sparse.csr_matrix), ("scipy.sparse.csc", cupyx.scipy.sparse.csc_matrix)):
        m = MaskContainer(lambda: sparse.COO.from_numpy(stack), backend=UDF.BACKEND_CUPY, use_sparse=fmt).get(tile)
        assert isinstance(m, cls)
        np.testing.assert_array_equal(m.get().toarray(), _expected(stack, tile))


# -- names a UDF module imports, added for the ports of com.py and record.py ------------------
# Compared with LiberTEM's own objects where LiberTEM is installed.

def _libertem(module: str):
    pytest.importorskip("libertem")
    import importlib

    return importlib.import_module(module)


def test_corrections_coordinates_match_libertem():
    from raytile.corrections import coordinates as rt_coords

    lt_coords = _libertem("libertem.corrections.coordinates")
    for angle in (0.0, 0.3, -2.0, np.pi):
        np.testing.assert_allclose(rt_coords.rotate(angle), lt_coords.rotate(angle), atol=1e-15)
    for deg in (0.0, 12.5, -90.0, 270.0):
        np.testing.assert_allclose(rt_coords.rotate_deg(deg), lt_coords.rotate_deg(deg), atol=1e-15)
    for name in ("flip_y", "flip_x", "identity"):
        np.testing.assert_array_equal(getattr(rt_coords, name)(), getattr(lt_coords, name)())
    np.testing.assert_array_equal(rt_coords.scale(2.5), lt_coords.scale(2.5))
    for s, deg, flip in ((1.0, 0.0, False), (2.0, 30.0, True), (0.5, -135.0, True), (3.0, 179.0, False)):
        mat = lt_coords.scale(s) @ lt_coords.rotate_deg(deg) @ (lt_coords.flip_y() if flip else lt_coords.identity())
        got, want = rt_coords.scale_rotate_flip_y(mat), lt_coords.scale_rotate_flip_y(mat)
        np.testing.assert_allclose(got[:2], want[:2], atol=1e-12)
        assert got[2] == want[2] == flip
        np.testing.assert_allclose(got[1], np.deg2rad(deg), atol=1e-12)
    for bad in (np.diag([1.0, 2.0]), np.array([[1.0, 0.5], [0.0, 1.0]])):  # two scales; a shear
        with pytest.raises(ValueError):
            lt_coords.scale_rotate_flip_y(bad)
        with pytest.raises(ValueError):
            rt_coords.scale_rotate_flip_y(bad)


def test_corrections_package_exposes_raytiles_correction_set():
    import raytile.corrections as corrections
    from raytile.corrections.corrset import CorrectionSet as from_corrset
    from raytile.io.corrections import CorrectionSet

    assert corrections.CorrectionSet is CorrectionSet and from_corrset is CorrectionSet
    with pytest.raises(AttributeError):
        corrections.correct  # noqa: B018 - LiberTEM's detector kernels are not mapped
    dark = np.ones(SIG, np.float32)
    corr = corrections.CorrectionSet(dark=dark, gain=np.full(SIG, 2.0, np.float32))
    tile = np.full((2,) + SIG, 5.0, np.float32)
    corr.apply(tile, _tile(origin_sig=(0, 0), shape_sig=SIG, frames=2, first=0))
    np.testing.assert_array_equal(tile, (5.0 - 1.0) * 2.0)


def test_make_polar_matches_libertem():
    lt_utils = _libertem("libertem.utils")
    rng = np.random.default_rng(5)
    for shape in ((7, 2), (3, 4, 2), (2,)):
        vectors = rng.normal(size=shape)
        np.testing.assert_allclose(masks.make_polar(vectors), lt_utils.make_polar(vectors), rtol=1e-14)
    assert masks.make_polar is __import__("raytile.masks", fromlist=["x"]).make_polar
    assert hasattr(_libertem("libertem.masks"), "make_polar")


def test_polar_map_matches_libertem():
    lt_masks = _libertem("libertem.masks")
    for kw in ({}, {"stretchY": 1.5, "angle": 0.4}):
        got = masks.polar_map(3.5, 2.0, 9, 7, **kw)
        want = lt_masks.polar_map(3.5, 2.0, 9, 7, **kw)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-15)


def test_container_to_sparse_is_the_sparse_modules():
    from raytile.common import container
    from raytile.common import sparse as rt_sparse

    assert container.to_sparse is rt_sparse.to_sparse
    np.testing.assert_array_equal(container.to_sparse(np.eye(3)).todense(), np.eye(3))


def test_buffer_type_aliases_and_placeholder():
    import typing

    from raytile.common import buffers
    from raytile.udf import buffers as udf_buffers

    lt_buffers = _libertem("libertem.common.buffers")
    assert set(typing.get_args(buffers.BufferKind)) == set(typing.get_args(lt_buffers.BufferKind))
    lt_location = set(typing.get_args(lt_buffers.BufferLocation))
    lt_location = {a for t in lt_location for a in (typing.get_args(t) or (t,))}  # Literal['device'] | None
    assert set(typing.get_args(buffers.BufferLocation)) == {None if a is type(None) else a for a in lt_location}
    # LiberTEM's BufferUse leaves None out (its signatures say BufferUse | None); raytile's includes it
    assert set(typing.get_args(buffers.BufferUse)) == set(typing.get_args(lt_buffers.BufferUse)) | {None}
    assert udf_buffers.BufferKind is buffers.BufferKind and udf_buffers.BufferUse is buffers.BufferUse
    assert buffers.PlaceholderBufferWrapper is udf_buffers.PlaceholderBufferWrapper

    lt_udf = _libertem("libertem.udf")
    for use, lt_cls, rt_cls in ((None, lt_buffers.BufferWrapper, buffers.BufferWrapper),
                                ("private", lt_buffers.BufferWrapper, buffers.BufferWrapper),
                                ("result_only", lt_buffers.PlaceholderBufferWrapper, buffers.PlaceholderBufferWrapper)):
        lt_buf = lt_udf.UDF().buffer(kind="nav", dtype="float32", use=use)
        rt_buf = UDF().buffer(kind="nav", dtype="float32", use=use)
        assert type(lt_buf) is lt_cls and type(rt_buf) is rt_cls
        assert isinstance(rt_buf, buffers.PlaceholderBufferWrapper) == isinstance(
            lt_buf, lt_buffers.PlaceholderBufferWrapper)
    placeholder = UDF().buffer(kind="sig", use="result_only")
    placeholder.allocate(4, SIG)
    assert placeholder.data is None and not placeholder.is_allocated


def test_check_cast_like_libertem():
    from raytile.common.errors import UDFException, UnsafeCastError
    from raytile.udf import check_cast
    from raytile.udf.base import check_cast as base_check_cast

    lt_check_cast = _libertem("libertem.udf").check_cast
    assert check_cast is base_check_cast
    pairs = [(np.float64, np.float32), (np.float32, np.float64), (np.int64, np.int32), (np.uint8, np.int16),
             (np.complex64, np.float64), (np.float32, np.complex64), (np.int64, np.float64)]
    for src, dest in pairs:
        a, b = np.zeros(2, src), np.zeros(2, dest)
        try:
            lt_check_cast(a, b)
            lt_raises = False
        except TypeError:
            lt_raises = True
        if lt_raises:
            with pytest.raises(TypeError) as err:
                check_cast(a, b)  # LiberTEM's two-argument form
            assert isinstance(err.value, UnsafeCastError) and isinstance(err.value, UDFException)
            with pytest.raises(UnsafeCastError, match="MyUDF.x"):
                check_cast(a, b, "MyUDF.x")
        else:
            check_cast(a, b)


def test_udf_mixins_match_libertem():
    import raytile as rt
    import raytile.udf as rt_udf
    import raytile.udf.base as rt_base

    lt_udf = _libertem("libertem.udf")
    names = ("UDFFrameMixin", "UDFTileMixin", "UDFPartitionMixin", "UDFPreprocessMixin", "UDFPostprocessMixin")
    for name in names:
        assert getattr(rt_udf, name) is getattr(rt_base, name)
    assert rt_udf.UDFRunCancelled is rt.UDFRunCancelled is rt_base.UDFRunCancelled

    def kinds(base, mixin_base=None):
        """Classes each defining some of the methods, made on ``base`` (LiberTEM's or raytile's UDF)."""
        body = {
            "frame": {"process_frame": lambda self, frame: None},
            "tile+pre": {"process_tile": lambda self, tile: None, "preprocess": lambda self: None},
            "partition+post": {"process_partition": lambda self, p: None, "postprocess": lambda self: None},
        }
        out = {k: type(k, (base,), v) for k, v in body.items()}
        if mixin_base is not None:  # a UDF listing a mixin among its bases
            out["listed"] = type("listed", (base, mixin_base), {"process_frame": lambda self, frame: None})
        return out

    lt_classes = kinds(lt_udf.UDF, lt_udf.UDFFrameMixin)
    rt_classes = kinds(rt_udf.UDF, rt_udf.UDFFrameMixin)
    for key in lt_classes:
        for name in names:
            lt_is = isinstance(lt_classes[key](), getattr(lt_udf, name))
            rt_is = isinstance(rt_classes[key](), getattr(rt_udf, name))
            assert rt_is == lt_is, (key, name)
    assert rt_classes["listed"]().get_method() == "frame"


# -- ApplyMasksEngine: tiles of every kind against numpy --------------------------------------

def _engine_meta(dataset_shape, scheme, backend="numpy", input_dtype=np.float32):
    from raytile.udf.meta import UDFMeta

    part = Slice((0,) + (0,) * len(SIG), Shape((dataset_shape[0],) + SIG, sig_dims=2))
    return UDFMeta(part, Shape(dataset_shape, sig_dims=2), None, np.float32, input_dtype, scheme,
                   array_backend=backend)


@pytest.mark.parametrize("masks_as", ["dense", "scipy.sparse", "scipy.sparse.csc", "sparse.pydata"])
@pytest.mark.parametrize("tile_as", ["numpy", "scipy.sparse.csr_matrix", "sparse.COO"])
def test_apply_masks_engine_tiles_against_numpy(masks_as, tile_as):
    from raytile.common.tiling import TilingScheme
    from raytile.udf.masks import ApplyMasksEngine

    rng = np.random.default_rng(8)
    frames = (rng.random((5,) + SIG) * (rng.random((5,) + SIG) < 0.5)).astype(np.float32)
    stack = _mask_stack()
    use_sparse = False if masks_as == "dense" else masks_as
    container = MaskContainer([(lambda m=m: sp.csr_matrix(m)) for m in stack], use_sparse=use_sparse,
                              dtype=np.float32)
    dataset_shape = (5,) + SIG
    scheme = TilingScheme.make_for_shape(Shape((5, 3, 8), sig_dims=2), Shape(dataset_shape, sig_dims=2))
    assert len(scheme) == 2
    meta = _engine_meta(dataset_shape, scheme, backend=tile_as)
    engine = ApplyMasksEngine(container, meta)
    for idx in range(len(scheme)):
        meta.tiling_scheme_idx = idx
        region = scheme[idx].get()
        part = frames[(slice(None),) + region]
        if tile_as == "numpy":
            tile = part
        elif tile_as == "sparse.COO":
            tile = sparse.COO.from_numpy(part)
        else:
            tile = sp.csr_matrix(part.reshape(5, -1))
        got = engine.process_tile(tile)
        want = np.einsum("fyx,nyx->fn", part, stack[(slice(None),) + region])
        assert isinstance(got, np.ndarray) and got.shape == (5, 3)
        np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("masks_as", ["dense", "scipy.sparse"])
def test_apply_masks_engine_shifted_frames_against_numpy(masks_as):
    from raytile.common.tiling import TilingScheme
    from raytile.udf.masks import ApplyMasksEngine

    rng = np.random.default_rng(9)
    frame = rng.random(SIG).astype(np.float32)
    stack = _mask_stack()
    container = MaskContainer(lambda: stack, use_sparse=False if masks_as == "dense" else masks_as)
    scheme = TilingScheme.make_for_shape(Shape((1,) + SIG, sig_dims=2), Shape((1,) + SIG, sig_dims=2))
    engine = ApplyMasksEngine(container, _engine_meta((1,) + SIG, scheme))
    y, x = np.mgrid[: SIG[0], : SIG[1]]
    for dy, dx in ((0, 0), (2, -3), (-5, 7), (6, 0), (0, -8), (3, 3)):
        sy, sx = y - dy, x - dx  # frame pixel (y, x) meets mask pixel (y - dy, x - dx)
        inside = (sy >= 0) & (sy < SIG[0]) & (sx >= 0) & (sx < SIG[1])
        moved = np.zeros_like(stack)
        moved[:, inside] = stack[:, sy[inside], sx[inside]]
        want = np.einsum("yx,nyx->n", frame, moved)
        got = engine.process_frame_shifted(frame, np.array([dy, dx]))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=f"shift {(dy, dx)}")
    with pytest.raises(ValueError, match="one entry per signal dim"):
        engine.process_frame_shifted(frame, (1, 2, 3))


@pytest.mark.parametrize("shifts", ["constant", "per frame"])
def test_applymasks_shifts_against_libertem(shifts):
    """raytile's ApplyMasksUDF with ``shifts`` (frames through ApplyMasksEngine.process_frame_shifted)
    against LiberTEM's ApplyMasksUDF on the same data, with and without an ROI."""
    import raytile as rt
    from raytile.udf import ApplyMasksUDF

    lt_api = _libertem("libertem.api")
    lt_masks = _libertem("libertem.udf.masks")
    rng = np.random.default_rng(12)
    data = rng.random((4, 5) + SIG).astype(np.float32)
    stack = _mask_stack()
    factories = [(lambda m=m: m) for m in stack]
    roi = rng.random((4, 5)) < 0.5
    per_frame = rng.integers(-4, 5, size=(4, 5, 2)).ravel()

    def make(cls):
        if shifts == "constant":
            return cls(mask_factories=factories, shifts=(2, -3))
        return cls(mask_factories=factories,
                   shifts=cls.aux_data(per_frame, kind="nav", extra_shape=(2,), dtype=per_frame.dtype))

    lt_ctx = lt_api.Context.make_with("inline")
    ctx = rt.Context(executor="inline")
    try:
        for r in (None, roi):
            want = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data, num_partitions=3), roi=r,
                                  udf=make(lt_masks.ApplyMasksUDF))["intensity"].data
            got = ctx.run_udf(dataset=ctx.load("memory", data=data, num_partitions=3), roi=r,
                              udf=make(ApplyMasksUDF))["intensity"].data
            np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)
    finally:
        ctx.close()
        lt_ctx.close()


def test_applymasks_constructor_like_libertem():
    """LiberTEM's positional order and its preferred_dtype / backends parameters."""
    import raytile as rt
    from raytile.common.errors import UDFException
    from raytile.udf import ApplyMasksUDF

    lt_api = _libertem("libertem.api")
    lt_masks = _libertem("libertem.udf.masks")
    rng = np.random.default_rng(13)
    data = rng.integers(0, 50, size=(3, 4) + SIG).astype(np.int32)
    stack = (rng.random((2,) + SIG) < 0.5).astype(np.int64)
    factories = [(lambda m=m: m) for m in stack]
    lt_ctx = lt_api.Context.make_with("inline")
    ctx = rt.Context(executor="inline")
    try:
        for kwargs in ({"preferred_dtype": np.int64}, {"backends": ("numpy",)}, {}):
            # positional: mask_factories, use_torch, use_sparse
            want = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data, num_partitions=2),
                                  udf=lt_masks.ApplyMasksUDF(factories, False, False, **kwargs))["intensity"]
            got = ctx.run_udf(dataset=ctx.load("memory", data=data, num_partitions=2),
                              udf=ApplyMasksUDF(factories, False, False, **kwargs))["intensity"]
            assert got.data.dtype == want.data.dtype, kwargs
            np.testing.assert_array_equal(got.data, want.data)
        assert ApplyMasksUDF(factories, backends=("cupy", "numpy")).get_backends() == ("cupy", "numpy")
        with pytest.raises(UDFException, match="none of backends"):
            ctx.run_udf(dataset=ctx.load("memory", data=data),
                        udf=ApplyMasksUDF(factories, backends=("sparse.COO",), shifts=(1, 1)))
    finally:
        ctx.close()
        lt_ctx.close()
