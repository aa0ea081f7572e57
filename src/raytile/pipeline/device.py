"""Where a stage's arrays live and in which precision (SPECULA's target_device_idx/precision).

``target_device_idx``: ``None`` or ``-1`` is the CPU (numpy), ``0, 1, ...`` a
GPU (cupy, imported only then). ``precision``: ``None``/``"single"`` gives
float32/complex64, ``"double"`` float64/complex128; SPECULA's codes ``1``
(single) and ``0`` (double) are accepted too.

>>> dev = resolve_device(-1, "double")
>>> dev.xp.zeros(3, dtype=dev.dtype).dtype
dtype('float64')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError

__all__ = ["Device", "resolve_device", "storage_of", "PRECISIONS"]

PRECISIONS = {None: (np.float32, np.complex64), "single": (np.float32, np.complex64),
              "double": (np.float64, np.complex128),
              1: (np.float32, np.complex64), 0: (np.float64, np.complex128)}  # SPECULA's precision codes


@dataclass(frozen=True)
class Device:
    """An array module and the float/complex dtypes for one stage."""

    idx: int
    xp: Any
    dtype: np.dtype
    complex_dtype: np.dtype

    @property
    def is_gpu(self) -> bool:
        return self.idx >= 0


def check_device_fields(target_device_idx: Any, precision: Any, where: str) -> None:
    """Raise ConfigValidationError naming ``where`` when either value is not allowed."""
    if target_device_idx is not None and (isinstance(target_device_idx, bool)
                                          or not isinstance(target_device_idx, int) or target_device_idx < -1):
        raise ConfigValidationError(f"{where}: field 'target_device_idx': expected None, -1 (CPU) or a GPU "
                                    f"index >= 0, got {target_device_idx!r}")
    if isinstance(precision, bool) or not isinstance(precision, (str, int, type(None))) or precision not in PRECISIONS:
        raise ConfigValidationError(f"{where}: field 'precision': expected 'single' or 'double' (or SPECULA's 1 "
                                    f"or 0), got {precision!r}")


def storage_of(target_device_idx: int | None) -> str:
    """``"gpu"`` for a GPU index, else ``"cpu"``."""
    return "gpu" if target_device_idx is not None and target_device_idx >= 0 else "cpu"


def resolve_device(target_device_idx: int | None = None, precision: Any = None,
                   where: str = "stage") -> Device:
    """The :class:`Device` for these settings; imports cupy only for a GPU index."""
    check_device_fields(target_device_idx, precision, where)
    idx = -1 if target_device_idx is None else int(target_device_idx)
    dtype, cdtype = PRECISIONS[precision]
    if idx < 0:
        return Device(idx, np, np.dtype(dtype), np.dtype(cdtype))
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # ImportError, or a CUDA runtime error without a GPU
        raise ConfigValidationError(f"{where}: field 'target_device_idx': GPU {idx} needs cupy and a CUDA GPU "
                                    f"({type(e).__name__}: {e})") from None
    if idx >= count:
        raise ConfigValidationError(f"{where}: field 'target_device_idx': GPU {idx} requested, {count} present")
    return Device(idx, cupy, np.dtype(dtype), np.dtype(cdtype))
