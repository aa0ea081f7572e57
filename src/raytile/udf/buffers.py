"""Result buffers a UDF declares (``self.buffer(...)``), and auxiliary per-frame data passed as a parameter.

The classes live in :mod:`raytile.common.buffer_wrappers` (the shared vocabulary, below the UDF layer,
as LiberTEM's ``libertem.common.buffers``); this module keeps their UDF-side path.
"""

from __future__ import annotations

from raytile.common.buffer_wrappers import (
    AuxBufferWrapper, BufferKind, BufferLocation, BufferUse, BufferWrapper, NavBufferView, PlaceholderBufferWrapper,
    expand_nav,
)

__all__ = [
    "BufferWrapper", "AuxBufferWrapper", "PlaceholderBufferWrapper", "NavBufferView", "BufferKind", "BufferUse",
    "BufferLocation", "expand_nav",
]
