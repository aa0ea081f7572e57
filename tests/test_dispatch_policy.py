"""`DispatchPolicy`: the pure decisions of dispatch, against expectations worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace

from raytile.runtime.dispatch_policy import (
    DISPATCH_POLICIES, DISPATCH_POLICY, InFlightLimit, Locality, SegmentSpreading, StreamCapacity,
    middle_of_longest_run,
)
from raytile.runtime.run_state import RunState


def test_the_policies_are_listed_in_one_place():
    assert DISPATCH_POLICIES == (InFlightLimit, Locality, SegmentSpreading, StreamCapacity)
    assert isinstance(DISPATCH_POLICY.in_flight, InFlightLimit) and DISPATCH_POLICY.in_flight.per_worker == 2


def test_in_flight_limit_is_two_a_worker():
    limit = InFlightLimit()
    assert [limit.run_limit(n) for n in (0, 1, 3)] == [0, 2, 6]
    assert [limit.has_room(n) for n in (0, 1, 2, 3)] == [True, True, False, False]
    one = InFlightLimit(per_worker=1)
    assert (one.run_limit(3), one.has_room(0), one.has_room(1)) == (3, True, False)


def test_a_task_is_best_read_on_the_driver_node_only_when_its_frames_are_there():
    loc = Locality()
    assert loc.home_node(True, "n1") == "n1"
    assert loc.home_node(False, "n1") is None
    assert loc.home_node(True, None) is None  # a Ray Client driver has no node


def test_locality_wishes_in_order_local_and_extending_local_extending():
    wishes = Locality().wishes("c", "run", 5)
    on_c_extending = SimpleNamespace(node_id="c", last_idx={"run": 4})
    on_c_elsewhere = SimpleNamespace(node_id="c", last_idx={"run": 2, "other": 4})
    on_b_extending = SimpleNamespace(node_id="b", last_idx={"run": 4})
    fresh = SimpleNamespace(node_id="b", last_idx={})
    assert [w(on_c_extending) for w in wishes] == [True, True, True]
    assert [w(on_c_elsewhere) for w in wishes] == [False, True, False]
    assert [w(on_b_extending) for w in wishes] == [False, False, True]
    assert [w(fresh) for w in wishes] == [False, False, False]
    anywhere = Locality().wishes(None, "run", 5)  # frames read where the task runs
    assert [w(on_c_extending) for w in anywhere] == [False, False, True]


def test_segments_prefer_the_partition_after_each_workers_last_when_merging():
    seg = SegmentSpreading()
    assert seg.preferred(True, [4, 8, 4]) == {5, 9}
    assert seg.preferred(False, [4, 8]) == set()
    assert seg.preferred(True, []) == set()


def test_the_next_partition_is_a_preferred_one_else_the_middle_of_the_longest_run():
    seg = SegmentSpreading()
    pending = [3, 0, 1, 2, 7, 8]  # queue order
    assert seg.choose(pending, {7, 8}, spread=True) == 4  # the first preferred in the queue: 7
    assert seg.choose(pending, {99}, spread=False) == 0  # none preferred is pending: the first
    assert seg.choose(pending, set(), spread=True) == 3  # longest run 0..3, its middle 2 is at position 3
    tasks = [SimpleNamespace(idx=i) for i in pending]
    assert seg.choose(tasks, set(), spread=True, idx_of=lambda t: t.idx) == 3


def test_new_segments_start_in_the_middle_of_the_longest_pending_run():
    assert middle_of_longest_run(list(range(64))) == 32
    assert middle_of_longest_run([0, 1, 2, 3, 7, 8]) == 2
    assert middle_of_longest_run([5, 10, 11, 12, 20]) == 11
    assert middle_of_longest_run([4]) == 4


def test_a_stream_holds_what_it_declares_else_every_in_flight_slot_and_two():
    cap = StreamCapacity()
    assert cap.capacity(None, 8) == 10
    assert cap.capacity(3, 8) == 3
    assert StreamCapacity(spare=0).capacity(None, 4) == 4


def test_run_state_dispatches_by_halving_the_pending_runs():
    """8 partitions, spread: 4 (middle of 0..7), 2 (of 0..3 beside 5..7), 6 (of 5..7), then 1 (of 0..1);
    a preferred partition (extending a worker's segment) goes first."""
    state = RunState([SimpleNamespace(idx=i) for i in range(8)])
    state.spread_segments()
    order = []
    for _ in range(4):
        task = state.next_to_submit(max_in_flight=100)
        order.append(task.idx)
    assert order == [4, 2, 6, 1]
    assert state.next_to_submit(100, preferred={5, 99}).idx == 5
    assert sorted(t.idx for t in state.pending) == [0, 3, 7]
    state.in_flight = [object()] * 2
    assert state.next_to_submit(max_in_flight=2) is None  # the run's limit is reached


def test_run_state_without_spreading_keeps_queue_order():
    state = RunState([SimpleNamespace(idx=i) for i in (5, 1, 3)])
    assert [state.next_to_submit(10).idx for _ in range(3)] == [5, 1, 3]
    assert state.next_to_submit(10) is None
