"""The ``raytile`` command line: real files in, real files out, checked against numpy."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from raytile.cli import main
from raytile.cli.demo import demo_shape

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NAV, SIG = (4, 8), (256, 256)


def ring_reference(sig_shape, cy, cx, ri, ro):
    """The ring mask, written out here independently of raytile.udf.masks."""
    y = np.arange(sig_shape[0])[:, None]
    x = np.arange(sig_shape[1])[None, :]
    d = np.hypot(y - cy, x - cx)
    return ((d > ri) & (d <= ro)).astype(np.float64)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    out = tmp_path_factory.mktemp("out")
    rc = main(["demo", "--size-gib", "0.004", "--executor", "inline", "--cache-dir", str(cache),
               "--out", str(out), "--no-progress"])
    raws = list(cache.glob("*.raw"))
    return rc, cache, out, raws


def test_demo_shape():
    assert demo_shape(1.0) == ((64, 128), (256, 256))
    nav, sig = demo_shape(0.004)
    assert nav == NAV and sig == SIG


def test_demo_writes_data_once_and_atomically(demo):
    rc, cache, _, raws = demo
    assert rc == 0
    assert len(raws) == 1
    raw = raws[0]
    assert raw.stat().st_size == np.prod(NAV) * np.prod(SIG) * 2
    assert [p.name for p in cache.iterdir() if "tmp" in p.name] == []
    mtime = raw.stat().st_mtime_ns
    # a second demo reuses the cached file instead of generating it again
    out2 = cache / "second"
    assert main(["demo", "--size-gib", "0.004", "--executor", "inline", "--cache-dir", str(cache),
                 "--out", str(out2), "--no-progress"]) == 0
    assert raw.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in cache.glob("*.raw")) == [raw.name]


def test_demo_prints_start_up_first_and_warm_run(demo, capsys):
    _, cache, _, raws = demo
    assert main(["demo", "--size-gib", "0.004", "--executor", "inline", "--cache-dir", str(cache),
                 "--out", str(cache / "third"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^start-up: \d+\.\d\d s \(inline executor", out, re.M), out
    gb = raws[0].stat().st_size / 1e9
    for label in ("first run", "warm run"):
        found = re.findall(rf"^{label}: +(\d+\.\d+) GB in (\d+\.\d+) s: (\d+\.\d+) GB/s, ([\d,]+) frames/s",
                           out, re.M)
        assert len(found) == 1, (label, out)
        size, seconds, rate, fps = found[0]
        assert float(size) == round(gb, 3)
        assert float(seconds) >= 0 and float(rate) > 0 and int(fps.replace(",", "")) > 0
    assert out.index("first run:") < out.index("warm run:")


def test_demo_data_has_structure(demo):
    _, _, _, raws = demo
    data = np.fromfile(raws[0], dtype=np.uint16).reshape(NAV + SIG).astype(np.float64)
    mean_frame = data.mean(axis=(0, 1))
    # the direct beam: a bright disk near the centre of the frame, dim background
    cy, cx = np.unravel_index(np.argmax(mean_frame), SIG)
    assert abs(cy - SIG[0] / 2) < SIG[0] / 8 and abs(cx - SIG[1] / 2) < SIG[1] / 8
    assert mean_frame.max() > 20 * np.median(mean_frame)
    # grains: the integrated intensity differs between scan positions beyond the noise
    per_frame = data.sum(axis=(2, 3))
    assert per_frame.std() / per_frame.mean() > 0.05


def test_demo_results_equal_numpy(demo):
    _, _, out, raws = demo
    data = np.fromfile(raws[0], dtype=np.uint16).reshape(NAV + SIG)
    for name in ("sum.png", "sumsig.png", "ring.png"):
        blob = (out / name).read_bytes()
        assert blob[:8] == PNG_MAGIC, name
        assert len(blob) > 1000
    with np.load(out / "results.npz") as npz:
        assert sorted(npz.files) == ["ring", "sum", "sumsig"]
        # integer sums: exact
        np.testing.assert_array_equal(npz["sum"], data.sum(axis=(0, 1), dtype=np.int64))
        np.testing.assert_array_equal(npz["sumsig"], data.sum(axis=(2, 3), dtype=np.int64))
        mask = ring_reference(SIG, SIG[0] / 2, SIG[1] / 2, SIG[0] / 4, SIG[0] * 0.45)
        ref = np.einsum("abyx,yx->ab", data.astype(np.float64), mask)
        assert npz["ring"].shape == NAV
        np.testing.assert_allclose(npz["ring"], ref, rtol=1e-5)
        assert npz["ring"].std() > 0


def test_run_raw(demo, tmp_path, capsys):
    _, _, _, raws = demo
    data = np.fromfile(raws[0], dtype=np.uint16).reshape(NAV + SIG)
    out = tmp_path / "sub" / "res.npz"
    rc = main(["run", "--format", "raw", "--path", str(raws[0]), "--nav-shape", "4,8", "--sig-shape", "256x256",
               "--dtype", "uint16", "--udf", "sum,sumsig", "--out", str(out), "--executor", "inline",
               "--no-progress"])
    assert rc == 0
    assert "GB/s" in capsys.readouterr().out
    with np.load(out) as npz:
        assert sorted(npz.files) == ["sum", "sumsig"]
        np.testing.assert_array_equal(npz["sum"], data.sum(axis=(0, 1), dtype=np.int64))
        np.testing.assert_array_equal(npz["sumsig"], data.sum(axis=(2, 3), dtype=np.int64))


def test_run_npy_ring_with_radii(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 1000, size=(5, 6, 16, 20)).astype(np.float32)
    p = tmp_path / "d.npy"
    np.save(p, data)
    out = tmp_path / "ring.npz"
    rc = main(["run", "--format", "npy", "--path", str(p), "--udf", "ring", "--ring-radii", "2,6",
               "--ring-center", "7,9", "--out", str(out), "--executor", "inline", "--no-progress"])
    assert rc == 0
    mask = ring_reference((16, 20), 7, 9, 2, 6)
    with np.load(out) as npz:
        np.testing.assert_allclose(npz["ring"], np.einsum("abyx,yx->ab", data.astype(np.float64), mask),
                                   rtol=1e-5)


@pytest.mark.parametrize("module", ["raytile", "raytile.cli"])
def test_python_m_runs_the_command(module):
    """``python -m raytile`` and ``python -m raytile.cli`` are the ``raytile`` command (cli is a package)."""
    proc = subprocess.run([sys.executable, "-m", module, "demo", "--help"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: raytile demo") and "--size-gib" in proc.stdout


def test_info(capsys):
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    assert "raytile 0.1.0" in text
    assert "numpy" in text and np.__version__ in text
    assert "formats" in text and "raw" in text and "npy" in text
    assert "ray" in text


@pytest.mark.parametrize("argv, needle", [
    (["run", "--path", "x.raw", "--nav-shape", "4,a", "--sig-shape", "8,8", "--dtype", "uint16"], "not a shape"),
    (["run", "--path", "x.raw", "--nav-shape", "0,4", "--sig-shape", "8,8", "--dtype", "uint16"], "positive"),
    (["demo", "--size-gib", "-1"], "must be positive"),
    (["demo", "--executor", "dask"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_bad_arguments_argparse(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_bad_arguments_after_parsing(demo, tmp_path, capsys):
    _, _, _, raws = demo
    raw = str(raws[0])
    cases = [
        (["run", "--path", raw, "--nav-shape", "4,8", "--sig-shape", "256,256", "--dtype", "uint16",
          "--udf", "bogus"], "unknown --udf bogus"),
        (["run", "--path", str(tmp_path / "missing.raw"), "--nav-shape", "4,8", "--sig-shape", "256,256",
          "--dtype", "uint16"], "file not found"),
        (["run", "--path", raw, "--nav-shape", "64,64", "--sig-shape", "256,256", "--dtype", "uint16"],
         "too short"),
        (["run", "--path", raw, "--nav-shape", "4,8", "--sig-shape", "256,256", "--dtype", "nonsense"],
         "parameter 'dtype' must be a numeric dtype such as 'uint16', '>f4' or np.float32, got 'nonsense'"),
        (["run", "--path", raw, "--nav-shape", "4,8"], "--format raw needs --sig-shape, --dtype"),
        (["run", "--path", raw, "--nav-shape", "4,8", "--sig-shape", "256,256", "--dtype", "uint16",
          "--udf", "ring", "--ring-radii", "9,3"], "inner <= outer"),
        (["run", "--path", raw, "--nav-shape", "4,8", "--sig-shape", "256,256", "--dtype", "uint16",
          "--udf", "ring", "--ring-radii", "1,2,3"], "two numbers"),
    ]
    for argv, needle in cases:
        rc = main(argv + ["--executor", "inline", "--no-progress", "--out", str(tmp_path / "o.npz")])
        err = capsys.readouterr().err
        assert rc == 2, argv
        assert needle in err, (argv, err)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("raytile run: error:"), err
    assert not os.path.exists(tmp_path / "o.npz")


def _load_example(name):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"raytile_example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_examples_run_inline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAYTILE_CACHE", str(tmp_path / "cache"))
    png = tmp_path / "qs.png"
    _load_example("quickstart").main(["--executor", "inline", "--out", str(png)])
    assert png.read_bytes()[:8] == PNG_MAGIC
    _load_example("async_live").main(["--executor", "inline", "--partitions", "8"])
    out = capsys.readouterr().out
    assert "--> ring radii" in out
    last = [ln for ln in out.splitlines() if ln.startswith("finished:")][-1]
    # patched after a quarter of the scan: some partitions used the old ring, the rest the new one
    assert "0: " in last and "1: " in last


def test_ray_executor_falls_back_to_inline_when_missing(demo, tmp_path, monkeypatch, capsys):
    import sys

    _, _, _, raws = demo
    monkeypatch.setitem(sys.modules, "raytile.actors.executor", None)  # import now raises ImportError
    out = tmp_path / "r.npz"
    rc = main(["run", "--path", str(raws[0]), "--nav-shape", "4,8", "--sig-shape", "256,256", "--dtype", "uint16",
               "--udf", "sumsig", "--out", str(out), "--executor", "ray", "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Ray executor is not available" in text and "running inline" in text
    data = np.fromfile(raws[0], dtype=np.uint16).reshape(NAV + SIG)
    with np.load(out) as npz:
        np.testing.assert_array_equal(npz["sumsig"], data.sum(axis=(2, 3), dtype=np.int64))


@pytest.mark.ray
def test_run_with_the_coordinator_as_an_actor(demo, tmp_path, capsys, ray_context):
    _, _, _, raws = demo
    data = np.fromfile(raws[0], dtype=np.uint16).reshape(NAV + SIG)
    out = tmp_path / "res.npz"
    rc = main(["run", "--format", "raw", "--path", str(raws[0]), "--nav-shape", "4,8", "--sig-shape", "256x256",
               "--dtype", "uint16", "--udf", "sumsig", "--out", str(out), "--coordinator", "actor",
               "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    with np.load(out) as npz:
        np.testing.assert_array_equal(npz["sumsig"], data.sum(axis=(2, 3), dtype=np.int64))
    rc = main(["run", "--format", "raw", "--path", str(raws[0]), "--nav-shape", "4,8", "--sig-shape", "256x256",
               "--dtype", "uint16", "--executor", "inline", "--coordinator", "actor", "--out", str(out)])
    assert rc == 2 and "coordinator='actor' needs executor='ray'" in capsys.readouterr().err
