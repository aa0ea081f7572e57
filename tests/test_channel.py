"""`SnapshotChannel` (one run's results for several viewers) and the coordinator actor's drop policy,
without Ray: a real run (`ActiveRun`) on the inline executor feeds the channel."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import raytile as rt
from raytile.runtime.channel import FINISHED, SnapshotChannel, is_terminal
from raytile.runtime.active_run import ActiveRun
from raytile.runtime.plan import make_plan
from raytile.runtime.results import UDFResults

from _ray_udfs import ScaledSumUDF
from _wait import wait_until


def _viewer(channel: SnapshotChannel, delay: float, out: list) -> None:
    seq = 0
    while True:
        got = channel.peek(seq)
        if got is None:
            time.sleep(0.005)
            continue
        seq, item = got
        out.append(item)
        if is_terminal(item):
            return
        time.sleep(delay)


def test_every_viewer_gets_the_final_result_and_a_slow_one_skips(inline_ctx):
    data = np.random.default_rng(3).integers(0, 100, size=(8, 8, 6, 6)).astype(np.uint16)
    ds = inline_ctx.load("memory", data=data, num_partitions=8)
    plan = make_plan(ds, ScaledSumUDF(scale=2.0, delay=0.02))
    live = ActiveRun(inline_ctx.executor, plan)
    changes = []
    channel = live.channel
    channel.on_change(lambda: changes.append(1))
    live.start()
    fast, slow = [], []
    threads = [threading.Thread(target=_viewer, args=(channel, 0.0, fast)),
               threading.Thread(target=_viewer, args=(channel, 0.1, slow))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for seen in (fast, slow):
        assert seen[-1] is FINISHED
        final = seen[-2]
        assert isinstance(final, UDFResults) and final.finished
        np.testing.assert_allclose(final.buffers[0]["intensity"].data, 2.0 * data.sum(axis=(0, 1)))
        done = [s.partitions_done for s in seen[:-1]]
        assert done == sorted(done)  # never an older snapshot after a newer one
    assert len(slow) <= len(fast) and len(changes) >= len(fast)


def test_no_viewer_still_drains_the_run_and_keeps_one_snapshot(inline_ctx):
    data = np.ones((4, 4, 5, 5), dtype=np.float32)
    ds = inline_ctx.load("memory", data=data, num_partitions=4)
    live = ActiveRun(inline_ctx.executor, make_plan(ds, rt.SumUDF())).start()
    channel = live.channel
    wait_until(lambda: channel.terminal is not None, timeout=10, what="the channel's terminal")
    assert channel.terminal is FINISHED
    assert channel.latest.finished
    np.testing.assert_allclose(channel.latest.buffers[0]["intensity"].data, data.sum(axis=(0, 1)))
    # nothing left behind: the channel holds the newest snapshot alone, and one reader sees it, then the end
    reader = channel.reader()
    assert reader.take(timeout=1) is channel.latest and reader.empty
    assert reader.take(timeout=1) is FINISHED


def test_the_run_s_exception_reaches_the_viewers():
    channel = SnapshotChannel()
    error = RuntimeError("boom")
    channel.end(error)
    wait_until(lambda: channel.peek(0) is not None, timeout=5, interval=0.01, what="the run's exception")
    assert channel.peek(0) == (1, error)


def test_drop_policy_of_the_coordinator_actor():
    from raytile.actors.coordinator_actor import runs_to_drop

    def run(over, ended_at, detached=False, viewers=0):
        channel = SimpleNamespace(terminal=FINISHED if over else None)
        return SimpleNamespace(over=over, ended_at=ended_at, detached=detached, viewers=viewers, channel=channel)

    runs = {
        "running": run(False, None),
        "viewed": run(True, 1.0, viewers=1),
        "unviewed": run(True, 1.0),
        "detached-young": run(True, 95.0, detached=True),
        "detached-old": run(True, 1.0, detached=True),
    }
    assert sorted(runs_to_drop(runs, now=100.0, keep_s=10.0)) == ["detached-old", "unviewed"]
    many = {f"d{i}": run(True, float(i), detached=True) for i in range(5)}
    assert sorted(runs_to_drop(many, now=5.0, keep_s=100.0, max_kept=2)) == ["d0", "d1", "d2"]


def test_channel_latest_wins_for_each_reader_and_publishes_at_the_fastest_pace():
    """The coordinator's side: a snapshot is wanted once some reader took the newest; one not taken is
    replaced (and counted); each reader sees the newest it has not seen, then the run's end."""
    channel = SnapshotChannel()
    takes = []
    channel.on_take(lambda: takes.append(1))
    fast, slow = channel.reader(), channel.reader()
    assert channel.wants_snapshot and fast.take_nowait() is None and fast.empty
    channel.publish("a")
    assert not channel.wants_snapshot and not fast.empty
    assert fast.take(timeout=1) == "a" and channel.wants_snapshot and takes == [1]
    channel.publish("b")
    channel.publish("c")  # "b" was taken by nobody: replaced
    assert channel.replaced == 1
    assert fast.take(timeout=1) == "c"
    assert slow.take(timeout=1) == "c"  # the slow reader skipped "a" and "b"
    channel.end(FINISHED)
    channel.publish("d")  # after the end nothing is accepted
    assert fast.take(timeout=1) is FINISHED and slow.take(timeout=1) is FINISHED
    assert fast.take(timeout=1) is FINISHED  # the end stays the end
    late = channel.reader()
    assert late.take(timeout=1) == "c" and late.take(timeout=1) is FINISHED


def test_a_dropped_snapshot_leads_readers_to_the_end_and_take_times_out():
    channel = SnapshotChannel()
    reader = channel.reader()
    with pytest.raises(TimeoutError):
        reader.take(timeout=0.05)
    channel.publish("partial")
    channel.drop()  # a cancelled run's results are of no use
    assert reader.take_nowait() is None
    error = RuntimeError("cancelled")
    channel.end(error)
    channel.end(FINISHED)  # the first end wins
    assert reader.take(timeout=1) is error
