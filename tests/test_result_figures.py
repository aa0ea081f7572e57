"""Figures for every result (issue 35): `raytile run` and `raytile live run` write labelled PNGs beside the
.npz, never over an earlier output, a live run stopped mid-scan saves what it merged, and
`raytile.figures.show` gives an Analysis result a colour bar and a title that is not cut off.

The labels are checked on the PNG's pixels: each label's box (title, axis labels, colour bar label) holds
text-dark pixels in the written file, where the same figure rendered with its texts hidden is blank."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from matplotlib.image import imread

import raytile as rt
from raytile.cli import main
from raytile.figures import result_figures, show

from _procs import stop_process

RING = (8.0, 10.0, 3.0, 7.0)  # cy, cx, ri, ro of --ring-center 8,10 --ring-radii 3,7


def _text_boxes(fig):
    """The label texts of a figure's image and colour bar axes, drawn, with their boxes in PNG pixels
    (rows from the top)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax, cax = fig.axes[0], fig.axes[-1]
    texts = {"title": ax.title, "xlabel": ax.xaxis.label, "ylabel": ax.yaxis.label, "colour bar": cax.yaxis.label}
    height = fig.canvas.get_width_height()[1]
    boxes = {}
    for name, t in texts.items():
        b = t.get_window_extent(renderer)
        boxes[name] = (int(height - b.y1), int(np.ceil(height - b.y0)), int(b.x0), int(np.ceil(b.x1)))
    return texts, boxes


def _dark(rgba: np.ndarray, box) -> int:
    r0, r1, c0, c1 = box
    region = np.asarray(rgba, dtype=np.float64)[r0:r1, c0:c1, :3]
    return int((region.mean(axis=-1) < 0.5).sum())


def assert_labels_drawn(png_path, fig) -> None:
    """The PNG at ``png_path`` is ``fig`` with its labels drawn: dark text pixels in each label's box,
    which the same figure rendered without its texts lacks."""
    png = imread(png_path)
    texts, boxes = _text_boxes(fig)
    assert png.shape[:2] == fig.canvas.get_width_height()[::-1]
    for t in texts.values():
        t.set_visible(False)
    fig.canvas.draw()
    blank = np.asarray(fig.canvas.buffer_rgba()) / 255.0
    for name, box in boxes.items():
        assert box[1] > box[0] and box[3] > box[2], (name, box)
        # the box may graze the image's edge or a tick: the label adds at least 10 dark pixels to what is there
        assert _dark(png, box) >= _dark(blank, box) + 10, f"{png_path}: no {name} drawn in {box}"


def _cyan(rgba: np.ndarray) -> int:
    px = np.asarray(rgba, dtype=np.float64)[..., :3]
    return int(((px[..., 0] < 0.3) & (px[..., 1] > 0.7) & (px[..., 2] > 0.7)).sum())


@pytest.fixture
def scan(tmp_path):
    rng = np.random.default_rng(5)
    data = rng.integers(0, 200, size=(6, 9, 16, 20)).astype(np.float32)
    np.save(tmp_path / "scan.npy", data)
    return tmp_path / "scan.npy", data


def _run(path, out) -> int:
    return main(["run", "--format", "npy", "--path", str(path), "--udf", "sum,sumsig,ring", "--ring-center",
                 "8,10", "--ring-radii", "3,7", "--out", str(out), "--executor", "inline", "--no-progress"])


def test_run_writes_labelled_pngs_beside_the_npz(scan, tmp_path):
    path, data = scan
    out = tmp_path / "res.npz"
    assert _run(path, out) == 0
    with np.load(out) as npz:
        arrays = {k: npz[k] for k in npz.files}
    np.testing.assert_array_equal(arrays["sum"], data.sum(axis=(0, 1)))
    figs = result_figures(arrays, rings=[RING], frames=54)
    for name in ("sum", "sumsig", "ring"):
        assert_labels_drawn(tmp_path / f"res-{name}.png", figs[name])
    # the ring detector is drawn on the sum frame: cyan pixels, which the frame's colour map never has
    assert _cyan(imread(tmp_path / "res-sum.png")) > 50
    assert _cyan(imread(tmp_path / "res-sumsig.png")) == 0


def test_run_never_overwrites_an_earlier_output(scan, tmp_path, capsys):
    path, _ = scan
    out = tmp_path / "res.npz"
    assert _run(path, out) == 0
    first = {p.name: p.read_bytes() for p in tmp_path.glob("res*")}
    assert sorted(first) == ["res-ring.png", "res-sum.png", "res-sumsig.png", "res.npz"]
    capsys.readouterr()
    assert _run(path, out) == 0
    said = capsys.readouterr().out
    assert f"{out} exists; this result goes to {tmp_path / 'res-1.npz'}" in said
    assert {p.name: p.read_bytes() for p in tmp_path.glob("res*") if p.name in first} == first  # untouched
    assert sorted(p.name for p in tmp_path.glob("res-1*")) == ["res-1-ring.png", "res-1-sum.png",
                                                              "res-1-sumsig.png", "res-1.npz"]
    with np.load(out) as a, np.load(tmp_path / "res-1.npz") as b:
        np.testing.assert_array_equal(a["sum"], b["sum"])
    # a PNG left alone from another run also moves the whole set on, so no result sits beside foreign PNGs
    (tmp_path / "other-sum.png").write_bytes(b"not ours")
    assert _run(path, tmp_path / "other.npz") == 0
    assert (tmp_path / "other-1.npz").exists() and not (tmp_path / "other.npz").exists()
    assert (tmp_path / "other-sum.png").read_bytes() == b"not ours"


def test_show_gives_an_analysis_result_a_colour_bar_and_a_whole_title(inline_ctx, tmp_path):
    rng = np.random.default_rng(2)
    data = rng.integers(0, 100, size=(5, 7, 16, 16)).astype(np.float32)
    ds = inline_ctx.load("memory", data=data)
    res = inline_ctx.run(inline_ctx.create_ring_analysis(dataset=ds, cx=8, cy=8, ri=2, ro=6))
    fig = show(res.intensity)
    ax, cax = fig.axes[0], fig.axes[-1]
    assert len(fig.axes) == 2 and "counts" in cax.get_ylabel()
    assert res.intensity.title in ax.get_title()
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), np.asarray(res.intensity.raw_data))
    long = "a virtual annular dark field detector from 2 to 6 pixels around the centre of the frame, per scan position"
    fig = show(res.intensity, title=long)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box, whole = fig.axes[0].title.get_window_extent(renderer), fig.bbox
    assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and box.y1 <= whole.y1, (box, whole)
    assert fig.axes[0].get_title().replace("\n", " ") == long
    fig.savefig(tmp_path / "ring.png")
    assert_labels_drawn(tmp_path / "ring.png", fig)


def _merlin_sim(tmp_path, frames, rate):
    np.save(tmp_path / "scan.npy", frames)
    proc = subprocess.Popen([sys.executable, "-m", "raytile.cli", "live", "sim", "merlin", "--dataset",
                             str(tmp_path / "scan.npy"), "--format", "npy", "--frame-rate", str(rate),
                             "--data-port", "0", "--api-port", "0", "--acquisitions", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    found = re.search(r"data 127.0.0.1:(\d+), control 127.0.0.1:(\d+)", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"simulator did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, found.group(1), found.group(2)


class _Stderr(threading.Thread):
    """Collects a process's stderr (the progress bar writes no newlines) for :meth:`wait_for`."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.text = stream, ""

    def run(self) -> None:
        while True:
            c = self.stream.read(1)
            if not c:
                return
            self.text += c

    def wait_for(self, needle: str, proc, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert proc.poll() is None, f"ended ({proc.returncode}) before {needle!r}: {self.text[-3000:]}"
            assert time.monotonic() < deadline, f"no {needle!r} within {timeout} s: {self.text[-3000:]}"
            time.sleep(0.1)


def test_live_run_writes_pngs_and_a_run_stopped_mid_scan_saves_its_partial_result(tmp_path):
    """A slow scan (400 frames at 10 frames/s, partitions of 50): SIGTERM once the progress bar says a
    partition is merged; the .npz holds the sum of exactly the frames it says it merged (``damage``),
    ``complete`` is False, its figures say "partial", and the earlier output is not overwritten."""
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 0xFFF, size=(20, 20, 16, 24)).astype(np.uint16)
    sim, data_port, api_port = _merlin_sim(tmp_path, frames, rate=10)
    out = tmp_path / "live.npz"
    (tmp_path / "live.npz").write_bytes(b"an earlier result")
    run = subprocess.Popen([sys.executable, "-m", "raytile.cli", "live", "run", "merlin", "--udf", "sum,sumsig,ring",
                            "--data-port", data_port, "--api-port", api_port, "--executor", "inline",
                            "--timeout", "60", "--out", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = _Stderr(run.stderr)
    err.start()
    try:
        err.wait_for("partitions=", run, timeout=120)  # a partial result is merged (and taken)
        time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
        rest = run.stdout.read()
        run.wait(60)
    finally:
        stop_process(run)
        stop_process(sim)
    assert run.returncode == 130, (rest, err.text[-3000:])
    assert "stopped (SIGTERM) mid-scan" in rest, rest
    assert (tmp_path / "live.npz").read_bytes() == b"an earlier result"  # not overwritten
    got = np.load(tmp_path / "live-1.npz")
    damage = got["damage"]
    assert not bool(got["complete"]) and 0 < damage.mean() < 1, damage.mean()
    ref = frames.reshape((-1,) + frames.shape[2:])[damage.reshape(-1)].sum(axis=0, dtype=np.float64)
    np.testing.assert_array_equal(got["sum_intensity"], ref)
    np.testing.assert_array_equal(got["sumsig_intensity"][damage], frames.sum(axis=(2, 3))[damage])
    arrays = {"sum": got["sum_intensity"], "sumsig": got["sumsig_intensity"], "ring": got["ring_intensity"][..., 0]}
    figs = result_figures(arrays, rings=[(8.0, 12.0, 4.0, 7.2)], frames=int(damage.sum()), done=float(damage.mean()))
    for name in ("sum", "sumsig", "ring"):
        assert "partial" in figs[name].axes[0].get_title()
        assert_labels_drawn(tmp_path / f"live-1-{name}.png", figs[name])


def test_live_run_complete_writes_figures(tmp_path):
    rng = np.random.default_rng(8)
    frames = rng.integers(0, 0xFFF, size=(4, 6, 16, 24)).astype(np.uint16)
    sim, data_port, api_port = _merlin_sim(tmp_path, frames, rate=5000)
    out = tmp_path / "live.npz"
    try:
        assert main(["live", "run", "merlin", "--udf", "sum,sumsig", "--data-port", data_port, "--api-port",
                     api_port, "--executor", "inline", "--timeout", "30", "--out", str(out)]) == 0
    finally:
        stop_process(sim)
    got = np.load(out)
    assert bool(got["complete"]) and got["damage"].all()
    np.testing.assert_array_equal(got["sum_intensity"], frames.sum(axis=(0, 1), dtype=np.float64))
    figs = result_figures({"sum": got["sum_intensity"], "sumsig": got["sumsig_intensity"]}, rings=[], frames=24)
    for name in ("sum", "sumsig"):
        assert_labels_drawn(tmp_path / f"live-{name}.png", figs[name])
