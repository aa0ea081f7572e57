"""Measuring a pipeline's loop: rate and the spacing of consecutive steps (p50, p99).

>>> r = measure(Pipeline.from_yaml("examples/ao_loop.yaml").build(), steps=2000)
>>> print(format_line("in-process", r))
in-process: 2,050 Hz, p50 0.47 ms, p99 0.61 ms
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from raytile.pipeline.runner import Pipeline

__all__ = ["LoopTiming", "measure", "measure_callable", "format_line"]


@dataclass(frozen=True)
class LoopTiming:
    """Loop rate over the measured steps and the spacing of consecutive steps."""

    steps: int
    hz: float
    p50_ms: float
    p99_ms: float


def measure_callable(step: Callable[[], object], steps: int, warmup: int = 50) -> LoopTiming:
    """Time ``steps`` calls of ``step`` after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    stamps = np.empty(steps + 1, np.int64)
    clock = time.perf_counter_ns
    stamps[0] = clock()
    for i in range(1, steps + 1):
        step()
        stamps[i] = clock()
    spacing = np.diff(stamps) / 1e6
    p50, p99 = np.percentile(spacing, [50, 99])
    return LoopTiming(steps, float(steps / ((stamps[-1] - stamps[0]) / 1e9)), float(p50), float(p99))


def measure(pipeline: Pipeline, steps: int = 2000, warmup: int = 50) -> LoopTiming:
    """Step a built pipeline ``warmup + steps`` times in this thread, one step a call."""
    return measure_callable(pipeline.step, steps, warmup)


def format_line(name: str, t: LoopTiming) -> str:
    """``name: 2,050 Hz, p50 0.47 ms, p99 0.61 ms``."""
    return f"{name}: {t.hz:,.0f} Hz, p50 {t.p50_ms:.2f} ms, p99 {t.p99_ms:.2f} ms"
