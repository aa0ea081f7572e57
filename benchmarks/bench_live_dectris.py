"""DECTRIS live receive rate: raytile's simulator (another process) into raytile's receiver, on loopback.

Three figures in one run, same sender, same frames (bitshuffle-LZ4, sparse Poisson counts):

* ``raw PULL``: a bare pyzmq PULL socket that only counts messages (the sender's ceiling here);
* ``receiver``: :class:`~raytile.live.detectors.dectris.DectrisReceiver` with a consumer that decodes
  each stack and does nothing else;
* ``SumUDF+ring``: a whole inline live run (``LiveContext.make_acquisition`` + ``run_udf``).

    python benchmarks/bench_live_dectris.py --sig 256 --frames 20000

``--reader`` measures, without sockets or a simulator, the CPU a frame (``time.thread_time``) of the two
halves of the receiver in this process: the reader thread's handling of each image's four message parts
(JSON head, layout part, copy into the slab) and the consumer's decoding of whole stacks. It varies much
less with the machine's load than the rates do; run it against two source trees in turn
(``PYTHONPATH=.../src``) to compare them.

The machine is shared: write ``uptime``'s load beside the numbers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np


def _sim_process(sig: int, dtype: str, ports: Any, stop: Any) -> None:
    from raytile.live.detectors.dectris import DectrisSimulator

    rng = np.random.default_rng(0)
    frames = rng.poisson(0.5, size=(256, sig, sig)).astype(dtype)
    with DectrisSimulator(frames, trigger_mode="exts") as sim:
        ports.put((sim.api_port, sim.data_port))
        stop.wait()


def _raw_pull(data_port: int, api_port: int, n: int) -> float:
    import zmq

    from raytile.live.detectors.dectris import SimplonClient

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.connect(f"tcp://127.0.0.1:{data_port}")
    time.sleep(0.2)
    SimplonClient("127.0.0.1", api_port).send_detector_command("arm")
    images, t0 = 0, None
    while True:
        if not sock.poll(10_000):
            raise RuntimeError("raw PULL: the sender stopped")
        head = sock.recv()
        if b"dimage-" in head[:40]:
            if t0 is None:
                t0 = time.perf_counter()
            images += 1
        elif b"dseries_end" in head[:40]:
            break
    dt = time.perf_counter() - t0
    sock.close()
    ctx.term()
    return (images - 1) / dt


def _reader(sig: int, dtype: str, rounds: int = 5, n: int = 4096) -> None:
    """CPU a frame of the reader's per-image work and of the consumer's decoding (see the docstring)."""
    import zmq

    from raytile.live.detectors.dectris import DectrisReceiver
    from raytile.live.detectors.dectris.stream_v1 import encode_image, image_message

    rng = np.random.default_rng(0)
    frames = rng.poisson(0.5, size=(16, sig, sig)).astype(dtype)
    encoded = [encode_image(f, "bslz4") for f in frames]
    parts = []
    for i in range(n):
        data, encoding = encoded[i % len(encoded)]
        parts += [zmq.Frame(p) for p in image_message(1, i, data, encoding, (sig, sig), frames.dtype)]
    rx = DectrisReceiver("tcp://127.0.0.1:1", frame_stack_size=64, slots=n // 64 + 2,
                         bytes_per_frame=frames[0].nbytes + 4096)
    out = np.empty((64, sig, sig), dtype)
    print(f"load: {os.getloadavg()}  {n} images of {sig}x{sig} {dtype}, bitshuffle-LZ4, "
          f"{np.mean([len(e[0]) for e in encoded]):.0f} bytes each; one process, no sockets")
    for r in range(rounds):
        feed = iter(parts)
        rx._next_part = lambda: next(feed)  # type: ignore[method-assign]  # the parts, as the socket gives them
        rx._series, rx._in_series, rx._expected = 1, 0, n
        t0 = time.thread_time()
        for _ in range(n):
            rx._message(rx._next_part())
        reader = (time.thread_time() - t0) / n
        t0, decoded = time.thread_time(), 0
        while not rx._events.empty():
            stack = rx._events.get()
            rx._decode_into(stack, 0, stack.count, out[:stack.count])
            rx._release(stack.slot)
            decoded += stack.count
        decode = (time.thread_time() - t0) / decoded
        print(f"round {r + 1}: reader thread {reader * 1e6:6.2f} us CPU a frame, decoding {decode * 1e6:6.2f} us"
              f"{'  (first round: the slab is touched for the first time)' if r == 0 else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sig", type=int, default=256)
    ap.add_argument("--dtype", default="uint16")
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--reader", action="store_true", help="the reader's and the decoder's CPU a frame, no sockets")
    args = ap.parse_args()
    if args.reader:
        _reader(args.sig, args.dtype)
        return
    from raytile.live import LiveContext
    from raytile.udf import ApplyMasksUDF, SumUDF, masks

    spawn = mp.get_context("spawn")
    ports = spawn.Queue()
    stop = spawn.Event()
    proc = spawn.Process(target=_sim_process, args=(args.sig, args.dtype, ports, stop), daemon=True)
    proc.start()
    try:
        api_port, data_port = ports.get(timeout=60)
        from raytile.live.detectors.dectris import SimplonClient
        ec = SimplonClient("127.0.0.1", api_port)
        ec.set_detector_config("nimages", args.frames)
        n = args.frames
        side = int(np.sqrt(n))
        nav = (n // side, side)
        n = nav[0] * nav[1]
        ec.set_detector_config("nimages", n)
        print(f"load: {os.getloadavg()}  frames: {n} of {args.sig}x{args.sig} {args.dtype}, bitshuffle-LZ4")
        print(f"raw PULL (counts messages):   {_raw_pull(data_port, api_port, n):10.0f} frames/s")

        ctx = LiveContext(executor="inline")
        with ctx.make_connection("dectris").open(api_port=api_port, data_port=data_port, buffer_size=256) as conn:
            ec.send_detector_command("arm")
            pending = conn.wait_for_acquisition(30.0)
            got, t0 = 0, time.perf_counter()
            for batch in conn.receiver.frames(pending.nimages):
                got += len(batch)
            rate = got / (time.perf_counter() - t0)
            print(f"receiver (decode, no UDF):    {rate:10.0f} frames/s  slab {conn.receiver.slab_bytes / 2**20:.0f} MiB")

            ring = masks.ring(args.sig / 2, args.sig / 2, args.sig / 8, args.sig / 4, (args.sig, args.sig))
            ec.send_detector_command("arm")
            pending = conn.wait_for_acquisition(30.0)
            aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=nav)
            t0 = time.perf_counter()
            ctx.run_udf(dataset=aq, udf=[SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring])])
            rate = n / (time.perf_counter() - t0)
            print(f"SumUDF+ring, inline run:      {rate:10.0f} frames/s")
    finally:
        stop.set()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()


if __name__ == "__main__":
    main()
