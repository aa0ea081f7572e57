"""What the mmap backend's read leases cost the inline executor, warm (issue #37).

Each file a partition maps is read under a Linux read lease (see
src/raytile/io/backends/lease.py), so that a file truncated during a run
ends the run with a DataSetException instead of killing the process with
SIGBUS. This measures the price: the inline executor's warm throughput of
SumUDF and SumSigUDF on the `raytile demo` uint16 raw file (in the page
cache), with the leases ("guarded", the default) and without them
("unguarded": the map read as before, no lease calls), the two taking turns
in the same process, best of ``--repeat`` each; a numpy pass over an
``np.memmap`` is the baseline of the machine. GB = 1e9 bytes. Run::

    python benchmarks/bench_truncation.py [--size-gib 0.5] [--repeat 7] [--partitions N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import raytile as rt
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape
from raytile.io.backends import lease


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(64 * 2**20)
        while f.readinto(buf):
            pass


def numpy_sum(path: Path, shape: tuple, chunk: int = 64) -> np.ndarray:
    flat = np.memmap(path, mode="r", dtype=np.uint16, shape=shape).reshape((-1,) + shape[-2:])
    acc = np.zeros(shape[-2:], dtype=np.float32)
    for s in range(0, flat.shape[0], chunk):
        acc += flat[s:s + chunk].sum(axis=0, dtype=np.float32)
    return acc


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gib", type=float, default=0.5)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--partitions", type=int, default=None, help="default: the data set's own choice")
    args = p.parse_args(argv)

    nav, sig = demo_shape(args.size_gib)
    path = demo_file(default_cache_dir(), nav, sig)
    nbytes = path.stat().st_size
    warm(path)
    ctx = rt.Context(executor="inline")
    kw = {} if args.partitions is None else {"num_partitions": args.partitions}
    ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16", **kw)
    print(f"file {path}: {nbytes / 2**30:.3f} GiB, {nav + sig} uint16, {len(list(ds.get_partitions()))} partitions; "
          f"best of {args.repeat}, taking turns; GB = 1e9 bytes")

    leases_available = lease._LEASES
    best: dict[tuple[str, str], float] = {}
    ref = None
    for _ in range(args.repeat):
        t, ref = timed(lambda: numpy_sum(path, nav + sig))
        best[("numpy", "sum")] = min(best.get(("numpy", "sum"), np.inf), t)
        for mode in ("unguarded", "guarded"):
            lease._LEASES = leases_available and mode == "guarded"
            lease.set_unleased_policy("map" if mode == "unguarded" else "read")
            for name, udf in (("SumUDF", rt.SumUDF), ("SumSigUDF", rt.SumSigUDF)):
                t, res = timed(lambda: ctx.run_udf(dataset=ds, udf=udf()))
                best[(mode, name)] = min(best.get((mode, name), np.inf), t)
                if name == "SumUDF":
                    np.testing.assert_allclose(res["intensity"].data, ref, rtol=1e-5)
    lease._LEASES = leases_available
    lease.set_unleased_policy("read")

    print(f"\n{'UDF':<12}{'unguarded GB/s':>16}{'guarded GB/s':>14}{'guarded/unguarded':>19}")
    for name in ("SumUDF", "SumSigUDF"):
        u, g = best[("unguarded", name)], best[("guarded", name)]
        print(f"{name:<12}{nbytes / u / 1e9:>16.2f}{nbytes / g / 1e9:>14.2f}{u / g:>19.3f}")
    print(f"{'numpy sum':<12}{nbytes / best[('numpy', 'sum')] / 1e9:>16.2f}")
    if not leases_available:
        print("\n(no read leases on this platform: both columns read unguarded)")
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
