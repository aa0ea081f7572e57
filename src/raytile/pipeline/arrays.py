"""Array values in configs: a number (fill), a nested list, ``{npy: path}``, ``{random: {...}}``, or an ndarray.

>>> make_array({"random": {"seed": 1, "scale": 0.01}}, (4, 2), np.float32, "stage 'r': field 'params.value'").shape
(4, 2)

``random`` takes ``seed`` (int), ``dist`` (``normal`` or ``uniform``),
``loc`` and ``scale``: ``loc + scale * N(0, 1)`` or ``U(loc, loc + scale)``,
drawn by ``numpy.random.default_rng(seed)`` in float64 then cast.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError

__all__ = ["make_array", "check_array_spec"]


def check_array_spec(spec: Any, where: str) -> None:
    """Raise ConfigValidationError naming ``where`` if ``spec`` is not one of the accepted forms."""
    if isinstance(spec, np.ndarray) or (isinstance(spec, (int, float)) and not isinstance(spec, bool)):
        return
    if isinstance(spec, (list, tuple)):
        try:
            np.asarray(spec, dtype=np.float64)
        except (ValueError, TypeError):
            raise ConfigValidationError(f"{where}: a list must be a rectangular list of numbers, got {spec!r}") from None
        return
    if isinstance(spec, Mapping) and len(spec) == 1:
        (key, val), = spec.items()
        if key == "npy" and isinstance(val, str):
            return
        if key == "random" and isinstance(val, Mapping):
            unknown = set(val) - {"seed", "dist", "loc", "scale"}
            if unknown:
                raise ConfigValidationError(f"{where}: random: unknown field(s) {sorted(unknown)}")
            if val.get("dist", "normal") not in ("normal", "uniform"):
                raise ConfigValidationError(f"{where}: random: dist must be 'normal' or 'uniform', "
                                            f"got {val.get('dist')!r}")
            return
    raise ConfigValidationError(f"{where}: expected a number, a list, {{npy: path}} or {{random: {{...}}}}, "
                                f"got {spec!r}")


def make_array(spec: Any, shape: tuple[int, ...], dtype: Any, where: str, base_dir: str = ".") -> np.ndarray:
    """The array ``spec`` describes, of ``shape`` and ``dtype`` (ConfigValidationError if it cannot be)."""
    check_array_spec(spec, where)
    if isinstance(spec, Mapping):
        (key, val), = spec.items()
        if key == "npy":
            path = val if os.path.isabs(val) else os.path.join(base_dir, val)
            try:
                arr = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise ConfigValidationError(f"{where}: cannot load {path!r}: {e}") from None
        else:
            rng = np.random.default_rng(val.get("seed", 0))
            loc, scale = float(val.get("loc", 0.0)), float(val.get("scale", 1.0))
            if val.get("dist", "normal") == "normal":
                arr = loc + scale * rng.standard_normal(shape)
            else:
                arr = rng.uniform(loc, loc + scale, shape)
    else:
        arr = np.asarray(spec)
    try:
        return np.broadcast_to(arr, shape).astype(dtype, copy=True)
    except ValueError:
        raise ConfigValidationError(f"{where}: shape {list(np.shape(arr))} does not fit the stream's "
                                    f"shape {list(shape)}") from None
