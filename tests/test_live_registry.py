"""A detector is one package plus one registration line (:mod:`raytile.live.registry`, issue 32).

``_tcpcam`` (tests/_tcpcam/) is a detector of the tests' own: a TCP camera, its simulator and its
command line, in one package whose ``__init__.py`` registers it; no file of raytile names it. Its
frames go through ``make_connection``, a ``tcpcam://`` URL source and ``raytile live run`` (in this
process, and from the shell with the package declared as an entry point), each result equal to numpy
on the frames sent. raytile's own connections implement the completed ``LiveConnection`` protocol.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import _tcpcam  # noqa: F401  (registers "tcpcam")
from _tcpcam.sim import TcpCamSimulator
from raytile.cli import build_parser
from raytile.common.errors import ConfigValidationError
from raytile.live import LiveContext
from raytile.live.connection import DataSetConnection, LiveConnection
from raytile.live.registry import DetectorSpec, detector_spec, detector_specs, register_detector
from raytile.live.sources import LiveSource
from raytile.udf import SumUDF

TESTS = Path(__file__).resolve().parent
NAV, SIG = (4, 6), (8, 10)


@pytest.fixture
def frames() -> np.ndarray:
    return np.random.default_rng(3).integers(0, 1000, size=(int(np.prod(NAV)),) + SIG).astype(np.uint16)


@pytest.fixture
def ctx():
    ctx = LiveContext(executor="inline")
    yield ctx
    ctx.close()


def _expected_sum(frames: np.ndarray) -> np.ndarray:
    return frames.astype(np.float64).sum(axis=0)


def test_the_registry_lists_raytiles_detectors_and_the_registered_one():
    specs = detector_specs()
    assert {"merlin", "dectris", "memory", "tcpcam"} <= set(specs)
    assert detector_spec("TcpCam") is specs["tcpcam"]  # names are case-blind, as make_connection's
    assert specs["merlin"].ports == {"data_port": 6342, "api_port": 6341}
    assert (specs["merlin"].url_port, specs["dectris"].url_port) == ("data_port", "api_port")


def test_make_connection_runs_a_registered_detector(ctx, frames):
    with TcpCamSimulator(frames) as sim:
        with ctx.make_connection("tcpcam").open(data_port=sim.data_port, timeout=10.0) as conn:
            assert isinstance(conn, LiveConnection)
            pending = conn.wait_for_acquisition(10.0)
            assert pending is not None and pending.nimages == len(frames)
            aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV, frames_per_partition=7)
            result = ctx.run_udf(dataset=aq, udf=SumUDF())
    np.testing.assert_array_equal(np.asarray(result["intensity"].data), _expected_sum(frames))
    assert aq.stats.frames == len(frames)


def test_a_url_source_runs_a_registered_detector(ctx, frames):
    with TcpCamSimulator(frames) as sim:
        source = LiveSource.parse(f"tcpcam://127.0.0.1:{sim.data_port}?timeout=5")
        assert source.params == {"data_host": "127.0.0.1", "data_port": sim.data_port, "timeout": 5}
        with source.open() as conn:
            aq = source.next_acquisition(ctx, conn, timeout=10.0, nav_shape=NAV)
            assert aq is not None
            result = ctx.run_udf(dataset=aq, udf=SumUDF())
    np.testing.assert_array_equal(np.asarray(result["intensity"].data), _expected_sum(frames))
    with pytest.raises(ConfigValidationError, match="unexpected keyword argument 'api_port'"):
        LiveSource.parse("tcpcam://127.0.0.1:1?api_port=2").open()  # its own open's parameters only


def test_the_command_line_runs_a_registered_detector(frames, tmp_path):
    parser = build_parser()
    sim_args = parser.parse_args(["live", "sim", "tcpcam", "--nav-shape", "4,6", "--data-port", "0"])
    assert (sim_args.detector, sim_args.nav_shape) == ("tcpcam", NAV)
    with TcpCamSimulator(frames) as sim:
        args = parser.parse_args(["live", "run", "tcpcam", "--data-port", str(sim.data_port), "--nav-shape", "4,6",
                                  "--tcpcam-timeout", "5", "--executor", "inline", "--timeout", "10",
                                  "--out", str(tmp_path / "cam.npz")])
        assert args.tcpcam_timeout == 5.0  # the detector's own option
        assert args.func(args) == 0
    with np.load(tmp_path / "cam.npz") as saved:
        np.testing.assert_array_equal(saved["sum_intensity"], _expected_sum(frames))
        assert bool(saved["complete"]) and int(saved["frames_dropped"]) == 0


def test_an_installed_detector_is_found_by_its_entry_point(frames, tmp_path):
    """From the shell, nothing imported by hand: a distribution that declares the package in the
    ``raytile.live.detectors`` entry-point group (written here as its dist-info) is found."""
    dist = tmp_path / "site" / "tcpcam_detector-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tcpcam-detector\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[raytile.live.detectors]\ntcpcam = _tcpcam\n")
    env_path = [str(tmp_path / "site"), str(TESTS), *sys.path]
    with TcpCamSimulator(frames) as sim:
        proc = subprocess.run([sys.executable, "-m", "raytile.cli", "live", "run", "tcpcam", "--data-port",
                               str(sim.data_port), "--nav-shape", "4,6", "--executor", "inline", "--timeout", "10",
                               "--out", str(tmp_path / "shell.npz")], capture_output=True, text=True, timeout=120,
                              env={"PYTHONPATH": ":".join(env_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(tmp_path / "shell.npz") as saved:
        np.testing.assert_array_equal(saved["sum_intensity"], _expected_sum(frames))


def test_a_second_detector_under_a_known_name_is_refused(ctx):
    with pytest.raises(ConfigValidationError, match="a detector 'merlin' is registered already"):
        register_detector(DetectorSpec(name="merlin", builder=object))
    with pytest.raises(ConfigValidationError, match="parameter 'ports' names \\['control_port'\\]"):
        DetectorSpec(name="cam", builder=object, ports={"control_port": 1})
    with pytest.raises(ConfigValidationError, match="known detectors: asi_tpx3, dectris, memory, merlin"):
        ctx.make_connection("nosuchcam")


def test_raytiles_connections_implement_the_protocol(ctx, frames):
    """wait_for_acquisition and close are part of LiveConnection; every connection class has them all."""
    from raytile.live.detectors.asi_tpx3.connection import AsiTpx3DetectorConnection
    from raytile.live.detectors.dectris.connection import DectrisDetectorConnection
    from raytile.live.detectors.memory.acquisition import MemoryConnection
    from raytile.live.detectors.merlin.connection import MerlinDetectorConnection

    members = ("wait_for_acquisition", "close", "get_active_controller", "acquisition_geometry",
               "acquisition_frames")
    for name in members:
        assert hasattr(LiveConnection, name)
    for cls in (MerlinDetectorConnection, DectrisDetectorConnection, AsiTpx3DetectorConnection):
        missing = [m for m in members if not callable(getattr(cls, m, None))]
        assert missing == [], (cls.__name__, missing)
    memory = ctx.make_connection("memory").open(data=frames.reshape(NAV + SIG))
    assert isinstance(memory, MemoryConnection) and isinstance(memory, DataSetConnection)
    assert not isinstance(memory, LiveConnection)  # its acquisition is a data set, not a stream

    class Partial:  # an old-style connection without wait_for_acquisition/close is not one
        def get_active_controller(self, **kwargs): ...
        def acquisition_geometry(self, pending): ...
        def acquisition_frames(self, *args): ...

    assert not isinstance(Partial(), LiveConnection)
