"""`DroppedFramesProgress`: a run's progress reporter that also reports the frames an acquisition lost.

``LiveContext.run_udf``/``run_udf_iter`` wrap the ``progress`` they are given
(``True`` for a tqdm bar, or a :class:`~raytile.runtime.progress.ProgressReporter`)
in it when the data set is an acquisition with ``stats``
(:class:`~raytile.live.receiver.AcquisitionStats`). Every call is passed on;
after each finished partition, a count of lost frames that grew is shown in
the bar (``dropped=n``) and given to the reporter's optional
``frames_dropped(run_id, n)`` method, so a GUI hears of it. Nothing is
dropped silently.

>>> class Bar(ProgressReporter):
...     def frames_dropped(self, run_id, n): print(f"{n} frames lost so far")
>>> ctx.run_udf(dataset=aq, udf=SumUDF(), progress=Bar())        # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from raytile.runtime.progress import ProgressReporter, TqdmProgressReporter

__all__ = ["DroppedFramesProgress", "with_dropped_frames"]


class DroppedFramesProgress(ProgressReporter):
    """``inner`` (None: no other reporting) with ``stats.frames_dropped`` reported as it grows."""

    def __init__(self, inner: ProgressReporter | None, stats: Any):
        self.inner, self.stats = inner, stats
        self.reported = 0

    def start(self, run_id: str, total_frames: int, total_partitions: int) -> None:
        if self.inner is not None:
            self.inner.start(run_id, total_frames, total_partitions)

    def advance(self, run_id: str, frames: int) -> None:
        if self.inner is not None:
            self.inner.advance(run_id, frames)

    def partition_done(self, run_id: str, partitions_done: int) -> None:
        if self.inner is not None:
            self.inner.partition_done(run_id, partitions_done)
        self._report(run_id, partitions_done)

    def finish(self, run_id: str) -> None:
        self._report(run_id, None)
        if self.inner is not None:
            self.inner.finish(run_id)

    def _report(self, run_id: str, partitions_done: int | None) -> None:
        dropped = int(self.stats.frames_dropped)
        bar = getattr(self.inner, "_bar", None) if isinstance(self.inner, TqdmProgressReporter) else None
        if bar is not None and dropped:  # after the inner reporter's postfix, which it rewrites each time
            postfix = {"dropped": dropped} if partitions_done is None else \
                {"partitions": partitions_done, "dropped": dropped}
            bar.set_postfix(postfix, refresh=False)
        if dropped == self.reported:
            return
        self.reported = dropped
        hook = getattr(self.inner, "frames_dropped", None)
        if callable(hook):
            hook(run_id, dropped)


def with_dropped_frames(progress: Any, dataset: Any) -> Any:
    """``progress`` as ``run_udf`` takes it, wrapped for an acquisition with ``stats``; else unchanged."""
    stats = getattr(dataset, "stats", None)
    if stats is None or not hasattr(stats, "frames_dropped") or isinstance(progress, DroppedFramesProgress):
        return progress
    if isinstance(progress, ProgressReporter):
        return DroppedFramesProgress(progress, stats)
    return DroppedFramesProgress(TqdmProgressReporter() if progress else None, stats)
