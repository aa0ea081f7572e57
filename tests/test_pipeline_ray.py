"""Pipelines on Ray actors: the same outputs as in-process over node-local sockets, actor calls and compiled graphs,
a raising stage, a dead actor reported with its stages, restart()."""

from __future__ import annotations

import os

import numpy as np
import pytest

from raytile.common.errors import ExecutorError
from raytile.pipeline import Pipeline, StageActorDied, StageFailed

from _wait import wait_until

pytestmark = pytest.mark.ray

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
AO = os.path.join(EXAMPLES, "ao_loop.yaml")


def ao_with_log() -> dict:
    import yaml

    with open(AO) as f:
        cfg = yaml.safe_load(f)
    cfg["stages"].append({"name": "log", "kind": "sink", "input": "slopes", "placement": "control",
                          "params": {"keep": 8}})
    return cfg


def _is_dead(actor) -> bool:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        ray.get(actor.ping.remote(), timeout=1)
    except RayActorError:
        return True
    except GetTimeoutError:
        pass
    return False


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def run(placement: str, steps: int, cfg: dict | None = None) -> tuple[Pipeline, dict[str, np.ndarray]]:
    p = Pipeline.from_dict(cfg or ao_with_log(), placement=placement, base_dir=EXAMPLES).build()
    p.step(steps)
    return p, {"commands": p.read("commands"), "slopes": p.read("slopes"), "log": p.sink("log")}


@pytest.mark.parametrize("placement", ["ray", "ray-compiled", "ray-classic"])
def test_same_outputs_as_in_process(ray_context, placement):
    local, ref = run("in-process", 12)
    p, got = run(placement, 12)
    try:
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7, err_msg=k)
        assert p.generation("commands") == 11
        m = p.metrics()
        assert set(m) == {s.name for s in p.config.stages}
        assert m["matvec"]["steps"] == 12 and m["camera"]["steps"] == 12 and m["log"]["steps"] == 12
        st = p.status()
        assert st["stages"]["matvec"]["placement"] == "control" and st["state"] == "built"
        # live parameter update on an actor, between steps
        p.update_parameters("clip", lo=-0.1, hi=0.1)
        local.update_parameters("clip", lo=-0.1, hi=0.1)
        p.step(2)
        local.step(2)
        np.testing.assert_allclose(p.read("commands"), local.read("commands"), rtol=1e-6, atol=1e-7)
        assert np.abs(p.read("commands")).max() <= 0.1
    finally:
        p.close()
        local.close()


def test_values_over_ray(ray_context):
    p = Pipeline.from_yaml(AO, placement="ray").build()
    try:
        got = list(p.values("commands", steps=5))
        assert p.wait(30) == "built" and p.t == 5 and got
        np.testing.assert_array_equal(got[-1], p.read("commands"))
    finally:
        p.close()


def test_raising_stage_on_an_actor(ray_context):
    import _pipeline_test_stages  # noqa: F401  (registers test.fail_at_ray here; actors import it by name)

    cfg = ao_with_log()
    cfg["streams"]["copied"] = {"shape": [512], "dtype": "float32"}
    cfg["stages"].append({"name": "flaky", "kind": "test.fail_at_ray", "input": "slopes", "output": "copied",
                          "placement": "control", "params": {"fail_at": 2}})
    p = Pipeline.from_dict(cfg, placement="ray", base_dir=EXAMPLES).build()
    try:
        with pytest.raises(StageFailed) as ei:
            p.step(5)
        assert ei.value.stage == "flaky" and "ray boom at step 2" in str(ei.value)
        assert "compute_into" in ei.value.stage_traceback
        st = p.status()
        assert st["state"] == "failed" and st["failed_stage"] == "flaky"
    finally:
        p.close()


def test_dead_actor_is_reported_and_restart_rebuilds(ray_context):
    import ray

    cfg = ao_with_log()
    cfg["stages"].append({"name": "sensor_log", "kind": "sink", "input": "slopes", "placement": "sensor",
                          "params": {"keep": 20}})
    p = Pipeline.from_dict(cfg, placement="ray", base_dir=EXAMPLES).build()
    local = Pipeline.from_dict(ao_with_log(), base_dir=EXAMPLES).build()
    try:
        p.step(3)
        local.step(3)
        p.read("commands")  # drain: with two steps in flight, step 3 could otherwise finish after the kill
        control = p._placement.actors["control"]
        pid = ray.get(control.__ray_call__.remote(lambda host: os.getpid()))
        ray.kill(control)
        # ray.kill returns before the actor is gone, and Ray reports it dead up to ~0.5 s before its process
        # ends: a step sent meanwhile could still finish on it over the node-local sockets, and the
        # pipeline's step counter would then rightly be one ahead of the in-process reference's.
        wait_until(lambda: _is_dead(control), timeout=30, what="the killed control actor to be dead")
        wait_until(lambda: not _process_alive(pid), timeout=30, what="the killed control actor's process to end")
        attempts = 0
        with pytest.raises(StageActorDied) as ei:  # noticed when a step that needs the dead actor is awaited
            for _ in range(3):
                attempts += 1
                p.step(1)
        assert ei.value.group == "control"
        assert set(ei.value.stages) == {"reconstructor", "matvec", "integrator", "clip", "log"}
        st = p.status()
        assert st["state"] == "failed" and "control" in st["error"]
        assert st["stages"]["matvec"]["state"] == "failed" and st["stages"]["camera"]["state"] == "built"
        assert set(st["failed_stages"]) == {"reconstructor", "matvec", "integrator", "clip", "log"}
        p.restart()
        local.restart()
        p.step(4)
        local.step(4)
        np.testing.assert_allclose(p.read("commands"), local.read("commands"), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(p.sink("log"), local.sink("log"), rtol=1e-6, atol=1e-7)
        assert len(p.sink("log")) == 4  # the replaced actor's stages started over
        # the living actor kept its state: 3 steps, then those of the failed attempts it got to run, then 4
        assert 3 + 4 <= len(p.sink("sensor_log")) <= 3 + attempts + 4, (len(p.sink("sensor_log")), attempts)
    finally:
        p.close()
        local.close()


def test_a_hanging_stage_times_out_instead_of_hanging(ray_context):
    import time

    import _pipeline_test_stages  # noqa: F401  (registers test.sleep_at)

    cfg = ao_with_log()
    cfg["streams"]["copied"] = {"shape": [512], "dtype": "float32"}
    cfg["stages"].append({"name": "slow", "kind": "test.sleep_at", "input": "slopes", "output": "copied",
                          "placement": "control", "params": {"at": 2, "seconds": 4.0}})
    p = Pipeline.from_dict(cfg, placement="ray", base_dir=EXAMPLES, step_timeout_s=1.0).build()
    try:
        t0 = time.monotonic()
        with pytest.raises(ExecutorError, match="did not answer within 1.0 s"):
            p.step(5)
        assert time.monotonic() - t0 < 4.0 and p.status()["state"] == "failed"
    finally:
        p.close()


def _closed_loop_config(keep: int) -> dict:
    """residual = (frame - cmd[t-1]) * g on the sensor actor; cmd = cmd + 0.5 * residual on the control
    actor; the last ``keep`` residuals logged."""
    return {
        "streams": {"frame": {"shape": [8, 8], "dtype": "uint16"}, "g": {"shape": [8, 8], "dtype": "float32"},
                    "res": {"shape": [8, 8], "dtype": "float32"}, "cmd": {"shape": [8, 8], "dtype": "float32"}},
        "stages": [
            {"name": "camera", "kind": "sh_frames", "output": "frame", "placement": "sensor",
             "params": {"n_sub": 2, "frames": 5, "seed": 7, "photons": 500.0}},
            {"name": "g", "kind": "constant", "output": "g", "placement": "sensor", "params": {"value": 0.8}},
            {"name": "residual", "kind": "calibrate", "input": "frame", "auxiliary": ["cmd:-1", "g"],
             "output": "res", "placement": "sensor"},
            {"name": "control", "kind": "leaky_integrator", "input": "res", "output": "cmd", "placement": "control",
             "params": {"gain": 0.5, "leak": 1.0}},
            {"name": "log", "kind": "sink", "input": "res", "placement": "control", "params": {"keep": keep}},
        ],
    }


@pytest.mark.parametrize("placement", ["ray", "ray-compiled", "ray-classic"])
def test_closed_loop_across_actors_equals_in_process(ray_context, placement):
    # residual = (frame - cmd[t-1]) * g on the sensor actor; cmd = cmd + 0.5 * residual on the control actor:
    # cmd:-1 goes back from control to sensor through the driver between steps
    cfg = _closed_loop_config(keep=10)
    local = Pipeline.from_dict(cfg).build()
    p = Pipeline.from_dict(cfg, placement=placement).build()
    try:
        assert p._placement.relayed == {"sensor": ["cmd"], "control": []} and p._placement.depth == 1
        local.step(10)
        p.step(10)
        np.testing.assert_allclose(p.read("cmd"), local.read("cmd"), rtol=1e-6)
        np.testing.assert_allclose(p.sink("log"), local.sink("log"), rtol=1e-6)
        assert p.generation("cmd") == 9
    finally:
        p.close()
        local.close()


def _shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm"))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this platform")
@pytest.mark.parametrize("placement", ["ray", "ray-compiled"])
def test_nothing_left_in_dev_shm_or_tmp_after_a_pipeline_stops(ray_context, placement):
    import glob
    import tempfile

    links = os.path.join(tempfile.gettempdir(), "raytile-pipe-*")
    shm_before, links_before = _shm_entries(), set(glob.glob(links))
    p = Pipeline.from_yaml(AO, placement=placement).build()
    try:
        p.run(steps=50)
        assert p.generation("commands") == 49
        if placement == "ray":  # the sockets' folder is gone once they are connected
            assert set(glob.glob(links)) == links_before
    finally:
        p.close()
    # Ray's compiled graphs create named semaphores (sem.hdr*/sem.obj*) for their channels and leave some
    # behind: 20 a pipeline before ray_channels removed them (ray-project/ray#65098 deprecated them anyway)
    left = {n for n in _shm_entries() - shm_before if not n.startswith("plasma")}
    assert left == set(), sorted(left)[:5]
    assert set(glob.glob(links)) == links_before


@pytest.fixture
def across_nodes(monkeypatch):
    """The ``ray`` placement as when its actors span nodes: the socket channel falls back to actor calls."""
    from raytile.pipeline.ray_channels import SocketChannel

    monkeypatch.setattr(SocketChannel, "_one_node", lambda self, actors: False)


def test_actors_on_several_nodes_use_actor_calls_with_steps_in_flight(ray_context, across_nodes):
    local, ref = run("in-process", 12)
    p, got = run("ray", 12)
    try:
        assert p._placement.channel.fallback is not None and p._placement.depth == 8
        assert "over actor calls (the actors span nodes), 8 steps in flight" in p.describe()
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7, err_msg=k)
        assert p.generation("commands") == 11
    finally:
        p.close()
        local.close()


def test_closed_loop_over_actor_calls_keeps_steps_in_flight(ray_context, across_nodes):
    # the delayed input goes from control's step t-1 to sensor's step t as an ObjectRef: no driver round trip
    cfg = _closed_loop_config(keep=20)
    local = Pipeline.from_dict(cfg).build()
    p = Pipeline.from_dict(cfg, placement="ray").build()
    try:
        assert p._placement.depth == 8
        local.step(20)
        p.run(steps=20)
        np.testing.assert_allclose(p.sink("log"), local.sink("log"), rtol=1e-6)
        np.testing.assert_allclose(p.read("cmd"), local.read("cmd"), rtol=1e-6)
        # a restart (no actor died) starts from the driver's copy of the relayed value, then chains again
        p.restart()
        local.restart()
        local.step(5)
        p.step(5)
        np.testing.assert_allclose(p.sink("log"), local.sink("log"), rtol=1e-6)
    finally:
        p.close()
        local.close()
