"""The case contract of ``bench_formats.py``: one :class:`FormatCase` per file kind benchmarked.

A case module ``benchmarks/_formats_<name>.py`` exposes ``cases(tmpdir) -> list[FormatCase]``;
``bench_formats.py`` imports every such module it finds (a missing optional dependency skips it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class FormatCase:
    """One file kind: how to make it, how raytile and LiberTEM open it, and a numpy reference read.

    ``make(nbytes)`` writes the file(s), about ``nbytes`` in all, if they are not there yet;
    ``files()`` lists them (bytes counted, page cache warmed); ``raytile`` and ``libertem``
    are ``(format name, load parameters)`` (``libertem`` None where LiberTEM cannot read the
    file); ``numpy_sum()`` reads the same bytes with numpy alone and returns the sum of all
    frames (sig shape, float64): the baseline time and the reference result; ``decoded`` is
    False where the pixels are stored as numpy can use them (the >= 0.8x numpy target).
    """

    name: str
    make: Callable[[int], None]
    files: Callable[[], list[str]]
    raytile: tuple[str, dict]
    libertem: tuple[str, dict] | None
    numpy_sum: Callable[[], np.ndarray]
    decoded: bool = True
    notes: str = ""
    extra: dict = field(default_factory=dict)
