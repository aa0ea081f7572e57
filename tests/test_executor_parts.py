"""The Ray executor's parts that decide or keep books without Ray calls: checked with stand-ins."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

pytest.importorskip("ray")

from raytile.actors.cancel import tell_cancelled  # noqa: E402
from raytile.actors.held_results import HeldResults  # noqa: E402
from raytile.actors.pool import Slot, SlotState  # noqa: E402
from raytile.actors.shipping import ParamsHandle, forget_shipped, to_ship  # noqa: E402
from raytile.actors.wakeups import RunWakeups  # noqa: E402


class _Call:
    def __init__(self, log: list, name: str):
        self._log, self._name = log, name

    def remote(self, *args):
        self._log.append((self._name, *args))
        future: Future = Future()
        future.set_result(None)
        return _Ref(future)


class _Ref:
    def __init__(self, future: Future):
        self._future = future

    def future(self) -> Future:
        return self._future


class _Actor:
    """Records the calls made on it."""

    def __init__(self):
        self.calls: list = []
        self.cancel_run = _Call(self.calls, "cancel_run")
        self.flush_run = _Call(self.calls, "flush_run")


def _slot(name: str) -> Slot:
    return Slot("cpu", name, _Actor(), "node", time.monotonic(), state=SlotState.READY)


def test_held_results_follow_holds_sends_and_losses_per_worker():
    held = HeldResults()
    held.hold("r", "w1", 3)
    held.hold("r", "w1", 4)
    held.hold("r", "w2", 7)
    held.sent("r", "w1", [3])
    assert held.take("r", "w1") == {4}  # w1 was lost holding 4
    assert held.take("r", "w1") == set()
    held.drop("r")
    assert held.take("r", "w2") == set()
    held.hold("a", "w1", 1)
    held.hold("b", "w1", 2)
    held.drop(None)  # the Context closed
    assert held.take("a", "w1") == set() and held.take("b", "w1") == set()


def test_flush_asks_each_worker_holding_results_once_and_skips_retired_ones():
    held = HeldResults()
    w1, w2 = _slot("w1"), _slot("w2")
    held.hold("r", "w1", 3)
    held.hold("r", "w1", 5)
    held.hold("r", "gone", 9)  # its worker was retired: not among the slots
    held.hold("r", "w2", 6)
    held.sent("r", "w2", [6])  # w2 holds nothing any more
    handles = held.flush("r", [w1, w2], RunWakeups())
    assert [(h.slot.name, set(h.expected), h.task) for h in handles] == [("w1", {3, 5}, None)]
    assert w1.actor.calls == [("flush_run", "r")] and w2.actor.calls == []


def test_a_run_wakes_when_a_future_it_waits_for_is_done_and_when_the_pool_changes():
    wakeups = RunWakeups()
    event = threading.Event()
    wakeups.start("r", event)
    future: Future = Future()
    wakeups.ring_when_done(future, "r")
    wakeups.ring_when_done(Future(), "not-started")  # no event: nothing to ring, nothing raised
    assert not event.is_set()
    future.set_result(1)
    assert event.is_set()
    event.clear()
    wakeups.wake_all()
    assert event.is_set()
    wakeups.forget("r")
    assert wakeups.get("r") is None


def test_values_ship_once_per_actor_and_again_after_a_miss():
    slot = _slot("w1")
    params = ParamsHandle(b"packed", "r", 2)
    assert to_ship(slot, params, "ab", "ref-ab") == {"params": b"packed", "data": "ref-ab"}
    assert to_ship(slot, params, "ab", "ref-ab") is None  # it holds both
    assert to_ship(slot, params, "cd", "ref-cd") == {"data": "ref-cd"}
    assert to_ship(slot, ParamsHandle(b"v3", "r", 3), None, None) == {"params": b"v3"}
    forget_shipped(slot, "data", "ab")  # the worker said it lacks "ab"
    assert to_ship(slot, params, "ab", "ref-ab") == {"data": "ref-ab"}


def test_cancel_tells_each_actor_once_per_run_and_settles_every_handle():
    a, b = _slot("a"), _slot("b")
    handles = [type("H", (), {"actor": s.actor, "run_id": run, "slot": s})()
               for s, run in ((a, "r"), (a, "r"), (b, "r"), (a, "other"))]
    settled = []
    tell_cancelled(handles, settled.append)
    assert a.actor.calls == [("cancel_run", "r"), ("cancel_run", "other")]
    assert b.actor.calls == [("cancel_run", "r")]
    assert settled == handles
