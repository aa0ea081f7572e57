"""Pipelines on Ray actors: the same outputs as in-process over compiled-graph channels and classic calls,
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


def run(placement: str, steps: int, cfg: dict | None = None) -> tuple[Pipeline, dict[str, np.ndarray]]:
    p = Pipeline.from_dict(cfg or ao_with_log(), placement=placement, base_dir=EXAMPLES).build()
    p.step(steps)
    return p, {"commands": p.read("commands"), "slopes": p.read("slopes"), "log": p.sink("log")}


@pytest.mark.parametrize("placement", ["ray", "ray-classic"])
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
        ray.kill(control)
        # ray.kill returns before the actor is gone: a step sent meanwhile could still finish on it, and the
        # pipeline's step counter would then rightly be one ahead of the in-process reference's.
        wait_until(lambda: _is_dead(control), timeout=30, what="the killed control actor to be dead")
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


@pytest.mark.parametrize("placement", ["ray", "ray-classic"])
def test_closed_loop_across_actors_equals_in_process(ray_context, placement):
    # residual = (frame - cmd[t-1]) * g on the sensor actor; cmd = cmd + 0.5 * residual on the control actor:
    # cmd:-1 goes back from control to sensor through the driver between steps
    cfg = {
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
            {"name": "log", "kind": "sink", "input": "res", "placement": "control", "params": {"keep": 10}},
        ],
    }
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
