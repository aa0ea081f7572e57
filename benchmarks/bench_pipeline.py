"""Loop rate and step spacing of the AO example (examples/ao_loop.yaml), four ways, in one run:

* hand-written: the same loop in plain numpy, arrays preallocated, one process;
* in-process: ``Pipeline(..., placement="in-process")``, one thread;
* ray: the two placement groups (sensor, control) on 2 Ray actors over node-local sockets;
* ray-compiled: the same 2 actors over a Ray Compiled Graph (deprecated upstream, an option);
* ray-classic: the same 2 actors driven by one plain actor call per group and step.

Each prints ``name: N Hz, p50 x ms, p99 y ms`` (the spacing of consecutive
steps), after ``--warmup`` steps, the best of ``--trials`` measurements (the
machine is shared: the best is the least disturbed; the hand-written and
in-process trials alternate, so both see the same share of the machine); BLAS runs one thread everywhere (the
hand-written loop, the driver and each actor). The hand-written loop's
commands are checked against the pipeline's after the same steps. For Ray
placements a breakdown follows: the time the stages of each actor spent
computing per step, against the step period; the rest is channel hops and
scheduling. Run::

    python benchmarks/bench_pipeline.py [--steps 2000] [--warmup 200] [--placements in-process,ray,ray-compiled,ray-classic]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from threadpoolctl import threadpool_limits

from raytile.pipeline import Pipeline
from raytile.pipeline.arrays import make_array
from raytile.pipeline.bench import LoopTiming, format_line, measure, measure_callable
from raytile.pipeline.kernels.sources import sh_frame_bank

AO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "ao_loop.yaml")


class HandWrittenLoop:
    """The AO example in numpy: same frames, dark, gain, reconstructor, centroid formula and control law."""

    def __init__(self) -> None:
        n, p = 16, 16
        self.frames = sh_frame_bank(n, p, 16, 1, 2000.0, 1.5)
        self.dark = np.full((256, 256), 100.0, np.float32)
        self.gain = make_array({"random": {"seed": 2, "dist": "uniform", "loc": 0.95, "scale": 0.1}}, (256, 256),
                               np.float32, "gain")
        self.recon = make_array({"random": {"seed": 3, "scale": 0.01}}, (1024, 512), np.float32, "recon")
        self.n, self.p = n, p
        self.offsets = np.arange(p, dtype=np.float32) - (p - 1) / 2.0
        self.cal = np.empty((256, 256), np.float32)
        self.rows = np.empty((n, p, n), np.float32)
        self.cols = np.empty((n, n, p), np.float32)
        self.flux = np.empty((n, n), np.float32)
        self.sx = np.empty((n, n), np.float32)
        self.sy = np.empty((n, n), np.float32)
        self.nonzero = np.empty((n, n), bool)
        self.slopes = np.zeros(2 * n * n, np.float32)
        self.modes = np.empty(1024, np.float32)
        self.scratch = np.empty(1024, np.float32)
        self.integrated = np.zeros(1024, np.float32)
        self.commands = np.zeros(1024, np.float32)
        self.t = 0

    def step(self) -> None:
        n, p = self.n, self.p
        np.subtract(self.frames[self.t % 16], self.dark, out=self.cal, casting="unsafe")
        np.multiply(self.cal, self.gain, out=self.cal)
        np.subtract(self.cal, 5.0, out=self.cal)          # threshold 5
        np.maximum(self.cal, 0, out=self.cal)
        sub = self.cal.reshape(n, p, n, p)
        np.sum(sub, axis=3, out=self.rows)
        np.sum(sub, axis=1, out=self.cols)
        np.sum(self.cols, axis=2, out=self.flux)
        np.matmul(self.cols, self.offsets, out=self.sx)
        np.matmul(self.rows.transpose(0, 2, 1), self.offsets, out=self.sy)
        np.greater(self.flux, 0, out=self.nonzero)
        ox, oy = self.slopes[:n * n].reshape(n, n), self.slopes[n * n:].reshape(n, n)
        ox[...] = 0
        oy[...] = 0
        np.divide(self.sx, self.flux, out=ox, where=self.nonzero)
        np.divide(self.sy, self.flux, out=oy, where=self.nonzero)
        np.matmul(self.recon, self.slopes, out=self.modes)
        np.multiply(self.modes, 0.2, out=self.scratch)
        self.integrated *= 0.9
        self.integrated += self.scratch
        np.clip(self.integrated, -0.25, 0.25, out=self.commands)
        self.t += 1


def breakdown(p: Pipeline, timing: LoopTiming) -> str:
    m = p.metrics()
    groups: dict[str, float] = {}
    for s in p.config.stages:
        g = s.placement or "main"
        groups[g] = groups.get(g, 0.0) + m[s.name]["mean_ms"] * m[s.name]["steps"] / max(1, p.t)
    period = 1e3 / timing.hz
    parts = ", ".join(f"{g} {ms:.3f} ms" for g, ms in groups.items())
    return (f"  breakdown: step period {period:.3f} ms; stage compute per step: {parts}; "
            f"the rest ({period - max(groups.values()):.3f} ms beyond the busiest actor) is channel hops, "
            f"driver round trip and scheduling on {os.cpu_count()} cores")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--placements", default="in-process,ray,ray-compiled,ray-classic")
    ap.add_argument("--trials", type=int, default=3, help="measure each this many times, print the best")
    args = ap.parse_args(argv)
    placements = [s for s in args.placements.split(",") if s]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"AO loop (256x256 frame -> 512 slopes -> 1024x512 -> 1024 commands), best of {args.trials} x "
          f"{args.steps} steps after {args.warmup}, {os.cpu_count()} cores, load average {load:.2f}", flush=True)
    with threadpool_limits(1):
        hand = HandWrittenLoop()
        local = Pipeline.from_yaml(AO).build()
        hand_runs, local_runs = [], []
        for _ in range(args.trials):  # interleaved: both see the same share of the machine
            hand_runs.append(measure_callable(hand.step, args.steps, args.warmup))
            local_runs.append(measure(local, args.steps, args.warmup))
        base = max(hand_runs, key=lambda r: r.hz)
        print(format_line("hand-written", base), flush=True)
        local.close()
        if any(p != "in-process" for p in placements):
            import ray

            # a Ray instance of its own (a running local cluster may belong to another job)
            ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
        for placement in placements:
            with Pipeline.from_yaml(AO, placement=placement).build() as p:
                if placement == "in-process":
                    t = max(local_runs, key=lambda r: r.hz)
                    p.step(local.t)  # same steps as the measured pipeline, for the check below
                else:
                    t = max((measure(p, args.steps, args.warmup) for _ in range(args.trials)), key=lambda r: r.hz)
                ref = HandWrittenLoop()
                for _ in range(p.t):
                    ref.step()
                ok = np.allclose(p.read("commands"), ref.commands, rtol=1e-4, atol=1e-5)
                print(format_line(placement, t) + f"  (rate {t.hz / base.hz:.2f}x hand-written, p50 spacing "
                      f"{t.p50_ms / base.p50_ms:.2f}x; commands {'equal' if ok else 'DIFFER'})", flush=True)
                if placement != "in-process":
                    print(breakdown(p, t), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
