"""raytile reading an object from S3 (moto on 127.0.0.1) beside a plain parallel ranged GET, and a local file.

One object of ``--size-mib`` MiB (uint16 frames of 256 x 256, 1 GiB by
default) is put into a moto S3 server running in its own process on
127.0.0.1 (this script, ``--serve-moto``: moto with ranged GETs that cost
their range, see :func:`serve_moto`; ``--stock-moto`` for moto as released).
Then, best of ``--repeat`` each, measured in the same run:

* **plain GET**: s3fs (the library raytile reads with), ``--concurrency`` x
  workers ranged GETs of ``--request-mib`` in flight from threads of this
  process, each into its place of one buffer: the store's own limit on this
  machine, nothing decoded;
* **raytile S3**: ``SumUDF`` over ``s3://...`` on ``--workers`` Ray workers
  (each fetches its partitions' ranges, ``--concurrency`` GETs in flight);
* **raytile local**: ``SumUDF`` over the same bytes as a local raw file
  (page cache warm), the same workers;

and the peak RSS of the Ray workers (``ru_maxrss``, sampled per tile by a
UDF run beside SumUDF in the S3 runs), beside the object's size: memory
follows the partitions in flight, not the object. Every SumUDF result is
checked against numpy's sum of the same data.

    python benchmarks/bench_cloud.py [--size-mib 1024] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import raytile as rt

SIG = (256, 256)
KEY, SECRET = "AKIABENCHRAYTILE0001", "bench-secret-never-shown"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_moto(port: int, stock: bool) -> None:
    """Run moto's S3 server on 127.0.0.1:``port`` in this process (``--serve-moto``).

    Stock moto answers a ranged GET by copying the *whole* object out of its
    buffer and then slicing the range (``FakeKey.value``, under a per-object
    lock): a GET of 8 MiB of a 1 GiB object copies 1 GiB, so one pass over the
    object copies 128 GiB and 16 GETs in flight hold 16 copies of it (16 GiB).
    Real stores serve a range for the cost of the range, so unless ``stock``
    this process lets GETs see the object's buffer without copying it
    (a ``memoryview``), and only the range is copied into the answer. Both
    ways of reading (plain GET and raytile) read from this same server.
    """
    import io
    import threading

    from moto import server
    from moto.s3 import models, responses

    if not stock:
        local = threading.local()
        value = models.FakeKey.value

        def view_value(self):
            buf = getattr(self._value_buffer, "_file", None)
            if getattr(local, "get", False) and isinstance(buf, io.BytesIO):
                return buf.getbuffer()
            return value.fget(self)

        key_response = responses.S3Response.key_response

        def ranged_key_response(self, request, full_url, headers):
            local.get = request.method == "GET"
            try:
                status, hdrs, body = key_response(self, request, full_url, headers)
            finally:
                local.get = False
            if isinstance(body, memoryview):
                body = body.tobytes()  # the range only (the view of the whole buffer is released here)
            return status, hdrs, body

        models.FakeKey.value = property(view_value, value.fset)
        responses.S3Response.key_response = ranged_key_response
    server.main(["-H", "127.0.0.1", "-p", str(port)])


def start_moto(port: int, object_bytes: int, stock: bool = False) -> subprocess.Popen:
    """moto's S3 server in its own process (its GIL is not ours) on 127.0.0.1 (see :func:`serve_moto`),
    keeping objects of ``object_bytes`` in memory (by default moto spools objects over 5 MiB to a
    temporary file and reads the whole file for every ranged GET)."""
    env = dict(os.environ, MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=str(object_bytes + (1 << 20)))
    cmd = [sys.executable, os.path.abspath(__file__), "--serve-moto", str(port)] + (["--stock-moto"] if stock else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto server did not start within 60 s")


class PeakRSS(rt.UDF):
    """Each worker's peak resident memory so far (``ru_maxrss``), the largest over the workers."""

    def get_result_buffers(self):
        return {"rss": self.buffer(kind="single", dtype="int64")}

    def process_tile(self, tile):
        self.results.rss[:] = max(int(self.results.rss[0]),
                                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    def merge(self, dest, src):
        dest.rss[:] = max(int(dest.rss[0]), int(src.rss[0]))


def plain_get(fs, url: str, size: int, request: int, concurrency: int) -> float:
    """Seconds to fetch the whole object with ``concurrency`` ranged GETs in flight into one buffer."""
    buf = np.empty(size, dtype=np.uint8)

    def get(a: int) -> None:
        b = min(size, a + request)
        buf[a:b] = np.frombuffer(fs.cat_file(url, start=a, end=b), dtype=np.uint8)

    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(concurrency)
    try:
        list(pool.map(get, range(0, size, request)))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return time.perf_counter() - t0


def timed_sum(ctx, ds, expected: np.ndarray) -> tuple[float, int]:
    """Seconds of one SumUDF run (beside PeakRSS, a getrusage call per tile) and the workers' peak RSS;
    the sum must equal numpy's of the same data."""
    t0 = time.perf_counter()
    res = ctx.run_udf(dataset=ds, udf=[rt.udf.SumUDF(), PeakRSS()])
    seconds = time.perf_counter() - t0
    if not np.allclose(res[0]["intensity"].data, expected, rtol=1e-5):
        raise SystemExit("SumUDF's result differs from numpy's sum of the same data")
    return seconds, int(res[1]["rss"].data[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=0,
                    help="plain GET: requests in flight per worker (default: raytile's, DEFAULT_CONCURRENCY)")
    ap.add_argument("--request-mib", type=int, default=8, help="bytes of one ranged GET (raytile's default)")
    ap.add_argument("--stock-moto", action="store_true",
                    help="moto as released: every ranged GET copies the whole object (see serve_moto)")
    ap.add_argument("--serve-moto", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_moto:
        serve_moto(args.serve_moto, args.stock_moto)
        return

    import s3fs

    from raytile.io.store import DEFAULT_CONCURRENCY
    frame_bytes = SIG[0] * SIG[1] * 2
    n_frames = args.size_mib * 1024 * 1024 // frame_bytes
    nav = (n_frames // 64, 64)
    size = n_frames * frame_bytes
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    options = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": "us-east-1"}
    moto = start_moto(port, size, args.stock_moto)
    tmp = tempfile.mkdtemp(prefix="bench_cloud_")
    local = os.path.join(tmp, "data.raw")
    try:
        data = np.random.default_rng(0).integers(0, 1000, size // 2, dtype=np.uint16)
        data.tofile(local)
        fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=endpoint,
                               client_kwargs={"region_name": "us-east-1"})
        import boto3

        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                     region_name="us-east-1").create_bucket(Bucket="bench-bucket")
        t0 = time.perf_counter()
        fs.put_file(local, "bench-bucket/data.raw")
        print(f"object: {size / 2**20:.0f} MiB ({nav[0]}x{nav[1]} frames of {SIG} uint16), "
              f"put in {time.perf_counter() - t0:.1f} s; moto on {endpoint} (own process)")
        url = "s3://bench-bucket/data.raw"
        expected = data.reshape(-1, *SIG).sum(axis=0, dtype=np.float64)
        del data

        total_conc = (args.concurrency or DEFAULT_CONCURRENCY) * args.workers
        request = args.request_mib * 2**20
        ctx = rt.Context.make_local(cpus=args.workers, gpus=0, runtime_env={
            "env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
        try:
            ds = ctx.load("raw", path=url, nav_shape=nav, sig_shape=SIG, dtype="uint16", storage_options=options)
            parts = len(ds.get_partitions())
            one = np.zeros(nav, dtype=bool)
            one[0, 0] = one[-1, -1] = True
            ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(), roi=one)  # workers started, clients made
            # interleaved, with Ray running in both: the machine's load falls on both alike
            plain, s3_times, rss = [], [], 0
            for _ in range(args.repeat):
                plain.append(plain_get(fs, url, size, request, total_conc))
                seconds, peak = timed_sum(ctx, ds, expected)
                s3_times.append(seconds)
                rss = max(rss, peak)
            # after the S3 runs: the local file's mapped pages count in a worker's RSS
            ds_local = ctx.load("raw", path=local, nav_shape=nav, sig_shape=SIG, dtype="uint16")
            timed_sum(ctx, ds_local, expected)  # page cache warm
            local_times = [timed_sum(ctx, ds_local, expected)[0] for _ in range(args.repeat)]
        finally:
            ctx.close()

        def rate(ts: list[float]) -> str:
            best = min(ts)
            return f"{size / best / 1e9:6.3f} GB/s (best of {len(ts)}: {best:.2f} s; all {', '.join(f'{t:.2f}' for t in ts)})"

        print(f"plain parallel ranged GET (s3fs, {total_conc} in flight, {args.request_mib} MiB): {rate(plain)}")
        print(f"raytile SumUDF from S3, {args.workers} Ray workers, {parts} partitions: {rate(s3_times)}")
        print(f"raytile SumUDF, same bytes as a local file, same workers:      {rate(local_times)}")
        print(f"raytile S3 / plain GET: {min(plain) / min(s3_times):.2f}x (target >= 0.8x)")
        print(f"workers' peak RSS in the S3 runs: {rss / 2**20:.0f} MiB (object {size / 2**20:.0f} MiB, "
              f"partitions of ~{size / parts / 2**20:.0f} MiB)")
    finally:
        moto.terminate()
        try:
            moto.wait(10)
        except subprocess.TimeoutExpired:
            moto.kill()
        for name in os.listdir(tmp):
            os.remove(os.path.join(tmp, name))
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
