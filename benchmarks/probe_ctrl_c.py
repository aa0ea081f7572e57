"""How fast Ctrl-C stops a script in the middle of a long run (issue 37, item 2).

For each executor (inline, Ray with a private local instance, Ray with the
coordinator actor) a child Python process starts a ``Context``, begins a long
``run_udf`` (a UDF that sleeps per frame; about a minute in all) and, once the
first frame was processed, gets SIGINT. Printed per case:

* ``interrupt``: SIGINT to ``KeyboardInterrupt`` caught at the top of the script
  (target: under 1 s);
* ``exit``: SIGINT to the process gone (target: under 3 s);
* ``left``: processes the child started (its Ray: GCS, raylet, workers; seen
  while the run was going) still alive 5 s after it ended (target: none).

A baseline in the same run: ``sleep``, a child that only sleeps in Python and
gets the same SIGINT (the interpreter's own time to raise and exit).

    python benchmarks/probe_ctrl_c.py [--cases inline,ray,actor] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import psutil

CHILD = r"""
import os, sys, time
import numpy as np
import raytile as rt

kind, marker = sys.argv[1], sys.argv[2]

class SlowSumUDF(rt.UDF):
    def __init__(self, marker="", delay=0.01):
        super().__init__(marker=marker, delay=delay)

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="sig", dtype="float64")}

    def process_frame(self, frame):
        if not os.path.exists(self.params.marker):
            open(self.params.marker, "w").close()
        time.sleep(self.params.delay)
        self.results.intensity[:] += frame

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity

try:
    if kind == "sleep":
        open(marker, "w").close()
        time.sleep(600)
    if kind == "inline":
        ctx = rt.Context(executor="inline")
    else:
        ctx = rt.Context.make_local(cpus=2, coordinator="actor" if kind == "actor" else "driver")
    ds = ctx.load("memory", data=np.ones((64, 96, 8, 8), dtype=np.float32), num_partitions=16)
    print("run", flush=True)
    ctx.run_udf(dataset=ds, udf=SlowSumUDF(marker=marker))
    print("finished", flush=True)
except KeyboardInterrupt:
    print(f"interrupted {time.time():.6f}", flush=True)
    raise
"""


def run_case(kind: str, marker: str, start_timeout: float = 120.0) -> dict:
    """One child of ``kind`` interrupted mid-run: the timings and the processes it left."""
    if os.path.exists(marker):
        os.unlink(marker)
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, kind, marker], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + start_timeout
        while not os.path.exists(marker):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: the run did not start: {proc.communicate(timeout=10)}")
            time.sleep(0.05)
        time.sleep(1.0)  # well into the run
        started = {(p.pid, p.create_time()) for p in psutil.Process(proc.pid).children(recursive=True)}
        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        t_exit = time.time() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = proc.communicate()
    t_int = None
    for line in out.splitlines():
        if line.startswith("interrupted "):
            t_int = float(line.split()[1]) - t0
    time.sleep(5.0)
    left = []
    for pid, created in started:
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(p.cmdline())[:60]}")
        except psutil.NoSuchProcess:
            pass
    for pid in [int(x.split()[0]) for x in left]:  # leave the machine clean
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    return {"interrupt": t_int, "exit": t_exit, "started": len(started), "left": left,
            "rc": proc.returncode, "stderr_tail": err[-3000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="sleep,inline,ray,actor")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--verbose", action="store_true", help="print each child's stderr tail")
    args = p.parse_args(argv)
    marker = f"/tmp/raytile-probe-ctrl-c-{os.getpid()}"
    print(f"load {os.getloadavg()[0]:.1f}; targets: interrupt < 1 s, exit < 3 s, nothing left")
    print(f"{'case':8} {'interrupt s':>12} {'exit s':>8} {'children':>9} {'left':>5}  rc")
    for kind in args.cases.split(","):
        for _ in range(args.repeat):
            r = run_case(kind, marker)
            t_int = "-" if r["interrupt"] is None else f"{r['interrupt']:.2f}"
            print(f"{kind:8} {t_int:>12} {r['exit']:8.2f} {r['started']:9d} {len(r['left']):5d}  {r['rc']}", flush=True)
            for line in r["left"]:
                print(f"    left: {line}")
            if args.verbose:
                print("    " + r["stderr_tail"].replace("\n", "\n    "))
    if os.path.exists(marker):
        os.unlink(marker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
