"""Live results: ``async for`` over partial results, and a ring radius changed mid-run.

A ring (annular dark-field) virtual detector runs over the synthetic demo
scan. Every merged partition arrives as a partial result (``part.damage``
says which scan positions are in). After the first quarter of the scan the
ring's radii are patched with ``run.update_parameters``: partitions that
start from then on use the new ring, and ``part.param_versions`` tells which
partition used which version.

    python examples/async_live.py --executor inline
    python examples/async_live.py --recompute    # also redo the partitions done with the old ring
"""

from __future__ import annotations

import argparse
import asyncio
import functools

from raytile.cli import make_context
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape
from raytile.udf import ApplyMasksUDF, masks


def ring_factories(sig, ri, ro):
    """Mask factories for ApplyMasksUDF: one ring around the signal centre."""
    return [functools.partial(masks.ring, sig[0] / 2, sig[1] / 2, ri, ro, tuple(sig))]


async def live(ctx, ds, sig, recompute: bool) -> None:
    old, new = (sig[0] * 0.25, sig[0] * 0.45), (sig[0] * 0.12, sig[0] * 0.2)
    run = ctx.run_udf_iter(dataset=ds, udf=ApplyMasksUDF(mask_factories=ring_factories(sig, *old)), sync=False)
    patched = False
    async for part in run:
        adf = part.buffers[0]["intensity"].data[..., 0]
        print(f"{part.partitions_done:>3}/{part.partitions_total} partitions, "
              f"{part.damage.fraction:5.0%} of the scan, mean ADF so far {adf[part.damage.data].mean():10.1f}")
        if not patched and part.damage.fraction >= 0.25:
            print(f"--> ring radii {old} -> {new} (recompute={recompute})")
            run.update_parameters([{"mask_factories": ring_factories(sig, *new)}], recompute=recompute)
            patched = True
    versions = part.param_versions
    print(f"finished: partitions per params version {dict(sorted(_count(versions.values()).items()))}")


def _count(values):
    out = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executor", choices=("ray", "inline"), default="ray")
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--recompute", action="store_true")
    args = p.parse_args(argv)

    nav, sig = demo_shape(1 / 16)
    path = demo_file(default_cache_dir(), nav, sig)
    ctx, executor = make_context(args.executor)
    with ctx:
        ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16",
                      num_partitions=args.partitions)
        print(f"{ds!r}, {args.partitions} partitions, {executor} executor")
        asyncio.run(live(ctx, ds, sig, args.recompute))


if __name__ == "__main__":
    main()
