"""Live acquisition: the highest frame rate sustained with nothing lost, beside a receiver that does nothing,
and the latency from a frame's arrival to the partial result that holds it.

For each detector (Merlin U16, Merlin R12, DECTRIS bitshuffle-LZ4 uint16; 256x256 frames) the simulator
(`raytile live sim ...`, a process of its own, so a sender with its own GIL) sends over 127.0.0.1 at a
paced rate, and raytile runs SumUDF + a ring mask on it: one run over many 32x32 scans (a continuous
Merlin acquisition, a DECTRIS series of that many scans) with per-scan results. A rate counts as
sustained when the sender kept its pace for the whole time, every frame was merged, and none was lost
(TCP and ZeroMQ PUSH/PULL block instead of dropping: a receiver that falls behind slows the sender,
which then misses its pace; a lost DECTRIS frame would be counted in ``aq.stats.frames_dropped``).

The do-nothing receiver takes the same simulator, unpaced, and only receives and decodes (the same
partition-sized arrays the run gets). Latency: from the moment the receiver handed a frame's stack on
to the first partial result whose merged frames include it (p50, p99).

Paced rates go up in steps of 1,000 frames/s from 10,000 to 20,000 until one is not sustained; the do-nothing
receiver is measured three times and the fastest counts (the ratio is then the conservative one). Each
line also gives the CPU time this process (receiver, decoding and, inline, the UDFs; not the simulator)
spent per frame: on a shared machine it varies much less than the rates do. With ``--executor ray`` the
workers' CPU is not in it. ``--threads`` splits it by thread (Linux): ``rx`` the receiver's reader thread
(socket reads, per-message Python), ``zmq`` ZeroMQ's I/O thread (DECTRIS), ``main`` the do-nothing
consumer (decoding), ``stream`` the run's feeder (decoding into the partitions), ``run`` the UDFs, the
merge and the partial results.

    python benchmarks/bench_live.py                       # 30 s per rate, as issue #21 asks
    python benchmarks/bench_live.py --quick               # 3 s per rate, fewer rates
    python benchmarks/bench_live.py --executor ray        # the UDFs on Ray workers
    python benchmarks/bench_live.py --quick --threads     # CPU a frame per thread
    python benchmarks/bench_live.py --frames-per-partition 128   # another partition size

The machine is shared: the load average is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import numpy as np

from raytile.live import LiveContext
from raytile.live.receiver import partition_batches
from raytile.udf import ApplyMasksUDF, SumUDF, masks

SIG = (256, 256)
NAV = (32, 32)
SCAN = NAV[0] * NAV[1]
#: The issue's latency target: p99 from arrival to the partial result below this.
P99_TARGET_S = 0.25
#: Paced rates tried in turn (frames/s) until one is not sustained: steps of 1,000 between 10,000 and
#: 20,000, so that the highest sustained rate (and its ratio to the do-nothing receiver) is known to
#: within ~7% where the 0.7x bound lies (steps of 2,000 put 16,000/s at 0.69x of a 23,000/s receiver).
RATES = "5000,10000,11000,12000,13000,14000,15000,16000,17000,18000,19000,20000,24000,28000"
#: The do-nothing receiver is measured this many times and the fastest counts (the machine is shared:
#: the best is the least disturbed, and it makes the ratio below the conservative one).
BASE_REPEATS = 3
#: (name, detector, simulator arguments)
CASES = {
    "merlin-U16": ("merlin", ["--mode", "U16"]),
    "merlin-R12": ("merlin", ["--mode", "R12"]),
    "dectris-bslz4": ("dectris", ["--compression", "bslz4", "--dtype", "uint16"]),
}


@contextlib.contextmanager
def simulator(case: str, rate: float | None, scans: int) -> Iterator[tuple[int, int]]:
    """The case's simulator in a subprocess, paced at ``rate`` (None: unpaced); yields (data, api) ports.
    Merlin sends one continuous acquisition, DECTRIS one series of ``scans`` scans (arming itself)."""
    detector, extra = CASES[case]
    cmd = [sys.executable, "-m", "raytile.cli", "live", "sim", detector, *extra, "--nav-shape",
           ",".join(map(str, NAV)), "--sig-shape", ",".join(map(str, SIG)), "--data-port", "0", "--api-port", "0"]
    cmd += ["--continuous"] if detector == "merlin" else ["--scans", str(scans), "--acquisitions", "1"]
    cmd += ["--frame-rate", str(rate)] if rate else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ports = re.search(r"data 127.0.0.1:(\d+), \w+ 127.0.0.1:(\d+)", line)
        if ports is None:
            raise RuntimeError(f"simulator did not start: {line!r}")
        yield int(ports.group(1)), int(ports.group(2))
    finally:
        proc.terminate()
        proc.wait(10)


def connect(ctx: LiveContext, case: str, data_port: int, api_port: int) -> Any:
    detector = CASES[case][0]
    if detector == "merlin":
        return ctx.make_connection("merlin").open(data_port=data_port, api_port=api_port)
    return ctx.make_connection("dectris").open(data_port=data_port, api_port=api_port, buffer_size=512,
                                               frame_stack_size=64)


def cpu_s() -> float:
    """CPU seconds this process (receiver, decoding, UDFs; not the simulator) has used."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class ThreadCPU:
    """CPU seconds of this process's threads by role, from ``/proc/self/task`` (Linux; empty elsewhere).
    Threads that end (a run's) are counted as last seen: :meth:`sample` while they run."""

    ROLES = (("raytile-rx", "rx"), ("ZMQbg/IO", "zmq"), ("raytile-stream", "stream"), ("raytile-run", "run"))

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, float]] = {}
        #: Sample while a run goes on (its threads end with it); the do-nothing run's split, as text.
        self.enabled, self.last = False, ""
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def sample(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        try:
            tids = os.listdir("/proc/self/task")
        except OSError:
            return
        for tid in tids:
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/self/task/{tid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            name = names.get(int(tid)) or comm  # (a thread that just ended is gone from threading's list:
            role = self.seen[int(tid)][0] if int(tid) in self.seen else (  # its first role stays)
                "main" if int(tid) == os.getpid() else next((r for p, r in self.ROLES if name.startswith(p)), "other"))
            self.seen[int(tid)] = (role, (int(fields[11]) + int(fields[12])) / self._tick)

    def per_frame(self, before: dict[int, tuple[str, float]], frames: int) -> str:
        """``role=us`` of CPU a frame since ``before`` (a copy of :attr:`seen`)."""
        by_role: dict[str, float] = {}
        for tid, (role, cpu) in self.seen.items():
            by_role[role] = by_role.get(role, 0.0) + cpu - before.get(tid, (role, 0.0))[1]
        return " ".join(f"{r}={v / frames * 1e6:.0f}" for r, v in sorted(by_role.items()) if v > 0.001)


#: ``--frames-per-partition``: the live acquisitions' partition size (None: raytile's live default).
FPP: int | None = None


def batches(dtype: Any) -> tuple[int, int] | None:
    """The receiver's cut for the do-nothing run: where the run's partitions would end."""
    return (min(FPP, SCAN), SCAN) if FPP else partition_batches(NAV, SIG, dtype)


def do_nothing(ctx: LiveContext, case: str, scans: int) -> tuple[float, float]:
    """Frames/s of the receiver alone (receive + decode into partition-sized arrays), the simulator
    unpaced, and this process's CPU seconds per frame."""
    dtype = np.uint16
    with simulator(case, None, scans) as (data_port, api_port), connect(ctx, case, data_port, api_port) as conn:
        conn.wait_for_acquisition(30.0)
        n = scans * SCAN
        THREADS.sample()
        t0, c0, before = time.perf_counter(), cpu_s(), dict(THREADS.seen)
        got = sum(len(b) for b in conn.receiver.frames(n, dtype, batch=batches(dtype)))
        rate, cpu = got / (time.perf_counter() - t0), (cpu_s() - c0) / got
        THREADS.sample()
        THREADS.last = THREADS.per_frame(before, got)
        return rate, cpu


def with_udfs(ctx: LiveContext, case: str, rate: float, seconds: float) -> dict:
    """One paced run: sustained?, achieved frames/s, frames lost, latency p50/p99 (s)."""
    scans = max(2, int(rate * seconds) // SCAN)
    ring = masks.ring(128, 128, 40, 100, SIG)
    with simulator(case, rate, scans) as (data_port, api_port), connect(ctx, case, data_port, api_port) as conn:
        pending = conn.wait_for_acquisition(30.0)
        aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV, scans=scans,
                                  frames_per_partition=FPP)
        merged: list[tuple[int, float]] = []  # (frames merged in total, when)
        done_before = 0
        THREADS.sample()
        t0, c0, before = time.monotonic(), cpu_s(), dict(THREADS.seen)
        for part in ctx.run_udf_iter(dataset=aq, udf=[SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring])]):
            if THREADS.enabled:
                THREADS.sample()
            whole = bool(part.damage.data.all())  # the scan shown is complete (and counted in scans_done)
            done = max(done_before, part.scans_done * SCAN + (0 if whole else int(part.damage.data.sum())))
            merged.append((done, time.monotonic()))
            done_before = done
        elapsed = time.monotonic() - t0
        cpu = cpu_s() - c0
        THREADS.sample()
        arrivals = list(conn.receiver.arrivals)
        lost = aq.stats.frames_dropped
    total = scans * SCAN
    p50, p99 = latencies(arrivals, merged)
    achieved = total / elapsed
    return {"ok": achieved >= 0.95 * rate and done_before == total and lost == 0, "achieved": achieved,
            "lost": lost, "p50": p50, "p99": p99, "merged": done_before, "total": total, "cpu": cpu / total,
            "threads": THREADS.per_frame(before, total)}


def latencies(arrivals: list[tuple[int, float]], merged: list[tuple[int, float]]) -> tuple[float, float]:
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


#: Per-thread CPU (``--threads``).
THREADS = ThreadCPU()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=30.0, help="seconds per paced rate (default 30)")
    p.add_argument("--rates", default=None, help="paced rates to try in turn, frames/s, until one is not "
                   f"sustained (default {RATES})")
    p.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    p.add_argument("--executor", default="inline", choices=["inline", "ray"])
    p.add_argument("--threads", action="store_true", help="CPU a frame per thread too (Linux)")
    p.add_argument("--frames-per-partition", type=int, default=None,
                   help="frames a partition of the live acquisitions (default: raytile's live default, "
                        "256 for these 32x32 scans of 256x256 uint16)")
    p.add_argument("--quick", action="store_true", help="3 s per rate (and rates 5000,10000,14000 unless --rates)")
    args = p.parse_args()
    THREADS.enabled = args.threads
    global FPP
    FPP = args.frames_per_partition
    if args.quick:
        args.seconds = 3.0
    args.rates = args.rates or ("5000,10000,14000" if args.quick else RATES)
    ctx = LiveContext(executor="inline") if args.executor == "inline" else LiveContext.make_local(cpus=2)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; executor {args.executor}; "
          f"{SIG[0]}x{SIG[1]} frames, scans of {NAV[0]}x{NAV[1]}, {args.seconds:g} s per rate; "
          f"{batches(np.dtype(np.uint16))[0]} frames a partition")
    try:
        for case in args.cases.split(","):
            bases, split = [], {}
            for _ in range(BASE_REPEATS):
                bases.append(do_nothing(ctx, case, scans=20))
                split[bases[-1]] = THREADS.last
            base, base_cpu = max(bases)
            print(f"\n{case}: do-nothing receiver {base:,.0f} frames/s "
                  f"({base * SIG[0] * SIG[1] * 2 / 1e9:.2f} GB/s decoded; the best of "
                  f"{', '.join(f'{b:,.0f}' for b, _ in bases)}; {base_cpu * 1e6:.0f} us CPU a frame"
                  f"{'; ' + split[(base, base_cpu)] if args.threads else ''})", flush=True)
            best = best_fast = 0.0
            for rate in (float(r) for r in args.rates.split(",")):
                r = with_udfs(ctx, case, rate, args.seconds)
                print(f"  paced {rate:>7,.0f}/s: achieved {r['achieved']:>7,.0f}/s  "
                      f"{'sustained' if r['ok'] else 'NOT sustained'}  merged {r['merged']}/{r['total']}  "
                      f"lost {r['lost']}  latency p50 {r['p50'] * 1e3:6.1f} ms  p99 {r['p99'] * 1e3:6.1f} ms  "
                      f"{r['cpu'] * 1e6:.0f} us CPU a frame{' (' + r['threads'] + ')' if args.threads else ''}",
                      flush=True)
                if not r["ok"]:
                    break
                best = max(best, r["achieved"])
                if r["p99"] < P99_TARGET_S:
                    best_fast = max(best_fast, r["achieved"])
            print(f"  highest sustained with SumUDF + ring: {best:,.0f} frames/s = {best / base:.2f}x the "
                  f"do-nothing receiver; with p99 latency < {P99_TARGET_S:g} s: {best_fast:,.0f} frames/s = "
                  f"{best_fast / base:.2f}x; load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        ctx.close()


if __name__ == "__main__":
    main()
