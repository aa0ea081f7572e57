"""Trigger order, multi-rate, delayed feedback, the in-process runner's controls, streams and failures."""

from __future__ import annotations

import time
from typing import Any, ClassVar, Mapping

import anyio
import numpy as np
import pytest

from raytile.common.errors import ConfigValidationError
from raytile.pipeline import Kernel, Pipeline, PipelineConfig, PipelineStateError, StageFailed, register_stage
from raytile.pipeline.kernels.sources import sh_frame_bank
from raytile.pipeline.order import trigger_levels

from _wait import wait_until


@register_stage
class FailAt(Kernel):
    """Copies its input; raises at step ``fail_at``."""

    kind = "test.fail_at"
    defaults: ClassVar[Mapping[str, Any]] = {"fail_at": 3}

    def compute_into(self, trigger_input, output, auxiliary_inputs):
        if self.current_time == self.params["fail_at"]:
            raise RuntimeError(f"boom at step {self.current_time}")
        output[...] = trigger_input


def frames_config(n_sub: int = 2, pix: int = 4, frames: int = 5) -> dict:
    side = n_sub * pix
    return {
        "streams": {"frame": {"shape": [side, side], "dtype": "uint16"}},
        "stages": [{"name": "camera", "kind": "sh_frames", "output": "frame",
                    "params": {"n_sub": n_sub, "frames": frames, "seed": 7, "photons": 500.0}}],
    }


def bank(n_sub: int = 2, pix: int = 4, frames: int = 5) -> np.ndarray:
    return sh_frame_bank(n_sub, pix, frames, 7, 500.0, 1.5)


def add(cfg: dict, streams: dict, *stages: dict) -> dict:
    cfg["streams"].update({k: {"shape": v[0], "dtype": v[1]} for k, v in streams.items()})
    cfg["stages"].extend(stages)
    return cfg


# -- trigger order -------------------------------------------------------------------------------------
def test_trigger_levels_chain_and_diamond():
    cfg = add(frames_config(), {"a": ([8, 8], "float32"), "b": ([8, 8], "float32"), "c": ([8, 8], "float32"),
                                "d": ([8, 8], "float32")},
              {"name": "d_late", "kind": "calibrate", "input": "frame", "auxiliary": ["b", "c"], "output": "d"},
              {"name": "a", "kind": "copy", "input": "frame", "output": "a"},
              {"name": "b", "kind": "affine", "input": "a", "output": "b"},
              {"name": "c", "kind": "clip", "input": "a", "output": "c"})
    levels = trigger_levels(PipelineConfig.from_dict(cfg))
    # auxiliary inputs order too: d_late waits for b and c although it is listed first
    assert levels == [("camera",), ("a",), ("b", "c"), ("d_late",)]


def test_delayed_feedback_loop_equals_numpy():
    # residual = (frame - cmd[t-1]) * g ; cmd = cmd + 0.5 * residual  (a closed loop on the previous command)
    cfg = add(frames_config(), {"g": ([8, 8], "float32"), "res": ([8, 8], "float32"), "cmd": ([8, 8], "float32")},
              {"name": "g", "kind": "constant", "output": "g", "params": {"value": 0.8}},
              {"name": "residual", "kind": "calibrate", "input": "frame", "auxiliary": ["cmd:-1", "g"],
               "output": "res"},
              {"name": "control", "kind": "leaky_integrator", "input": "res", "output": "cmd",
               "params": {"gain": 0.5, "leak": 1.0}})
    p = Pipeline.from_dict(cfg).build()
    assert p.levels == [("camera", "g"), ("residual",), ("control",)]
    p.step(12)
    frames = bank().astype(np.float32)
    cmd = np.zeros((8, 8), np.float32)
    for t in range(12):
        res = (frames[t % 5] - cmd) * np.float32(0.8)
        cmd = cmd + np.float32(0.5) * res
    np.testing.assert_allclose(p.read("cmd"), cmd, rtol=1e-5)


def test_delayed_input_read_after_its_writer_sees_previous_step():
    cfg = add(frames_config(), {"prev": ([8, 8], "uint16")},
              {"name": "prev", "kind": "copy", "input": "frame:-1", "output": "prev"},
              {"name": "log", "kind": "sink", "input": "prev", "params": {"keep": 10}})
    p = Pipeline.from_dict(cfg).build()
    p.step(6)
    kept = p.sink("log")
    frames = bank()
    assert len(kept) == 5  # step 0 has no previous frame: prev is not triggered
    np.testing.assert_array_equal(kept, frames[[0, 1, 2, 3, 4]])
    np.testing.assert_array_equal(p.stage("log").times(), [1, 2, 3, 4, 5])


def test_multi_rate_stage_triggers_consumers_every_n_steps():
    cfg = add(frames_config(), {"long": ([8, 8], "uint16"), "scaled": ([8, 8], "float32")},
              {"name": "exposure", "kind": "integrate", "input": "frame", "output": "long", "params": {"frames": 3}},
              {"name": "scale", "kind": "affine", "input": "long", "output": "scaled", "params": {"scale": 0.5}},
              {"name": "log", "kind": "sink", "input": "scaled", "params": {"keep": 4}})
    p = Pipeline.from_dict(cfg).build()
    p.step(9)
    m = p.metrics()
    assert m["camera"]["steps"] == 9 and m["exposure"]["steps"] == 9
    assert m["scale"]["steps"] == 3 and m["log"]["steps"] == 3
    frames = bank()
    expect = [frames[[i % 5 for i in range(k, k + 3)]].sum(axis=0) * 0.5 for k in (0, 3, 6)]
    np.testing.assert_allclose(p.sink("log"), np.array(expect), rtol=1e-6)
    assert p.generation("long") == 8 and p.stage("log").times().tolist() == [2, 5, 8]


# -- running and control ------------------------------------------------------------------------------
def test_step_run_until_and_metrics():
    p = Pipeline.from_dict(add(frames_config(), {"c": ([8, 8], "uint16")},
                               {"name": "c", "kind": "copy", "input": "frame", "output": "c"})).build()
    p.step(4)
    assert p.t == 4 and p.status()["state"] == "built"
    p.run(steps=6)
    assert p.t == 10
    p.run(until=lambda pl: pl.t >= 15)
    assert p.t == 15
    p.run(until=0.05)
    assert p.t > 15
    st = p.status()
    m = st["stages"]["c"]
    assert m["steps"] == p.t and m["state"] == "built"
    assert 0 < m["p50_ms"] <= m["p99_ms"] and m["mean_ms"] > 0 and m["hz"] > 0 and m["jitter_ms"] >= 0
    assert st["loop"]["hz"] > 0
    with pytest.raises(ConfigValidationError, match="never return"):
        p.run()
    with pytest.raises(ConfigValidationError, match="n must be"):
        p.step(-1)


def test_background_pause_resume_stop_and_live_update():
    cfg = add(frames_config(), {"s": ([8, 8], "float32")},
              {"name": "scale", "kind": "affine", "input": "frame", "output": "s", "params": {"scale": 1.0}})
    cfg["stages"][0]["params"]["rate_hz"] = 1000.0
    p = Pipeline.from_dict(cfg).build()
    p.run(background=True)
    wait_until(lambda: p.t >= 5, timeout=5, interval=0.005, what="five background steps")
    with pytest.raises(PipelineStateError, match="background run"):
        p.step()
    p.pause()
    time.sleep(0.05)
    assert p.state == "paused"
    t0 = p.t
    time.sleep(0.05)
    assert p.t == t0
    p.update_parameters("scale", scale=-2.0)  # queued, applied before the next step
    p.resume()
    wait_until(lambda: p.t >= t0 + 3, timeout=5, interval=0.005, what="three steps after resume")
    p.stop()
    assert p.state == "stopped" and p.t >= t0 + 3
    frames = bank().astype(np.float32)
    np.testing.assert_array_equal(p.read("s"), -2.0 * frames[(p.t - 1) % 5])
    p.close()


def test_values_sync_and_async():
    cfg = add(frames_config(), {"s": ([8, 8], "float32")},
              {"name": "scale", "kind": "affine", "input": "frame", "output": "s", "params": {"scale": 2.0}})
    frames = bank().astype(np.float32)
    p = Pipeline.from_dict(cfg).build()
    got = [v for v in p.values("s", steps=10)]
    assert 1 <= len(got) <= 10
    np.testing.assert_array_equal(got[-1], 2.0 * frames[9 % 5])  # the last value is never skipped
    assert p.wait(5) == "built" and p.t == 10

    async def consume() -> list[np.ndarray]:
        out = []
        async for v in p.values("s", steps=7):
            out.append(v)
        return out

    got = anyio.run(consume)
    assert p.wait(5) == "built"
    np.testing.assert_array_equal(got[-1], 2.0 * frames[16 % 5])
    assert p.state == "built" and p.t == 17
    for k, _ in enumerate(p.values("s")):  # endless run started by the loop; leaving it stops the run
        if k == 2:
            break
    assert p.wait(5) == "stopped"


# -- failures -------------------------------------------------------------------------------------------
def failing_config() -> dict:
    return add(frames_config(), {"c": ([8, 8], "uint16")},
               {"name": "flaky", "kind": "test.fail_at", "input": "frame", "output": "c", "params": {"fail_at": 3}})


def test_raising_stage_fails_the_pipeline_with_name_and_traceback():
    p = Pipeline.from_dict(failing_config()).build()
    with pytest.raises(StageFailed) as ei:
        p.step(10)
    assert ei.value.stage == "flaky" and ei.value.method == "trigger_code"
    assert "boom at step 3" in str(ei.value) and "compute_into" in ei.value.stage_traceback
    st = p.status()
    assert st["state"] == "failed" and st["failed_stage"] == "flaky" and "boom" in st["traceback"]
    assert st["stages"]["flaky"]["state"] == "failed" and st["stages"]["camera"]["state"] == "built"
    with pytest.raises(PipelineStateError, match="failed"):
        p.step()
    assert p.t == 3  # the failed step does not count
    p.restart()  # a fresh build from the config; the step counter goes on
    p.update_parameters("flaky", fail_at=-1)
    p.step(2)
    assert p.state == "built" and p.t == 5
    np.testing.assert_array_equal(p.read("c"), bank()[4])


def test_raising_stage_in_background_ends_iteration_with_the_error():
    p = Pipeline.from_dict(failing_config()).build()
    with pytest.raises(StageFailed, match="flaky"):
        for _ in p.values("c"):
            pass
    assert p.wait(5) == "failed"
    p2 = Pipeline.from_dict(failing_config()).build()
    p2.run(background=True)
    assert p2.wait(5) == "failed" and "boom" in p2.status()["error"]


def test_raising_setup_names_the_stage():
    cfg = frames_config()
    cfg["streams"]["bad"] = {"shape": [3], "dtype": "float32"}
    cfg["stages"].append({"name": "const", "kind": "constant", "output": "bad", "params": {"value": [1, 2]}})
    p = Pipeline.from_dict(cfg)
    with pytest.raises(ConfigValidationError, match="stage 'const': field 'params.value'.*\\[2\\]"):
        p.build()
    assert p.state == "failed"
    with pytest.raises(ConfigValidationError, match="stage 'const'"):
        p.restart()  # builds again from the config: the same error, nothing half-built left
    assert p.state == "failed"
    with pytest.raises(PipelineStateError, match="failed"):
        p.step()


def test_reads_during_a_background_run_see_whole_steps():
    cfg = add(frames_config(), {"s": ([8, 8], "float32")},
              {"name": "scale", "kind": "affine", "input": "frame", "output": "s", "params": {"scale": 2.0}})
    frames = 2.0 * bank().astype(np.float32)
    p = Pipeline.from_dict(cfg).build()
    p.run(steps=3000, background=True)
    try:
        for _ in range(200):
            v = p.read("s")
            assert any(np.array_equal(v, f) for f in frames)
            p.metrics()
    finally:
        p.stop()
    assert p.state in ("stopped", "built")


def test_stage_metrics_window_against_numpy():
    from raytile.pipeline.metrics import WINDOW, StageMetrics

    m = StageMetrics()
    rng = np.random.default_rng(1)
    n = WINDOW + 1000  # the window wraps
    execs = rng.integers(1_000, 50_000, n)
    starts = np.cumsum(rng.integers(900_000, 1_100_000, n))
    for s, e in zip(starts, execs):
        m.record(int(s), int(e))
    snap = m.snapshot()
    last = execs[-WINDOW:] / 1e6
    assert snap["steps"] == n
    assert snap["first_ms"] == pytest.approx(execs[0] / 1e6)
    assert snap["mean_ms"] == pytest.approx(execs[1:].mean() / 1e6)  # the steady state: after the first step
    assert snap["p50_ms"] == pytest.approx(np.percentile(last, 50))
    assert snap["p99_ms"] == pytest.approx(np.percentile(last, 99))
    assert snap["jitter_ms"] == pytest.approx((np.diff(starts[-WINDOW:]) / 1e6).std())
    assert snap["hz"] == pytest.approx((n - 2) / ((starts[-1] - starts[1]) / 1e9))


@register_stage
class SlowFirst(Kernel):
    """Copies its input; its first step sleeps ``first_s`` (a one-time cost, as numba compiling)."""

    kind = "test.slow_first"
    defaults: ClassVar[Mapping[str, Any]] = {"first_s": 0.3}

    def compute_into(self, trigger_input, output, auxiliary_inputs):
        if self.current_time == 0:
            time.sleep(self.params["first_s"])
        output[...] = trigger_input


def test_status_reports_first_step_apart_from_steady_rate():
    from raytile.pipeline.metrics import StageMetrics

    # a slow first step (1 s), then 0.4 ms steps every 0.5 ms: the steady state is 2000 Hz
    m = StageMetrics()
    m.record(0, 1_000_000_000)
    for k in range(1, 101):
        m.record(1_000_000_000 + (k - 1) * 500_000, 400_000)
    snap = m.snapshot()
    assert snap["first_ms"] == pytest.approx(1000.0)
    assert snap["mean_ms"] == pytest.approx(0.4) and snap["p99_ms"] == pytest.approx(0.4)
    assert snap["hz"] == pytest.approx(2000.0)  # with the first step counted it was ~99 Hz
    assert snap["jitter_ms"] == pytest.approx(0.0)

    # through status(): a stage whose first trigger sleeps 0.3 s
    p = Pipeline.from_dict(add(frames_config(), {"c": ([8, 8], "uint16")},
                               {"name": "c", "kind": "test.slow_first", "input": "frame", "output": "c"})).build()
    p.step(40)
    st = p.status()
    c = st["stages"]["c"]
    assert c["steps"] == 40 and c["first_ms"] >= 300.0
    assert c["mean_ms"] < 100.0  # the steady steps copy 8x8 pixels; the sleep is not in their mean
    assert c["hz"] > 38 / 0.3  # counted from the second step on (with the first in, < 130 Hz)
    assert st["loop"]["first_ms"] >= 300.0
