"""README's tour: its live-patch example gives the exact result (issue 20: it used to mix masks silently)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import anyio
import numpy as np

from raytile.udf import ApplyMasksUDF, masks

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_live_patch_recomputes():
    tour = README.read_text().split("## A short tour", 1)[1].split("\n## ", 1)[0]
    patches = re.findall(r"run\.update_parameters\((.*)\)", tour)
    assert patches and all("recompute=True" in p for p in patches), patches
    assert "Without it" in tour  # and it says what happens without


class _SlowRing(ApplyMasksUDF):
    """ApplyMasksUDF taking 50 ms a partition: the patch lands while the run goes on, as in a real scan."""

    def process_partition(self, partition) -> None:
        time.sleep(0.05)
        self.process_tile(partition)

    def get_method(self):
        return self.UDF_METHOD.PARTITION


def _live(ctx, ds, recompute: bool):
    """The tour's loop: a ring run patched to another ring after its first partial result."""
    sig = ds.shape.sig.to_tuple()
    ring = _SlowRing(mask_factories=[lambda: masks.ring(8, 8, 2, 5, sig)])
    new = [lambda: masks.ring(8, 8, 3, 7, sig)]

    async def live():
        run = ctx.run_udf_iter(dataset=ds, udf=ring, sync=False)
        patched, last = False, None
        async for part in run:
            last = part
            if not patched:
                run.update_parameters([{"mask_factories": new}], recompute=recompute)
                patched = True
        return last

    return anyio.run(live)


def test_tour_live_patch_with_recompute_equals_a_fresh_run(inline_ctx, rng):
    data = rng.integers(0, 100, size=(8, 4, 16, 16)).astype(np.float32)
    ds = inline_ctx.load("memory", data=data, num_partitions=8)
    ref = np.einsum("yxab,ab->yx", data.astype(np.float64), masks.ring(8, 8, 3, 7, (16, 16)))
    old = np.einsum("yxab,ab->yx", data.astype(np.float64), masks.ring(8, 8, 2, 5, (16, 16)))
    exact = _live(inline_ctx, ds, recompute=True)
    np.testing.assert_allclose(exact.buffers[0]["intensity"].data[..., 0], ref, rtol=1e-5)
    assert set(exact.param_versions.values()) == {1}
    # without recompute the result mixes both masks, as README says
    mixed = _live(inline_ctx, ds, recompute=False).buffers[0]["intensity"].data[..., 0]
    uses_old = np.isclose(mixed, old, rtol=1e-5).all(axis=1)
    assert uses_old.any() and not uses_old.all()
