"""Live plots' cost: a run with ``plots=True`` (matplotlib, rendered headless with Agg) against the same
run without plots, in one process, alternating.

Two ratios: ``run_udf`` alone (plots made, fed with the final data; with
Agg nothing is drawn during the run: see raytile/viz/mpl.py), and
``run_udf`` plus one render of every figure with its final data (what
Jupyter's inline back-end does when the cell ends).

The `raytile demo` file (``--size-gib``, 1 GiB by default, made in the cache
folder if absent) is read once into the page cache; SumUDF and SumSigUDF
run together (two plots: the sum frame and the nav map) on Ray with
``--workers`` workers (default: the CPU count), or inline with
``--inline``. Each round runs both contenders, in turn first (so that
neither always follows the other); the best time of each counts, and the
ratio plots / no plots is printed (target <= 1.05), with the ratio of the
medians beside it. Both results are checked against each other.

Where the time goes (2 cores, both busy with the workers). Before: the run
made partial results for the plots (each worker sent its merged partitions
every 0.1 s instead of once at the end), and each plot's figure, Axes and
image (~5 ms of CPU a figure) were made while the workers read: 1.07-1.16x.
Now, on a non-interactive back-end (Agg, Jupyter's inline), where no plot
can show a partial result, ``run_udf`` runs as without plots (final result
only) and each figure is made at once (0.2 ms, listed by pyplot) with its
Axes and image made when it is first drawn or read
(raytile/viz/deferred_figure.py): what is left in the run is the dry run
that finds the channels (<1 ms) and the plots' final update (~1 ms). The
Axes' cost moved to the final render, which pays it once (second ratio).
Measured in one session on 2 shared cores (load average 1.6-1.9), best of
12, this script with the code before and after in turn: before 1.083x
(medians 1.077x), after 1.022x (medians 1.018x); with the final render
1.44x both. See docs/notebooks.md.

    python benchmarks/bench_plots.py [--size-gib 1] [--rounds 3] [--workers N] [--inline]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import matplotlib

matplotlib.use("Agg")  # headless

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import raytile as rt  # noqa: E402
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_inline import warm_page_cache  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gib", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--inline", action="store_true", help="the inline executor instead of Ray")
    p.add_argument("--cache-dir", default=None)
    args = p.parse_args(argv)

    nav, sig = demo_shape(args.size_gib)
    path = demo_file(default_cache_dir() if args.cache_dir is None else args.cache_dir, nav, sig)
    warm_page_cache(path)
    ctx = rt.Context(executor="inline") if args.inline else rt.Context.make_local(cpus=args.workers, gpus=0)
    try:
        ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16")
        size_gb = os.path.getsize(path) / 1e9

        def run(plots: bool):
            udfs = [rt.SumUDF(), rt.SumSigUDF()]
            t0 = time.perf_counter()
            res = ctx.run_udf(dataset=ds, udf=udfs, plots=plots)
            elapsed = time.perf_counter() - t0
            figures = [plt.figure(n) for n in plt.get_fignums()]
            for fig in figures:  # render the final figures, as the inline back-end does at the cell's end
                fig.canvas.draw()
            rendered = time.perf_counter() - t0
            plt.close("all")
            return elapsed, rendered, res, len(figures)

        run(False)  # warm the workers
        times: dict[bool, list[float]] = {False: [], True: []}
        with_render: list[float] = []
        results = {}
        drawn = 0
        for round_ in range(args.rounds):
            for plots in ((False, True) if round_ % 2 == 0 else (True, False)):
                t, t_render, res, n = run(plots)
                times[plots].append(t)
                if plots:
                    with_render.append(t_render)
                results[plots] = res
                drawn = max(drawn, n)
        for i in range(2):
            np.testing.assert_allclose(results[True][i]["intensity"].data, results[False][i]["intensity"].data,
                                       rtol=1e-5)
        best = {k: min(v) for k, v in times.items()}
        median = {k: float(np.median(v)) for k, v in times.items()}
        where = "inline" if args.inline else f"Ray, {args.workers} workers"
        print(f"data: {path} ({size_gb:.2f} GB, nav {nav}, sig {sig}); {where}; best of {args.rounds}")
        print(f"no plots        : {best[False]:7.3f} s  {size_gb / best[False]:6.2f} GB/s")
        print(f"plots=True (MPL): {best[True]:7.3f} s  {size_gb / best[True]:6.2f} GB/s  ({drawn} figures drawn)")
        print(f"  + final render: {min(with_render):7.3f} s  (the {drawn} figures drawn once with the final data)")
        print(f"ratio plots / no plots: {best[True] / best[False]:.3f} run_udf alone (target <= 1.05), "
              f"{min(with_render) / best[False]:.3f} with the final render")
        print(f"medians: no plots {median[False]:.3f} s, plots {median[True]:.3f} s: ratio {median[True] / median[False]:.3f} "
              "(the best times are the figure; medians show how much the machine's other load moved them)")
        print(f"all times: no plots {['%.3f' % t for t in times[False]]}, plots {['%.3f' % t for t in times[True]]}")
        print(f"load average: {os.getloadavg()}")
    finally:
        ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
