"""`ScanResults`: the merged results of a stream run, one scan at a time.

A stream of several scans (a continuous acquisition) gives per-scan
results: each partition's result is merged into the accumulator of its
scan (partition index ``scan * partitions_per_scan + p``), and a snapshot
shows the oldest scan not yet shown complete, with
``UDFResults.scan`` saying which. Once a scan was shown complete its
accumulator is dropped, so memory stays flat however many scans pass: at
most the scans with partitions in flight (two, with the inlet's bound
smaller than a scan) plus the last complete one, kept for the final result.
The final result (``run_udf``, the last partial) is the last complete scan.
A consumer slower than the scans skips scans (latest wins), as it skips
partial results. See docs/streams.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from raytile.runtime.param_versions import ParamVersion
from raytile.runtime.params import PartitionResult
from raytile.runtime.results import ResultAccumulator, UDFResults

__all__ = ["ScanResults"]


class ScanResults:
    """Per-scan accumulators, made by ``make()`` as scans begin; the interface of
    :class:`~raytile.runtime.results.ResultAccumulator` that the coordinator uses."""

    def __init__(self, make: Callable[[], ResultAccumulator], partitions_per_scan: int, expected_per_scan: int):
        self._make = make
        self._per_scan = partitions_per_scan
        self._expected = expected_per_scan  # partitions of a scan with frames in the ROI
        self._open: dict[int, ResultAccumulator] = {}
        self._merged: dict[int, int] = {}
        self._complete: tuple[int, ResultAccumulator] | None = None  # the newest complete scan
        self._complete_shown = False
        self._versions: list[ParamVersion] = []
        #: Partitions merged over all scans.
        self.done = 0
        #: Scans complete.
        self.scans_done = 0

    def merge(self, result: PartitionResult, where: str = "") -> None:
        scan, local = divmod(result.idx, self._per_scan)
        acc = self._open.get(scan)
        if acc is None:
            acc = self._open[scan] = self._make()
            for version in self._versions:
                acc.adopt(version)
        acc.merge(replace(result, idx=local, covers=[]), where)
        self._merged[scan] = self._merged.get(scan, 0) + 1
        self.done += 1
        if self._merged[scan] == self._expected:  # complete: it replaces an older complete scan
            self.scans_done += 1
            del self._open[scan], self._merged[scan]
            if self._complete is None or self._complete[0] < scan:
                self._complete, self._complete_shown = (scan, acc), False

    def adopt(self, version: ParamVersion) -> None:
        """A new version of the parameters: for the scans open now and those to come."""
        self._versions.append(version)
        for acc in self._open.values():
            acc.adopt(version)

    def reset(self) -> None:
        raise AssertionError("a stream run is never recomputed (its frames are gone once processed)")

    def snapshot(self, finished: bool) -> UDFResults:
        """The newest complete scan if it was not shown yet, else the oldest scan in progress; with
        ``finished``, the last complete scan."""
        shown: tuple[int, ResultAccumulator] | None = None
        if self._complete is not None and (finished or not self._complete_shown or not self._open):
            shown, self._complete_shown = self._complete, True
        elif self._open:
            scan = min(self._open)
            shown = (scan, self._open[scan])
        if shown is None:  # nothing merged yet (or the ROI selects nothing)
            return self._tagged(self._make().snapshot(finished), 0)
        return self._tagged(shown[1].snapshot(finished), shown[0])

    def _tagged(self, snap: UDFResults, scan: int) -> UDFResults:
        snap.scan = scan
        snap.scans_done = self.scans_done
        return snap
