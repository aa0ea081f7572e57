"""DECTRIS bitshuffle-LZ4: raytile's SumUDF against LiberTEM 0.16 (hdf5 + hdf5plugin) and a plain h5py read.

A case module of ``benchmarks/bench_formats.py`` (:func:`cases`), which also
runs on its own::

    python benchmarks/_formats_dectris.py [--size-gib 0.25] [--trials 3] [--no-first-run] [--decoders]

It writes an ARINA-like series (96x96 uint16 frames, Poisson counts with a
bright disk, bitshuffle-LZ4 chunks of one frame written by HDF5 through
hdf5plugin) of ``--size-gib`` decoded bytes: a master file and ONE data file,
so that LiberTEM, whose ``hdf5`` reader opens one data set, reads the same
bytes as raytile. The file is read once into the page cache. Then, in one
run, best of ``--trials`` rounds that run each once in turn (a load that
comes and goes on a shared machine hits all alike):

* raytile: ``ctx.load("dectris", path=master)``, SumUDF, Ray with 2 workers;
* LiberTEM 0.16: ``ctx.load("hdf5", path=data file, ds_path="/entry/data/data")``,
  its SumUDF, Dask with 2 workers, HDF5 given hdf5plugin's filters through
  ``HDF5_PLUGIN_PATH`` (what ``--preload hdf5plugin`` does for its workers);
* a plain h5py read (``read_direct`` of all frames, hdf5plugin's filters,
  this process, one core);
* the first run of a fresh process (new Ray, new workers, an empty numba
  cache) against its warm second run;
* with ``--decoders``, the decoder candidates on one core of this process:
  HDF5's filter pipeline, ``bitshuffle.decompress_lz4`` called per chunk,
  and raytile's :func:`raytile.io.bslz4.decode_chunks`.

GB/s count decoded bytes (GB = 1e9). The load average is printed before and
after: on a shared machine other processes' work shows in every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

FRAME = (96, 96)
DTYPE = np.dtype("uint16")


def load_avg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _frames(start: int, stop: int) -> np.ndarray:
    """ARINA-like frames: ~0.3 counts a pixel, a bright disk (~30 counts) moving with the image number."""
    rng = np.random.default_rng(start)
    yy, xx = np.mgrid[:FRAME[0], :FRAME[1]]
    out = np.empty((stop - start,) + FRAME, DTYPE)
    for i in range(start, stop):
        cy, cx = 48 + 6 * np.sin(i / 50), 48 + 6 * np.cos(i / 70)
        lam = 0.3 + 30.0 * (((yy - cy) ** 2 + (xx - cx) ** 2) < 14 ** 2)
        out[i - start] = rng.poisson(lam)
    return out


def make_series(directory: str, size_gib: float) -> dict[str, Any]:
    """The benchmark series in ``directory`` (kept and reused when it is there), read into the page cache."""
    from raytile.io.testing.dectris import write_dectris

    n = max(64, int(size_gib * 2 ** 30 // (np.prod(FRAME) * DTYPE.itemsize)))
    name = f"bench_{n}"
    master = os.path.join(directory, f"{name}_master.h5")
    data_file = os.path.join(directory, f"{name}_data_000001.h5")
    if not (os.path.exists(master) and os.path.exists(data_file)):
        write_dectris(directory, _frames, frames_per_file=n, name=name, num_frames=n, frame_shape=FRAME,
                      dtype=DTYPE, nimages=n, ntrigger=1)
    for p in (master, data_file):
        with open(p, "rb") as fh:
            while fh.read(64 << 20):
                pass
    return {"master": master, "data_file": data_file, "frames": n,
            "nbytes": n * int(np.prod(FRAME)) * DTYPE.itemsize, "file_bytes": os.path.getsize(data_file)}


def plain_h5py_read(data_file: str) -> Callable[[], int]:
    """A function reading every frame through h5py + hdf5plugin into one array; returns the bytes read."""
    def read() -> int:
        import h5py
        import hdf5plugin  # noqa: F401

        with h5py.File(data_file, "r") as f:
            ds = f["/entry/data/data"]
            out = np.empty(ds.shape, ds.dtype)
            ds.read_direct(out)
        return out.nbytes
    return read


def h5py_frame_sum(data_file: str) -> Callable[[], np.ndarray]:
    """A function summing all frames (float64, signal shaped) read through h5py + hdf5plugin: the reference."""
    def run() -> np.ndarray:
        import h5py
        import hdf5plugin  # noqa: F401

        with h5py.File(data_file, "r") as f:
            ds = f["/entry/data/data"]
            acc = np.zeros(ds.shape[1:], np.float64)
            block = np.empty((4096,) + ds.shape[1:], ds.dtype)
            for a in range(0, ds.shape[0], block.shape[0]):
                n = min(block.shape[0], ds.shape[0] - a)
                ds.read_direct(block, np.s_[a:a + n], np.s_[:n])
                acc += block[:n].sum(axis=0, dtype=np.float64)
        return acc
    return run


def cases(tmpdir: str, size_gib: float = 1.0) -> list[dict[str, Any]]:
    """The DECTRIS case of bench_formats.py, as a dict (``bench_formats.normalise`` reads it).

    ``name``; ``files`` (master and data file); ``nbytes`` (decoded frame bytes); ``raytile`` and
    ``libertem`` (``Context.load`` keyword arguments, ``format`` among them; the same file);
    ``libertem_env`` (what LiberTEM's Dask workers need: hdf5plugin's filters through
    ``HDF5_PLUGIN_PATH``); ``numpy_sum`` (the frames' float64 sum through h5py: reference and
    baseline); ``baseline`` (label and a plain h5py read of every frame); ``decoded``; ``notes``.
    """
    import hdf5plugin

    s = make_series(tmpdir, size_gib)
    return [{
        "name": "dectris_bslz4",
        "files": [s["master"], s["data_file"]],
        "nbytes": s["nbytes"],
        "file_bytes": s["file_bytes"],
        "raytile": {"format": "dectris", "path": s["master"]},
        "libertem": {"format": "hdf5", "path": s["data_file"], "ds_path": "/entry/data/data"},
        "libertem_env": {"HDF5_PLUGIN_PATH": hdf5plugin.PLUGIN_PATH},
        "numpy_sum": h5py_frame_sum(s["data_file"]),
        "baseline": ("plain h5py read (hdf5plugin, 1 core)", plain_h5py_read(s["data_file"])),
        "decoded": True,
        "notes": "DECTRIS master + 1 data file, 96x96 uint16, bitshuffle-LZ4 chunks of one frame "
                 f"({s['nbytes'] / s['file_bytes']:.1f}x compressed); LiberTEM: its hdf5 reader + hdf5plugin",
    }]


def bench_decoders(data_file: str, trials: int, frames: int = 4000) -> dict[str, float]:
    """One core, this process: GB/s of the decoder candidates on the first ``frames`` chunks of the file."""
    import ctypes
    import glob

    import bitshuffle
    import h5py
    import hdf5plugin  # noqa: F401

    from raytile.io import bslz4

    with h5py.File(data_file, "r") as f:
        ds = f["/entry/data/data"]
        n = min(frames, ds.shape[0])
        want = ds[:n]
        info = [ds.id.get_chunk_info(i) for i in range(n)]
    offsets = np.array([c.byte_offset for c in info], np.int64)
    sizes = np.array([c.size for c in info], np.int64)
    buf = np.memmap(data_file, np.uint8, "r")
    out = np.empty_like(want)
    rows = out.view(np.uint8).reshape(n, -1)
    gomp = glob.glob(os.path.join(os.path.dirname(bitshuffle.__file__), "..", "bitshuffle.libs", "libgomp*"))
    if gomp:  # bitshuffle.decompress_lz4 runs an OpenMP team per call: one thread, as in a worker
        ctypes.CDLL(gomp[0]).omp_set_num_threads(1)

    def h5() -> None:
        with h5py.File(data_file, "r") as f:
            f["/entry/data/data"].read_direct(out, np.s_[:n])

    def per_chunk() -> None:
        for i in range(n):
            o = offsets[i]
            out[i] = bitshuffle.decompress_lz4(buf[o + 12:o + sizes[i]], FRAME, DTYPE)

    def ours() -> None:
        bslz4.decode_chunks(buf, offsets, sizes, np.zeros(n, np.bool_), bslz4.CODEC_BSLZ4, DTYPE.itemsize, rows)

    result = {}
    for name, fn in (("h5py + hdf5plugin (HDF5 filter pipeline)", h5),
                     ("bitshuffle.decompress_lz4, a call a chunk", per_chunk),
                     ("raytile bslz4.decode_chunks (bitshuffle C kernels)", ours)):
        fn()
        out[:] = 0
        t = _best(fn, trials)
        assert np.array_equal(out, want), name
        result[name] = out.nbytes / t / 1e9
    return result


def _best(fn: Callable[[], Any], trials: int) -> float:
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


class RaytileRun:
    """raytile on Ray with ``workers`` workers: SumUDF over the case's data set (``first`` is its first run)."""

    def __init__(self, params: dict[str, Any], workers: int):
        import raytile as rt

        params = dict(params)
        fmt = params.pop("format")
        self.rt = rt
        self.ctx = rt.Context.make_local(cpus=workers, gpus=0)
        self.ds = self.ctx.load(fmt, **params)
        t0 = time.perf_counter()
        self()
        self.first = time.perf_counter() - t0

    def __call__(self) -> None:
        self.ctx.run_udf(dataset=self.ds, udf=self.rt.udf.SumUDF())

    def close(self) -> None:
        self.ctx.close()
        import ray

        ray.shutdown()


class LiberTEMRun:
    """LiberTEM 0.16 with Dask, ``workers`` workers: its SumUDF over the same file."""

    def __init__(self, params: dict[str, Any], env: dict[str, str], workers: int):
        os.environ.update(env)  # inherited by the Dask workers LiberTEM starts
        import hdf5plugin  # noqa: F401  (this process reads the file's metadata)
        from libertem.api import Context
        from libertem.udf.sum import SumUDF

        params = dict(params)
        fmt = params.pop("format")
        self.udf = SumUDF
        self.ctx = Context.make_with("dask", cpus=workers)
        self.ds = self.ctx.load(fmt, **params)
        self()

    def __call__(self) -> None:
        self.ctx.run_udf(dataset=self.ds, udf=self.udf())

    def close(self) -> None:
        self.ctx.close()


def interleaved(runs: dict[str, Callable[[], Any]], trials: int) -> dict[str, float]:
    """Best time of each run over ``trials`` rounds that run each once, in turn: a load that comes and goes
    on a shared machine then hits all of them alike."""
    best = {name: float("inf") for name in runs}
    for _ in range(trials):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def first_run_child(master: str, workers: int) -> None:
    """In a new process with an empty numba cache: start-up, load, first and warm SumUDF on Ray."""
    t0 = time.perf_counter()
    import raytile as rt

    ctx = rt.Context.make_local(cpus=workers, gpus=0,
                                runtime_env={"env_vars": {"NUMBA_CACHE_DIR": os.environ["NUMBA_CACHE_DIR"]}})
    out = {"start-up": time.perf_counter() - t0}
    try:
        t0 = time.perf_counter()
        ds = ctx.load("dectris", path=master)
        out["load"] = time.perf_counter() - t0
        for label in ("first run", "warm run"):
            t0 = time.perf_counter()
            ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF())
            out[label] = time.perf_counter() - t0
    finally:
        ctx.close()
        import ray

        ray.shutdown()
    print(json.dumps(out))


def first_run(master: str, workers: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="raytile-numba-") as numba_dir:
        env = dict(os.environ, NUMBA_CACHE_DIR=numba_dir)
        proc = subprocess.run([sys.executable, __file__, "--child-first-run", master, "--workers", str(workers)],
                              env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(f"first-run child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-gib", type=float, default=0.25, help="decoded size of the series")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--dir", default=None, help="where the series is written (default: a temporary folder)")
    p.add_argument("--no-libertem", action="store_true")
    p.add_argument("--no-first-run", action="store_true")
    p.add_argument("--decoders", action="store_true", help="also the decoder candidates on one core")
    p.add_argument("--child-first-run", metavar="MASTER", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child_first_run:
        first_run_child(args.child_first_run, args.workers)
        return 0
    with tempfile.TemporaryDirectory(prefix="raytile-bench-dectris-") as tmp:
        directory = args.dir or tmp
        os.makedirs(directory, exist_ok=True)
        print(f"load average before: {load_avg()}")
        (case,) = cases(directory, args.size_gib)
        gb = case["nbytes"] / 1e9
        print(f"{case['name']} ({case['notes']}): {gb:.3f} GB decoded, "
              f"{case['file_bytes'] / 1e9:.3f} GB in the file "
              f"(ratio {case['nbytes'] / case['file_bytes']:.1f}), page cache")
        if args.decoders:
            for name, gbs in bench_decoders(case["libertem"]["path"], args.trials).items():
                print(f"decoder, 1 core: {name:52s} {gbs:6.2f} GB/s")
        label, read = case["baseline"]
        ours = RaytileRun(case["raytile"], args.workers)
        runs: dict[str, Callable[[], Any]] = {"raytile": ours, "plain": read}
        theirs = None
        try:
            if not args.no_libertem:
                theirs = runs["libertem"] = LiberTEMRun(case["libertem"], case["libertem_env"], args.workers)
            best = interleaved(runs, args.trials)
        finally:
            ours.close()
            if theirs is not None:
                theirs.close()
        print(f"{label:44s} {gb / best['plain']:6.2f} GB/s  ({best['plain']:.3f} s)")
        print(f"{'raytile SumUDF, Ray, %d workers' % args.workers:44s} {gb / best['raytile']:6.2f} GB/s  "
              f"({best['raytile']:.3f} s; first run in this process {ours.first:.3f} s)")
        if "libertem" in best:
            lt = best["libertem"]
            print(f"{'LiberTEM 0.16 SumUDF, Dask, %d workers' % args.workers:44s} {gb / lt:6.2f} GB/s  ({lt:.3f} s)"
                  f"  -> raytile / LiberTEM = {lt / best['raytile']:.2f}x")
        print(f"raytile / plain h5py read = {best['plain'] / best['raytile']:.2f}x")
        if not args.no_first_run:
            fr = first_run(case["raytile"]["path"], args.workers)
            print(f"fresh process, empty numba cache: start-up {fr['start-up']:.1f} s, load {fr['load']:.2f} s, "
                  f"first run {fr['first run']:.3f} s, warm run {fr['warm run']:.3f} s "
                  f"(first / warm = {fr['first run'] / fr['warm run']:.2f})")
        print(f"load average after: {load_avg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
