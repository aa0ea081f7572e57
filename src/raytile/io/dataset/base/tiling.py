"""``libertem.io.dataset.base.tiling`` at its ported path."""

from raytile.common.tiling import DataTile

__all__ = ["DataTile"]
