"""Live Merlin acquisition: the highest frame rate sustained with nothing lost, beside a receiver that does
nothing, and the latency from a frame's arrival to the partial result that holds it.

The simulator (`raytile live sim merlin`, in a process of its own) sends a continuous acquisition of
256x256 frames over 127.0.0.1 at a paced rate; raytile receives it with SumUDF + a ring mask running on it
(one run over `--scans` scans, per-scan results). A rate counts as sustained when the sender kept its
pace (TCP never drops: a receiver that falls behind slows the sender through backpressure) and every
frame was merged. The do-nothing receiver takes the same stream and only decodes it.

    python benchmarks/bench_live.py                  # 30 s per rate, as the issue asks
    python benchmarks/bench_live.py --seconds 5      # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time

import numpy as np

from raytile.live import LiveContext
from raytile.udf import ApplyMasksUDF, SumUDF, masks

SIG = (256, 256)
NAV = (32, 32)


FRAME_BYTES = SIG[0] * SIG[1] * 2


@contextlib.contextmanager
def simulator(mode: str, rate: float | None):
    """``raytile live sim merlin`` in a subprocess (a sender with a GIL of its own); yields its ports."""
    cmd = [sys.executable, "-m", "raytile.cli", "live", "sim", "merlin", "--mode", mode, "--continuous",
           "--nav-shape", ",".join(map(str, NAV)), "--sig-shape", ",".join(map(str, SIG)),
           "--data-port", "0", "--api-port", "0"] + (["--frame-rate", str(rate)] if rate else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        ports = re.search(r"data 127.0.0.1:(\d+), control 127.0.0.1:(\d+)", line)
        if ports is None:
            raise RuntimeError(f"simulator did not start: {line!r}")
        yield int(ports.group(1)), int(ports.group(2))
    finally:
        proc.terminate()
        proc.wait(10)


def do_nothing(ctx, mode, scans):
    """Frames/s of the receiver alone (receive + decode), the simulator unpaced."""
    with simulator(mode, None) as (data_port, api_port), \
            ctx.make_connection("merlin").open(data_port=data_port, api_port=api_port) as conn:
        conn.wait_for_acquisition(10.0)
        n = scans * int(np.prod(NAV))
        t0 = time.perf_counter()
        got = sum(len(b) for b in conn.receiver.frames(n))
        return got / (time.perf_counter() - t0)


def with_udfs(ctx, mode, rate, seconds):
    """(sustained?, achieved frames/s, p50 and p99 latency in s) at a paced ``rate``."""
    per_scan = int(np.prod(NAV))
    scans = max(1, int(rate * seconds) // per_scan)
    ring = masks.ring(128, 128, 40, 100, SIG)
    with simulator(mode, rate) as (data_port, api_port), \
            ctx.make_connection("merlin").open(data_port=data_port, api_port=api_port) as conn:
        pending = conn.wait_for_acquisition(10.0)
        aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV, scans=scans)
        merged = []  # (frames merged in total, time)
        t0 = time.monotonic()
        last_scan, last_done = 0, 0
        for part in ctx.run_udf_iter(dataset=aq, udf=[SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring])]):
            done = part.scans_done * per_scan + (0 if part.damage.data.all() else int(part.damage.data.sum()))
            merged.append((max(done, last_done), time.monotonic()))
            last_done = max(done, last_done)
        elapsed = time.monotonic() - t0
        arrivals = list(conn.receiver.arrivals)
    total = scans * per_scan
    lat = latencies(arrivals, merged)
    achieved = total / elapsed
    return achieved >= 0.95 * rate and last_done == total, achieved, lat


def latencies(arrivals, merged) -> tuple[float, float]:
    """For each stack: the first partial result whose merged count covers it, minus its arrival."""
    out, j = [], 0
    for count, t in arrivals:
        while j < len(merged) and merged[j][0] < count:
            j += 1
        if j < len(merged):
            out.append(merged[j][1] - t)
    if not out:
        return float("nan"), float("nan")
    return float(np.percentile(out, 50)), float(np.percentile(out, 99))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=30.0, help="seconds per paced rate (default 30)")
    p.add_argument("--rates", default="2000,5000,8000,12000,16000", help="paced rates to try, frames/s")
    p.add_argument("--modes", default="U16,R12")
    p.add_argument("--executor", default="inline", choices=["inline", "ray"])
    args = p.parse_args()
    ctx = LiveContext(executor=args.executor) if args.executor == "inline" else LiveContext.make_local(cpus=2)
    print(f"load average {os.getloadavg()[0]:.2f}; executor {args.executor}; {SIG[0]}x{SIG[1]} frames")
    for mode in args.modes.split(","):
        base = do_nothing(ctx, mode, scans=20)
        print(f"\n{mode}: do-nothing receiver {base:,.0f} frames/s ({base * FRAME_BYTES / 1e9:.2f} GB/s decoded)")
        best = 0.0
        for rate in (float(r) for r in args.rates.split(",")):
            ok, achieved, (p50, p99) = with_udfs(ctx, mode, rate, args.seconds)
            print(f"  paced {rate:>8,.0f}/s: achieved {achieved:>8,.0f}/s  {'sustained' if ok else 'NOT sustained'}  "
                  f"latency p50 {p50 * 1e3:6.1f} ms  p99 {p99 * 1e3:6.1f} ms")
            if ok:
                best = max(best, achieved)
            else:
                break
        print(f"  highest sustained with SumUDF + ring: {best:,.0f} frames/s = {best / base:.2f}x the do-nothing receiver")
    ctx.close()


if __name__ == "__main__":
    main()
