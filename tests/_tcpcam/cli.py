"""TcpCam's part of ``raytile live sim|run``."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from raytile.live.registry import SimulatorSpec


def run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tcpcam-timeout", type=float, default=10.0, help="TcpCam: seconds of silence (default 10)")


def open_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {"timeout": args.tcpcam_timeout}


def _make(args: argparse.Namespace, frames: Any, nav: tuple[int, ...], n: int) -> Any:
    from _tcpcam.sim import TcpCamSimulator

    return TcpCamSimulator(frames, host=args.host, data_port=args.data_port, acquisitions=args.acquisitions)


SIMULATOR = SimulatorSpec(make=_make, frame_dtype=lambda args: np.dtype(np.uint16),
                          synthetic=lambda rng, size, args: rng.integers(0, 1000, size=size),
                          describe=lambda args, dtype: "uint16", api=None)
