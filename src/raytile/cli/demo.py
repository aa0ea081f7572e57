"""The demo scene of ``raytile demo``: a synthetic 4D-STEM scan, written once to a cache folder.

:class:`DemoScene` is the specimen (a few grains seen by a moving disk-shaped
direct beam with six Bragg spots), :func:`demo_shape` sizes a scan in GiB,
and :func:`demo_file` writes the scan as a raw uint16 file (atomically, once
per shape, seed and recipe) that the demo, the examples and the benchmarks
read.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np

from raytile.cli.args import CLIError

__all__ = ["DemoScene", "demo_file", "demo_shape", "default_cache_dir", "DEMO_RECIPE"]

#: Version of the synthetic data recipe; part of the cached file's name.
DEMO_RECIPE = 1
#: Frames generated per chunk when writing the demo file.
GEN_CHUNK_FRAMES = 64


def default_cache_dir() -> Path:
    env = os.environ.get("RAYTILE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "raytile"


def demo_shape(size_gib: float, sig_size: int = 256) -> tuple[tuple[int, int], tuple[int, int]]:
    """A (nav, sig) shape of about ``size_gib`` GiB of uint16, nav twice as wide as high.

    1 GiB with 256x256 frames gives nav (64, 128).
    """
    if not size_gib > 0:
        raise CLIError(f"--size-gib must be positive, got {size_gib}")
    if sig_size < 8:
        raise CLIError(f"--sig-size must be at least 8, got {sig_size}")
    frame_bytes = sig_size * sig_size * 2
    frames = max(2, round(size_gib * 2**30 / frame_bytes))
    ny = max(1, int(math.sqrt(frames / 2)))
    nx = max(1, frames // ny)
    return (ny, nx), (sig_size, sig_size)


def _stamp(radius: float) -> np.ndarray:
    r = int(math.ceil(radius))
    y, x = np.ogrid[-r:r + 1, -r:r + 1]
    return ((y * y + x * x) <= radius * radius).astype(np.float32)


def _add_stamp(frame: np.ndarray, stamp: np.ndarray, cy: int, cx: int, value: float) -> None:
    """``frame[cy-r:cy+r+1, cx-r:cx+r+1] += value * stamp``, clipped at the frame's edges."""
    r = stamp.shape[0] // 2
    sy, sx = frame.shape
    y0, y1 = max(cy - r, 0), min(cy + r + 1, sy)
    x0, x1 = max(cx - r, 0), min(cx + r + 1, sx)
    if y1 <= y0 or x1 <= x0:
        return
    frame[y0:y1, x0:x1] += value * stamp[y0 - (cy - r):y1 - (cy - r), x0 - (cx - r):x1 - (cx - r)]


class DemoScene:
    """The synthetic specimen: a few grains seen by a moving, disk-shaped direct beam.

    Each nav position belongs to one of ``n_grains`` Voronoi grains. A grain
    sets the direct beam's brightness and the orientation and strength of six
    Bragg spots around it; the beam centre drifts across the scan (descan).
    Counts get Poisson-like noise (Gaussian with variance = mean, clipped at 0).
    """

    def __init__(self, nav_shape: tuple[int, int], sig_shape: tuple[int, int], seed: int = 0, n_grains: int = 5):
        self.nav_shape = nav_shape
        self.sig_shape = sig_shape
        self.seed = seed
        rng = np.random.default_rng(seed)
        ny, nx = nav_shape
        sy, sx = sig_shape
        seeds = rng.uniform(0, 1, (n_grains, 2)) * (ny, nx)
        yy, xx = np.mgrid[:ny, :nx]
        d2 = (yy[..., None] - seeds[:, 0]) ** 2 + (xx[..., None] - seeds[:, 1]) ** 2
        self.grain = np.argmin(d2, axis=-1).reshape(-1)
        self.brightness = rng.uniform(0.35, 1.0, n_grains)
        self.orientation = rng.uniform(0, np.pi / 3, n_grains)
        self.spot_strength = rng.uniform(0.2, 1.0, n_grains)
        amp = sy / 16
        fy = (yy.reshape(-1) + 0.5) / ny - 0.5
        fx = (xx.reshape(-1) + 0.5) / nx - 0.5
        self.cy = sy / 2 + amp * fy + 0.3 * amp * np.sin(2 * np.pi * fx)
        self.cx = sx / 2 + amp * fx
        self.disk_radius = sy / 10
        self.spot_radius = max(1.0, sy / 64)
        self.spot_distance = sy / 3.2
        self.disk_stamp = _stamp(self.disk_radius)
        self.spot_stamp = _stamp(self.spot_radius)
        self.background = 2.0
        self.disk_counts = 120.0
        self.spot_counts = 60.0

    @property
    def num_frames(self) -> int:
        return self.nav_shape[0] * self.nav_shape[1]

    def frames(self, start: int, stop: int) -> np.ndarray:
        """Frames ``[start, stop)`` (flat nav order) as uint16, deterministic for a seed."""
        n = stop - start
        lam = np.full((n,) + self.sig_shape, self.background, dtype=np.float32)
        for i in range(n):
            f = start + i
            g = self.grain[f]
            cy, cx = self.cy[f], self.cx[f]
            _add_stamp(lam[i], self.disk_stamp, int(round(cy)), int(round(cx)),
                       self.disk_counts * self.brightness[g])
            for k in range(6):
                a = self.orientation[g] + k * np.pi / 3
                _add_stamp(lam[i], self.spot_stamp, int(round(cy + self.spot_distance * np.sin(a))),
                           int(round(cx + self.spot_distance * np.cos(a))),
                           self.spot_counts * self.spot_strength[g])
        rng = np.random.default_rng([self.seed, start])
        noise = np.empty(lam.shape, dtype=np.float32)
        rng.standard_normal(dtype=np.float32, out=noise)
        noise *= np.sqrt(lam)
        lam += noise
        np.rint(lam, out=lam)
        np.clip(lam, 0, 65535, out=lam)
        return lam.astype(np.uint16)


def demo_file(cache_dir: Path, nav_shape, sig_shape, seed: int = 0, log=print) -> Path:
    """The demo raw file for this shape in ``cache_dir``, generated once (atomically)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    name = (f"demo-r{DEMO_RECIPE}-s{seed}-nav{nav_shape[0]}x{nav_shape[1]}"
            f"-sig{sig_shape[0]}x{sig_shape[1]}-uint16.raw")
    path = cache_dir / name
    expected = nav_shape[0] * nav_shape[1] * sig_shape[0] * sig_shape[1] * 2
    if path.exists() and path.stat().st_size == expected:
        return path
    scene = DemoScene(tuple(nav_shape), tuple(sig_shape), seed=seed)
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    log(f"generating {path} ({expected / 2**30:.3g} GiB, nav {nav_shape}, sig {sig_shape}, uint16) ...")
    t0 = time.perf_counter()
    try:
        from tqdm.auto import tqdm

        with open(tmp, "wb") as f, tqdm(total=scene.num_frames, desc="generating", unit="frame",
                                        unit_scale=True, disable=None) as bar:
            for start in range(0, scene.num_frames, GEN_CHUNK_FRAMES):
                stop = min(start + GEN_CHUNK_FRAMES, scene.num_frames)
                scene.frames(start, stop).tofile(f)
                bar.update(stop - start)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    meta = {"nav_shape": list(nav_shape), "sig_shape": list(sig_shape), "dtype": "uint16", "seed": seed,
            "recipe": DEMO_RECIPE}
    meta_tmp = tmp.with_suffix(".json.tmp")
    meta_tmp.write_text(json.dumps(meta, indent=1))
    os.replace(meta_tmp, path.with_suffix(".json"))
    log(f"generated in {time.perf_counter() - t0:.1f} s")
    return path
