"""LiberTEM's own UDFs, ported by rewriting their imports only, against LiberTEM's results.

Each case reads a UDF module's source from the installed LiberTEM package (or
a documentation example written here), rewrites ``libertem`` -> ``raytile`` in
its import statements with :func:`raytile.compat.rewrite_imports` and runs the
result on raytile: memory and raw data sets with several partitions, with and
without an ROI, on the inline and the Ray executor. LiberTEM runs the original
source on the same data with its inline executor; the results must agree.
"""

from __future__ import annotations

import importlib.util
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import raytile as rt  # noqa: E402
from raytile.compat import find_unmapped, load_ported, rewrite_imports  # noqa: E402

NAV = (8, 8)
SIG = (16, 16)
PARTS = {"memory": 3, "raw": 4}

# The ROI: 29 of the 64 positions, never a whole partition.
_ROI = np.random.default_rng(7).random(NAV) < 0.45


def _data() -> np.ndarray:
    rng = np.random.default_rng(11)
    data = rng.integers(0, 1000, size=NAV + SIG).astype(np.float32)
    data[0, 0] = 0  # an empty frame
    data[3, 5, 7, 8] = 60000  # a bright spot off the centre
    return data


DATA = _data()


def _source(module_name: str) -> tuple[str, str]:
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin is not None
    with open(spec.origin, encoding="utf-8") as f:
        return f.read(), spec.origin


_LT_CACHE: dict[str, types.ModuleType] = {}
_RT_CACHE: dict[str, types.ModuleType] = {}


def _lt_module(name: str) -> types.ModuleType:
    if name.startswith("builtin:"):
        return importlib.import_module(name.split(":")[1])
    if name.startswith("doc:"):
        if name not in _LT_CACHE:
            mod = types.ModuleType("lt_" + name[4:])
            exec(compile(DOC_EXAMPLES[name[4:]], name, "exec"), mod.__dict__)  # noqa: S102
            _LT_CACHE[name] = mod
        return _LT_CACHE[name]
    return importlib.import_module(name)


def _rt_module(name: str) -> types.ModuleType:
    if name not in _RT_CACHE:
        if name.startswith("builtin:"):
            # A user's script importing the built-in: ``from libertem.udf.sum import SumUDF``.
            _, module, cls = name.split(":")
            source, origin = f"from {module} import {cls}\n", name
        elif name.startswith("doc:"):
            source, origin = DOC_EXAMPLES[name[4:]], name
        else:
            source, origin = _source(name)
        _RT_CACHE[name] = load_ported(source, "ported_" + name.replace(".", "_").replace(":", "_"), origin)
    return _RT_CACHE[name]


# -- documentation examples (LiberTEM's docs: "User-defined functions", basic and advanced) -------------

DOC_EXAMPLES: dict[str, str] = {
    "max": '''
import numpy as np
from libertem.udf import UDF


class MaxUDF(UDF):
    """The maximum of every detector pixel over all frames (docs: merge example)."""

    def get_result_buffers(self):
        return {"maxbuf": self.buffer(kind="sig", dtype=self.meta.input_dtype)}

    def preprocess(self):
        self.results.maxbuf[:] = -np.inf

    def process_frame(self, frame):
        self.results.maxbuf[:] = np.maximum(frame, self.results.maxbuf)

    def merge(self, dest, src):
        dest.maxbuf[:] = np.maximum(dest.maxbuf, src.maxbuf)
''',
    "pixelsum": '''
import numpy as np
from libertem.udf import UDF


class PixelsumUDF(UDF):
    """Sum over the signal dimensions per frame (docs: the first UDF)."""

    def get_result_buffers(self):
        return {"pixelsum": self.buffer(kind="nav", dtype="float32")}

    def process_frame(self, frame):
        self.results.pixelsum[:] = np.sum(frame)
''',
    "tiles": '''
import numpy as np
from libertem.udf import UDF
from libertem.common.buffers import reshaped_view
from libertem.common.math import prod


class TiledSumSigUDF(UDF):
    """process_tile over a flat nav buffer, with get_backends and the tiling preferences."""

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="nav", dtype="float64")}

    def get_backends(self):
        return (self.BACKEND_NUMPY,)

    def get_tiling_preferences(self):
        return {"depth": 4, "total_size": self.TILE_SIZE_MAX}

    def process_tile(self, tile):
        flat = reshaped_view(tile, (tile.shape[0], prod(tile.shape[1:])))
        self.results.intensity[:] += flat.sum(axis=1)
''',
    "partition": '''
import numpy as np
from libertem.udf import UDF


class PartitionMeanUDF(UDF):
    """process_partition with a sig buffer, a private count and postprocess/get_results."""

    def get_result_buffers(self):
        return {
            "sum": self.buffer(kind="sig", dtype="float64"),
            "count": self.buffer(kind="single", dtype="int64"),
            "mean": self.buffer(kind="sig", dtype="float64", use="result_only"),
        }

    def process_partition(self, partition):
        self.results.sum[:] += partition.sum(axis=0)
        self.results.count[:] += partition.shape[0]

    def merge(self, dest, src):
        dest.sum[:] += src.sum
        dest.count[:] += src.count

    def get_results(self):
        return {"mean": self.results.sum / max(int(self.results.count[0]), 1)}
''',
    "weighted": '''
import numpy as np
from libertem.udf import UDF


class WeightedUDF(UDF):
    """aux data per frame and task data (docs: "Auxiliary data", "get_task_data")."""

    def __init__(self, weights, aux):
        super().__init__(weights=weights, aux=aux)

    def get_task_data(self):
        return {"weights": np.asarray(self.params.weights, dtype=np.float64)}

    def get_result_buffers(self):
        return {"weighted": self.buffer(kind="nav", dtype="float64")}

    def process_frame(self, frame):
        self.results.weighted[:] = np.sum(frame * self.task_data.weights) * self.params.aux
''',
    "private": '''
import numpy as np
from libertem.udf import UDF


class PrivateMeanUDF(UDF):
    """use="private" buffers merged and read in get_results (docs: buffer "use")."""

    def get_result_buffers(self):
        return {
            "count": self.buffer(kind="single", dtype="int64", use="private"),
            "total": self.buffer(kind="single", dtype="float64", use="private"),
            "mean": self.buffer(kind="single", dtype="float64", use="result_only"),
        }

    def process_frame(self, frame):
        self.results.count[:] += 1
        self.results.total[:] += frame.sum()

    def merge(self, dest, src):
        dest.count[:] += src.count
        dest.total[:] += src.total

    def get_results(self):
        return {"mean": self.results.total / self.results.count}
''',
    "navshaped": '''
import numpy as np
from libertem.udf import UDF


class NavGradientUDF(UDF):
    """get_results reads get_buffer(...).data (nav-shaped, NaN outside the ROI) and .raw_data (compressed)."""

    def get_result_buffers(self):
        return {
            "total": self.buffer(kind="nav", dtype="float64", use="private"),
            "grad_x": self.buffer(kind="nav", dtype="float64", use="result_only"),
            "frames": self.buffer(kind="single", dtype="int64", use="result_only"),
        }

    def process_frame(self, frame):
        self.results.total[:] = frame.sum()

    def get_results(self):
        buf = self.results.get_buffer("total")
        nav = tuple(self.meta.dataset_shape.nav)
        assert buf.data.shape == nav, buf.data.shape
        return {
            "grad_x": np.gradient(np.nan_to_num(buf.data, nan=-1.0), axis=1),
            "frames": np.array([buf.raw_data.shape[0]]),
        }
''',
}


# -- the cases --------------------------------------------------------------------------------------

@dataclass
class Case:
    module: str
    make: Callable[[types.ModuleType], Any]
    roi_ok: bool = True  # False: both must raise the same error with an ROI
    rtol: float = 1e-5
    atol: float = 0.0
    xfail: str | None = None
    xfail_raises: type[BaseException] = AssertionError
    keys: tuple[str, ...] | None = None  # None: every result buffer
    extra: dict[str, Any] = field(default_factory=dict)


def _masks():
    y, x = np.mgrid[0:SIG[0], 0:SIG[1]]
    r2 = (y - 7.5) ** 2 + (x - 7.5) ** 2
    return [
        lambda: (r2 < 16).astype(np.float32),
        lambda: ((r2 >= 16) & (r2 < 49)).astype(np.float32),
        lambda: (x / 15.0).astype(np.float32),
    ]


def _aux(mod):
    return mod.WeightedUDF.aux_data(data=np.arange(64, dtype=np.float64).reshape(NAV).ravel(),
                                    kind="nav", dtype=np.float64)


CASES: dict[str, Case] = {
    "SumUDF": Case("libertem.udf.sum", lambda m: m.SumUDF()),
    "SumSigUDF": Case("libertem.udf.sumsigudf", lambda m: m.SumSigUDF()),
    "StdDevUDF": Case("libertem.udf.stddev", lambda m: m.StdDevUDF(), rtol=1e-4),
    "LogsumUDF": Case("libertem.udf.logsum", lambda m: m.LogsumUDF()),
    "PickUDF": Case("libertem.udf.raw", lambda m: m.PickUDF()),
    "ApplyMasksUDF": Case("libertem.udf.masks", lambda m: m.ApplyMasksUDF(mask_factories=_masks())),
    "ApplyMasksUDF-sparse": Case("libertem.udf.masks",
                                 lambda m: m.ApplyMasksUDF(mask_factories=_masks(), use_sparse="scipy.sparse")),
    "FEMUDF": Case("libertem.udf.FEM", lambda m: m.FEMUDF(center=(7, 8), rad_in=2, rad_out=6)),
    "CrystallinityUDF": Case("libertem.udf.crystallinity",
                             lambda m: m.CrystallinityUDF(rad_in=1, rad_out=6, real_center=(4, 4), real_rad=2),
                             rtol=1e-4),
    "AutoUDF": Case("libertem.udf.auto", lambda m: m.AutoUDF(f=lambda frame: frame.max(axis=0))),
    # LiberTEM's com.py: raytile.corrections.coordinates, ApplyMasksEngine, get_buffer(...).data nav-shaped.
    # Also as raytile's built-in (below); test_builtin_comudf_against_libertem adds more empty frames and options.
    "CoMUDF": Case("libertem.udf.com", lambda m: m.CoMUDF.with_params(cy=7.5, cx=7.5, r=6.0)),
    "CoMUDF-ring": Case("libertem.udf.com", lambda m: m.CoMUDF.with_params(
        cy=7.0, cx=8.0, r=6.0, ri=2.5, scan_rotation=-20.0, flip_y=True, regression=1), atol=1e-6),
    "MaxUDF (docs)": Case("doc:max", lambda m: m.MaxUDF()),
    "PixelsumUDF (docs)": Case("doc:pixelsum", lambda m: m.PixelsumUDF()),
    "TiledSumSigUDF (docs)": Case("doc:tiles", lambda m: m.TiledSumSigUDF()),
    "PartitionMeanUDF (docs)": Case("doc:partition", lambda m: m.PartitionMeanUDF()),
    "WeightedUDF (docs)": Case("doc:weighted", lambda m: m.WeightedUDF(
        weights=np.linspace(0, 1, SIG[0] * SIG[1]).reshape(SIG), aux=_aux(m))),
    "PrivateMeanUDF (docs)": Case("doc:private", lambda m: m.PrivateMeanUDF()),
    "NavGradientUDF (get_buffer)": Case("doc:navshaped", lambda m: m.NavGradientUDF()),
}


# The same UDFs as raytile's built-ins, imported the way a user's script imports LiberTEM's.
for _name, _case in list(CASES.items()):
    _cls = _name.split("-")[0]
    if _case.module.startswith("libertem.udf.") and _case.xfail is None and ("-" not in _name or _cls == "CoMUDF"):
        # LiberTEM's CoMUDF sums in float32, raytile's in float64: absolute differences of ~1e-7 pixel
        atol = max(_case.atol, 1e-5) if _cls == "CoMUDF" else _case.atol
        CASES[f"builtin {_name}"] = Case(f"builtin:{_case.module}:{_cls}", _case.make, rtol=_case.rtol, atol=atol)


# -- data sets and LiberTEM's reference results ------------------------------------------------------

@pytest.fixture(scope="module")
def raw_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("compat") / "data.raw"
    DATA.tofile(path)
    return str(path)


@pytest.fixture(scope="module")
def lt_ctx():
    ctx = lt_api.Context.make_with("inline")
    yield ctx
    ctx.close()


def _load(ctx, kind: str, raw_path: str, data: np.ndarray = DATA):
    if kind == "memory":
        return ctx.load("memory", data=data, num_partitions=PARTS[kind])
    return ctx.load("raw", path=raw_path, nav_shape=NAV, sig_shape=SIG, dtype="float32",
                    num_partitions=PARTS[kind])


_REF: dict[tuple[str, str, bool], Any] = {}


def _reference(lt_ctx, name: str, kind: str, with_roi: bool, raw_path: str):
    key = (name, kind, with_roi)
    if key not in _REF:
        case = CASES[name]
        ds = _load(lt_ctx, kind, raw_path)
        try:
            res = lt_ctx.run_udf(dataset=ds, udf=case.make(_lt_module(case.module)),
                                 roi=_ROI if with_roi else None)
            _REF[key] = {k: (np.array(v.data), np.array(v.valid_mask)) for k, v in res.items()}
        except Exception as e:  # noqa: BLE001 - the port must fail the same way
            _REF[key] = e
    return _REF[key]


def _compare(got, want, case: Case, what: str) -> None:
    keys = case.keys if case.keys is not None else tuple(want)
    assert set(keys) <= set(got), f"{what}: raytile lacks results {set(keys) - set(got)}"
    for k in keys:
        w_data, w_valid = want[k]
        g_data = np.asarray(got[k].data)
        assert g_data.shape == w_data.shape, f"{what}[{k}]: shape {g_data.shape} != {w_data.shape}"
        np.testing.assert_array_equal(np.asarray(got[k].valid_mask), w_valid, err_msg=f"{what}[{k}] valid_mask")
        # NaN outside the ROI where LiberTEM has it; compare every position, NaNs included.
        np.testing.assert_allclose(g_data, w_data, rtol=case.rtol, atol=case.atol, equal_nan=True,
                                   err_msg=f"{what}[{k}]")


def _params():
    for name, case in CASES.items():
        marks = [pytest.mark.xfail(reason=case.xfail, strict=True, raises=case.xfail_raises)] if case.xfail else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.fixture(scope="module")
def actor_context(ray_context):
    """Runs coordinated by an actor on the session's cluster: the main node's UDF (preprocess, merge,
    get_results) is a copy that crossed a process boundary."""
    ctx = rt.Context(coordinator="actor", cpus=2)
    yield ctx
    ctx.close()


def _context(executor: str, request):
    if executor == "inline":
        return rt.Context(executor="inline")
    return request.getfixturevalue("ray_context" if executor == "ray" else "actor_context")


# Cases whose main-node methods do more than pass results through, also run with the coordinator actor.
_ACTOR_CASES = ("CoMUDF-ring", "PickUDF", "MaxUDF (docs)", "NavGradientUDF (get_buffer)", "PrivateMeanUDF (docs)")


def _executor_params():
    for name in _params():
        yield pytest.param(name.values[0], "inline", marks=name.marks, id=f"{name.id}-inline")
        yield pytest.param(name.values[0], "ray", marks=(*name.marks, pytest.mark.ray), id=f"{name.id}-ray")
        if name.values[0] in _ACTOR_CASES:
            yield pytest.param(name.values[0], "actor", marks=(*name.marks, pytest.mark.ray), id=f"{name.id}-actor")


@pytest.mark.filterwarnings("ignore:'where' used without 'out'")  # LiberTEM's com.py, on empty frames
@pytest.mark.parametrize("name, executor", list(_executor_params()))
def test_ported_udf_matches_libertem(name, executor, lt_ctx, raw_path, request):
    case = CASES[name]
    ported = _rt_module(case.module)  # the xfail cases fail here, on the missing name
    ctx = _context(executor, request)
    try:
        for kind in ("memory", "raw"):
            ds = _load(ctx, kind, raw_path)
            for with_roi in (False, True):
                what = f"{name} {kind} roi={with_roi} {executor}"
                want = _reference(lt_ctx, name, kind, with_roi, raw_path)
                roi = _ROI if with_roi else None
                if isinstance(want, Exception):
                    with pytest.raises(type(want)):
                        ctx.run_udf(dataset=ds, udf=case.make(ported), roi=roi)
                    continue
                got = ctx.run_udf(dataset=ds, udf=case.make(ported), roi=roi)
                _compare(got, want, case, what)
    finally:
        if executor == "inline":
            ctx.close()


@pytest.mark.parametrize("variant", ["ported", "builtin"])
@pytest.mark.parametrize("executor", ["inline", pytest.param("ray", marks=pytest.mark.ray),
                                      pytest.param("actor", marks=pytest.mark.ray)])
def test_recordudf_matches_libertem(variant, executor, lt_ctx, raw_path, tmp_path, request):
    """RecordUDF writes the data set to .npy: the files agree; with an ROI both refuse.

    ``ported``: LiberTEM's record.py with its imports rewritten. Its ``__init__`` passes
    ``_is_master=False`` to ``UDF.__init__`` and keeps ``self._is_master=True`` on the user's
    instance only: the main node's ``preprocess`` (on that instance's attributes) creates the
    file, each partition's fresh ``cls(**kwargs)`` only opens it (also when that instance
    was pickled to a coordinator actor: ``actor``). ``builtin``: a user's
    ``from libertem.udf.record import RecordUDF`` rewritten to raytile's own RecordUDF.
    """
    if variant == "ported":
        ported = _rt_module("libertem.udf.record")
    else:
        ported = load_ported("from libertem.udf.record import RecordUDF\n", "ported_record_import")
    lt_mod = _lt_module("libertem.udf.record")
    ctx = _context(executor, request)
    try:
        for kind in ("memory", "raw"):
            want_path, got_path = tmp_path / f"lt_{kind}.npy", tmp_path / f"rt_{kind}.npy"
            lt_ctx.run_udf(dataset=_load(lt_ctx, kind, raw_path), udf=lt_mod.RecordUDF(str(want_path)))
            ds = _load(ctx, kind, raw_path)
            ctx.run_udf(dataset=ds, udf=ported.RecordUDF(str(got_path)))
            want, got = np.load(want_path), np.load(got_path)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got, DATA)
            with pytest.raises(RuntimeError, match="ROI"):
                lt_ctx.run_udf(dataset=_load(lt_ctx, kind, raw_path), udf=lt_mod.RecordUDF(str(want_path)),
                               roi=_ROI)
            if variant == "ported":
                with pytest.raises(Exception, match="ROI"):
                    ctx.run_udf(dataset=ds, udf=ported.RecordUDF(str(got_path)), roi=_ROI)
            else:
                # An extension: raytile's RecordUDF writes the ROI's frames in nav order (LiberTEM refuses).
                ctx.run_udf(dataset=ds, udf=ported.RecordUDF(str(got_path)), roi=_ROI)
                np.testing.assert_array_equal(np.load(got_path), DATA[_ROI])
    finally:
        if executor == "inline":
            ctx.close()


# -- raytile's built-ins under LiberTEM's import paths -----------------------------------------------

def _com_data() -> np.ndarray:
    """DATA with frames that have no intensity in some or all of the CoM regions below."""
    data = DATA.copy()
    data[1, 2] = 0  # empty, in the ROI ([0, 0] is empty too, outside it)
    data[4, 4] = 0
    data[4, 4, 0, 0] = 50.0  # only a corner: empty for the disks, not for the whole frame
    data[6, 5] = 0
    data[6, 5, 7, 8] = 80.0  # only the centre (7, 8): empty for the ring, which leaves out d <= ri
    data[3, 0] = 0
    data[3, 0, 7, 6] = data[3, 0, 5, 8] = 30.0  # only at d == ri == 2 from (7, 8): empty for the ring
    return data


_COM_PARAMS = {
    "whole frame": dict(cy=7.5, cx=7.5, r=float("inf"), scan_rotation=10.0, flip_y=True),
    "disk": dict(cy=7.2, cx=6.8, r=6.0),
    "ring": dict(cy=7.0, cx=8.0, r=6.0, ri=2.0, scan_rotation=-20.0, flip_y=True),
}
_COM_REGRESSIONS = ("NO_REGRESSION", "SUBTRACT_MEAN", "SUBTRACT_LINEAR", "array")


def _com_udfs(mod):
    udfs = []
    for params in _COM_PARAMS.values():
        for reg in _COM_REGRESSIONS:
            regression = (np.array([[0.3, -0.2], [0.05, 0.01], [-0.02, 0.04]]) if reg == "array"
                          else getattr(mod.RegressionOptions, reg))
            udfs.append(mod.CoMUDF.with_params(**params, regression=regression))
    return udfs


@pytest.mark.filterwarnings("ignore:'where' used without 'out'")  # LiberTEM's com.py, on empty frames
@pytest.mark.parametrize("executor", ["inline", pytest.param("ray", marks=pytest.mark.ray)])
def test_builtin_comudf_against_libertem(executor, lt_ctx, tmp_path, request):
    """``from libertem.udf.com import CoMUDF`` -> ``from raytile.udf.com import CoMUDF``: same results.

    Every result buffer (values, NaN outside the ROI, ``valid_mask``) for a
    disk, a ring and the whole frame, with flip and rotation, under each
    regression option, on data whose frames include some without intensity
    in the region: LiberTEM gives those a zero shift (``raw_com`` at
    ``(cy, cx)``) that enters the regression fit and the differences, and
    leaves pixels at exactly ``ri`` out of the ring.
    """
    ported = load_ported("from libertem.udf.com import CoMUDF, RegressionOptions\n", "ported_com_import")
    lt_mod = _lt_module("libertem.udf.com")
    ctx = rt.Context(executor="inline") if executor == "inline" else request.getfixturevalue("ray_context")
    data = _com_data()
    com_raw = str(tmp_path / "com.raw")
    data.tofile(com_raw)
    names = [f"{p} {r}" for p in _COM_PARAMS for r in _COM_REGRESSIONS]
    case = Case("builtin:libertem.udf.com:CoMUDF", lambda m: None, rtol=1e-4, atol=1e-4)
    try:
        for kind in ("memory", "raw"):
            ds = _load(ctx, kind, com_raw, data)
            for roi in (None, _ROI):
                lt_res = lt_ctx.run_udf(dataset=_load(lt_ctx, kind, com_raw, data), roi=roi, udf=_com_udfs(lt_mod))
                got = ctx.run_udf(dataset=ds, roi=roi, udf=_com_udfs(ported))
                for name, g, w in zip(names, got, lt_res):
                    want = {k: (np.array(v.data), np.array(v.valid_mask)) for k, v in w.items()}
                    _compare(g, want, case, f"CoMUDF {name} {kind} roi={roi is not None} {executor}")
                # the empty frame in the ROI: zero shift, exactly at the centre (also in raytile's float64)
                whole, ring = got[0], got[2 * len(_COM_REGRESSIONS)]
                np.testing.assert_array_equal(np.asarray(whole["raw_shifts"].data)[1, 2], [0.0, 0.0])
                np.testing.assert_array_equal(np.asarray(ring["raw_com"].data)[3, 0], [7.0, 8.0])
                np.testing.assert_array_equal(np.asarray(ring["raw_com"].data)[6, 5], [7.0, 8.0])
    finally:
        if executor == "inline":
            ctx.close()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # LiberTEM's np.mean over no positions
@pytest.mark.filterwarnings("ignore:'where' used without 'out'")  # LiberTEM's com.py, on empty frames
def test_builtin_comudf_empty_roi_against_libertem(lt_ctx):
    """No position selected: the mean regression is NaN (LiberTEM's mean over nothing), the linear one zero;
    the ``valid_mask`` of every buffer as LiberTEM's (sig and single buffers valid, nav ones not)."""
    ported = load_ported("from libertem.udf.com import CoMUDF, RegressionOptions\n", "ported_com_import")
    lt_mod = _lt_module("libertem.udf.com")
    roi = np.zeros(NAV, dtype=bool)
    with rt.Context(executor="inline") as ctx:
        got = ctx.run_udf(dataset=_load(ctx, "memory", ""), roi=roi, udf=_com_udfs(ported))
    want = lt_ctx.run_udf(dataset=_load(lt_ctx, "memory", ""), roi=roi, udf=_com_udfs(lt_mod))
    for g, w in zip(got, want):
        for k in w:
            np.testing.assert_allclose(np.asarray(g[k].data), np.asarray(w[k].data), rtol=1e-5, atol=1e-5,
                                       equal_nan=True, err_msg=f"empty ROI[{k}]")
            np.testing.assert_array_equal(np.asarray(g[k].valid_mask), np.asarray(w[k].valid_mask), err_msg=k)
    assert np.isnan(np.asarray(got[1]["regression"].data)[0]).all()


def test_every_libertem_udf_module_imports_map():
    """The check tool on LiberTEM's UDF modules: every imported name maps."""
    import libertem.udf as lt_udf
    import os

    found: dict[str, list[str]] = {}
    for fname in sorted(os.listdir(os.path.dirname(lt_udf.__file__))):
        # holography.py only raises ImportError (moved to LiberTEM-holo); base.py is LiberTEM's UDF
        # runner itself (tracing, io internals), not a UDF a user ports.
        if not fname.endswith(".py") or fname in ("holography.py", "base.py"):
            continue
        with open(os.path.join(os.path.dirname(lt_udf.__file__), fname), encoding="utf-8") as f:
            unmapped = find_unmapped(rewrite_imports(f.read()))
        if unmapped:
            found[fname] = [f"{u.module}" + ("" if u.name is None else f".{u.name}") for u in unmapped]
    assert found == {}, found


def test_builtin_stddev_has_varsum(lt_ctx):
    ported = load_ported("from libertem.udf.stddev import StdDevUDF\n", "ported_stddev_import")
    ctx = rt.Context(executor="inline")
    try:
        got = ctx.run_udf(dataset=ctx.load("memory", data=DATA, num_partitions=2), udf=ported.StdDevUDF())
    finally:
        ctx.close()
    want = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA, num_partitions=2),
                          udf=_lt_module("libertem.udf.stddev").StdDevUDF())
    assert "varsum" in got
    np.testing.assert_allclose(got["varsum"].data, want["varsum"].data, rtol=1e-4)
