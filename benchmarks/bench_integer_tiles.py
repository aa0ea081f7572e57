"""SumUDF + a ring mask on 256x256 uint16 frames: integer tiles reduced as they are, against the same run
reading float32 tiles (the path before: every tile converted, then BLAS), in one process, alternating.

The frames come from an in-memory stream of 128-frame partitions (eight distinct ones in turn, 128 MB,
so they come from memory as a detector's would), inline executor: no receiver, only the UDF side of a
live run. The baseline asks ApplyMasksUDF for float32 tiles (``preferred_dtype=np.float32``), which is
what every run of these two UDFs on integer data did before. Both results are checked against numpy.

    python benchmarks/bench_integer_tiles.py [--scans 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import raytile as rt
from raytile.udf import ApplyMasksUDF, SumUDF, masks

SIG = (256, 256)
NAV = (32, 32)
FRAMES_PER_PARTITION = 128


def run_once(ctx: rt.Context, parts: list[np.ndarray], scans: int, float_tiles: bool) -> tuple[float, dict]:
    """Seconds per frame of one run over ``scans`` scans, and its results."""
    count = scans * NAV[0] * NAV[1] // FRAMES_PER_PARTITION

    def frames():
        for i in range(count):
            yield parts[i % len(parts)]

    ring = masks.ring(128, 128, 40, 100, SIG)
    udfs = [SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring],
                                    preferred_dtype=np.float32 if float_tiles else None)]
    ds = ctx.load("stream", frames=frames(), nav_shape=NAV, sig_shape=SIG, dtype="uint16", scans=scans,
                  frames_per_partition=FRAMES_PER_PARTITION)
    t0 = time.perf_counter()
    last = None
    for last in ctx.run_udf_iter(dataset=ds, udf=udfs):
        pass
    elapsed = time.perf_counter() - t0
    assert last is not None
    return elapsed / (count * FRAMES_PER_PARTITION), {"sum": last.buffers[0]["intensity"].data,
                                                       "ring": last.buffers[1]["intensity"].data}


def check(res: dict, parts: list[np.ndarray], scans: int) -> None:
    """The last scan's results against numpy (the stream's per-scan results hold the last scan)."""
    per_scan = NAV[0] * NAV[1] // FRAMES_PER_PARTITION
    first = (scans - 1) * per_scan
    frames = np.concatenate([parts[i % len(parts)] for i in range(first, first + per_scan)])
    flat = frames.reshape(len(frames), -1).astype(np.float64)
    np.testing.assert_allclose(res["sum"], flat.sum(axis=0).reshape(SIG), rtol=1e-6)
    ring = masks.ring(128, 128, 40, 100, SIG).reshape(-1).astype(np.float64)
    np.testing.assert_allclose(res["ring"].reshape(-1), flat @ ring, rtol=1e-5)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scans", type=int, default=20, help="32x32 scans per run (default 20: 20,480 frames)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each, alternating (default 3)")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 4096, size=(FRAMES_PER_PARTITION,) + SIG, dtype=np.uint16) for _ in range(8)]
    ctx = rt.Context(executor="inline")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {SIG[0]}x{SIG[1]} uint16 frames, "
          f"SumUDF + ring mask, inline, {args.scans * NAV[0] * NAV[1]:,} frames a run")
    best = {True: float("inf"), False: float("inf")}
    try:
        for round_ in range(args.rounds):
            for float_tiles in ((False, True) if round_ % 2 == 0 else (True, False)):
                per_frame, res = run_once(ctx, parts, args.scans, float_tiles)
                check(res, parts, args.scans)
                best[float_tiles] = min(best[float_tiles], per_frame)
    finally:
        ctx.close()
    for float_tiles, label in ((True, "float32 tiles (baseline)"), (False, "integer tiles as they are")):
        print(f"  {label:26s} {best[float_tiles] * 1e6:6.1f} us a frame  {1 / best[float_tiles]:9,.0f} frames/s")
    print(f"  speed-up {best[True] / best[False]:.2f}x (best of {args.rounds} each; results checked against numpy)")


if __name__ == "__main__":
    main()
