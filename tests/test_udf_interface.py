"""The UDF interface: parameters, method choice, hooks, merging, results, aux data, meta."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import UDFException
from raytile.udf import UDF, NoOpUDF, SumUDF
from raytile.udf.base import check_cast

NAV, SIG = (5, 6), (8, 4)


@pytest.fixture
def data(rng):
    return rng.integers(0, 500, size=NAV + SIG).astype(np.uint16)


@pytest.fixture
def roi(rng):
    r = rng.random(NAV) > 0.4
    r[0, 0] = True
    return r


def frames_of(data, roi=None):
    sel = np.ones(NAV, dtype=bool) if roi is None else roi
    return data[sel].astype(np.float64)


# -- parameters, copies, method choice -------------------------------------------

class Scaled(UDF):
    def __init__(self, factor, offset=0.0, **kwargs):
        super().__init__(factor=factor, offset=offset, **kwargs)

    def get_result_buffers(self):
        return {"v": self.buffer(kind="nav", dtype="float64")}

    def process_frame(self, frame):
        self.results.v[:] = frame.sum() * self.params.factor + self.params.offset


def test_params_from_kwargs_and_copy(inline_ctx, data):
    udf = Scaled(3.0, offset=1.5)
    assert udf.params.factor == 3.0 and udf.params.offset == 1.5
    cp = udf.copy()
    assert type(cp) is Scaled and cp is not udf and cp.params.factor == 3.0
    cp.update_parameters({"factor": 2.0})
    assert udf.params.factor == 3.0 and cp.params.factor == 2.0
    with pytest.raises(UDFException, match=r"Scaled has no parameters \['nope'\]"):
        cp.update_parameters({"nope": 1})
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    r1, r2 = inline_ctx.run_udf(dataset=ds, udf=[udf, cp])
    sums = data.astype(np.float64).sum(axis=(2, 3))
    np.testing.assert_allclose(r1["v"].data, sums * 3.0 + 1.5)
    np.testing.assert_allclose(r2["v"].data, sums * 2.0 + 1.5)


class AllThree(UDF):
    def get_result_buffers(self):
        return {"which": self.buffer(kind="nav", dtype="int64")}

    def process_tile(self, tile):
        self.results.which[:] = 1

    def process_frame(self, frame):
        self.results.which[:] = 2

    def process_partition(self, partition):
        self.results.which[:] = 3


class FrameAndPartition(AllThree):
    process_tile = None


class PartitionOnly(AllThree):
    process_tile = None
    process_frame = None


class Chosen(AllThree):
    def get_method(self):
        return "partition"


@pytest.mark.parametrize("cls,method,code", [
    (AllThree, "tile", 1), (FrameAndPartition, "frame", 2), (PartitionOnly, "partition", 3), (Chosen, "partition", 3),
])
def test_get_method_precedence(ctx, data, cls, method, code):
    assert cls().get_method() == method
    ds = ctx.load("memory", data=data, num_partitions=2)
    res = ctx.run_udf(dataset=ds, udf=cls())
    assert np.all(res["which"].data == code)


def test_no_process_method():
    with pytest.raises(UDFException, match="implements none of"):
        UDF().get_method()


# -- hooks --------------------------------------------------------------------------

class Hooks(UDF):
    def get_result_buffers(self):
        return {"v": self.buffer(kind="nav", dtype="float64"),
                "total": self.buffer(kind="single", dtype="float64")}

    def get_task_data(self):
        return {"weights": np.arange(np.prod(SIG), dtype=np.float64).reshape(SIG)}

    def preprocess(self):
        self.results.v[:] = 1000.0  # whole partition buffer visible

    def process_frame(self, frame):
        self.results.v[:] += (frame * self.task_data.weights).sum()

    def postprocess(self):
        self.results.total[:] = self.results.v.sum()

    def merge(self, dest, src):
        dest.v[:] = src.v
        dest.total[:] += src.total


def test_preprocess_postprocess_task_data(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=Hooks(), roi=roi)
    w = np.arange(np.prod(SIG), dtype=np.float64).reshape(SIG)
    ref = 1000.0 + (frames_of(data, roi) * w).sum(axis=(1, 2))
    np.testing.assert_allclose(res["v"].data[roi], ref)
    np.testing.assert_allclose(res["total"].data[0], ref.sum())


# -- merging ------------------------------------------------------------------------

class SigNoMerge(UDF):
    def get_result_buffers(self):
        return {"s": self.buffer(kind="sig", dtype="float64")}

    def process_tile(self, tile):
        self.results.s[:] += tile.sum(axis=0)


class NavOnly(UDF):
    def get_result_buffers(self):
        return {"a": self.buffer(kind="nav", dtype="float64"),
                "b": self.buffer(kind="nav", extra_shape=(2,), dtype="int64")}

    def process_tile(self, tile):
        self.results.a[:] = tile.reshape(tile.shape[0], -1).max(axis=1)
        self.results.b[:, 0] = self.meta.coordinates[:, 0]
        self.results.b[:, 1] = self.meta.coordinates[:, 1]


def test_default_merge_nav_only(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=NavOnly(), roi=roi)
    np.testing.assert_array_equal(res["a"].data[roi], frames_of(data, roi).max(axis=(1, 2)))
    np.testing.assert_array_equal(res["b"].data[roi], np.argwhere(roi))


def test_sig_buffer_without_merge_asks_for_one(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=2)
    with pytest.raises(UDFException, match=r"SigNoMerge has a 'sig' buffer 's': implement SigNoMerge\.merge"):
        ctx.run_udf(dataset=ds, udf=SigNoMerge())


class DtypeDrift(UDF):
    """Declares float64 on workers but float32 on the coordinator: merging must refuse."""

    def get_result_buffers(self):
        dtype = "float64" if self.meta.array_backend is not None else "float32"
        return {"a": self.buffer(kind="nav", dtype=dtype)}

    def process_tile(self, tile):
        self.results.a[:] = 1.0


def test_safe_cast_check(ctx, data):
    with pytest.raises(UDFException, match=r"cannot merge X\.y: float64 does not fit safely into float32"):
        check_cast(np.zeros(2, np.float64), np.zeros(2, np.float32), "X.y")
    check_cast(np.zeros(2, np.float32), np.zeros(2, np.float64), "X.y")  # widening is fine
    ds = ctx.load("memory", data=data)
    with pytest.raises(UDFException, match=r"cannot merge DtypeDrift\.a: float64 does not fit safely into float32"):
        ctx.run_udf(dataset=ds, udf=DtypeDrift())


class MergeAll(UDF):
    def get_result_buffers(self):
        return {"s": self.buffer(kind="sig", dtype="float64"),
                "n": self.buffer(kind="nav", dtype="float64")}

    def process_tile(self, tile):
        self.results.s[:] += tile.sum(axis=0)
        self.results.n[:] = tile.reshape(tile.shape[0], -1).sum(axis=1)

    def merge_all(self, ordered_results):
        parts = list(ordered_results.values())
        return {"s": np.sum([p.s for p in parts], axis=0),
                "n": np.concatenate([p.n for p in parts])}


def test_merge_all_override(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=MergeAll(), roi=roi)
    f = frames_of(data, roi)
    np.testing.assert_allclose(res["s"].data, f.sum(axis=0))
    np.testing.assert_allclose(res["n"].data[roi], f.sum(axis=(1, 2)))


# -- results -----------------------------------------------------------------------------

class Masked(UDF):
    def get_result_buffers(self):
        return {"v": self.buffer(kind="nav", dtype="float64"),
                "hidden": self.buffer(kind="nav", dtype="float64", use="private"),
                "twice": self.buffer(kind="nav", dtype="float64", use="result_only")}

    def process_frame(self, frame):
        self.results.hidden[:] = 7.0
        self.results.v[:] = frame.sum() + self.results.hidden

    def get_results(self):
        valid = self.meta.get_valid_nav_mask(full_nav=True).reshape(self.meta.dataset_shape.nav.to_tuple())
        assert self.meta.get_valid_nav_mask().shape == self.results.v.shape  # ROI-compressed
        return {"v": self.results.v, "twice": self.with_mask(self.results.v * 2, valid)}


def test_get_results_with_mask_private_and_result_only(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=3)
    run = ctx.run_udf_iter(dataset=ds, udf=Masked(), roi=roi)
    parts = list(run)
    assert len(parts) + run.coalesced == 3
    ref = frames_of(data, roi).sum(axis=(1, 2)) + 7.0
    for p in parts:
        bufs = p.buffers[0]
        assert set(bufs) == {"v", "twice"}  # private buffers are merged but never returned
        # the mask passed through with_mask is the valid-nav mask: what was merged so far
        assert np.array_equal(bufs["twice"].valid_mask, p.damage.data)
        assert np.array_equal(bufs["v"].valid_mask, p.damage.data)
        merged = p.damage.data
        full = np.zeros(NAV)
        full[roi] = ref
        np.testing.assert_allclose(bufs["twice"].data[merged], 2 * full[merged])
    assert np.array_equal(parts[-1].damage.data, roi)
    assert all(a.damage.data.sum() < b.damage.data.sum() for a, b in zip(parts, parts[1:]))


class ResultOnlyForgotten(UDF):
    def get_result_buffers(self):
        return {"v": self.buffer(kind="nav"), "r": self.buffer(kind="nav", use="result_only")}

    def process_tile(self, tile):
        self.results.v[:] = 1


def test_result_only_must_be_computed(inline_ctx, data):
    ds = inline_ctx.load("memory", data=data)
    with pytest.raises(UDFException, match=r"ResultOnlyForgotten: buffer 'r' is result_only"):
        inline_ctx.run_udf(dataset=ds, udf=ResultOnlyForgotten())


# -- dtypes -------------------------------------------------------------------------------

class DtypeProbe(UDF):
    def __init__(self, want, **kwargs):
        super().__init__(want=want, **kwargs)

    def get_preferred_input_dtype(self):
        return self.params.want

    def get_result_buffers(self):
        return {"code": self.buffer(kind="single", extra_shape=(2,), dtype="int64")}

    def process_tile(self, tile):
        assert tile.dtype == self.meta.input_dtype
        self.results.code[:] = (ord(tile.dtype.kind), tile.dtype.itemsize)

    def merge(self, dest, src):
        dest.code[:] = src.code


@pytest.mark.parametrize("wants,expected", [
    ([UDF.USE_NATIVE_DTYPE], np.uint16),
    ([None], np.float32),  # the default preference
    ([UDF.USE_NATIVE_DTYPE, np.int64], np.int64),
    ([UDF.USE_NATIVE_DTYPE, np.float64], np.float64),
])
def test_preferred_input_dtype(ctx, data, wants, expected):
    ds = ctx.load("memory", data=data, num_partitions=2)
    udfs = [DtypeProbe(w) if w is not None else _DefaultDtype() for w in wants]
    res = ctx.run_udf(dataset=ds, udf=udfs)
    exp = np.dtype(expected)
    for r in res:
        assert tuple(r["code"].data) == (ord(exp.kind), exp.itemsize)


class _DefaultDtype(DtypeProbe):
    def __init__(self, want=None, **kwargs):
        super().__init__(want=want, **kwargs)

    def get_preferred_input_dtype(self):
        return UDF.get_preferred_input_dtype(self)


# -- aux data -----------------------------------------------------------------------------

class AuxCopy(UDF):
    def __init__(self, aux, **kwargs):
        super().__init__(aux=aux, **kwargs)

    def get_result_buffers(self):
        return {"out": self.buffer(kind="nav", extra_shape=(2,), dtype="float64")}


class AuxTile(AuxCopy):
    def get_tiling_preferences(self):
        return {"depth": 2, "total_size": 2 * 32 * 4}

    def process_tile(self, tile):
        assert self.params.aux.shape == (tile.shape[0], 2)
        self.results.out[:] = self.params.aux


class AuxFrame(AuxCopy):
    def process_frame(self, frame):
        assert self.params.aux.shape == (2,)
        self.results.out[:] = self.params.aux


class AuxPartition(AuxCopy):
    def process_partition(self, partition):
        assert self.params.aux.shape == (partition.shape[0], 2)
        self.results.out[:] = self.params.aux


@pytest.mark.parametrize("cls", [AuxTile, AuxFrame, AuxPartition])
def test_aux_data_sliced(ctx, data, roi, rng, cls):
    aux = rng.normal(size=NAV + (2,))
    ds = ctx.load("memory", data=data, num_partitions=3)
    udf = cls(aux=UDF.aux_data(aux, kind="nav", extra_shape=(2,), dtype="float64"))
    for r in (None, roi):
        res = ctx.run_udf(dataset=ds, udf=udf, roi=r)
        sel = np.ones(NAV, dtype=bool) if r is None else r
        np.testing.assert_array_equal(res["out"].data[sel], aux[sel])


# -- meta --------------------------------------------------------------------------------

class MetaProbe(UDF):
    def get_tiling_preferences(self):
        return {"depth": 3, "total_size": 64}  # float32: 1 frame, sig split in two

    def get_result_buffers(self):
        nav_dims = len(self.meta.dataset_shape.nav)
        return {"coords": self.buffer(kind="nav", extra_shape=(nav_dims,), dtype="int64"),
                "flat": self.buffer(kind="nav", dtype="int64"),
                "sig_px": self.buffer(kind="sig", dtype="int64")}

    def process_tile(self, tile):
        m = self.meta
        assert m.dataset_shape.to_tuple() == NAV + SIG
        assert m.input_dtype == tile.dtype
        assert m.slice.shape.to_tuple() == tile.shape
        self.results.coords[:] = m.coordinates
        self.results.flat[:] = m.slice.origin[0] + np.arange(tile.shape[0])
        # the sig part of the slice says where the tile lies in the frame
        self.results.sig_px[:] += 1
        assert len(m.tiling_scheme) == 2
        assert self.results.sig_px.shape == tuple(m.slice.shape.to_tuple()[1:])
        assert m.slice.origin[1:] == m.sig_slice.origin

    def merge(self, dest, src):
        dest.coords[:] = src.coords
        dest.flat[:] = src.flat
        dest.sig_px[:] += src.sig_px


def test_meta_fields(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=MetaProbe(), roi=roi)
    idx = np.flatnonzero(roi.reshape(-1))
    np.testing.assert_array_equal(res["coords"].data[roi], np.stack(np.unravel_index(idx, NAV), axis=1))
    np.testing.assert_array_equal(res["flat"].data[roi], np.arange(len(idx)))  # ROI-compressed nav index
    np.testing.assert_array_equal(res["sig_px"].data, np.full(SIG, len(idx)))  # every pixel once per frame


# -- NoOp, dry run, buffer declarations --------------------------------------------------

def test_noop_udf(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=2)
    parts = list(ctx.run_udf_iter(dataset=ds, udf=NoOpUDF()))
    assert parts[-1].finished and parts[-1].buffers[0] == {}
    assert parts[-1].damage.data.all()


def test_dry_run_shapes(inline_ctx, data, roi):
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    res = inline_ctx.dry_run(ds, [SumUDF(), rt.SumSigUDF(), rt.StdDevUDF(),
                                  rt.ApplyMasksUDF(mask_factories=lambda: np.ones((3,) + SIG), mask_count=3)],
                             roi=roi)
    s, ss, sd, am = res
    assert s["intensity"].data.shape == SIG and not s["intensity"].data.any()
    assert ss["intensity"].data.shape == NAV and not ss["intensity"].valid_mask.any()
    assert sd["var"].data.shape == SIG and sd["num_frames"].data[0] == 0
    assert am["intensity"].data.shape == NAV + (3,)


def test_buffer_declaration_errors():
    with pytest.raises(UDFException, match="buffer kind must be"):
        UDF.buffer(kind="pixel")
    with pytest.raises(UDFException, match="buffer use must be"):
        UDF.buffer(kind="nav", use="secret")
    b = UDF.buffer(kind="nav", extra_shape=3, dtype="int16")
    assert b.extra_shape == (3,) and b.dtype == np.int16
    assert b.shape_for(10, SIG) == (10, 3)
    assert UDF.buffer(kind="sig", extra_shape=(2,)).shape_for(10, SIG) == SIG + (2,)
    assert UDF.buffer(kind="single").shape_for(10, SIG) == (1,)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix is what scipy sums return
def test_forbuf_brings_results_into_numpy_buffers():
    import scipy.sparse as sp
    import sparse

    udf = SumUDF()
    target = np.zeros(4)
    out = udf.forbuf(np.matrix([[1.0, 2.0, 3.0, 4.0]]), target)
    assert type(out) is np.ndarray and out.shape == (4,)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])
    out = udf.forbuf(sp.csr_matrix(np.array([[0.0, 5.0, 0.0, 1.0]])), target)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, [0, 5, 0, 1])
    out = udf.forbuf(sparse.COO.from_numpy(np.array([0.0, 2.0, 0.0, 0.0])), target)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, [0, 2, 0, 0])


class PartialResults(UDF):
    """Declares three results; get_results returns only one of them, derived."""

    def get_result_buffers(self):
        return {"total": self.buffer(kind="nav", dtype="float64"),
                "count": self.buffer(kind="nav", dtype="int64"),
                "perpix": self.buffer(kind="nav", extra_shape=(2,), dtype="float32")}

    def process_frame(self, frame):
        self.results.total[:] = frame.sum()
        self.results.count[:] = frame.size
        self.results.perpix[:] = (frame.min(), frame.max())

    def get_results(self):
        return {"total": self.results.total * 2}


def test_results_left_out_of_get_results_pass_through_with_full_masks(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=PartialResults(), roi=roi)
    assert set(res) == {"total", "count", "perpix"}
    sums = data.reshape(*NAV, -1).astype(np.float64)
    np.testing.assert_allclose(res["total"].data[roi], 2 * sums.sum(axis=-1)[roi])
    assert np.all(np.isnan(res["total"].data[~roi]))            # float: NaN outside the ROI
    assert np.array_equal(res["count"].data[roi], np.full(roi.sum(), SIG[0] * SIG[1]))
    assert np.all(res["count"].data[~roi] == 0)                 # int: zero outside the ROI
    np.testing.assert_allclose(res["perpix"].data[roi][:, 1], sums.max(axis=-1)[roi])
    assert res["perpix"].valid_mask.shape == NAV + (2,)         # nav plus extra shape
    assert np.array_equal(res["perpix"].valid_mask, np.repeat(roi[..., None], 2, axis=-1))


class MetaWhilePlanning(UDF):
    """Uses self.meta in every method called while planning (as LiberTEM UDFs do on the main node)."""

    def get_backends(self):
        assert self.meta.dataset_shape.sig.to_tuple() == SIG
        return ("numpy",)

    def get_preferred_input_dtype(self):
        return np.float64 if self.meta.dataset_dtype.kind == "u" else self.USE_NATIVE_DTYPE

    def get_tiling_preferences(self):
        return {"depth": self.meta.dataset_shape.nav.size, "total_size": 1 << 20}

    def get_result_buffers(self):
        n = int(np.count_nonzero(self.meta.roi)) if self.meta.roi is not None else self.meta.dataset_shape.nav.size
        return {"seen": self.buffer(kind="single", dtype="int64"),
                "frames": self.buffer(kind="single", extra_shape=(n,), dtype="float64")}

    def process_tile(self, tile):
        assert tile.dtype == np.float64
        self.results.seen[:] += tile.shape[0]

    def merge(self, dest, src):
        dest.seen[:] += src.seen


def test_meta_is_available_while_planning(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=2)
    res = ctx.run_udf(dataset=ds, udf=MetaWhilePlanning(), roi=roi)
    assert int(res["seen"].data[0]) == int(roi.sum())
    assert res["frames"].data.shape == (int(roi.sum()),)


def test_preprocess_runs_on_the_main_node_and_partitions_are_fresh_instances(ctx, data, tmp_path):
    from _ray_udfs import FailingPreprocessUDF, FrameSumsToFileUDF

    ds = ctx.load("memory", data=data, num_partitions=3)
    path = tmp_path / "sums.npy"
    udf = FrameSumsToFileUDF(path=str(path))
    udf.extra = "state set on the main node's instance only"
    res = ctx.run_udf(dataset=ds, udf=udf)
    assert int(res["carried"].data[0]) == 0  # partitions are built from the constructor arguments
    np.testing.assert_allclose(np.load(path), data.reshape(data.shape[0] * data.shape[1], -1).sum(axis=1))
    with pytest.raises(UDFException, match=r"FailingPreprocessUDF\.preprocess raised OSError: cannot create "
                                           r"the output file \(on the main node"):
        ctx.run_udf(dataset=ds, udf=FailingPreprocessUDF(path=str(tmp_path / "never.npy")))


class MainNodeFlag(UDF):
    """LiberTEM's RecordUDF idiom: a flag set in ``__init__`` besides the parameters, True on the user's
    instance and False on each partition's ``cls(**kwargs)``."""

    def __init__(self, scale=1.0, _is_master=True):
        super().__init__(scale=scale, _is_master=False)
        self._is_master = _is_master

    def get_result_buffers(self):
        return {"main": self.buffer(kind="single", dtype="int64"),
                "fresh": self.buffer(kind="single", dtype="int64")}

    def preprocess(self):
        if self._is_master:
            self.results.main[:] += 1
        else:
            self.results.fresh[:] += 1

    def process_partition(self, partition):
        pass

    def merge(self, dest, src):
        dest.main[:] += src.main
        dest.fresh[:] += src.fresh


def test_main_node_preprocess_sees_the_users_attributes_partitions_do_not(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=3)
    udf = MainNodeFlag(scale=2.0)
    res = ctx.run_udf(dataset=ds, udf=udf)
    assert int(res["main"].data[0]) == 1  # once, on the main node, with the user's _is_master=True
    assert int(res["fresh"].data[0]) == 3  # each partition's instance is MainNodeFlag(scale=2.0, _is_master=False)
    assert udf._is_master is True

    cp = udf.copy()  # the main node's instance: the user's attributes, its own parameters
    assert type(cp) is MainNodeFlag and cp._is_master is True
    cp.update_parameters({"scale": 3.0})
    assert udf.params.scale == 2.0 and cp.params.scale == 3.0
    part = udf.copy_for_partition(0, 4, None)
    assert part._is_master is False and part.params.scale == 2.0


class PrivateCounts(UDF):
    """Sums frames into a private sig buffer and counts frames privately; get_results divides (a mean)."""

    def get_result_buffers(self):
        return {"acc": self.buffer(kind="sig", dtype="float64", use="private"),
                "n": self.buffer(kind="single", dtype="int64", use="private"),
                "mean": self.buffer(kind="sig", dtype="float64", use="result_only")}

    def process_frame(self, frame):
        self.results.acc[:] += frame
        self.results.n[:] += 1

    def merge(self, dest, src):
        dest.acc[:] += src.acc
        dest.n[:] += src.n

    def get_results(self):
        return {"mean": self.results.acc / max(int(self.results.n[0]), 1)}


def test_private_buffers_are_merged_for_get_results_but_not_returned(ctx, data, roi):
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=PrivateCounts(), roi=roi)
    assert set(res) == {"mean"}
    np.testing.assert_allclose(res["mean"].data, data[roi].astype(np.float64).mean(axis=0))
