"""`RayletWatch` and `SharedFrames.put_again`: how the pool notices a lost node before Ray does, and why
no retry then waits on a copy of the frames on that node (the end-to-end case: tests/test_cluster.py)."""

from __future__ import annotations

import socket

import numpy as np

from raytile.actors.raylet_watch import RayletWatch
from raytile.actors.shared_frames import SharedFrames


def _listener() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def _closed_port() -> int:
    s, port = _listener()
    s.close()
    return port


def test_a_raylet_that_accepted_and_now_refuses_is_gone_for_good():
    raylet, port = _listener()
    watch = RayletWatch()
    try:
        assert watch.gone([("a", "127.0.0.1", port)]) == set()
        assert watch.gone([("a", "127.0.0.1", port)]) == set()  # still listening
    finally:
        raylet.close()
    assert watch.gone([("a", "127.0.0.1", port)]) == {"a"}
    # a node id stays gone while it is listed (a raylet that comes back has a new node id) ...
    again, _ = _listener()
    try:
        assert watch.gone([("a", "127.0.0.1", port)]) == {"a"}
    finally:
        again.close()
    # ... and is forgotten once the cluster no longer lists it
    assert watch.gone([]) == set()


def test_a_raylet_never_reached_is_not_called_gone():
    """A driver that cannot reach the nodes (Ray Client, a firewall that rejects) sees only refusals."""
    watch = RayletWatch()
    port = _closed_port()
    for _ in range(3):
        assert watch.gone([("b", "127.0.0.1", port)]) == set()
    assert watch.gone([("c", "", 0)]) == set()  # no address known


def test_a_raylet_that_never_answers_is_tried_once(monkeypatch):
    """A connection that times out costs a pool refresh its timeout once, not at every refresh."""
    import raytile.actors.raylet_watch as rw

    tries = []

    def silent(address, timeout):
        tries.append(address)
        raise socket.timeout("timed out")

    monkeypatch.setattr(rw.socket, "create_connection", silent)
    watch = RayletWatch()
    for _ in range(3):
        assert watch.gone([("d", "10.0.0.9", 4000)]) == set()
    assert tries == [("10.0.0.9", 4000)]


class _Ref:
    def __init__(self, n: int):
        self.n = n

    def hex(self) -> str:
        return f"ref{self.n}"


def test_put_again_gives_new_refs_to_the_same_frames_and_releases_the_old():
    store: dict[str, np.ndarray] = {}

    def put(a: np.ndarray) -> _Ref:
        ref = _Ref(len(store))
        store[ref.hex()] = a.copy()
        return ref

    class DataSet:
        pass

    ds = DataSet()
    frames = {0: np.arange(6.0).reshape(2, 3), 1: np.ones((2, 3))}
    shared = SharedFrames(put)
    shared.share(ds, frames)
    old = {i: shared.ref(id(ds), i) for i in frames}
    assert shared.put_again(lambda ref: store[ref.hex()]) == 2
    new = {i: shared.ref(id(ds), i) for i in frames}
    assert all(new[i].hex() != old[i].hex() for i in frames)
    for i, a in frames.items():
        np.testing.assert_array_equal(store[new[i].hex()], a)
    assert sorted(shared.take_released()) == sorted(r.hex() for r in old.values())
