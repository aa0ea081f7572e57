"""``libertem.warnings`` at its ported path."""

from raytile.udf.base import UseDiscouragedWarning

__all__ = ["UseDiscouragedWarning"]
