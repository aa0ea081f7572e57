"""Every built-in UDF against the machine's read limit and against LiberTEM, in one run (issue #31).

A uint16 raw file (``--size-gib``, 1 GiB by default: the `raytile demo` data
set, created in the cache folder if absent) is read once into the page
cache. Then, on that file:

* the touch bound: the file as an ``np.memmap`` of uint64 summed in chunks,
  every byte read once with no conversion, in 1 process and in ``--workers``
  processes (a ``fork`` pool made before Ray starts);
* raytile on Ray with ``--workers`` worker actors, and inline;
* LiberTEM 0.16 on its Dask executor with ``--workers`` workers (a test
  dependency of raytile; ``--no-libertem`` leaves it out);

each running SumUDF, SumSigUDF, ApplyMasksUDF with one dense ring mask and
with 16 dense ring masks, StdDevUDF, CoMUDF (whole frame, default centre),
PickUDF of 1 % of the frames (a fixed random ROI) and LogsumUDF.

Every UDF runs once to warm up (JIT, actors, page cache), then ``--repeat``
rounds run each contender once in turn (Ray, inline, LiberTEM; the touch
bound beside SumUDF), so that load coming and going on a shared machine hits
all alike; the best time counts. Every result is checked against numpy on
the same file (one float64 pass over the memmap, ``--no-check`` skips it).

Each figure is printed beside its target (issue #31), as a ratio measured in
this run: Ray SumUDF >= 0.8x the touch bound in ``--workers`` processes;
SumSig, Logsum, ApplyMasks (1 mask) and CoM >= 0.8x Ray SumUDF; ApplyMasks
(16 masks) >= 0.5x; StdDev >= 0.6x; every UDF faster on Ray than on LiberTEM.
PickUDF's GB/s count the picked frames' bytes.

GB = 1e9 bytes. ``--quick`` is ``--size-gib 0.25 --repeat 1`` (about a
minute on a quiet 2-core machine). Run::

    python benchmarks/bench_limits.py [--size-gib 1] [--repeat 2] [--workers 2] [--quick]
        [--only Sum,CoM,...] [--no-libertem] [--no-inline] [--no-check]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

import raytile as rt
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape

from bench_inline import warm_page_cache  # this folder is on sys.path when run as a script

TOUCH_CHUNK = 2**20  # uint64 words a chunk: 8 MiB
SUM = "Sum"


def touch_range(args: tuple[str, int, int]) -> int:
    """Sum of the uint64 words ``[start, stop)`` of the file: every byte read once, nothing converted."""
    path, start, stop = args
    words = np.memmap(path, mode="r", dtype=np.uint64)
    total = 0
    for s in range(start, stop, TOUCH_CHUNK):
        total += int(words[s:min(s + TOUCH_CHUNK, stop)].sum())
    return total


def ring_factories(sig: tuple[int, int], count: int) -> list[Callable[[], np.ndarray]]:
    """``count`` dense float32 rings around the signal centre: one wide ring, or ``count`` adjacent ones.

    Factories that draw the ring when called (small to send, as users write them)."""
    from raytile.udf import masks

    cy, cx, r = sig[0] / 2, sig[1] / 2, min(sig) / 2
    edges = np.linspace(0, r, count + 1)
    radii = [(r * 0.3, r * 0.8)] if count == 1 else list(zip(edges[:-1], edges[1:]))
    return [lambda a=float(a), b=float(b): masks.ring(cy, cx, a, b, sig) for a, b in radii]


@dataclass
class Case:
    """One UDF: how raytile and LiberTEM make it, its result names, its target (a ratio to ``of``)."""

    name: str
    raytile: Callable[[], Any]
    libertem: Callable[[], Any]
    results: dict[str, str]          # raytile result name -> LiberTEM result name
    target: float | None = None      # Ray GB/s >= target x Ray SumUDF GB/s
    roi: bool = False                # runs with the 1 % ROI
    times: dict[str, float] = field(default_factory=dict)


def make_cases(sig: tuple[int, int]) -> list[Case]:
    from libertem.udf.com import CoMUDF as LtCoM
    from libertem.udf.logsum import LogsumUDF as LtLogsum
    from libertem.udf.masks import ApplyMasksUDF as LtMasks
    from libertem.udf.raw import PickUDF as LtPick
    from libertem.udf.stddev import StdDevUDF as LtStdDev
    from libertem.udf.sum import SumUDF as LtSum
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSig

    one, sixteen = ring_factories(sig, 1), ring_factories(sig, 16)

    return [
        Case(SUM, rt.udf.SumUDF, LtSum, {"intensity": "intensity"}),
        Case("SumSig", rt.udf.SumSigUDF, LtSumSig, {"intensity": "intensity"}, 0.8),
        Case("Masks 1 ring", lambda: rt.udf.ApplyMasksUDF(mask_factories=one),
             lambda: LtMasks(mask_factories=one), {"intensity": "intensity"}, 0.8),
        Case("Masks 16 rings", lambda: rt.udf.ApplyMasksUDF(mask_factories=sixteen),
             lambda: LtMasks(mask_factories=sixteen), {"intensity": "intensity"}, 0.5),
        Case("StdDev", rt.udf.StdDevUDF, LtStdDev, {"var": "var", "mean": "mean", "sum": "sum"}, 0.6),
        Case("CoM", rt.udf.CoMUDF.with_params, LtCoM.with_params, {"raw_com": "raw_com"}, 0.8),
        Case("Pick 1 %", rt.udf.PickUDF, LtPick, {"intensity": "intensity"}, None, roi=True),
        Case("Logsum", rt.udf.LogsumUDF, LtLogsum, {"logsum": "logsum"}, 0.8),
    ]


def numpy_references(path: Path, nav, sig, roi: np.ndarray, chunk: int = 256) -> dict[str, dict[str, np.ndarray]]:
    """Every case's results from one float64 pass over the memmap (integer sums exact in int64)."""
    frames = int(np.prod(nav))
    flat = np.memmap(path, mode="r", dtype=np.uint16, shape=(frames, int(np.prod(sig))))
    one = np.stack([f().reshape(-1) for f in ring_factories(sig, 1)]).astype(np.float64)
    sixteen = np.stack([f().reshape(-1) for f in ring_factories(sig, 16)]).astype(np.float64)
    y, x = np.mgrid[:sig[0], :sig[1]]
    moment_rows = np.stack([np.ones(y.size), y.reshape(-1), x.reshape(-1)]).astype(np.float64)
    total = np.zeros(flat.shape[1], np.int64)
    squares = np.zeros(flat.shape[1], np.int64)
    logsum = np.zeros(flat.shape[1], np.float64)
    sumsig, p1, p16, moments = (np.empty((frames,) + s) for s in ((), (1,), (16,), (3,)))
    for s in range(0, frames, chunk):
        block = np.asarray(flat[s:s + chunk])
        wide = block.astype(np.int64)
        total += wide.sum(axis=0)
        squares += (wide * wide).sum(axis=0)
        f = block.astype(np.float64)
        sumsig[s:s + len(f)] = wide.sum(axis=1)
        p1[s:s + len(f)] = f @ one.T
        p16[s:s + len(f)] = f @ sixteen.T
        moments[s:s + len(f)] = f @ moment_rows.T
        logsum += np.log(f - f.min(axis=1, keepdims=True) + 1).sum(axis=0)
    mean = total / frames
    var = (squares - total.astype(np.float64) * mean) / frames  # from exact integer sums
    with np.errstate(invalid="ignore", divide="ignore"):
        com = moments[:, 1:] / moments[:, :1]
    com[moments[:, 0] == 0] = [sig[0] // 2, sig[1] // 2]
    picked = np.asarray(flat[np.flatnonzero(roi.reshape(-1))]).reshape((-1,) + tuple(sig))
    return {
        SUM: {"intensity": total.reshape(sig)},
        "SumSig": {"intensity": sumsig.reshape(nav)},
        "Masks 1 ring": {"intensity": p1.reshape(tuple(nav) + (1,))},
        "Masks 16 rings": {"intensity": p16.reshape(tuple(nav) + (16,))},
        "StdDev": {"var": var.reshape(sig), "mean": mean.reshape(sig), "sum": total.reshape(sig)},
        "CoM": {"raw_com": com.reshape(tuple(nav) + (2,))},
        "Pick 1 %": {"intensity": picked},
        "Logsum": {"logsum": logsum.reshape(sig)},
    }


def check(label: str, case: Case, res: Any, refs: dict | None, libertem: bool = False) -> None:
    """``res`` against numpy (rtol 1e-4: LiberTEM computes several of these in float32)."""
    if refs is None:
        return
    for name, lt_name in case.results.items():
        got = np.asarray(res[lt_name if libertem else name].data)
        want = refs[case.name][name]
        if case.roi and libertem:  # LiberTEM's PickUDF result is nav-shaped over the ROI's bounds
            got = got.reshape(want.shape)
        try:
            np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-6 * np.abs(want).max())
        except AssertionError as e:
            raise SystemExit(f"{label} {case.name} {name} differs from numpy:\n{e}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gib", type=float, default=None, help="file size (default 1, --quick 0.25)")
    p.add_argument("--cache-dir", default=None, help="default $RAYTILE_CACHE or ~/.cache/raytile")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds (default 2, --quick 1)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="--size-gib 0.25 --repeat 1")
    p.add_argument("--only", default=None, help="comma-separated case names (Sum always runs)")
    p.add_argument("--no-libertem", action="store_true")
    p.add_argument("--no-inline", action="store_true")
    p.add_argument("--no-check", action="store_true", help="skip the numpy reference pass")
    args = p.parse_args(argv)
    size = args.size_gib if args.size_gib is not None else (0.25 if args.quick else 1.0)
    repeat = max(1, args.repeat if args.repeat is not None else (1 if args.quick else 2))
    n = max(1, args.workers)
    t_start = time.perf_counter()
    # LiberTEM's CoMUDF divides with `where` and no `out` (its results are right: it fills the rest)
    warnings.filterwarnings("ignore", message="'where' used without 'out'")

    nav, sig = demo_shape(size)
    path = demo_file(Path(args.cache_dir) if args.cache_dir else default_cache_dir(), nav, sig)
    nbytes = path.stat().st_size
    frames = int(np.prod(nav))
    t_warm = warm_page_cache(path)
    print(f"file {path}: {nbytes / 2**30:.3f} GiB, nav {nav} sig {sig} uint16; "
          f"warm read {nbytes / t_warm / 1e9:.2f} GB/s")
    print(f"{os.cpu_count()} cpus, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"{n} workers, best of {repeat} rounds, GB = 1e9 bytes")

    cases = make_cases(sig)
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")} | {SUM}
        cases = [c for c in cases if c.name in wanted]
    roi = np.zeros(frames, bool)
    roi[np.random.default_rng(0).choice(frames, max(1, frames // 100), replace=False)] = True
    roi = roi.reshape(nav)
    picked_bytes = int(roi.sum()) * int(np.prod(sig)) * 2
    refs = None
    if not args.no_check:
        t0 = time.perf_counter()
        refs = numpy_references(path, nav, sig, roi)
        print(f"numpy references (float64, one pass): {time.perf_counter() - t0:.1f} s")

    # -- the touch bound: a fork pool made before Ray or Dask start threads ---------------------------
    words = nbytes // 8
    bounds = np.linspace(0, words, n + 1).astype(int)
    jobs = [(str(path), int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    pool = mp.get_context("fork").Pool(n)
    whole = touch_range((str(path), 0, words))
    if sum(pool.map(touch_range, jobs)) != whole:
        raise SystemExit("touch bound: the processes' sums do not add up to the one process' sum")

    # -- contenders ---------------------------------------------------------------------------------
    import ray

    ray.init(address="local", num_cpus=n, include_dashboard=False, log_to_driver=False)  # never join another
    contexts: dict[str, Any] = {f"Ray {n}w": rt.Context(executor="ray", cpus=n)}
    if not args.no_inline:
        contexts["inline"] = rt.Context(executor="inline")
    lt_ctx = None
    if not args.no_libertem:
        import libertem.api as lt

        lt_ctx = lt.Context.make_with("dask", cpus=n)
        contexts["LiberTEM"] = lt_ctx
    datasets = {label: ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16")
                for label, ctx in contexts.items()}

    def run(label: str, case: Case) -> float:
        is_lt = label == "LiberTEM"
        udf = case.libertem() if is_lt else case.raytile()
        t0 = time.perf_counter()
        res = contexts[label].run_udf(dataset=datasets[label], udf=udf, roi=roi if case.roi else None)
        elapsed = time.perf_counter() - t0
        check(label, case, res, refs, libertem=is_lt)
        return elapsed

    touch = {"1 process": float("inf"), f"{n} processes": float("inf")}
    try:
        for case in cases:
            for label in contexts:
                run(label, case)  # warm: JIT, actors, masks
            for _ in range(repeat):
                if case.name == SUM:  # the touch bound beside SumUDF, in the same rounds
                    for what, fn in (("1 process", lambda: touch_range((str(path), 0, words))),
                                     (f"{n} processes", lambda: pool.map(touch_range, jobs))):
                        t0 = time.perf_counter()
                        fn()
                        touch[what] = min(touch[what], time.perf_counter() - t0)
                for label in contexts:
                    case.times[label] = min(case.times.get(label, float("inf")), run(label, case))
            size_of = picked_bytes if case.roi else nbytes
            print(f"  {case.name:<16}" + "".join(f"{label} {size_of / t / 1e9:6.2f}  " for label, t in case.times.items()),
                  flush=True)
    finally:
        pool.close()
        for label, ctx in contexts.items():
            ctx.close()
        ray.shutdown()

    # -- the table ----------------------------------------------------------------------------------
    ray_label = f"Ray {n}w"
    labels = list(contexts)
    print(f"\ntouch bound: 1 process {nbytes / touch['1 process'] / 1e9:.2f} GB/s, "
          f"{n} processes {nbytes / touch[f'{n} processes'] / 1e9:.2f} GB/s")
    print(f"\n{'UDF':<16}" + "".join(f"{label + ' GB/s':>16}" for label in labels) + "   targets (Ray, this run)")
    met, missed = 0, 0
    t_sum = next(c.times[ray_label] for c in cases if c.name == SUM)

    def verdict(ok: bool) -> str:
        nonlocal met, missed
        met, missed = met + ok, missed + (not ok)
        return "met" if ok else "MISSED"

    for case in cases:
        size_of = picked_bytes if case.roi else nbytes
        line = f"{case.name:<16}" + "".join(f"{size_of / case.times[label] / 1e9:>16.2f}" for label in labels)
        t = case.times[ray_label]
        goals = []
        if case.name == SUM:
            ratio = touch[f"{n} processes"] / t
            goals.append(f"{ratio:.2f}x touch bound ({n} proc.) >= 0.8 {verdict(ratio >= 0.8)}")
        elif case.target is not None:
            ratio = t_sum / t
            goals.append(f"{ratio:.2f}x SumUDF >= {case.target} {verdict(ratio >= case.target)}")
        if "LiberTEM" in case.times:
            ratio = case.times["LiberTEM"] / t
            goals.append(f"{ratio:.2f}x LiberTEM > 1 {verdict(ratio > 1)}")
        print(line + "   " + "; ".join(goals))
    print(f"\n{met} targets met, {missed} missed; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"{time.perf_counter() - t_start:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
