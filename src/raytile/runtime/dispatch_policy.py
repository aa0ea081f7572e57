"""`DispatchPolicy`: which task goes out next, to which worker, and how many at once, in one place.

The decisions of dispatch are small pure functions, grouped here into four
policies (as Ray Data lists its backpressure policies in one place); the
effects (submitting, counting tasks in flight, recording each worker's last
partition) stay with their owners, which ask the policy:

=====================  ==========================================================  ===========================
policy                 decides                                                     asked by
=====================  ==========================================================  ===========================
``InFlightLimit``      tasks in flight per worker (one running, one queued), so    ``RayExecutor.max_in_flight``,
                       a run's limit, and whether a worker has room                ``WorkerPool.pick``
``Locality``           which workers a task would rather run on: the node          ``RayExecutor.submit``,
                       holding its frames, a worker whose segment it extends       ``WorkerPool.pick``
``SegmentSpreading``   which pending partition goes next: one extending a          ``RunState.next_to_submit``,
                       worker's segment, else the middle of the longest run of     ``RayExecutor.preferred``
                       pending partitions (work-stealing by halving)
``StreamCapacity``     how many partitions of a stream may be between arrival      the coordinator, for its
                       and done at once (its memory bound)                         stream's inlet
=====================  ==========================================================  ===========================

:data:`DISPATCH_POLICY` is the one instance everything uses;
:data:`DISPATCH_POLICIES` names its policies. GPU placement or a cluster's
own placement rules are new policies here (or new answers of these), not
new branches in the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Collection, Sequence

__all__ = ["DispatchPolicy", "InFlightLimit", "Locality", "SegmentSpreading", "StreamCapacity",
           "DISPATCH_POLICY", "DISPATCH_POLICIES", "middle_of_longest_run"]

#: A wish about a worker slot (anything with ``node_id`` and ``last_idx``): True if the task would
#: rather run there.
Wish = Callable[[Any], bool]


@dataclass(frozen=True)
class InFlightLimit:
    """Tasks kept in flight per worker: one running, one queued in its mailbox, so the next partition
    starts without a round trip to the coordinator."""

    per_worker: int = 2

    def run_limit(self, workers: int) -> int:
        """The most tasks a run keeps in flight on ``workers`` workers."""
        return self.per_worker * workers

    def has_room(self, in_flight: int) -> bool:
        """Whether a worker with ``in_flight`` tasks takes another before the others are full."""
        return in_flight < self.per_worker


@dataclass(frozen=True)
class Locality:
    """Where a task would rather run: on the node whose object store (or shared-memory slab) holds
    its frames, and on the worker whose merged segment it extends (see runtime/segments.py)."""

    def home_node(self, frames_near_driver: bool, driver_node: str | None) -> str | None:
        """The node a task is best read on: the driver's, where its shared frames are; else None
        (it reads its own, anywhere)."""
        return driver_node if frames_near_driver else None

    def wishes(self, node: str | None, run_id: str, idx: int) -> tuple[Wish, Wish, Wish]:
        """Wishes about the worker for partition ``idx`` of ``run_id``, the most important first: on
        ``node`` and extending its segment there, on ``node``, extending a segment anywhere."""

        def extends(slot: Any) -> bool:
            return bool(slot.last_idx.get(run_id) == idx - 1)

        def local(slot: Any) -> bool:
            return node is not None and slot.node_id == node

        return (lambda s: local(s) and extends(s)), local, extends


@dataclass(frozen=True)
class SegmentSpreading:
    """The order partitions go out in when workers merge near the data: a worker extends its segment
    while it can; a new segment starts in the middle of the longest run of pending partitions."""

    def preferred(self, merging: bool, last_sent: Collection[int]) -> set[int]:
        """Partitions that extend a worker's segment (each one after the last one sent to a worker
        with room); none when workers do not merge."""
        return {idx + 1 for idx in last_sent} if merging else set()

    def choose(self, pending: Sequence[Any], preferred: Collection[int], spread: bool,
               idx_of: Callable[[Any], int] = int) -> int:
        """The position in ``pending`` (queued partitions, not empty; ``idx_of`` gives one's index)
        of the next to submit: the first ``preferred``, else with ``spread`` the middle of the
        longest run, else the first."""
        if preferred:
            for pos, item in enumerate(pending):
                if idx_of(item) in preferred:
                    return pos
        if not spread:
            return 0
        idxs = [idx_of(item) for item in pending]
        return idxs.index(middle_of_longest_run(sorted(idxs)))


@dataclass(frozen=True)
class StreamCapacity:
    """A stream's bound on partitions between arrival and done: what it declares, else enough to
    keep every worker's in-flight slots full with ``spare`` arrived beside them."""

    spare: int = 2

    def capacity(self, declared: int | None, full_in_flight: int) -> int:
        return declared or full_in_flight + self.spare


@dataclass(frozen=True)
class DispatchPolicy:
    """The dispatch policies, one field each (see the module doc)."""

    in_flight: InFlightLimit = field(default_factory=InFlightLimit)
    locality: Locality = field(default_factory=Locality)
    segments: SegmentSpreading = field(default_factory=SegmentSpreading)
    stream: StreamCapacity = field(default_factory=StreamCapacity)


#: The policy every run dispatches by.
DISPATCH_POLICY = DispatchPolicy()
#: The policies, listed: the fields of :class:`DispatchPolicy` and their classes.
DISPATCH_POLICIES: tuple[type, ...] = tuple(type(getattr(DISPATCH_POLICY, f.name)) for f in fields(DispatchPolicy))


def middle_of_longest_run(idxs: Sequence[int]) -> int:
    """The middle of the longest run of consecutive numbers in the sorted ``idxs`` (the first such
    run on ties).

    >>> middle_of_longest_run([0, 1, 2, 3, 7, 8])
    2
    """
    best_start, best_len, start = 0, 0, 0
    for i in range(1, len(idxs) + 1):
        if i == len(idxs) or idxs[i] != idxs[i - 1] + 1:
            if i - start > best_len:
                best_start, best_len = start, i - start
            start = i
    return idxs[best_start + best_len // 2]
