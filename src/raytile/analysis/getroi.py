"""``libertem.analysis.getroi`` at its ported path: :func:`get_roi`, a ROI from an analysis' parameters."""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.analysis.base import roi_from_parameters

__all__ = ["get_roi"]


def get_roi(params: dict, shape: Any) -> np.ndarray | None:
    """The nav ROI that ``params["roi"]`` describes (LiberTEM's GUI form, a ``disk`` or a ``rect``), or None.

    >>> get_roi({"roi": {"shape": "disk", "cx": 1, "cy": 1, "r": 1}}, (3, 3)).sum()
    np.int64(5)
    """
    return roi_from_parameters(params, tuple(shape))
