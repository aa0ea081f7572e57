"""``libertem.io.dataset.base.tiling_scheme`` at its ported path (:class:`raytile.common.tiling.TilingScheme`)."""

from raytile.common.tiling import TilingScheme

__all__ = ["TilingScheme"]
