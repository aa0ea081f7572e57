"""Masks are made once per worker and params version, reused across partitions, rebuilt after a patch.

References: numpy on the same frames with the masks of each partition's
params version; mask factory calls counted in this process (inline executor).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest

import raytile as rt
from raytile.udf import masks
from raytile.udf.applymasks import ApplyMasksUDF
from raytile.udf.com import CoMUDF
from raytile.udf.meta import UDFMeta
from raytile.udf.worker_cache import WorkerCache, scope_key, worker_cache_for

NAV, SIG = (8, 6), (12, 12)


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(11).integers(0, 1000, size=NAV + SIG).astype(np.uint16)


class CountingRing:
    """A ring mask factory that counts its calls (inline executor: the calls happen in this process)."""

    def __init__(self, ri: float, ro: float):
        self.ri, self.ro, self.calls = ri, ro, 0

    def __call__(self) -> np.ndarray:
        self.calls += 1
        return masks.ring(5.5, 5.5, self.ri, self.ro, SIG)


def _numpy_ring(data: np.ndarray, ri: float, ro: float) -> np.ndarray:
    flat = data.reshape((-1,) + SIG).astype(np.float64)
    return (flat * masks.ring(5.5, 5.5, ri, ro, SIG).astype(np.float64)).sum(axis=(1, 2))


@pytest.mark.parametrize("given", [True, False], ids=["count+dtype given", "count+dtype found"])
def test_masks_made_once_per_worker_for_n_partitions(inline_ctx, data, given):
    calls = {}
    for parts in (4, 16):
        factory = CountingRing(2.0, 5.0)
        kw = {"mask_count": 1, "mask_dtype": np.float32} if given else {}
        ds = inline_ctx.load("memory", data=data, num_partitions=parts)
        res = inline_ctx.run_udf(dataset=ds, udf=ApplyMasksUDF(mask_factories=[factory], **kw))
        np.testing.assert_allclose(res["intensity"].data.reshape(-1), _numpy_ring(data, 2.0, 5.0), rtol=1e-6)
        calls[parts] = factory.calls
    # the main node makes them only to find their dtype; the one inline worker once for all partitions
    assert calls[4] == calls[16]
    if given:
        assert calls[16] == 1


def test_patch_of_ring_radii_mid_stream_uses_the_new_masks(ctx, data):
    flat = data.reshape((-1,) + SIG)

    def source():
        for i in range(0, len(flat), 6):
            time.sleep(0.03)  # slower than the workers: partitions after the patch see the new version
            yield flat[i:i + 6].copy()

    ds = ctx.load("stream", frames=source(), nav_shape=NAV, sig_shape=SIG, dtype="uint16", frames_per_partition=6)
    ring = functools.partial(masks.ring, 5.5, 5.5)
    run = ctx.run_udf_iter(dataset=ds, udf=ApplyMasksUDF(mask_factories=[functools.partial(ring, 2.0, 5.0, SIG)]))
    patched = False
    for part in run:
        if not patched:
            run.update_parameters([{"mask_factories": [functools.partial(ring, 1.0, 3.0, SIG)]}])
            patched = True
    assert part.finished
    versions = part.param_versions
    assert set(versions.values()) == {0, 1}, versions
    refs = {0: _numpy_ring(data, 2.0, 5.0), 1: _numpy_ring(data, 1.0, 3.0)}
    got = part.buffers[0]["intensity"].data.reshape(-1)
    for idx, version in versions.items():
        sl = slice(idx * 6, (idx + 1) * 6)
        np.testing.assert_allclose(got[sl], refs[version][sl], rtol=1e-6, err_msg=f"partition {idx}")


def test_com_masks_reused_and_equal_to_numpy(inline_ctx, data):
    ds = inline_ctx.load("memory", data=data, num_partitions=4)
    res = inline_ctx.run_udf(dataset=ds, udf=CoMUDF.with_params(cy=5.0, cx=6.0, r=4.0))
    flat = data.reshape((-1,) + SIG).astype(np.float64)
    y, x = np.indices(SIG)
    inside = (np.hypot(y - 5.0, x - 6.0) <= 4.0).astype(np.float64)
    mass = (flat * inside).sum(axis=(1, 2))
    cy = (flat * inside * y).sum(axis=(1, 2)) / mass
    cx = (flat * inside * x).sum(axis=(1, 2)) / mass
    np.testing.assert_allclose(res["raw_com"].data.reshape(-1, 2), np.stack([cy, cx], axis=1), rtol=1e-9)


def test_worker_cache_scope_and_key():
    class Template:
        pass

    a, b = Template(), Template()
    assert worker_cache_for(a) is worker_cache_for(a)
    assert worker_cache_for(a) is not worker_cache_for(b)  # a patch makes new templates: a new cache
    cache = WorkerCache()
    made: list[int] = []
    with pytest.raises(ZeroDivisionError):
        cache.get_or_make("k", lambda: 1 // 0)
    assert cache.get_or_make("k", lambda: made.append(1) or 7) == 7 == cache.get_or_make("k", lambda: 8)
    assert made == [1] and len(cache) == 1

    shape = rt.common.Shape(NAV + SIG, sig_dims=2)
    roi = np.zeros(NAV, dtype=bool)
    roi[1] = True
    keys = {
        scope_key(UDFMeta(None, shape, None, "uint16", "float32", array_backend="numpy")),
        scope_key(UDFMeta(None, shape, roi, "uint16", "float32", array_backend="numpy")),
        scope_key(UDFMeta(None, shape, ~roi, "uint16", "float32", array_backend="numpy")),
        scope_key(UDFMeta(None, shape, None, "uint16", "float64", array_backend="numpy")),
        scope_key(UDFMeta(None, rt.common.Shape(NAV + (6, 24), sig_dims=2), None, "uint16", "float32",
                          array_backend="numpy")),
        scope_key(UDFMeta(None, shape, None, "uint16", "float32", array_backend="cupy")),
    }
    assert len(keys) == 6
