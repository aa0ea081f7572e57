"""`PipelineState`: one enum, changed by one locked transition method; reads as its string value."""

from __future__ import annotations

import json
import threading

from raytile.pipeline import Pipeline
from raytile.pipeline.runner import STATES, PipelineState


def small() -> Pipeline:
    return Pipeline.from_dict({
        "streams": {"frame": {"shape": [8, 8], "dtype": "uint16"}},
        "stages": [{"name": "camera", "kind": "sh_frames", "output": "frame",
                    "params": {"n_sub": 2, "frames": 5, "seed": 7, "photons": 500.0}}],
    })


def test_states_read_as_their_values():
    assert STATES == ("created", "built", "running", "paused", "stopped", "failed")
    assert PipelineState.BUILT == "built" and f"{PipelineState.PAUSED}" == "paused"
    assert str(PipelineState.FAILED) == "failed"
    p = small()
    assert p.state is PipelineState.CREATED
    p.build()
    p.step(2)
    st = p.status()
    assert json.loads(json.dumps(st["state"])) == "built" and type(st["state"]) is str
    p.run(steps=3)
    assert p.state is PipelineState.BUILT and p.t == 5
    p.stop()
    assert p.state is PipelineState.STOPPED
    p.close()


def test_a_transition_with_a_precondition_is_atomic():
    p = small()
    assert not p._transition(PipelineState.STOPPED, only_from=(PipelineState.RUNNING, PipelineState.BUILT))
    assert p.state is PipelineState.CREATED  # refused: it was created, not running or built
    p._transition(PipelineState.RUNNING)
    # eight threads race to stop a running pipeline: the check and the change are one step, so one wins
    wins: list[bool] = []
    barrier = threading.Barrier(8)

    def stopper():
        barrier.wait()
        wins.append(p._transition(PipelineState.STOPPED, only_from=(PipelineState.RUNNING,)))

    threads = [threading.Thread(target=stopper) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert wins.count(True) == 1 and p.state is PipelineState.STOPPED
