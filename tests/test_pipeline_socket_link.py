"""The node-local links of the `ray` pipeline placement without Ray: message framing, an actor's step loop
(values, a raising step, the end of input), and connecting by name."""

from __future__ import annotations

import os
import socket
import threading

import numpy as np
import pytest

from raytile.common.errors import ExecutorError, StageFailed
from raytile.pipeline.socket_link import StepError, StepLoop, accept_named, connect, listen, recv_msg, send_msg

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix-domain sockets here")


def test_messages_round_trip_larger_than_the_socket_buffer():
    a, b = socket.socketpair()
    try:
        big = np.random.default_rng(1).random((512, 512), dtype=np.float32)  # 1 MiB: several recv calls
        msg = {"frame": (big, 7), "slopes": (None, 6)}
        sender = threading.Thread(target=send_msg, args=(a, msg))
        sender.start()
        got = recv_msg(b)
        sender.join(10)
        np.testing.assert_array_equal(got["frame"][0], big)
        assert got["frame"][1] == 7 and got["slopes"] == (None, 6)
        a.close()
        with pytest.raises(ConnectionError, match="closed by the other end"):
            recv_msg(b)
    finally:
        a.close()
        b.close()


def test_step_loop_steps_passes_a_stage_error_on_and_ends_with_its_input():
    drv, drv_actor = socket.socketpair()
    up, up_actor = socket.socketpair()
    down_actor, down = socket.socketpair()
    calls = []

    def step(t, relayed, upstream):
        calls.append(t)
        if t == 2:
            raise StageFailed("double", "compute_into", "boom at step 2")
        x, gen = upstream["x"]
        return {"y": (x * 2 + relayed.get("offset", (0, -1))[0], gen)}

    loop = StepLoop(step, drv_actor, [up_actor], [down_actor])
    loop.start()
    try:
        x = np.arange(6, dtype=np.float32)
        for t in range(4):
            send_msg(drv, (t, {"offset": (1.0, t - 1)}))
            send_msg(up, {"x": (x + t, t)})
        got = [recv_msg(down) for _ in range(4)]
        for t in (0, 1, 3):
            np.testing.assert_array_equal(got[t]["y"][0], (x + t) * 2 + 1.0)
            assert got[t]["y"][1] == t
        assert isinstance(got[2], StepError) and isinstance(got[2].error, StageFailed)
        assert got[2].error.stage == "double" and "boom at step 2" in str(got[2].error)
        # an upstream error is passed on without stepping
        send_msg(drv, (4, {}))
        send_msg(up, StepError(StageFailed("camera", "compute_into", "no frame")))
        passed = recv_msg(down)
        assert isinstance(passed, StepError) and passed.error.stage == "camera" and calls == [0, 1, 2, 3]
        drv.close()  # end of input: the loop ends and closes its links
        loop._thread.join(10)
        assert not loop._thread.is_alive()
        with pytest.raises(ConnectionError):
            recv_msg(down)
    finally:
        loop.stop()
        for s in (drv, up, down):
            s.close()


def test_values_that_cannot_be_pickled_become_an_error_for_the_driver():
    drv, drv_actor = socket.socketpair()
    down_actor, down = socket.socketpair()
    loop = StepLoop(lambda t, relayed: {"y": (threading.Lock(), t)}, drv_actor, [], [down_actor])
    loop.start()
    try:
        send_msg(drv, (0, {}))
        got = recv_msg(down)
        assert isinstance(got, StepError) and isinstance(got.error, ExecutorError)
        assert "a step's values (dict) could not be sent to another group" in str(got.error)
    finally:
        loop.stop()
        for s in (drv, down):
            s.close()


def test_links_are_made_by_name(tmp_path):
    path = str(tmp_path / "g0")
    srv = listen(path)
    try:
        a = connect(path, "driver", 5.0)
        b = connect(path, "sensor", 5.0)
        got = accept_named(srv, {"driver", "sensor"}, 5.0)
        assert set(got) == {"driver", "sensor"}
        send_msg(a, "hello")
        assert recv_msg(got["driver"]) == "hello"
        for s in (a, b, *got.values()):
            s.close()
        c = connect(path, "intruder", 5.0)
        with pytest.raises(ExecutorError, match="unexpected peer 'intruder'"):
            accept_named(srv, {"control"}, 5.0)
        c.close()
        with pytest.raises(ExecutorError, match=r"\['control'\] did not connect within 0.2 s"):
            accept_named(srv, {"control"}, 0.2)
    finally:
        srv.close()
        os.unlink(path)
