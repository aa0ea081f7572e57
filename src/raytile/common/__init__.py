"""Shared vocabulary of every layer: geometry (:class:`Shape`, :class:`Slice`), tiling
(:class:`TilingScheme`, :class:`DataTile`) and raytile's exceptions.

``raytile.udf``, ``raytile.io`` and ``raytile.runtime`` import from here and
never from each other for these names; the module paths mirror
``libertem.common`` so that ported code changes its imports only.
Never imports ray.
"""

from raytile.common.errors import (
    BackendError, ConfigValidationError, DataSetException, ExecutorError, RaytileError, UDFException,
    UDFRunCancelled,
)
from raytile.common.shape import Shape
from raytile.common.slice import Slice, SliceUsageError
from raytile.common.tiling import DataTile, TilingScheme

__all__ = [
    "Shape", "Slice", "SliceUsageError", "TilingScheme", "DataTile", "RaytileError", "DataSetException", "UDFException",
    "UDFRunCancelled", "BackendError", "ExecutorError", "ConfigValidationError",
]
