"""GPU throughput: SumUDF, a ring mask and a small-kernel-heavy UDF, with and without CUDA-graph capture.

Data sets: a raw file in the page cache (read, staged through pinned buffers,
copied on a stream) and an array already on the device. Printed beside the
host-to-device copy bandwidth of the same bytes measured in the same run
(pageable and pinned) and a plain cupy sum of the device-resident data.

    python benchmarks/bench_gpu.py [--frames 4096] [--sig 256] [--repeats 3]

Runs only where cupy and a CUDA GPU are available; otherwise it says so and
exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def _gpu_available() -> tuple[bool, str]:
    try:
        import cupy
    except Exception as e:  # noqa: BLE001
        return False, f"cupy is not importable ({type(e).__name__}: {e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return False, f"no CUDA device ({type(e).__name__}: {e})"
    return (n > 0), ("no CUDA device" if n == 0 else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=4096)
    ap.add_argument("--sig", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=8)
    args = ap.parse_args(argv)

    ok, why = _gpu_available()
    if not ok:
        print(f"bench_gpu: skipped, {why}. Run it on a machine with cupy and an NVIDIA GPU.")
        return 0

    import cupy

    import raytile as rt
    from raytile.runtime.executor import Executor, TaskHandle
    from raytile.runtime.part_runner import run_partition
    from raytile.udf import masks
    from raytile.udf.base import UDF

    class GPUInline(Executor):
        device_classes = frozenset({"cuda"})

        def put_params(self, params):
            return params

        def submit(self, task, params_handle, version, progress=None):
            h = TaskHandle(task, version)
            h.result = run_partition(task, params_handle, device_class="cuda")
            return h

        def wait(self, handles, timeout):
            return list(handles[:1])

        def result(self, handle):
            return handle.result

    sig = (args.sig, args.sig)
    frames = args.frames
    nbytes = frames * sig[0] * sig[1] * 4
    rng = np.random.default_rng(0)
    host = rng.random((frames,) + sig, dtype=np.float32)

    class Sum(rt.SumUDF):
        def get_tiling_preferences(self):
            return {"depth": 64, "total_size": 64 * sig[0] * sig[1] * 4}

        def get_backends(self):
            return (self.BACKEND_CUPY,)

    class SumCaptured(Sum):
        capturable = True

    cy, cx = sig[0] / 2, sig[1] / 2

    class Ring(rt.udf.ApplyMasksUDF):
        def get_tiling_preferences(self):
            return {"depth": 64, "total_size": 64 * sig[0] * sig[1] * 4}

        def get_backends(self):
            return (self.BACKEND_CUPY,)

    class RingCaptured(Ring):
        capturable = True

    class SmallKernels(UDF):
        """40 tiny elementwise/reduction launches per tile: launch overhead dominates."""

        def get_preferred_input_dtype(self):
            return np.float32

        def get_tiling_preferences(self):
            return {"depth": 16, "total_size": 16 * sig[0] * sig[1] * 4}

        def get_backends(self):
            return (self.BACKEND_CUPY,)

        def get_result_buffers(self):
            return {"acc": self.buffer(kind="nav", dtype="float32", where="device")}

        def process_tile(self, tile):
            out = self.results.acc
            corner = tile[:, :8, :8]
            for k in range(20):
                out += (corner * (k + 1)).sum(axis=(1, 2))
                out *= 0.5

    class SmallKernelsCaptured(SmallKernels):
        capturable = True

    def ring():
        return masks.ring(cy, cx, sig[0] / 8, sig[0] / 4, sig)

    ctx = rt.Context(executor=GPUInline())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.raw")
        host.tofile(path)
        ds_file = ctx.load("raw", path=path, nav_shape=(frames,), sig_shape=sig, dtype="float32",
                           num_partitions=args.partitions)
        dev = cupy.asarray(host)
        ds_dev = ctx.load("memory", data=dev, num_partitions=args.partitions)

        # Copy baselines, same bytes, same run
        def best(fn):
            ts = []
            for _ in range(args.repeats):
                cupy.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
                fn()
                cupy.cuda.runtime.deviceSynchronize()
                ts.append(time.perf_counter() - t0)
            return min(ts)

        target = cupy.empty_like(dev)
        t_pageable = best(lambda: target.set(host))
        mem = cupy.cuda.alloc_pinned_memory(nbytes)
        pinned = np.frombuffer(mem, np.float32, host.size).reshape(host.shape)
        pinned[...] = host
        t_pinned = best(lambda: target.set(pinned))
        t_devsum = best(lambda: dev.sum(axis=0))
        del pinned, mem, target

        print(f"bench_gpu: {frames} frames of {sig[0]}x{sig[1]} float32 = {nbytes / 2**30:.2f} GiB, "
              f"device {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
        print(f"  baseline H2D pageable copy     {nbytes / t_pageable / 1e9:8.2f} GB/s")
        print(f"  baseline H2D pinned copy       {nbytes / t_pinned / 1e9:8.2f} GB/s")
        print(f"  baseline cupy sum on device    {nbytes / t_devsum / 1e9:8.2f} GB/s")

        ref_sum = host.sum(axis=0, dtype=np.float64)
        cases = [
            ("SumUDF", lambda: Sum(), lambda: SumCaptured()),
            ("ring mask", lambda: Ring(mask_factories=ring), lambda: RingCaptured(mask_factories=ring)),
            ("small kernels", lambda: SmallKernels(), lambda: SmallKernelsCaptured()),
        ]
        for ds_name, ds in (("page-cached file", ds_file), ("device-resident", ds_dev)):
            ctx.run_udf(dataset=ds, udf=Sum())  # warm page cache, compile kernels
            for name, plain, captured in cases:
                row = []
                for label, make in (("plain", plain), ("captured", captured)):
                    ts = []
                    for _ in range(args.repeats):
                        udf = make()
                        t0 = time.perf_counter()
                        res = ctx.run_udf(dataset=ds, udf=udf)
                        ts.append(time.perf_counter() - t0)
                    if name == "SumUDF":
                        np.testing.assert_allclose(res["intensity"].data, ref_sum, rtol=1e-3)
                    row.append(f"{label} {nbytes / min(ts) / 1e9:8.2f} GB/s")
                print(f"  {ds_name:17s} {name:14s} " + "   ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
