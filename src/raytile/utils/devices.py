"""Which compute devices this machine has: LiberTEM's ``libertem.utils.devices.detect``.

``detect()`` answers ``{"cpus": [...], "cudas": [...], "has_cupy": bool}``:
one CPU entry per physical core (all logical CPUs where the physical count is
unknown), one CUDA entry per device numba's CUDA driver sees, and whether
cupy imports and sees a device.
"""

from __future__ import annotations

import os
import warnings
from typing import TypedDict

__all__ = ["DetectResult", "detect", "has_cupy"]


class DetectResult(TypedDict):
    cpus: list[int]
    cudas: list[int]
    has_cupy: bool


def _physical_cores() -> int:
    try:
        import psutil  # a dependency of ray

        cores = psutil.cpu_count(logical=False)
    except ImportError:
        cores = None
    return int(cores or os.cpu_count() or 2)


def _cuda_devices() -> list[int]:
    try:
        from numba import cuda

        if not cuda.is_available():
            return []
        return [int(dev.id) for dev in cuda.gpus]
    except Exception:  # noqa: BLE001 - no driver, no device, a broken install: no CUDA devices
        return []


def has_cupy() -> bool:
    """True if cupy imports and can make an array on a device (asked anew each time, as LiberTEM: an
    installation that fails says why in a RuntimeWarning)."""
    try:
        import cupy
    except ModuleNotFoundError:  # not installed
        return False
    except Exception as e:  # noqa: BLE001 - a broken install: said, as LiberTEM says it, and no cupy
        warnings.warn(repr(e), RuntimeWarning, stacklevel=2)
        return False
    try:
        cupy.zeros((1,))
        return True
    except Exception as e:  # noqa: BLE001 - no device, no driver
        warnings.warn(repr(e), RuntimeWarning, stacklevel=2)
        return False


def detect() -> DetectResult:
    """The devices present: CPU core ids, CUDA device ids, and whether cupy works."""
    return {"cpus": list(range(_physical_cores())), "cudas": _cuda_devices(), "has_cupy": has_cupy()}
