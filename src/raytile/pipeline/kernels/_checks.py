"""Small parameter checks shared by the built-in kernels.

>>> number(params, "scale", where)   # raises ConfigValidationError naming field 'params.scale'
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import StreamSpec

__all__ = ["number", "positive_int", "require_float", "same_shape"]


def number(params: Mapping[str, Any], key: str, where: str) -> float:
    v = params[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise ConfigValidationError(f"{where}: field 'params.{key}': expected a finite number, got {v!r}")
    return float(v)


def positive_int(params: Mapping[str, Any], key: str, where: str) -> int:
    v = params[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigValidationError(f"{where}: field 'params.{key}': expected a positive integer, got {v!r}")
    return v


def require_float(spec: StreamSpec, where: str, field: str = "output") -> None:
    if spec.dtype.kind not in "fc":
        raise ConfigValidationError(f"{where}: field {field!r}: stream {spec.name!r} has dtype {spec.dtype}, "
                                    f"a float dtype is needed")


def same_shape(a: StreamSpec, b: StreamSpec, where: str, field: str) -> None:
    if a.shape != b.shape:
        raise ConfigValidationError(f"{where}: field {field!r}: stream {b.name!r} has shape {list(b.shape)}, "
                                    f"expected {list(a.shape)} like {a.name!r}")
