"""Memory over many runs on one continuous acquisition (issue 37: each ``run_udf`` on the same acquisition
object reads the next scan, LiberTEM-live's meaning).

A Merlin simulator on 127.0.0.1 sends one continuous acquisition (the scan repeated forever); one
acquisition object is made with an explicit ``nav_shape``, and ``run_udf`` (SumUDF + SumSigUDF) runs on
it ``--runs`` times, each checked against numpy on the scan's frames. It prints this process's RSS
(``VmRSS``, ``RssAnon``) before the first run (the baseline, measured in the same process) and after
runs 1, 10, 30, 100, ...: flat memory means no growth after the first runs.

    python benchmarks/probe_continuous_scans.py [--runs 100] [--nav 32,32] [--sig 128,128] [--executor inline|ray]
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

from raytile.live import LiveContext
from raytile.live.detectors.merlin import MerlinSimulator
from raytile.udf import SumSigUDF, SumUDF


def rss_mib() -> dict[str, float]:
    out = {}
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(value.split()[0]) / 1024
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--nav", default="32,32")
    p.add_argument("--sig", default="128,128")
    p.add_argument("--executor", choices=("inline", "ray"), default="inline")
    args = p.parse_args()
    nav = tuple(int(s) for s in args.nav.split(","))
    sig = tuple(int(s) for s in args.sig.split(","))
    frames = np.random.default_rng(0).integers(0, 64, size=(int(np.prod(nav)),) + sig).astype(np.uint16)
    want_sum, want_sig = frames.sum(axis=0, dtype=np.int64), frames.sum(axis=(1, 2)).reshape(nav)
    ctx = LiveContext(executor=args.executor)
    marks = {1, 10, 30} | set(range(100, args.runs + 1, 100)) | {args.runs}
    try:
        with MerlinSimulator(frames, mode="U16", nav_shape=nav, continuous=True) as sim, \
                ctx.make_connection("merlin").open(data_port=sim.data_port, api_port=sim.api_port) as conn:
            aq = ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=nav)
            gc.collect()
            base = rss_mib()
            print(f"{args.executor}: {len(frames)} frames of {sig} a scan; before run 1 (baseline): "
                  f"VmRSS {base['VmRSS']:.1f} MiB, RssAnon {base['RssAnon']:.1f} MiB", flush=True)
            t0 = time.perf_counter()
            for k in range(1, args.runs + 1):
                total, per_frame = ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()])
                assert np.array_equal(total["intensity"].data, want_sum), k
                assert np.array_equal(per_frame["intensity"].data, want_sig), k
                del total, per_frame
                if k in marks:
                    gc.collect()
                    now = rss_mib()
                    print(f"after run {k:4d}: VmRSS {now['VmRSS']:.1f} MiB ({now['VmRSS'] - base['VmRSS']:+.1f}), "
                          f"RssAnon {now['RssAnon']:.1f} MiB ({now['RssAnon'] - base['RssAnon']:+.1f}), "
                          f"{k / (time.perf_counter() - t0):.1f} scans/s", flush=True)
    finally:
        ctx.close()


if __name__ == "__main__":
    main()
