"""``libertem.io.dataset.raw_csr`` at its ported path."""

from raytile.io.formats.raw_csr import RawCSRDataSet

__all__ = ["RawCSRDataSet"]
