"""`SegmentMerger`: a worker's partial results of one run, merged near the data.

Without it every partition's result buffers travel to the coordinator: for a
sig-sized result (a 256x256 sum) that is one result per partition, and the
coordinator's node receives and merges O(partitions) results (LiberTEM's
issue #106 measured this as the scaling limit). A worker instead merges the
results of the partitions it ran, with the UDFs' own ``merge``, and sends the
merged state now and then: O(workers) results per run.

It merges into *segments*. With nav buffers (a result per frame) a segment
is a run of partitions contiguous in the (ROI-compressed) nav space, exactly
what one larger partition covering its nav range would have produced: its
nav buffers cover that range,
its sig and single buffers start as its first partition's (what
``preprocess`` set up on the worker and the partition added) and the UDF's
``merge`` adds each further partition to them; the coordinator then merges
the segment into its own buffers (set up by ``preprocess`` on the main node)
as it merges a partition: main + (p1 + p2 + ...) instead of
((main + p1) + p2) + ..., equal for any merge that is associative, as
LiberTEM's own merges are. So any UDF's merge stays exact,
and ``damage`` and per-partition parameter versions stay exact (a segment
lists the partitions it covers, all of one parameters version). The
coordinator dispatches each worker a contiguous block of partitions (see
``RunState``), so a worker usually holds one segment per run. Without nav
buffers (sig-sized and single results only) the position of a partition
does not matter: a worker holds exactly one segment per run, with gaps,
and the coordinator receives one result per worker and send.

UDFs that only implement ``merge_all`` cannot be merged pairwise: a run with
one of them keeps merging in the coordinator (:func:`merges_pairwise`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from raytile.runtime.params import PartitionResult, RunParams
from raytile.runtime.udf_calls import calling_udf
from raytile.udf.base import UDF, MergeAttrMapping, UDFData
from raytile.udf.meta import UDFMeta
from raytile.udf.worker_cache import worker_cache_for

__all__ = ["Segment", "SegmentMerger", "merges_pairwise"]


def merges_pairwise(udfs: Sequence[UDF]) -> bool:
    """True if every UDF combines partitions with ``merge`` (not ``merge_all`` alone)."""
    return all(not (u.overrides("merge_all") and not u.overrides("merge")) for u in udfs)


@dataclass
class Segment:
    """Merged results of partitions ``covers`` (one params ``version``) over nav ``[nav_start, nav_stop)``."""

    version: int
    nav_start: int
    nav_stop: int
    covers: list[int] = field(default_factory=list)
    #: Per UDF: its sig and single buffers, merged.
    buffers: list[dict[str, np.ndarray]] = field(default_factory=list)
    #: Per UDF: its nav buffers, one array per partition in nav order (joined once, in ``as_result``).
    nav_chunks: list[dict[str, list[np.ndarray]]] = field(default_factory=list)
    num_frames: int = 0
    #: ``(compressed nav start, frames)`` of every partition merged in (the merges' valid nav mask).
    ranges: list[tuple[int, int]] = field(default_factory=list)

    def as_result(self, worker: str = "") -> PartitionResult:
        """The segment as a partition result the coordinator merges (``covers`` names its partitions)."""
        buffers = [
            {**merged, **{name: np.concatenate(parts) for name, parts in chunks.items()}}
            for merged, chunks in zip(self.buffers, self.nav_chunks)
        ]
        has_nav = any(self.nav_chunks)
        return PartitionResult(idx=self.covers[0], buffers=buffers, version=self.version, worker=worker,
                               num_frames=self.num_frames, covers=list(self.covers),
                               nav_range=(self.nav_start, self.nav_stop) if has_nav else None)


class SegmentMerger:
    """Holds one run's merged partial results on a worker; ``add`` partitions, ``take`` segments."""

    def __init__(self, params: RunParams):
        self._params = params
        self._udfs: list[UDF] = []
        for template in params.udfs:
            udf = template.copy()
            # the template's worker cache: what get_result_buffers computes (masks) is made once per worker
            udf.set_meta(UDFMeta(None, params.dataset_shape, params.roi, params.dataset_dtype, params.input_dtype,
                                 params.tiling_scheme, params.corrections, worker_cache=worker_cache_for(template)))
            udf.results = UDFData(udf.get_result_buffers())  # declarations: merge looks up buffer kinds
            self._udfs.append(udf)
        self._sig = params.dataset_shape.sig.to_tuple()
        self._has_nav = any(buf.kind == "nav" for udf in self._udfs for _, buf in udf.results.buffers())
        roi = params.roi
        self._nav_size = int(np.count_nonzero(roi)) if roi is not None else params.dataset_shape.nav.size
        self._segments: list[Segment] = []

    @property
    def version(self) -> int:
        return self._params.version

    def __len__(self) -> int:
        """Partitions held."""
        return sum(len(s.covers) for s in self._segments)

    def add(self, result: PartitionResult, nav_start: int, where: str = "") -> None:
        """Merge a partition's result (its frames start at ``nav_start``) into a segment.

        A UDF's merge that raises gives a UDFException naming the UDF and ``where`` (the partition).
        """
        count = result.num_frames
        seg = next((s for s in self._segments if s.nav_stop == nav_start or not self._has_nav), None)
        if seg is None:
            self._segments.append(self._seeded(result, nav_start))
            return
        fresh = self._fresh(count)
        merged_so_far = list(seg.ranges)
        for i, (udf, part) in enumerate(zip(self._udfs, result.buffers)):
            # as on the main node: the positions merged into ``dest`` so far (made only if merge asks)
            udf.meta.set_valid_nav_mask(lambda: self._mask(merged_so_far))
            view = dict(seg.buffers[i])
            for name, chunks in seg.nav_chunks[i].items():
                chunks.append(fresh[i][name])  # this partition's nav region, merged into below
                view[name] = fresh[i][name]
            with calling_udf(udf, "merge", f"while merging {where or 'a partition'}"):
                udf.merge(MergeAttrMapping(view), MergeAttrMapping(part))
        self._note_merged(seg, result, nav_start, count)

    def _seeded(self, result: PartitionResult, nav_start: int) -> Segment:
        """A new segment holding (a copy of) ``result``'s buffers as they are, without a merge.

        The partition's buffers are what ``preprocess`` set up on the worker and
        the partition's processing added, as the coordinator expects of any
        partition result; merging them into zeroed buffers instead would lose
        what ``preprocess`` put there (a list in an object buffer) that the
        UDF's ``merge`` builds on (LiberTEM's ``merge`` always finds it in
        ``dest``). A copy: the segment outlives the partition's buffers.
        """
        seg = Segment(result.version, nav_start, nav_start)
        for i, part in enumerate(result.buffers):
            seg.buffers.append({n: np.array(a, copy=True) for n, a in part.items() if not self._is_nav(i, n)})
            seg.nav_chunks.append({n: [np.array(a, copy=True)] for n, a in part.items() if self._is_nav(i, n)})
        self._note_merged(seg, result, nav_start, result.num_frames)
        return seg

    @staticmethod
    def _note_merged(seg: Segment, result: PartitionResult, nav_start: int, count: int) -> None:
        seg.nav_stop += count
        seg.ranges.append((nav_start, count))
        seg.covers.append(result.idx)
        seg.num_frames += count

    def take(self) -> list[Segment]:
        """The segments held so far; the merger is empty afterwards."""
        segments, self._segments = self._segments, []
        return segments

    def _mask(self, ranges: list[tuple[int, int]]) -> np.ndarray:
        mask = np.zeros(self._nav_size, dtype=bool)
        for start, count in ranges:
            mask[start:start + count] = True
        return mask

    def _is_nav(self, i: int, name: str) -> bool:
        return self._udfs[i].results.get_buffer(name).kind == "nav"

    def _fresh(self, count: int) -> list[dict[str, np.ndarray]]:
        """Zeroed result buffers for ``count`` frames, as the coordinator allocates them."""
        out = []
        for udf in self._udfs:
            bufs = {}
            for name, buf in udf.get_result_buffers().items():
                if buf.use != "result_only":
                    buf.allocate(count, self._sig)
                    bufs[name] = buf.data
            out.append(bufs)
        return out

