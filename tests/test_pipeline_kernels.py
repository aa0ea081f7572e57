"""Every built-in kernel against numpy; the replay source against the data set; the AO example against a
hand-written numpy loop."""

from __future__ import annotations

import os

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import ConfigValidationError
from raytile.pipeline import Pipeline, PipelineConfig
from raytile.pipeline.arrays import make_array
from raytile.pipeline.kernels.sources import sh_frame_bank

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def run_kernel(kind: str, x: np.ndarray, out_shape, out_dtype="float32", aux=(), params=None, steps=1):
    """One kernel fed by constant streams; returns its output after ``steps`` steps (x re-emitted each step)."""
    streams = {"x": {"shape": list(x.shape), "dtype": str(x.dtype)},
               "y": {"shape": list(out_shape), "dtype": out_dtype}}
    stages = [{"name": "x", "kind": "constant", "output": "x", "params": {"value": x}}]
    for i, a in enumerate(aux):
        streams[f"a{i}"] = {"shape": list(a.shape), "dtype": str(a.dtype)}
        stages.append({"name": f"a{i}", "kind": "constant", "output": f"a{i}", "params": {"value": a}})
    stages.append({"name": "k", "kind": kind, "input": "x", "auxiliary": [f"a{i}" for i in range(len(aux))],
                   "output": "y", "params": params or {}})
    p = Pipeline.from_dict({"streams": streams, "stages": stages}).build()
    for _ in range(steps):
        p.update_parameters("x", value=x)  # re-emit the input so the kernel triggers
        p.step()
    return p.read("y")


@pytest.fixture
def img(rng):
    return rng.uniform(0, 100, (16, 16)).astype(np.float32)


def test_copy_casts(img):
    np.testing.assert_array_equal(run_kernel("copy", img, img.shape, "int32"), img.astype(np.int32))


def test_affine(img):
    np.testing.assert_allclose(run_kernel("affine", img, img.shape, params={"scale": -1.5, "offset": 2.0}),
                               img * np.float32(-1.5) + np.float32(2.0), rtol=1e-6)


def test_clip(img):
    np.testing.assert_array_equal(run_kernel("clip", img, img.shape, params={"lo": 20.0, "hi": 60.0}),
                                  np.clip(img, 20, 60))


def test_calibrate(rng):
    raw = rng.integers(90, 4000, (16, 16)).astype(np.uint16)
    dark = rng.uniform(90, 110, (16, 16)).astype(np.float32)
    gain = rng.uniform(0.9, 1.1, (16, 16)).astype(np.float32)
    np.testing.assert_allclose(run_kernel("calibrate", raw, raw.shape, aux=(dark, gain)),
                               (raw.astype(np.float32) - dark) * gain, rtol=1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_binning(img, mode):
    ref = img.reshape(4, 4, 4, 4).sum(axis=(1, 3))
    if mode == "mean":
        ref = ref / 16
    np.testing.assert_allclose(run_kernel("binning", img, (4, 4), params={"factor": 4, "mode": mode}), ref,
                               rtol=1e-5)


def centroids_numpy(frame: np.ndarray, n: int, threshold: float) -> np.ndarray:
    p = frame.shape[0] // n
    c = (p - 1) / 2.0
    sx = np.zeros((n, n))
    sy = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            w = frame[i * p:(i + 1) * p, j * p:(j + 1) * p].astype(np.float64)
            if threshold > 0:
                w = np.maximum(w - threshold, 0)
            flux = w.sum()
            if flux > 0:
                yy, xx = np.mgrid[0:p, 0:p]
                sx[i, j] = ((xx - c) * w).sum() / flux
                sy[i, j] = ((yy - c) * w).sum() / flux
    return np.concatenate([sx.ravel(), sy.ravel()])


@pytest.mark.parametrize("threshold", [0.0, 150.0])
def test_centroids(threshold):
    frame = sh_frame_bank(4, 8, 1, 3, 1000.0, 1.2)[0]
    frame[:8, :8] = 0  # one empty subaperture: slope 0
    got = run_kernel("centroids", frame, (32,), params={"n_sub": 4, "threshold": threshold})
    np.testing.assert_allclose(got, centroids_numpy(frame, 4, threshold), rtol=1e-4, atol=1e-4)
    assert got[0] == 0 and got[16] == 0


def test_matvec(rng):
    m = rng.standard_normal((12, 8)).astype(np.float32)
    x = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(run_kernel("matvec", x, (12,), aux=(m,)), m @ x, rtol=1e-5, atol=1e-6)


def test_leaky_integrator(rng):
    x = rng.standard_normal(6).astype(np.float32)
    got = run_kernel("leaky_integrator", x, (6,), params={"gain": 0.3, "leak": 0.9}, steps=5)
    ref = np.zeros(6, np.float32)
    for _ in range(5):
        ref = np.float32(0.9) * ref + np.float32(0.3) * x
    np.testing.assert_allclose(got, ref, rtol=1e-5)


@pytest.mark.parametrize("shift", [False, True])
def test_fft_magnitude(img, shift):
    ref = np.abs(np.fft.fft2(img))
    if shift:
        ref = np.fft.fftshift(ref)
    np.testing.assert_allclose(run_kernel("fft_magnitude", img, img.shape, params={"shift": shift}), ref,
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "std"])
@pytest.mark.parametrize("axis, shape", [(None, (1,)), (0, (16,)), ([0, 1], (1,)), (-1, (16,))])
def test_reduce(img, op, axis, shape):
    ax = tuple(axis) if isinstance(axis, list) else axis
    ref = np.asarray(getattr(np, op)(img.astype(np.float64), axis=ax)).reshape(shape)
    np.testing.assert_allclose(run_kernel("reduce", img, shape, params={"op": op, "axis": axis}), ref, rtol=1e-4)


def test_reduce_bad_axis_names_the_field(img):
    with pytest.raises(ConfigValidationError, match="stage 'k': field 'params.axis': 2"):
        run_kernel("reduce", img, (1,), params={"axis": 2})


def test_sink_keeps_last_n():
    cfg = {"streams": {"f": {"shape": [4, 4], "dtype": "uint16"}},
           "stages": [{"name": "cam", "kind": "sh_frames", "output": "f", "params": {"n_sub": 1, "frames": 4}},
                      {"name": "log", "kind": "sink", "input": "f", "params": {"keep": 3}}]}
    p = Pipeline.from_dict(cfg).build()
    p.step(7)
    frames = sh_frame_bank(1, 4, 4, 0, 2000.0, 1.5)
    np.testing.assert_array_equal(p.sink("log"), frames[[4 % 4, 5 % 4, 6 % 4]])


def test_array_specs(tmp_path):
    np.save(tmp_path / "m.npy", np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(make_array({"npy": "m.npy"}, (2, 3), np.float32, "w", str(tmp_path)),
                                  np.arange(6.0).reshape(2, 3))
    ref = 1.0 + 2.0 * np.random.default_rng(4).standard_normal((2, 3))
    np.testing.assert_allclose(make_array({"random": {"seed": 4, "loc": 1.0, "scale": 2.0}}, (2, 3), np.float64,
                                          "w"), ref)
    with pytest.raises(ConfigValidationError, match="where: shape \\[4\\]"):
        make_array([1, 2, 3, 4], (2, 3), np.float32, "where")


# -- replay source ----------------------------------------------------------------------------------------------
def replay_config(dataset, frames_per_read=3, loop=True) -> dict:
    return {"streams": {"f": {"shape": [5, 6], "dtype": "uint16"}},
            "stages": [{"name": "src", "kind": "replay", "output": "f",
                        "params": {"dataset": dataset, "frames_per_read": frames_per_read, "loop": loop}},
                       {"name": "log", "kind": "sink", "input": "f", "params": {"keep": 20}}]}


def test_replay_memory_dataset_in_nav_order_and_loops(rng):
    data = rng.integers(0, 1000, (2, 4, 5, 6)).astype(np.uint16)
    ds = rt.Context(executor="inline").load("memory", data=data, num_partitions=3)
    p = Pipeline.from_dict(replay_config(ds)).build()
    p.step(11)
    flat = data.reshape(8, 5, 6)
    np.testing.assert_array_equal(p.sink("log"), flat[[i % 8 for i in range(11)]])


def test_replay_npy_from_json_params_without_loop(tmp_path, rng):
    data = rng.integers(0, 1000, (7, 5, 6)).astype(np.uint16)
    np.save(tmp_path / "scan.npy", data)
    p = Pipeline.from_dict(replay_config({"type": "npy", "path": str(tmp_path / "scan.npy")}, 4, False)).build()
    p.step(10)
    np.testing.assert_array_equal(p.sink("log"), data)  # 7 frames, then the source stops refreshing
    assert p.stage("src").exhausted


def test_replay_shape_mismatch_names_stage(rng):
    ds = rt.Context(executor="inline").load("memory", data=np.zeros((4, 3, 3), np.uint16))
    with pytest.raises(ConfigValidationError, match="stage 'src': field 'params.dataset': frames are \\[3, 3\\]"):
        Pipeline.from_dict(replay_config(ds)).build()


def test_replay_rate(rng):
    ds = rt.Context(executor="inline").load("memory", data=np.zeros((4, 5, 6), np.uint16))
    cfg = replay_config(ds)
    cfg["stages"][0]["params"]["rate_hz"] = 200.0
    p = Pipeline.from_dict(cfg).build()
    p.step(11)
    assert 150 < p.metrics()["src"]["hz"] < 230


# -- the AO example ---------------------------------------------------------------------------------------------
def ao_numpy_loop(steps: int) -> np.ndarray:
    """The AO example written by hand in numpy (same frames, dark, gain, reconstructor)."""
    frames = sh_frame_bank(16, 16, 16, 1, 2000.0, 1.5)
    dark = np.float32(100.0)
    gain = make_array({"random": {"seed": 2, "dist": "uniform", "loc": 0.95, "scale": 0.1}}, (256, 256),
                      np.float32, "gain")
    recon = make_array({"random": {"seed": 3, "scale": 0.01}}, (1024, 512), np.float32, "recon")
    integrated = np.zeros(1024, np.float32)
    commands = np.zeros(1024, np.float32)
    for t in range(steps):
        cal = (frames[t % 16].astype(np.float32) - dark) * gain
        slopes = centroids_numpy(cal, 16, 5.0).astype(np.float32)
        modes = recon @ slopes
        integrated = np.float32(0.9) * integrated + np.float32(0.2) * modes
        commands = np.clip(integrated, -0.25, 0.25)
    return commands


def test_ao_example_equals_numpy_loop():
    p = Pipeline.from_yaml(os.path.join(EXAMPLES, "ao_loop.yaml")).build()
    p.step(20)
    got = p.read("commands")
    ref = ao_numpy_loop(20)
    assert got.shape == (1024,) and 0 < np.count_nonzero(np.abs(ref) < 0.25) < 1024  # some clipped, not all
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def test_all_examples_validate():
    names = [f for f in os.listdir(EXAMPLES) if f.endswith(".yaml")]
    assert "ao_loop.yaml" in names
    for f in names:
        Pipeline(PipelineConfig.from_yaml(os.path.join(EXAMPLES, f)))


def test_detector_example_equals_numpy():
    p = Pipeline.from_yaml(os.path.join(EXAMPLES, "detector_preproc.yaml")).build()
    p.step(16)
    frames = sh_frame_bank(16, 16, 8, 5, 2000.0, 1.5).astype(np.float32) - 100
    binned = frames.reshape(8, 128, 2, 128, 2).sum(axis=(2, 4))
    np.testing.assert_allclose(p.sink("totals")[:, 0], binned.sum(axis=(1, 2))[np.arange(16) % 8], rtol=1e-4)
    np.testing.assert_allclose(p.read("spectrum"), np.fft.fftshift(np.abs(np.fft.fft2(binned[15 % 8]))),
                               rtol=1e-3, atol=1e-1)
    np.testing.assert_allclose(p.read("exposure"), binned.sum(axis=0), rtol=1e-4)
    assert p.metrics()["long_exposure"]["steps"] == 16 and p.generation("exposure") == 15
