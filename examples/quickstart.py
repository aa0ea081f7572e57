"""raytile quickstart: load a data set, run UDFs in one pass, plot the results.

    python examples/quickstart.py                       # synthetic 4D-STEM scan (64 MiB, cached)
    python examples/quickstart.py --executor inline     # no Ray: everything in this process
    python examples/quickstart.py --path scan.raw --nav-shape 64,64 --sig-shape 256,256 --dtype uint16

Writes quickstart.png (or --out) with the sum frame and the integrated-intensity map.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import raytile as rt
from raytile.cli import make_context
from raytile.cli.args import parse_shape
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executor", choices=("ray", "inline"), default="ray")
    p.add_argument("--path", help="a raw file (default: the synthetic demo scan)")
    p.add_argument("--nav-shape", type=parse_shape)
    p.add_argument("--sig-shape", type=parse_shape)
    p.add_argument("--dtype", default="uint16")
    p.add_argument("--out", default="quickstart.png")
    args = p.parse_args(argv)

    if args.path:
        path, nav, sig = args.path, args.nav_shape, args.sig_shape
    else:
        nav, sig = demo_shape(1 / 16)
        path = demo_file(default_cache_dir(), nav, sig)

    # 1. a Context: "ray" (a local Ray, started if none runs) or "inline" (no Ray)
    ctx, executor = make_context(args.executor)
    with ctx:
        # 2. load: a format name and its parameters
        ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype=args.dtype)
        print(f"{ds!r} on the {executor} executor, {ds.num_partitions} partitions")

        # 3. run: a list of UDFs shares one read of every tile
        sum_res, sumsig_res = ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()], progress=True)

    frame_sum = sum_res["intensity"].data      # sig-shaped
    intensity = sumsig_res["intensity"].data   # nav-shaped
    print(f"sum frame {frame_sum.shape}, max {frame_sum.max():.4g}; "
          f"integrated intensity {intensity.shape}, mean {intensity.mean():.4g}")

    # 4. plot (the Agg canvas: no display needed)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.imshow(np.log1p(frame_sum), cmap="inferno")
    ax1.set_title("SumUDF (log)")
    ax2.imshow(intensity, cmap="gray")
    ax2.set_title("SumSigUDF")
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {Path(args.out).resolve()}")


if __name__ == "__main__":
    main()
