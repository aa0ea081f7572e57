"""`Reply`: actor calls answer with a status by name, and unwrap() raises our exceptions (no Ray needed)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from raytile.actors.reply import Reply, ReplyStatus
from raytile.common.errors import ExecutorError, UDFException, UDFRunCancelled
from raytile.runtime.executor import TaskNotRun


def test_ok_held_and_wait_unwrap_to_their_payload():
    assert Reply.ok([1, 2], spans=[{"name": "s"}]).unwrap() == [1, 2]
    assert Reply.ok([1, 2], spans=[{"name": "s"}]).spans == ({"name": "s"},)
    held = Reply.held(7)
    assert held.status is ReplyStatus.HELD and held.unwrap() == 7 and not held.failed
    assert Reply.wait({"progress": 3}).unwrap() == {"progress": 3}


def test_failures_raise_our_exceptions_naming_what():
    error = UDFException("SumUDF failed in partition 3")
    with pytest.raises(UDFException, match="partition 3") as ei:
        Reply.error(error).unwrap("task 3")
    assert ei.value is error  # the worker's exception itself, class and message kept
    with pytest.raises(UDFRunCancelled, match="partition 4 .* was cancelled"):
        Reply.cancelled().unwrap("partition 4 (frames 0:8)")
    with pytest.raises(TaskNotRun, match="partition 5 did not run: its worker did not hold the params"):
        Reply.missing("params", ("run", 0)).unwrap("partition 5")
    with pytest.raises(ExecutorError, match="carries str"):
        Reply(ReplyStatus.ERROR, "not an exception").unwrap("x")
    assert all(r.failed for r in (Reply.error(error), Reply.cancelled(), Reply.missing("data", "k")))


def test_a_reply_is_frozen_and_crosses_process_boundaries():
    reply = Reply.error(UDFException("boom"), spans=[{"name": "raytile.task"}])
    with pytest.raises(dataclasses.FrozenInstanceError):
        reply.status = ReplyStatus.OK  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(reply))
    assert back.status is ReplyStatus.ERROR and back.spans == ({"name": "raytile.task"},)
    with pytest.raises(UDFException, match="boom"):
        back.unwrap()
