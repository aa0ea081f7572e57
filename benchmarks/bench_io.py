"""I/O throughput: raw via mmap-straight, buffered, direct; 12-bit packed decode; HDF5 chunked.

Each pass reads a whole file through ``Partition.get_tiles`` (no UDF) and
consumes every tile like a reader would: ``tile.max()`` reads every byte of
it (a numpy ``sum`` of uint16 alone runs at a few GB/s and would hide the
differences between the read paths; the "consumer only" line shows what
the consumer does on an array already in memory). It prints GB/s of file
bytes beside a dd-style sequential read (1 MiB ``readinto``) of the same
file in the same run, cold after a cold pass and warm after a warm one;
files are dropped from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``)
before every cold pass. Each read path runs once on a few frames first, so
that loading numba's cached code is not timed.

    python benchmarks/bench_io.py --size-gib 1 [--dir /path]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import raytile as rt
from raytile.io.formats.packed import pack_bits
from raytile.io.negotiator import Negotiator


def drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def dd_read(path: str, cold: bool) -> float:
    if cold:
        drop_cache(path)
    buf = bytearray(1 << 20)
    t = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            k = f.readinto(buf)
            if not k:
                break
            n += k
    return n / (time.perf_counter() - t) / 1e9


def consume(data) -> None:
    """What a reader does with a tile: look at every byte of it."""
    np.asarray(data).max()


def read_all(ds, io_backend=None, dtype=None, frames=None) -> float:
    """Seconds to read (and consume) every tile of ``ds``, or of the first ``frames`` frames."""
    udf = rt.udf.SumUDF()
    part = ds.get_partitions()
    scheme = Negotiator().get_scheme([udf], part[0], np.dtype(dtype or ds.dtype))
    roi = None
    if frames is not None:
        roi = np.zeros(ds.shape.nav.size, dtype=bool)
        roi[:frames] = True
        part = part[:1]
    t = time.perf_counter()
    for p in part:
        if io_backend:
            p.io_backend = io_backend
        for tile in p.get_tiles(scheme, roi=roi, dest_dtype=dtype):
            consume(tile.data)
    return time.perf_counter() - t


def consumer_only(shape, dtype) -> float:
    """GB/s of :func:`consume` on tiles already in memory."""
    tile = np.ones(shape, dtype=dtype)
    consume(tile)
    t = time.perf_counter()
    for _ in range(50):
        consume(tile)
    return 50 * tile.nbytes / (time.perf_counter() - t) / 1e9


def write_file(path: str, nbytes: int, writer) -> None:
    if os.path.exists(path) and os.path.getsize(path) >= nbytes * 0.9:
        return
    writer(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    d = args.dir or tempfile.mkdtemp(prefix="raytile-bench-io-")
    os.makedirs(d, exist_ok=True)
    sig = (256, 256)
    frame_bytes = sig[0] * sig[1] * 2
    n = max(16, int(args.size_gib * 2**30 // frame_bytes))
    ctx = rt.Context(executor="inline")
    rng = np.random.default_rng(0)
    block = rng.integers(0, 4096, (64,) + sig).astype(np.uint16)

    raw = os.path.join(d, "bench.raw")
    def w_raw(path):
        with open(path, "wb") as f:
            for i in range(0, n, 64):
                f.write(block[: min(64, n - i)].tobytes())
    write_file(raw, n * frame_bytes, w_raw)
    size = os.path.getsize(raw)
    print(f"file {raw}: {n} frames of {sig} uint16, {size / 2**30:.2f} GiB")
    print(f"{'pass':40s} {'GB/s':>7s}   dd-style sequential read of the same file")

    def line(name, path, nbytes, seconds):
        cold = "(cold)" in name
        print(f"{name:40s} {nbytes / seconds / 1e9:7.2f}   {dd_read(path, cold):.2f}")

    print(f"{'consumer only (uint16 tile in memory)':40s} {consumer_only((32,) + sig, np.uint16):7.2f}")
    ds = ctx.load("raw", path=raw, nav_shape=(n,), sig_shape=sig, dtype="uint16")
    t = time.perf_counter()
    for backend, dtype in (("mmap", None), ("mmap", np.float32), ("buffered", None), ("direct", None)):
        read_all(ds, backend, dtype, frames=64)
    print(f"{'first reads of 64 frames, 4 paths (s)':40s} {time.perf_counter() - t:7.2f}   (numba code load/compile)")
    drop_cache(raw)
    line("raw mmap straight (cold)", raw, size, read_all(ds, "mmap"))
    line("raw mmap straight (warm)", raw, size, read_all(ds, "mmap"))
    drop_cache(raw)
    line("raw mmap read ranges ->float32 (cold)", raw, size, read_all(ds, "mmap", np.float32))
    line("raw mmap read ranges ->float32 (warm)", raw, size, read_all(ds, "mmap", np.float32))
    drop_cache(raw)
    line("raw buffered preadv (cold)", raw, size, read_all(ds, "buffered"))
    line("raw buffered preadv (warm)", raw, size, read_all(ds, "buffered"))
    drop_cache(raw)
    line("raw direct O_DIRECT (cold)", raw, size, read_all(ds, "direct"))

    packed = os.path.join(d, "bench12.bin")
    packed_bytes = n * frame_bytes * 3 // 4
    def w_packed(path):
        with open(path, "wb") as f:
            enc = pack_bits(block, 12)
            per = len(enc) // 64
            for i in range(0, n, 64):
                f.write(enc[: per * min(64, n - i)])
    write_file(packed, packed_bytes, w_packed)
    ds12 = ctx.load("packed_raw", path=packed, nav_shape=(n,), sig_shape=sig, bits=12)
    read_all(ds12, "mmap", frames=64)
    read_all(ds12, "buffered", frames=64)
    read_all(ds12, "mmap")  # into the page cache
    line("12-bit packed decode, mmap (warm)", packed, os.path.getsize(packed), read_all(ds12, "mmap"))
    drop_cache(packed)
    line("12-bit packed decode, buffered (cold)", packed, os.path.getsize(packed), read_all(ds12, "buffered"))

    try:
        import h5py
    except ImportError:
        print("hdf5: h5py not installed, skipped")
        return
    for name, chunks in (("bench.h5", (16, 128, 128)), ("bench_frames.h5", (16,) + sig)):
        h5 = os.path.join(d, name)

        def w_h5(path, chunks=chunks):
            with h5py.File(path, "w") as f:
                dset = f.create_dataset("data", shape=(n,) + sig, dtype="uint16", chunks=chunks)
                for i in range(0, n, 64):
                    dset[i:i + 64] = block[: min(64, n - i)]
        write_file(h5, n * frame_bytes, w_h5)
        dsh = ctx.load("hdf5", path=h5, ds_path="data")
        read_all(dsh, frames=64)
        label = f"hdf5 chunked ({','.join(map(str, chunks))})"
        drop_cache(h5)
        line(f"{label} (cold)", h5, n * frame_bytes, read_all(dsh))
        line(f"{label} (warm)", h5, n * frame_bytes, read_all(dsh))


if __name__ == "__main__":
    main()
