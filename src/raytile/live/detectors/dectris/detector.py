"""DECTRIS's :class:`~raytile.live.registry.DetectorSpec` (:data:`SPEC`): its connection builder,
what a URL's port is (the REST port), its default ports, and its part of ``raytile live sim|run``:
the simulator and options (compression, stream format, trigger mode ...), its synthetic frames
(sparse counts) and the modules of the ``live`` extra each command needs.

    raytile live sim dectris --compression bslz4 --stream-format cbor --frame-rate 2000
    raytile live run dectris --udf sum --data-port 9999 --api-port 8910 --out live.npz
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.frame_blocks import iter_frame_blocks
from raytile.live.detectors.dectris.connection import DectrisConnectionBuilder
from raytile.live.registry import DetectorSpec, SimulatorSpec

__all__ = ["SPEC", "SIMULATOR", "sim_arguments", "run_arguments", "open_arguments", "extra_modules"]


def _indices(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 3,17, got {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers >= 0, got {text!r}")
    return values


def sim_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--dtype", default="uint16", choices=("uint8", "uint16", "uint32"),
                   help="DECTRIS: pixel type of synthetic frames (default uint16)")
    s.add_argument("--compression", default="bslz4", choices=("bslz4", "lz4", "none"),
                   help="DECTRIS: image compression (default bslz4; settable over REST)")
    s.add_argument("--stream-format", default="legacy", choices=("legacy", "cbor"),
                   help="DECTRIS: stream V1 (legacy, JSON) or V2 (cbor) (default legacy; settable over REST)")
    s.add_argument("--channels", type=int, default=1,
                   help="DECTRIS stream V2: threshold channels sent (threshold_k: the frames divided by k; default 1)")
    s.add_argument("--trigger-mode", default="exts", choices=("exts", "exte", "ints", "inte"),
                   help="DECTRIS: trigger mode; ints/inte wait for the trigger command (default exts)")
    s.add_argument("--scans", type=int, default=1,
                   help="DECTRIS: scans of the frames in each series (default 1)")
    s.add_argument("--sndhwm", type=int, default=128,
                   help="DECTRIS: ZeroMQ send high-water mark in messages, what the sender queues for a slow "
                        "receiver (default 128, about one stack of synthetic frames)")
    s.add_argument("--skip-images", type=_indices, default=(), metavar="I,J,...",
                   help="DECTRIS: image numbers never sent in each series (frames lost, for tests)")


def run_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("--stream-format", default=None, choices=("legacy", "cbor"),
                   help="DECTRIS: V1 or V2, set over REST (default: the detector's, never set)")
    r.add_argument("--channel", default=None, help="DECTRIS stream V2: the threshold channel (default: the first)")


def open_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {"stream_format": args.stream_format, "channel": args.channel}


def extra_modules(args: argparse.Namespace) -> tuple[str, ...]:
    """ZeroMQ, and the codecs of the chosen stream."""
    out = ["zmq"]
    if args.live_command == "sim":
        out.append({"bslz4": "bitshuffle", "lz4": "lz4.block", "none": "zmq"}[args.compression])
    if args.stream_format == "cbor":
        out.append("cbor2")
    return tuple(out)


def _file_dtype(ds: Any, path: str) -> np.dtype | None:
    """A DECTRIS detector sends unsigned integers of up to 32 bits: a file of another dtype is sent as
    uint32, once every value is checked to fit (a pass over the file, a block at a time)."""
    if ds.dtype in (np.uint8, np.uint16, np.uint32):
        return None
    top = np.iinfo(np.uint32).max
    for block in iter_frame_blocks(ds, 64):
        if block.size and (block.min() < 0 or block.max() > top or not np.array_equal(block, np.round(block))):
            raise ConfigValidationError(f"--dataset {path}: a DECTRIS detector sends whole numbers in 0..{top}; "
                                        f"this file (dtype {ds.dtype}) holds others")
    return np.dtype(np.uint32)


def _synthetic(rng: np.random.Generator, size: tuple[int, ...], args: argparse.Namespace) -> np.ndarray:
    """Sparse counts, as a counting detector sends (and compressible)."""
    return rng.poisson(1.0, size=size)


def _make(args: argparse.Namespace, frames: Any, nav: tuple[int, ...], n: int) -> Any:
    from raytile.live.detectors.dectris.sim import DectrisSimulator

    if args.scans < 1:
        raise ConfigValidationError(f"--scans must be at least 1 for the simulator, got {args.scans}")
    sim = DectrisSimulator(frames, host=args.host, api_port=args.api_port, data_port=args.data_port,
                           frame_rate=args.frame_rate, compression=args.compression,
                           trigger_mode=args.trigger_mode, stream_format=args.stream_format,
                           auto_arm=0 if args.triggered else args.acquisitions, skip_images=args.skip_images,
                           channels=args.channels, sndhwm=args.sndhwm)
    per_series = n * args.scans
    if args.trigger_mode in ("exte", "inte"):  # one image per trigger
        sim.config.update(nimages=1, ntrigger=per_series)
    else:
        sim.config.update(nimages=per_series, ntrigger=1)
    return sim


#: ``raytile live sim dectris``.
SIMULATOR = SimulatorSpec(make=_make, frame_dtype=lambda args: np.dtype(args.dtype), synthetic=_synthetic,
                          describe=lambda args, dtype: f"{dtype} {args.compression} stream {args.stream_format}",
                          api="REST", file_dtype=_file_dtype)

#: What raytile knows of DECTRIS: registered by the package (``register_detector(detector.SPEC)``).
SPEC = DetectorSpec(name="dectris", title="DECTRIS", builder=DectrisConnectionBuilder, url_port="api_port",
                    ports={"data_port": 9999, "api_port": 8910}, simulator=SIMULATOR,
                    sim_arguments=sim_arguments, run_arguments=run_arguments,
                    open_arguments=open_arguments, extra=extra_modules)
