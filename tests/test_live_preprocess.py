"""A pipeline (dark, gain, binning) in front of the UDFs of a live run, on the workers, per frame stack.

Live results with ``preprocess=`` equal numpy applying dark/gain/binning to the frames the Merlin
simulator sent, on the inline executor and on Ray. Simulators stop with their context managers.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.live import LiveContext
from raytile.live.detectors.merlin import MerlinSimulator
from raytile.pipeline.frame_stacks import FrameStackPipeline
from raytile.udf import AutoUDF, SumSigUDF, SumUDF

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "detector_preproc.yaml")
NAV = (4, 8)


def sensor_frames(seed: int, sig=(256, 256), nav=NAV) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 0x1000, size=(int(np.prod(nav)),) + sig).astype(np.uint32)


def bin2(frames: np.ndarray) -> np.ndarray:
    k, h, w = frames.shape
    return frames.reshape(k, h // 2, 2, w // 2, 2).sum(axis=(2, 4))


def calib_config(sig, dark, gain, mode="sum") -> dict:
    h, w = sig
    return {
        "name": "calib_bin",
        "streams": {"frame": {"shape": [h, w], "dtype": "uint16"}, "dark": {"shape": [h, w], "dtype": "float32"},
                    "gain": {"shape": [h, w], "dtype": "float32"}, "cal": {"shape": [h, w], "dtype": "float32"},
                    "binned": {"shape": [h // 2, w // 2], "dtype": "float32"}},
        "stages": [
            {"name": "camera", "kind": "constant", "output": "frame"},  # stands in for the detector
            {"name": "dark", "kind": "constant", "output": "dark", "params": {"value": dark}},
            {"name": "gain", "kind": "constant", "output": "gain", "params": {"value": gain}},
            {"name": "correct", "kind": "calibrate", "input": "frame", "auxiliary": ["dark", "gain"],
             "output": "cal"},
            {"name": "bin", "kind": "binning", "input": "cal", "output": "binned",
             "params": {"factor": 2, "mode": mode}},
        ],
    }


def connect(ctx, sim):
    return ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=sim.data_port,
                                              api_host="127.0.0.1", api_port=sim.api_port)


@pytest.fixture(params=["inline", pytest.param("ray", marks=pytest.mark.ray)])
def live_ctx(request):
    if request.param == "inline":
        return LiveContext(executor="inline")
    return LiveContext(executor=request.getfixturevalue("ray_context").executor)


def test_example_preproc_on_a_live_run_equals_numpy(live_ctx):
    """examples/detector_preproc.yaml's dark (100), gain (1) and 2x2 binning before SumUDF/SumSigUDF."""
    frames = sensor_frames(1)
    pre = FrameStackPipeline.from_yaml(EXAMPLE, output="binned")
    assert pre.stacked and pre.stages == ["correct", "bin"]
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV) as sim, connect(live_ctx, sim) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0),
                                       frames_per_partition=8, preprocess=pre)
        assert aq.shape.sig.to_tuple() == (128, 128) and aq.dtype == np.float32
        total, per_frame = live_ctx.run_udf(dataset=aq, udf=[SumUDF(), SumSigUDF()])
    expected = bin2(frames.astype(np.float64) - 100.0)
    assert np.allclose(total["intensity"].data, expected.sum(axis=0), rtol=1e-5)
    assert np.allclose(per_frame["intensity"].data, expected.sum(axis=(1, 2)).reshape(NAV), rtol=1e-5)


def test_dark_gain_mean_binning_with_roi_and_frames_equal_numpy(live_ctx):
    """Non-trivial dark and gain arrays, mean binning, a ROI; the preprocessed frames themselves too."""
    sig = (32, 64)
    rng = np.random.default_rng(7)
    dark = rng.uniform(0, 50, sig).astype(np.float32)
    gain = rng.uniform(0.5, 1.5, sig).astype(np.float32)
    frames = sensor_frames(2, sig)
    roi = np.zeros(NAV, bool)
    roi[1:3, 2:7] = True
    pre = FrameStackPipeline.from_dict(calib_config(sig, dark, gain, mode="mean"), input="frame")
    assert pre.input == "frame" and pre.output == "binned"
    with MerlinSimulator(frames, mode="R12", nav_shape=NAV) as sim, connect(live_ctx, sim) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0),
                                       frames_per_partition=5, preprocess=pre)
        picked, total = live_ctx.run_udf(dataset=aq, roi=roi, udf=[AutoUDF(f=lambda frame: frame), SumUDF()])
    cal = (frames.astype(np.float32) - dark) * gain
    expected = bin2(cal.astype(np.float64)) / 4
    assert np.allclose(picked["result"].data[roi], expected[roi.reshape(-1)], rtol=1e-5, atol=1e-3)
    assert np.allclose(total["intensity"].data, expected[roi.reshape(-1)].sum(axis=0), rtol=1e-5)


def test_stream_load_with_preprocess_iter_damage_grows(inline_ctx):
    """The generic form: ``ctx.load("stream", ..., preprocess=)`` over batches of any size."""
    sig = (16, 16)
    frames = sensor_frames(3, sig, nav=(6, 6)).astype(np.uint16)
    pre = FrameStackPipeline.from_dict(calib_config(sig, 10.0, 2.0), input="frame")
    ds = inline_ctx.load("stream", frames=(frames[i:i + 7] for i in range(0, 36, 7)), nav_shape=(6, 6),
                         sig_shape=sig, dtype="uint16", frames_per_partition=6, preprocess=pre)
    fractions, last = [], None
    for part in inline_ctx.run_udf_iter(dataset=ds, udf=SumUDF()):
        fractions.append(part.damage.fraction)
        last = part.buffers[0]["intensity"].data
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) >= 2
    expected = bin2((frames.astype(np.float64) - 10.0) * 2.0).sum(axis=0)
    assert np.allclose(last, expected, rtol=1e-5)


def test_stacked_equals_the_pipeline_frame_by_frame():
    """Each stack rule (calibrate, binning, fft, reduce) gives what the kernels give one frame a step."""
    frames = sensor_frames(4, (64, 64), nav=(1, 5)).astype(np.uint16)
    for output in ("binned", "spectrum", "total"):
        raw = calib_config((64, 64), 3.0, 0.5)
        raw["streams"]["spectrum"] = {"shape": [32, 32], "dtype": "float32"}
        raw["streams"]["total"] = {"shape": [1], "dtype": "float32"}
        raw["stages"] += [{"name": "fft", "kind": "fft_magnitude", "input": "binned", "output": "spectrum",
                           "params": {"shift": True}},
                          {"name": "total", "kind": "reduce", "input": "binned", "output": "total",
                           "params": {"op": "max"}}]
        pre = FrameStackPipeline.from_dict(raw, input="frame", output=output)
        assert pre.stacked
        stacked = pre(frames)
        pre.stacked = False  # the same stages stepped once per frame
        by_frame = pre(frames)
        assert stacked.shape == by_frame.shape == (5,) + pre.sig_shape
        assert np.allclose(stacked, by_frame, rtol=1e-5)
    again = pickle.loads(pickle.dumps(pre))
    assert np.array_equal(again(frames), by_frame)


def test_bad_preprocess_is_a_clear_error(inline_ctx):
    with pytest.raises(ConfigValidationError, match="pass output="):
        FrameStackPipeline.from_yaml(EXAMPLE)
    with pytest.raises(ConfigValidationError, match="'nope' is not declared"):
        FrameStackPipeline.from_yaml(EXAMPLE, output="nope")
    with pytest.raises(ConfigValidationError, match="not computed from the input stream"):
        FrameStackPipeline.from_yaml(EXAMPLE, output="dark")
    pre = FrameStackPipeline.from_yaml(EXAMPLE, output="binned")
    with pytest.raises(ConfigValidationError, match=r"'frame' is \[256, 256\] uint16; the frames are \[16, 16\]"):
        inline_ctx.load("stream", frames=[], nav_shape=(2, 2), sig_shape=(16, 16), dtype="uint16", preprocess=pre)
    with pytest.raises(DataSetException, match="preprocess"):
        inline_ctx.load("stream", frames=[], nav_shape=(2, 2), sig_shape=(16, 16), dtype="uint16",
                        preprocess=lambda x: x)
    multi = FrameStackPipeline.from_yaml(EXAMPLE, output="exposure")  # integrate: one frame out of eight
    ds = inline_ctx.load("stream", frames=[np.zeros((4, 256, 256), np.uint16)], nav_shape=(2, 2),
                         sig_shape=(256, 256), dtype="uint16", preprocess=multi)
    with pytest.raises(DataSetException, match="was not refreshed for frame 0"):
        inline_ctx.run_udf(dataset=ds, udf=SumUDF())


def test_a_stack_rule_is_for_kernels_only():
    from raytile.pipeline.frame_stacks import STACK_RULES, register_stack_rule

    with pytest.raises(ConfigValidationError, match="'constant' is a .*not a Kernel"):
        register_stack_rule("constant")  # a source stage: it has no compute_into to run on a stack
    assert "constant" not in STACK_RULES
