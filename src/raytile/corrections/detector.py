"""Whole-array detector corrections at the path of ``libertem.corrections.detector``.

LiberTEM keeps this older path beside ``libertem.io.corrections.detector``; both
name the same functions, and so do raytile's: :func:`correct` (dark frame, gain
map, excluded pixels patched, outside any run) and :func:`correct_dot_masks`.

>>> import numpy as np
>>> from raytile.corrections.detector import correct
>>> correct(np.ones((1, 2, 2)), dark_image=np.full((2, 2), 0.5)).tolist()
[[[0.5, 0.5], [0.5, 0.5]]]
"""

from raytile.io.corrections.detector import CorrectError, RepairValueError, correct, correct_dot_masks

__all__ = ["correct", "correct_dot_masks", "CorrectError", "RepairValueError"]
