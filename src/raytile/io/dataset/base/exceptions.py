"""``libertem.io.dataset.base.exceptions`` at its ported path."""

from raytile.common.errors import DataSetException

__all__ = ["DataSetException"]
