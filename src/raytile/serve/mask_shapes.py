"""Masks as JSON shapes: ``{"shape": "ring", "cy", "cx", "ri", "ro"}``, ``disk`` (``r``), ``point``.

:class:`MaskShape` is the picklable mask factory that
:class:`~raytile.udf.ApplyMasksUDF` gets for each shape: the workers call it
(it holds numbers and the signal shape, never code from a client).

>>> f = MaskShape.from_json({"shape": "ring", "cy": 8, "cx": 8, "ri": 2, "ro": 5}, (16, 16))
>>> f().shape
(16, 16)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from raytile.udf import masks

__all__ = ["MaskShape", "MASK_SCHEMA", "MASK_FIELDS"]

#: Numbers each shape takes, in the order of its raytile.udf.masks function.
MASK_FIELDS: dict[str, tuple[str, ...]] = {
    "ring": ("cy", "cx", "ri", "ro"),
    "disk": ("cy", "cx", "r"),
    "point": ("cy", "cx"),
}

_NUMBER = {"type": "number"}
_RADIUS = {"type": "number", "minimum": 0}

#: JSON schema of one mask shape (a ``oneOf`` chosen by ``shape``).
MASK_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "object", "additionalProperties": False, "required": ["shape", *fields],
         "properties": {"shape": {"const": name},
                        **{f: (_NUMBER if f in ("cy", "cx") else _RADIUS) for f in fields}}}
        for name, fields in MASK_FIELDS.items()
    ],
    "discriminator": {"propertyName": "shape"},
}


@dataclasses.dataclass(frozen=True)
class MaskShape:
    """A mask factory: ``shape`` ("ring", "disk", "point"), its numbers and the signal shape."""

    shape: str
    numbers: tuple[float, ...]
    sig_shape: tuple[int, int]

    @classmethod
    def from_json(cls, spec: dict[str, Any], sig_shape: tuple[int, ...]) -> "MaskShape":
        """From a validated JSON shape (see :data:`MASK_SCHEMA`)."""
        fields = MASK_FIELDS[spec["shape"]]
        if len(sig_shape) != 2:
            raise ValueError(f"mask shapes need a 2D signal, the data set's is {tuple(sig_shape)}")
        return cls(spec["shape"], tuple(float(spec[f]) for f in fields), (int(sig_shape[0]), int(sig_shape[1])))

    def __call__(self) -> np.ndarray:
        return getattr(masks, self.shape)(*self.numbers, self.sig_shape)
