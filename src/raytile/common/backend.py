"""Which device this process computes on: LiberTEM's ``libertem.common.backend`` at its path.

A worker (or a test driving the inline executor by hand) says whether UDF
code runs on the CPU or on a CUDA device through two environment variables,
``RAYTILE_USE_CPU`` and ``RAYTILE_USE_CUDA``, so that child processes and
threads see the same choice. Setting one clears the other. With neither set,
the CPU (id 0) is used.
"""

from __future__ import annotations

import os

from raytile.common.device_class import DeviceClass

__all__ = ["get_use_cpu", "get_use_cuda", "set_use_cpu", "set_use_cuda", "get_device_class"]

_CPU = "RAYTILE_USE_CPU"
_CUDA = "RAYTILE_USE_CUDA"


def _both_set() -> RuntimeError:
    return RuntimeError(f"both {_CPU} and {_CUDA} are set in the environment; expected at most one")


def get_use_cuda() -> int | None:
    """The CUDA device id to use, or None when computing on the CPU."""
    cuda = os.environ.get(_CUDA)
    if cuda is None:
        return None
    if os.environ.get(_CPU) is not None:
        raise _both_set()
    return int(cuda)


def set_use_cuda(cuda_device: int) -> None:
    """Compute on CUDA device ``cuda_device`` (and not on the CPU)."""
    os.environ[_CUDA] = str(int(cuda_device))
    os.environ.pop(_CPU, None)


def get_use_cpu() -> int | None:
    """The CPU id to use (0 unless set; not pinned), or None when computing on a CUDA device."""
    cpu = os.environ.get(_CPU)
    if cpu is not None:
        if os.environ.get(_CUDA) is not None:
            raise _both_set()
        return int(cpu)
    return 0 if get_use_cuda() is None else None


def set_use_cpu(cpu: int) -> None:
    """Compute on the CPU (``cpu`` is recorded, not used for pinning) and not on a CUDA device."""
    os.environ.pop(_CUDA, None)
    os.environ[_CPU] = str(int(cpu))


def get_device_class() -> DeviceClass:
    """``"cuda"`` when a CUDA device is set, else ``"cpu"``."""
    return DeviceClass.CUDA if get_use_cuda() is not None else DeviceClass.CPU
