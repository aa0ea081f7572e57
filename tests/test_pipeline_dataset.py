"""A pipeline's stream as a live data set: UDF results equal numpy over the frames the pipeline made.

The reference frames come from the pipeline's documented sources (``sh_frame_bank``, a replayed array)
and numpy's dark/gain/binning, not from the pipeline itself.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from raytile.common.errors import DataSetException
from raytile.pipeline import Pipeline
from raytile.pipeline.kernels.sources import sh_frame_bank
from raytile.pipeline.stream_source import PipelineFrames, pipeline_dataset
from raytile.udf import SumSigUDF, SumUDF
from raytile.udf.base import UDF

SIDE, N_SUB, BANK, SEED = 32, 4, 5, 3
DARK, GAIN = 100.0, 0.5


def config(camera: dict, integrate: int | None = None) -> dict:
    streams = {"frame": {"shape": [SIDE, SIDE], "dtype": "uint16"},
               "dark": {"shape": [SIDE, SIDE], "dtype": "float32"},
               "gain": {"shape": [SIDE, SIDE], "dtype": "float32"},
               "cal": {"shape": [SIDE, SIDE], "dtype": "float32"},
               "binned": {"shape": [SIDE // 2, SIDE // 2], "dtype": "float32"},
               "exposure": {"shape": [SIDE // 2, SIDE // 2], "dtype": "float32"}}
    stages = [{"name": "camera", "output": "frame", **camera},
              {"name": "dark", "kind": "constant", "output": "dark", "params": {"value": DARK}},
              {"name": "gain", "kind": "constant", "output": "gain", "params": {"value": GAIN}},
              {"name": "correct", "kind": "calibrate", "input": "frame", "auxiliary": ["dark", "gain"],
               "output": "cal"},
              {"name": "bin", "kind": "binning", "input": "cal", "output": "binned", "params": {"factor": 2}}]
    if integrate:
        stages.append({"name": "long", "kind": "integrate", "input": "binned", "output": "exposure",
                       "params": {"frames": integrate}})
    return {"name": "sink_source", "streams": streams, "stages": stages}


SH_CAMERA = {"kind": "sh_frames", "params": {"n_sub": N_SUB, "frames": BANK, "seed": SEED}}


def reference(raw: np.ndarray) -> np.ndarray:
    """numpy's dark/gain correction and 2x2 binning of each frame."""
    cal = (raw.astype(np.float32) - np.float32(DARK)) * np.float32(GAIN)
    return cal.astype(np.float64).reshape(len(raw), SIDE // 2, 2, SIDE // 2, 2).sum(axis=(2, 4))


def sh_raw(count: int) -> np.ndarray:
    bank = sh_frame_bank(N_SUB, SIDE // N_SUB, BANK, SEED, 2000.0, 1.5)
    return bank[np.arange(count) % BANK]


def test_sink_stream_as_dataset_equals_numpy(ctx):
    nav = (4, 6)
    with Pipeline.from_dict(config(SH_CAMERA)) as p:
        ds = pipeline_dataset(ctx, p, "binned", nav_shape=nav, frames_per_partition=5)
        assert ds.shape.sig.to_tuple() == (16, 16) and ds.dtype == np.float32
        total, per_frame = ctx.run_udf(dataset=ds, udf=[SumUDF(dtype="float64"), SumSigUDF()])
        assert p.t == 24  # stepped once per frame taken: nothing made ahead of the run
    expected = reference(sh_raw(24))
    assert np.allclose(total["intensity"].data, expected.sum(axis=0), rtol=1e-5)
    assert np.allclose(per_frame["intensity"].data, expected.sum(axis=(1, 2)).reshape(nav), rtol=1e-5)


def test_multi_rate_stream_gives_one_frame_per_refresh(inline_ctx):
    with Pipeline.from_dict(config(SH_CAMERA, integrate=3)) as p:
        ds = p.as_dataset(inline_ctx, "exposure", nav_shape=(2, 4))
        res = inline_ctx.run_udf(dataset=ds, udf=SumSigUDF())
        assert p.t == 24
    binned = reference(sh_raw(24)).reshape(8, 3, 16, 16).sum(axis=1)
    assert np.allclose(res["intensity"].data, binned.sum(axis=(1, 2)).reshape(2, 4), rtol=1e-5)


class _SlowRecorder(UDF):
    """Records how far the pipeline ran when each partition is processed (inline: same process)."""

    def __init__(self, pipeline=None, seen=None, **kwargs):
        super().__init__(pipeline=pipeline, seen=seen, **kwargs)

    def get_result_buffers(self):
        return {"n": self.buffer(kind="single", dtype="int64")}

    def process_partition(self, partition):
        self.params.seen.append((partition.shape[0], self.params.pipeline.t))
        time.sleep(0.02)
        self.results.n[:] += partition.shape[0]

    def merge(self, dest, src):
        dest.n[:] += src.n


def test_backpressure_holds_the_pipeline_and_nothing_is_lost(inline_ctx):
    """With one partition in flight the pipeline never runs more than two partitions ahead of the UDF."""
    fpp, seen = 4, []
    with Pipeline.from_dict(config(SH_CAMERA)) as p:
        ds = pipeline_dataset(inline_ctx, p, "binned", nav_shape=(8, 8), frames_per_partition=fpp,
                              max_partitions_in_flight=1)
        res = inline_ctx.run_udf(dataset=ds, udf=[_SlowRecorder(pipeline=p, seen=seen), SumUDF(dtype="float64")])
    assert int(res[0]["n"].data[0]) == 64 and len(seen) == 16
    done = np.cumsum([n for n, _ in seen])  # inline: partitions one after the other
    assert max(made - d for d, (_, made) in zip(done, seen)) <= 2 * fpp
    assert np.allclose(res[1]["intensity"].data, reference(sh_raw(64)).sum(axis=0), rtol=1e-5)


def test_a_source_that_ends_ends_the_stream(inline_ctx):
    raw = np.random.default_rng(0).integers(0, 4096, (10, SIDE, SIDE)).astype(np.uint16)
    replay = {"kind": "replay", "params": {"dataset": inline_ctx.load("memory", data=raw), "loop": False}}
    with Pipeline.from_dict(config(replay)) as p:  # exactly the frames the replay has: fine
        res = inline_ctx.run_udf(dataset=pipeline_dataset(inline_ctx, p, "binned", nav_shape=(2, 5)),
                                 udf=SumUDF(dtype="float64"))
    assert np.allclose(res["intensity"].data, reference(raw).sum(axis=0), rtol=1e-5)
    with Pipeline.from_dict(config(replay)) as p:  # more than it has: a clear error, no hang
        ds = pipeline_dataset(inline_ctx, p, "binned", nav_shape=(4, 4), idle_steps=50)
        with pytest.raises(DataSetException, match="ended after 10 frames"):
            inline_ctx.run_udf(dataset=ds, udf=SumUDF())


def test_bad_stream_name(inline_ctx):
    with Pipeline.from_dict(config(SH_CAMERA)) as p:
        with pytest.raises(Exception, match="'nope' is not declared"):
            PipelineFrames(p, "nope")
