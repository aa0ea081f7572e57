"""Per-stage timing: execution time (mean, p50, p99), trigger spacing jitter, rate and step count.

The first step of a stage is reported apart (``first_ms``): it pays one-time
costs (numba compiling, first allocations, a GPU context) that would
otherwise hide the steady state. ``hz`` and ``mean_ms`` are the steady state,
from the second step on. A fixed window of the latest samples keeps memory
flat in endless runs; ``steps`` and the mean cover the whole run.

>>> m = StageMetrics()
>>> m.record(start_ns=0, exec_ns=900_000_000)       # a slow first step (0.9 s)
>>> m.record(start_ns=1_000_000_000, exec_ns=1000); m.record(start_ns=1_001_000_000, exec_ns=3000)
>>> s = m.snapshot(); s["steps"], s["first_ms"], s["mean_ms"], s["hz"]
(3, 900.0, 0.002, 1000.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["StageMetrics", "summarize_ns"]

WINDOW = 4096


def summarize_ns(samples_ns: np.ndarray) -> dict[str, float]:
    """p50/p99/mean/std of nanosecond samples, in milliseconds (zeros when empty)."""
    if samples_ns.size == 0:
        return {"mean_ms": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "std_ms": 0.0}
    ms = samples_ns.astype(np.float64) / 1e6
    p50, p99 = np.percentile(ms, [50, 99])
    return {"mean_ms": float(ms.mean()), "p50_ms": float(p50), "p99_ms": float(p99), "std_ms": float(ms.std())}


class StageMetrics:
    """Timing of one stage's triggers (prepare + trigger + post of one step)."""

    __slots__ = ("steps", "total_ns", "first_exec_ns", "_exec", "_start", "_second_ns", "_last_ns")

    def __init__(self) -> None:
        self.steps = 0
        self.total_ns = 0  #: execution time of the steps after the first
        self.first_exec_ns = 0
        # plain lists: an item store is ~4x cheaper than into an ndarray (this runs every stage and step)
        self._exec: list[int] = [0] * WINDOW
        self._start: list[int] = [0] * WINDOW
        self._second_ns = 0
        self._last_ns = 0

    def record(self, start_ns: int, exec_ns: int) -> None:
        i = self.steps % WINDOW
        self._exec[i] = exec_ns
        self._start[i] = start_ns
        if self.steps == 0:
            self.first_exec_ns = exec_ns
        else:
            if self.steps == 1:
                self._second_ns = start_ns
            self.total_ns += exec_ns
        self._last_ns = start_ns
        self.steps += 1

    def snapshot(self) -> dict[str, Any]:
        """steps; first_ms (the first step's execution); mean_ms, p50_ms, p99_ms (execution), jitter_ms
        (std of trigger spacing) and hz (trigger rate) of the steady state: the steps after the first.

        The rate is measured from the second step's start, so the first step's one-time costs and the
        wait before the second trigger do not lower it; with fewer than three steps it is 0."""
        n = min(self.steps, WINDOW)
        i = self.steps % WINDOW
        exec_ns = np.asarray(self._exec[:n], np.int64)
        start = np.asarray(self._start, np.int64)
        starts = np.concatenate([start[i:n], start[:i]]) if self.steps > WINDOW else start[:n]
        spacing = np.diff(starts)
        if self.steps <= WINDOW:  # the first step is still in the window: it is reported apart
            exec_ns, spacing = exec_ns[1:], spacing[1:]
        stats = summarize_ns(exec_ns)
        hz = (self.steps - 2) / ((self._last_ns - self._second_ns) / 1e9) \
            if self.steps > 2 and self._last_ns > self._second_ns else 0.0
        return {
            "steps": self.steps,
            "first_ms": self.first_exec_ns / 1e6,
            "mean_ms": self.total_ns / (self.steps - 1) / 1e6 if self.steps > 1 else 0.0,
            "p50_ms": stats["p50_ms"],
            "p99_ms": stats["p99_ms"],
            "jitter_ms": summarize_ns(spacing)["std_ms"],
            "hz": float(hz),
        }
