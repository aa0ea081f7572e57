"""`plan_pool`: which worker actors the pool starts and retires (a pure decision, no Ray needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from raytile.actors.pool import (  # noqa: E402
    PLACEMENT_TIMEOUT_S, STARTUP_TIMEOUT_S, NodeInfo, Slot, SlotState, plan_pool,
)

NOW = 1000.0


def slot(kind: str, node: str | None, state: SlotState = SlotState.READY, started: float = NOW - 1) -> Slot:
    return Slot(kind, f"{kind}@{node}", actor=object(), node_id=node, started_at=started, state=state)


def test_elastic_wants_one_actor_per_cpu_and_gpu_of_every_node():
    nodes = [NodeInfo("a", 2, 0), NodeInfo("b", 1, 1)]
    plan = plan_pool(nodes=nodes, slots=[slot("cpu", "a")], fixed=None, max_workers=None, now=NOW, backoff={})
    assert sorted(plan.start) == [("cpu", "a"), ("cpu", "b"), ("cuda", "b")]
    assert plan.retire == ()


def test_elastic_respects_max_workers_and_backoff():
    nodes = [NodeInfo("a", 2, 0), NodeInfo("b", 4, 0)]
    capped = plan_pool(nodes=nodes, slots=[], fixed=None, max_workers=3, now=NOW, backoff={})
    assert len(capped.start) == 3
    held = plan_pool(nodes=nodes, slots=[], fixed=None, max_workers=None, now=NOW, backoff={"b": NOW + 5})
    assert held.start == (("cpu", "a"), ("cpu", "a"))


def test_slots_of_a_lost_node_are_retired_and_not_replaced_there():
    lost = slot("cpu", "gone")
    plan = plan_pool(nodes=[NodeInfo("a", 1, 0)], slots=[slot("cpu", "a"), lost], fixed=None, max_workers=None,
                     now=NOW, backoff={})
    assert plan.retire == (lost,)
    assert plan.start == ()


def test_an_actor_not_placed_in_time_is_retired_and_fixed_mode_tries_again():
    stuck = slot("cpu", None, SlotState.STARTING, started=NOW - PLACEMENT_TIMEOUT_S - 1)
    fresh = slot("cpu", None, SlotState.STARTING, started=NOW - 1)
    plan = plan_pool(nodes=[NodeInfo("a", 2, 0)], slots=[stuck, fresh], fixed={"cpu": 2, "cuda": 0},
                     max_workers=None, now=NOW, backoff={})
    assert plan.retire == (stuck,)
    assert plan.start == (("cpu", None),)  # the fresh one still counts; one more to reach 2


def test_a_placed_actor_still_starting_gets_the_longer_startup_timeout():
    slow = slot("cpu", "a", SlotState.STARTING, started=NOW - PLACEMENT_TIMEOUT_S - 1)
    args = dict(nodes=[NodeInfo("a", 1, 0)], slots=[slow], fixed=None, max_workers=None, now=NOW, backoff={})
    assert plan_pool(**args).retire == (slow,)  # no process: not placed in time
    assert plan_pool(**args, placed=frozenset({slow.name})).retire == ()  # it has a process: let it start
    late = dict(args, now=slow.started_at + STARTUP_TIMEOUT_S + 1)
    assert plan_pool(**late, placed=frozenset({slow.name})).retire == (slow,)


def test_fixed_mode_ignores_node_sizes():
    plan = plan_pool(nodes=[NodeInfo("a", 8, 2)], slots=[], fixed={"cpu": 1, "cuda": 0}, max_workers=None,
                     now=NOW, backoff={})
    assert plan.start == (("cpu", None),)


def test_pick_prefers_the_node_holding_the_frames_then_segment_extension():
    from raytile.actors.pool import WorkerPool

    pool = WorkerPool(fixed={"cpu": 3})
    a, b, c = slot("cpu", "a"), slot("cpu", "b"), slot("cpu", "c")
    pool._slots = [a, b, c]
    b.last_idx["run"] = 4  # b ran partition 4 last: partition 5 would extend its segment
    assert pool.pick("cpu", "run", 5, node="c") is c  # the frames are on c
    c.in_flight = 2  # c is full, and it ran 5: no wish is met, the least busy slot takes 6
    assert pool.pick("cpu", "run", 6, node="c") is a
    b.last_idx["run"] = 8  # extending b's segment is the wish met next
    assert pool.pick("cpu", "run", 9, node="c") is b
    c.in_flight = 0
    c.last_idx["run"] = 11
    b.last_idx["run"] = 11
    assert pool.pick("cpu", "run", 12, node="c") is c  # local and extending beats extending alone
    assert pool.pick("cpu", "other", 0, node=None) in (a, b, c)
    assert pool.pick("cuda", "run", 0, node="c") is None


def test_last_sent_names_the_segment_ends_of_slots_with_room():
    from raytile.actors.pool import WorkerPool

    pool = WorkerPool(fixed={"cpu": 3})
    a, b, c = slot("cpu", "a"), slot("cpu", "b"), slot("cpu", "c", SlotState.STARTING)
    pool._slots = [a, b, c]
    a.last_idx["run"], b.last_idx["run"], c.last_idx["run"] = 3, 9, 20
    assert sorted(pool.last_sent("run")) == [3, 9]  # c is not ready
    b.in_flight = 2  # full: its segment waits
    assert pool.last_sent("run") == [3]
    assert pool.last_sent("other") == []
