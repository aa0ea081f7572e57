"""ASI Timepix3 live: frames/s of SumSigUDF and SumUDF over LiberTEM-live's simulator, raytile beside
LiberTEM-live (and, with ``--before-src``, beside another raytile source tree) in the same run.

One stream file (``--frames`` frames of 512x512, ~``--events`` random events a frame, uint32 CSR chunks
of ``--chunk`` frames, written with raytile's encoder, which tests/test_live_asi_tpx3.py checks byte for
byte against LiberTEM-rs') is replayed by LiberTEM-live's ``TpxCameraSim`` (in memory) to each
connection. Each measurement opens a connection, waits for the acquisition's header, and times
``run_udf`` with the inline executor from its call to its result: receiving, decoding and the UDF.
Each side runs in a subprocess of its own (its own imports; ``--before-src`` puts that tree first on
``PYTHONPATH``); every measurement is repeated ``--repeat`` times, all are printed, the best counts.

    python benchmarks/bench_live_asi_tpx3.py                          # raytile (this tree) and LiberTEM-live
    python benchmarks/bench_live_asi_tpx3.py --before-src /tmp/old/src   # and an older raytile

Needs the test extra (libertem-live, libertem-asi-tpx3). The machine may be shared: the load average
is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

SIG = (512, 512)


def write_stream(path: str, frames: int, events: int, chunk: int, seed: int = 0) -> int:
    """The stream file; returns the events written."""
    import scipy.sparse as sp

    from raytile.live.detectors.asi_tpx3.wire import (
        AcquisitionEnd, AcquisitionStart, ArrayChunk, ScanEnd, ScanStart,
    )

    rng = np.random.default_rng(seed)
    pixels = SIG[0] * SIG[1]
    start = AcquisitionStart(nav_shape=(frames // 32, 32), sig_shape=SIG, sequence=1)
    total = 0
    with open(path, "wb") as f:
        f.write(start.encode() + ScanStart(1, 0).encode())
        for first in range(0, frames, chunk):
            n = min(chunk, frames - first)
            counts = rng.poisson(events, n)
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype("<u4")
            indices = rng.integers(0, pixels, int(indptr[-1])).astype("<u4")
            values = rng.integers(1, 100, int(indptr[-1])).astype("<u4")
            csr = sp.csr_matrix((values, indices, indptr), shape=(n, pixels))
            assert csr.nnz == len(values)
            payload = indptr.tobytes() + indices.tobytes() + values.tobytes()
            f.write(ArrayChunk(np.dtype("<u4"), n, len(values), indptr.nbytes,
                               indptr.nbytes + indices.nbytes).encode() + payload)
            total += len(values)
        f.write(ScanEnd(1).encode() + AcquisitionEnd(1).encode())
    return total


def _sim(path: str):
    from libertem_live.detectors.asi_tpx3.sim import TpxCameraSim

    sim = TpxCameraSim(cached="MEM", port=0, sleep=0.1, paths=[path])
    sim.start()
    sim.wait_for_listen()
    return sim


def measure(side: str, path: str, repeat: int) -> None:
    """Print one JSON line per run: side, udf, frames/s."""
    if side == "raytile":
        from raytile.live import LiveContext
        from raytile.udf import SumSigUDF, SumUDF

        ctx = LiveContext(executor="inline")
        open_kw: dict = {}
    else:
        from libertem.executor.inline import InlineJobExecutor
        from libertem.udf.sum import SumUDF
        from libertem.udf.sumsigudf import SumSigUDF
        from libertem_live.api import LiveContext

        ctx = LiveContext(executor=InlineJobExecutor())
        open_kw = {"bytes_per_chunk": 1 << 20}  # LiberTEM-live fails a chunk larger than its slots
    for make in (SumSigUDF, SumUDF):
        for _ in range(repeat):
            sim = _sim(path)
            try:
                with ctx.make_connection("asi_tpx3").open(data_port=sim.server_t.port, **open_kw) as conn:
                    pending = conn.wait_for_acquisition(30.0)
                    aq = ctx.make_acquisition(conn=conn, pending_aq=pending)
                    t0 = time.perf_counter()
                    res = ctx.run_udf(dataset=aq, udf=make())
                    dt = time.perf_counter() - t0
                    check = float(np.asarray(res["intensity"].data).sum())
            finally:
                sim.stop()
            print(json.dumps({"side": side, "udf": make.__name__, "frames_per_s": pending.nimages / dt,
                              "s": dt, "check": check}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=1024)
    p.add_argument("--events", type=int, default=260, help="mean events a frame")
    p.add_argument("--chunk", type=int, default=32, help="frames a CSR chunk")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--before-src", help="another raytile source tree to measure too (e.g. an older commit's src)")
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        measure(args.side, args.file, args.repeat)
        return
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "stream.tpx3")
        nnz = write_stream(path, args.frames, args.events, args.chunk)
        print(f"{args.frames} frames of {SIG[0]}x{SIG[1]}, {nnz / args.frames:.0f} events a frame, "
              f"{args.chunk}-frame chunks; load average {os.getloadavg()[0]:.2f}")
        sides = [("raytile before", "raytile", args.before_src)] if args.before_src else []
        sides += [("raytile", "raytile", here), ("LiberTEM-live", "ltl", None)]
        best: dict[tuple[str, str], float] = {}
        for label, side, src in sides:
            env = dict(os.environ)
            if src is not None:
                env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
            out = subprocess.run([sys.executable, __file__, "--side", side, "--file", path, "--repeat",
                                  str(args.repeat)], env=env, capture_output=True, text=True, check=False)
            if out.returncode:
                print(f"{label}: failed\n{out.stderr[-3000:]}")
                continue
            for line in out.stdout.splitlines():
                r = json.loads(line)
                print(f"  {label:15s} {r['udf']:10s} {r['frames_per_s']:10,.0f} frames/s  ({r['s']:.3f} s)")
                key = (label, r["udf"])
                best[key] = max(best.get(key, 0.0), r["frames_per_s"])
        print(f"best of {args.repeat} (load average now {os.getloadavg()[0]:.2f}):")
        for (label, udf), fps in best.items():
            print(f"  {label:15s} {udf:10s} {fps:10,.0f} frames/s")


if __name__ == "__main__":
    main()
