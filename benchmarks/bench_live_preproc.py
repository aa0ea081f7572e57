"""Frame-stack preprocessing (examples/detector_preproc.yaml: dark, gain, 2x2 binning) on 256x256 uint16 frames.

Side by side, on the same stack of frames, in one process:

* hand-written numpy on the whole stack (the baseline);
* ``FrameStackPipeline`` once per stack (what ``preprocess=`` runs on a worker per partition);
* the same graph stepped once per frame (the pipeline's own model, and the fallback for kinds
  without a stack rule);

then a stream run with and without ``preprocess=`` (inline: the preprocessing and SumUDF in this
process; with ``--ray N`` also on N Ray workers, where the preprocessing runs), and the bytes a task carries for the pipeline (its dark and gain travel with it).
Best of ``--repeat``; frames/s. Run::

    python benchmarks/bench_live_preproc.py [--frames 1024] [--stack 128] [--repeat 3] [--ray WORKERS]
"""

from __future__ import annotations

import argparse
import os
import pickle
import time

import numpy as np

import raytile as rt
from raytile.pipeline.frame_stacks import FrameStackPipeline

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "detector_preproc.yaml")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1024)
    ap.add_argument("--stack", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ray", type=int, default=0, metavar="WORKERS",
                    help="also run the stream on Ray with this many workers (preprocessing on them)")
    args = ap.parse_args()
    n, k = args.frames, args.stack
    frames = np.random.default_rng(0).integers(0, 4096, (n, 256, 256)).astype(np.uint16)
    pre = FrameStackPipeline.from_yaml(EXAMPLE, output="binned")
    dark = np.float32(100.0)

    def numpy_stacks() -> None:  # the fastest numpy we know: strided adds for the 2x2 blocks
        for i in range(0, n, k):
            cal = (frames[i:i + k] - dark) * np.float32(1.0)
            rows = cal[:, 0::2] + cal[:, 1::2]
            rows[:, :, 0::2] + rows[:, :, 1::2]

    def stacked() -> None:
        for i in range(0, n, k):
            pre(frames[i:i + k])

    def per_frame() -> None:
        pre.stacked = False
        try:
            for i in range(0, n, k):
                pre(frames[i:i + k])
        finally:
            pre.stacked = True

    ref = ((frames[:k] - dark) * np.float32(1.0)).reshape(-1, 128, 2, 128, 2).sum(axis=(2, 4))
    assert np.allclose(pre(frames[:k]), ref, rtol=1e-5)
    rows = [("hand-written numpy, per stack", best(numpy_stacks, args.repeat)),
            ("FrameStackPipeline, per stack", best(stacked, args.repeat)),
            ("pipeline stepped per frame", best(per_frame, args.repeat))]

    def run(ctx, preprocess) -> None:
        ds = ctx.load("stream", frames=(frames[i:i + k] for i in range(0, n, k)), nav_shape=(n,),
                      sig_shape=(256, 256), dtype="uint16", frames_per_partition=k, preprocess=preprocess)
        ctx.run_udf(dataset=ds, udf=rt.SumUDF())

    inline = rt.Context(executor="inline")
    rows += [("stream run inline, no preprocess", best(lambda: run(inline, None), args.repeat)),
             ("stream run inline, preprocess=", best(lambda: run(inline, pre), args.repeat))]
    if args.ray:
        with rt.Context(cpus=args.ray) as ray_ctx:
            run(ray_ctx, pre)  # workers warm
            rows += [(f"stream run Ray x{args.ray}, no preprocess", best(lambda: run(ray_ctx, None), args.repeat)),
                     (f"stream run Ray x{args.ray}, preprocess=", best(lambda: run(ray_ctx, pre), args.repeat))]
    print(f"{n} frames 256x256 uint16, stacks of {k}; load average {os.getloadavg()[0]:.2f}")
    base = rows[0][1]
    for name, t in rows:
        print(f"  {name:<36} {n / t:>10,.0f} frames/s  ({base / t:.2f}x hand-written)")
    state = pickle.dumps(pre)
    t0 = time.perf_counter()
    for _ in range(20):
        pickle.loads(pickle.dumps(pre))
    each = (time.perf_counter() - t0) / 20
    print(f"  the pipeline travels with each task: {len(state) / 1e6:.2f} MB, pickled and unpickled in "
          f"{each * 1e3:.2f} ms (a partition of {k} frames is {k * 256 * 256 * 2 / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
