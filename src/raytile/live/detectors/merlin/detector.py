"""Merlin's :class:`~raytile.live.registry.DetectorSpec` (:data:`SPEC`): its connection builder,
what a URL's port is, its default ports, and its part of ``raytile live sim|run``: the simulator,
the options ``--mode`` and ``--continuous``, and its synthetic frames.

    raytile live sim merlin --mode R12 --nav-shape 64,64 --sig-shape 256,256 --frame-rate 5000
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from raytile.live.detectors.merlin.connection import MerlinConnectionBuilder
from raytile.live.registry import DetectorSpec, SimulatorSpec

__all__ = ["SPEC", "SIMULATOR", "sim_arguments"]

#: The largest count of each counter mode (synthetic frames are drawn in 0..top).
TOPS = {"U08": 0xFF, "U16": 0xFFF, "U32": 0xFFFFFF, "R1": 1, "R6": 0x3F, "R12": 0xFFF}


def sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", default="U16", help="Merlin: U08, U16, U32, R1, R6 or R12 (default U16)")
    parser.add_argument("--continuous", action="store_true",
                        help="Merlin: one acquisition repeating the scan forever")


def _frame_dtype(args: argparse.Namespace) -> np.dtype:
    mode = args.mode
    return np.dtype(np.uint8 if mode in ("U08", "R1", "R6") else np.uint32 if mode in ("U32", "R24") else np.uint16)


def _synthetic(rng: np.random.Generator, size: tuple[int, ...], args: argparse.Namespace) -> np.ndarray:
    return rng.integers(0, TOPS.get(args.mode, 0xFFF) + 1, size=size)


def _make(args: argparse.Namespace, frames: Any, nav: tuple[int, ...], n: int) -> Any:
    from raytile.live.detectors.merlin.sim import MerlinSimulator

    return MerlinSimulator(frames, mode=args.mode, nav_shape=nav, host=args.host, data_port=args.data_port,
                           api_port=args.api_port, frame_rate=args.frame_rate, acquisitions=args.acquisitions,
                           continuous=args.continuous, triggered=args.triggered, num_frames=n)


#: ``raytile live sim merlin``.
SIMULATOR = SimulatorSpec(make=_make, frame_dtype=_frame_dtype, synthetic=_synthetic,
                          describe=lambda args, dtype: f"{args.mode}", api="control")

#: What raytile knows of Merlin: registered by the package (``register_detector(detector.SPEC)``).
SPEC = DetectorSpec(name="merlin", title="Merlin", builder=MerlinConnectionBuilder, url_port="data_port",
                    ports={"data_port": 6342, "api_port": 6341}, simulator=SIMULATOR,
                    sim_arguments=sim_arguments)
