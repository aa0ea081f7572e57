"""K2 IS read throughput: raytile against LiberTEM 0.16 and a numpy read of the same bytes.

A case module of ``benchmarks/bench_formats.py`` (:func:`cases`) that also
runs on its own::

    python benchmarks/_formats_k2is.py [--size-gib 1] [--trials 3] [--workers 2] [--dir DIR] [--formats k2is,frms6]

It writes a K2 IS data set of about ``--size-gib`` (8 sector files and a
``.gtg``, by :mod:`raytile.io.testing.k2is`; a time series with the shutter
flag set from the first frame, which LiberTEM can open) into ``--dir``
(kept there and reused), reads it once so it is in the page cache, then
prints in one run:

- ``numpy read``: ``readinto`` of every sector file into one reused buffer
  (no decoding): the ceiling of the bytes alone;
- ``raytile``: SumUDF on a Ray cluster of ``--workers`` CPUs (best of
  ``--trials`` warm runs, and the first run of the session);
- ``LiberTEM``: the same SumUDF of LiberTEM 0.16 on a Dask cluster of
  ``--workers`` CPUs on the same files (``Context.make_with("dask", cpus=...)``);
  both clusters are up together and the trials alternate, so both meet the
  same load from other processes;
- ``raytile first run``: a new process (new Ray, new workers), once with an
  empty numba cache (as right after ``pip install``) and once with the
  cache on disk (any later process): its first and second run.

GB = 1e9 bytes of the files. The machine's load average is printed before
and after: other processes' work shows in every figure.

``--formats frms6`` adds (or picks) a PNDetector FRMS6 data set of 264 x 264
frames, read with the dark frame subtracted (both readers' default).

A case (see :func:`cases`) is a :class:`FormatCase`: the name, the files and
their size, and how raytile and LiberTEM load it (format name, parameters).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FRAME_BYTES = 8 * 32 * 0x5758  # one frame in all 8 sector files


@dataclass
class FormatCase:
    """One file set to benchmark: how each reader loads it."""

    name: str
    files: list[str]
    nbytes: int
    raytile: tuple[str, dict[str, Any]]
    libertem: tuple[str, dict[str, Any]] | None
    info: dict[str, Any] = field(default_factory=dict)


def make_k2is(directory: Path, size_gib: float) -> Path:
    """A K2 IS time series of about ``size_gib`` in ``directory`` (written once, reused); its ``.gtg``."""
    from raytile.io.testing.k2is import write_k2is

    n = max(4, int(size_gib * 2**30 // FRAME_BYTES))
    directory = Path(directory) / f"k2is_{n}"
    gtg = directory / "bench_.gtg"
    if gtg.exists():
        return gtg
    tmp = directory.with_suffix(".partial")
    # a few distinct frames, repeated: the writer packs every block, so keep it quick
    distinct = np.random.default_rng(0).integers(0, 4096, (4, 1860, 2048), dtype=np.uint16)
    frames = np.broadcast_to(distinct[None], (-(-n // 4), 4, 1860, 2048)).reshape(-1, 1860, 2048)[:n]
    write_k2is(tmp, np.ascontiguousarray(frames), name="bench", lead_blocks=[0, 3, 5, 0, 0, 0, 0, 7])
    tmp.rename(directory)
    return gtg


def make_frms6(directory: Path, size_gib: float) -> Path:
    """An FRMS6 data set of about ``size_gib`` of 264 x 264 frames (files of 1000 frames; written once); its ``.hdr``."""
    from raytile.io.testing.frms6 import write_frms6

    n = max(8, int(size_gib * 2**30 // (264 * 264 * 2 + 64)))
    directory = Path(directory) / f"frms6_{n}"
    hdr = directory / "bench.hdr"
    if hdr.exists():
        return hdr
    tmp = directory.with_suffix(".partial")
    rng = np.random.default_rng(0)
    distinct = rng.integers(0, 4000, (16, 264, 264), dtype=np.uint16)
    frames = np.broadcast_to(distinct[None], (-(-n // 16), 16, 264, 264)).reshape(-1, 264, 264)[:n]
    dark = rng.integers(0, 100, (20, 264, 264), dtype=np.uint16)
    write_frms6(tmp, frames, dark, name="bench", scan_shape=(n, 1), frames_per_file=1000)
    tmp.rename(directory)
    return hdr


def cases(tmpdir: str | os.PathLike, size_gib: float = 1.0, formats: tuple[str, ...] = ("k2is",)) -> list[FormatCase]:
    """The cases of ``bench_formats.py`` in ``tmpdir``, data sets of about ``size_gib``: ``"k2is"`` (default)
    and ``"frms6"`` (264 x 264 frames, dark frame subtracted as both readers do by default)."""
    out = []
    if "k2is" in formats:
        gtg = make_k2is(Path(tmpdir), size_gib)
        files = sorted(str(p) for p in gtg.parent.glob("bench_*.bin"))
        nbytes = sum(os.path.getsize(f) for f in files)
        out.append(FormatCase("k2is", files, nbytes, raytile=("k2is", {"path": str(gtg)}),
                              libertem=("k2is", {"path": str(gtg)}), info={"frames": nbytes // FRAME_BYTES}))
    if "frms6" in formats:
        hdr = make_frms6(Path(tmpdir), size_gib)
        files = sorted(str(p) for p in hdr.parent.glob("bench_*.frms6") if not p.name.endswith("_000.frms6"))
        out.append(FormatCase("frms6", files, sum(os.path.getsize(f) for f in files),
                              raytile=("frms6", {"path": str(hdr)}), libertem=("frms6", {"path": str(hdr)})))
    return out


def numpy_read(files: list[str]) -> float:
    """Seconds to ``readinto`` every file into one reused buffer."""
    buf = np.empty(max(os.path.getsize(f) for f in files), dtype=np.uint8)
    t0 = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            fh.readinto(memoryview(buf)[:os.path.getsize(f)])
    return time.perf_counter() - t0


def load_avg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def raytile_context(workers: int, numba_dir: str | None = None):
    """A raytile Context on a new local Ray cluster of ``workers`` CPUs (``numba_dir``: the workers' numba cache)."""
    import raytile as rt

    env = {"NUMBA_CACHE_DIR": numba_dir} if numba_dir else {}
    return rt.Context.make_local(cpus=workers, gpus=0, runtime_env={"env_vars": env} if env else None)


def time_raytile(case: FormatCase, workers: int, trials: int, numba_dir: str | None = None) -> dict[str, float]:
    """``{"start", "first", "best"}`` seconds of SumUDF on a new local Ray cluster of ``workers`` CPUs."""
    import raytile as rt

    t0 = time.perf_counter()
    ctx = raytile_context(workers, numba_dir)
    try:
        name, params = case.raytile
        ds = ctx.load(name, **params)
        start = time.perf_counter() - t0
        times = []
        for _ in range(trials + 1):
            t0 = time.perf_counter()
            ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF())
            times.append(time.perf_counter() - t0)
    finally:
        ctx.close()
        import ray

        ray.shutdown()
    return {"start": start, "first": times[0], "best": min(times[1:])}


def time_both(case: FormatCase, workers: int, trials: int) -> tuple[dict[str, float], dict[str, float]]:
    """SumUDF seconds of raytile (Ray) and LiberTEM 0.16 (Dask), both clusters up, trials alternating
    (so both meet the same load): ``({"first", "best"}, {"first", "best"})``."""
    import raytile as rt
    from libertem.api import Context
    from libertem.udf.sum import SumUDF as LTSumUDF

    ctx = raytile_context(workers)
    lt = Context.make_with("dask", cpus=workers, gpus=0)
    try:
        ds = ctx.load(case.raytile[0], **case.raytile[1])
        name, params = case.libertem  # type: ignore[misc]
        lds = lt.load(name, **params)
        runs = {"raytile": lambda: ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF()),
                "libertem": lambda: lt.run_udf(dataset=lds, udf=LTSumUDF())}
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(trials + 1):
            for k, run in runs.items():
                t0 = time.perf_counter()
                run()
                times[k].append(time.perf_counter() - t0)
    finally:
        lt.close()
        ctx.close()
        import ray

        ray.shutdown()
    rt_t, lt_t = ({"first": v[0], "best": min(v[1:])} for v in times.values())
    return rt_t, lt_t


def fresh_process(case: FormatCase, workers: int, empty_cache: bool = True) -> dict[str, float]:
    """First and second run in a new process (new Ray, new workers); with ``empty_cache`` its numba cache
    is a new empty folder (as right after ``pip install``), else the usual one (a second process)."""
    with tempfile.TemporaryDirectory(prefix="raytile-numba-") as numba_dir:
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[1] / "src")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, __file__, "--child", json.dumps([case.raytile[0], case.raytile[1]]),
               "--workers", str(workers)]
        if empty_cache:
            env["NUMBA_CACHE_DIR"] = numba_dir
            cmd += ["--numba-dir", numba_dir]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"fresh process failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(case: FormatCase, workers: int, trials: int, fresh: bool = True) -> dict[str, float]:
    """Measure one case and print the figures side by side; returns GB/s by reader."""
    gb = case.nbytes / 1e9
    numpy_read(case.files)  # into the page cache
    np_s = min(numpy_read(case.files) for _ in range(trials))
    out = {"numpy read": gb / np_s}
    print(f"{case.name}: {gb:.2f} GB in {len(case.files)} files {case.info}; load average {load_avg()}")
    print(f"  numpy read:          {gb / np_s:6.2f} GB/s")
    if case.libertem is not None:
        rt_t, lt_t = time_both(case, workers, trials)
    else:
        rt_t, lt_t = time_raytile(case, workers, trials), None
    out["raytile"] = gb / rt_t["best"]
    print(f"  raytile ({workers} workers):  {gb / rt_t['best']:6.2f} GB/s (first run of the session "
          f"{gb / rt_t['first']:.2f} GB/s)")
    if lt_t is not None:
        out["libertem"] = gb / lt_t["best"]
        print(f"  LiberTEM ({workers} workers): {gb / lt_t['best']:6.2f} GB/s (first run {gb / lt_t['first']:.2f} "
              f"GB/s); raytile / LiberTEM = {lt_t['best'] / rt_t['best']:.2f}x")
    print(f"  raytile / numpy read = {np_s / rt_t['best']:.2f}x")
    if fresh:
        for empty, label in ((True, "empty numba cache"), (False, "numba cache on disk")):
            fr = fresh_process(case, workers, empty)
            out[f"first run ({label})"] = gb / fr["first"]
            print(f"  raytile first run, new process, {label}: {gb / fr['first']:.2f} GB/s ({fr['first']:.2f} s; "
                  f"its second run {fr['best']:.2f} s: first/warm {fr['first'] / fr['best']:.2f}x)")
    print(f"  load average after: {load_avg()}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "raytile-bench-formats"))
    ap.add_argument("--no-fresh", action="store_true", help="skip the new-process first run")
    ap.add_argument("--formats", default="k2is", help="comma-separated: k2is, frms6")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--numba-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        name, params = json.loads(args.child)
        case = FormatCase(name, [], 0, (name, params), None)
        print(json.dumps(time_raytile(case, args.workers, 1, args.numba_dir)))
        return
    for case in cases(args.dir, args.size_gib, tuple(args.formats.split(","))):
        report(case, args.workers, args.trials, fresh=not args.no_fresh)


if __name__ == "__main__":
    main()
