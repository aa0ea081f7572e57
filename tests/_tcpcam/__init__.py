"""TcpCam, a detector of the tests' own: frames over one TCP socket (:mod:`_tcpcam.wire`).

A whole detector outside raytile: its connection, simulator and command line, registered by the
one line below (tests/test_live_registry.py).
"""

from _tcpcam import cli
from _tcpcam.connection import TcpCamConnectionBuilder
from raytile.live.registry import DetectorSpec, register_detector

register_detector(DetectorSpec(name="tcpcam", title="TcpCam", builder=TcpCamConnectionBuilder, url_port="data_port",
                               hosts=("data_host",), ports={"data_port": 7878}, simulator=cli.SIMULATOR,
                               run_arguments=cli.run_arguments, open_arguments=cli.open_arguments))
