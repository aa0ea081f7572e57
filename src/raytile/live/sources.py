"""`LiveSource`: a detector connection written as a URL, for configs and command lines.

    merlin://HOST:DATA_PORT?api_port=6341&timeout=10     Merlin (api_host defaults to HOST)
    dectris://HOST:API_PORT?data_port=9999                DECTRIS (data_host defaults to HOST)

The scheme is a registered detector's name, and its
:class:`~raytile.live.registry.DetectorSpec` says which ``open`` parameter the
port is (``url_port``) and which the host fills (``hosts``).

Query fields are the parameters of the detector's ``open(...)`` (ints and
floats as numbers, ``true``/``false``), and raytile's ``preprocess`` (the
path of a pipeline YAML run on the workers in front of the UDFs, see
:class:`~raytile.pipeline.frame_stacks.FrameStackPipeline`) with
``preprocess_input``/``preprocess_output`` (its streams). ``raytile serve --live`` takes
these; a source opens its connection with :meth:`LiveSource.open` and makes
each acquisition's data set with :meth:`LiveSource.next_acquisition`.

>>> src = LiveSource.parse("merlin://127.0.0.1:6342?api_port=6341")
>>> src.detector, src.params["data_port"], src.params["api_port"]
('merlin', 6342, 6341)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlsplit

from raytile.common.errors import ConfigValidationError
from raytile.io.dataset import DataSet
from raytile.live.api import make_acquisition_on
from raytile.live.registry import detector_spec, detector_specs

__all__ = ["LiveSource"]


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclasses.dataclass(frozen=True)
class LiveSource:
    """A detector type and the parameters of its connection's ``open(...)``; picklable."""

    detector: str
    params: Mapping[str, Any]
    url: str = ""
    #: A pipeline YAML applied to each frame stack on the workers (None: none), and its streams.
    preprocess: str | None = None
    preprocess_input: str | None = None
    preprocess_output: str | None = None

    @classmethod
    def parse(cls, url: str) -> "LiveSource":
        """From ``detector://host:port?field=value&...``; ConfigValidationError naming what is wrong."""
        if not isinstance(url, str):
            raise ConfigValidationError(f"live source: expected a URL like merlin://host:6342, got {url!r}")
        scheme, _, rest = url.partition("://")  # a detector's name may hold "_" (asi_tpx3), which
        parts = urlsplit(f"live://{rest}")    # urlsplit does not take as a scheme
        detector = scheme.lower()
        specs = detector_specs()
        if detector not in specs:
            raise ConfigValidationError(f"live source {url!r}: unknown detector {scheme!r} "
                                        f"(known: {', '.join(specs)})")
        spec = specs[detector]
        try:
            port = parts.port
        except ValueError:
            raise ConfigValidationError(f"live source {url!r}: the port is not a TCP port") from None
        if not parts.hostname:
            raise ConfigValidationError(f"live source {url!r}: needs a host, e.g. {detector}://127.0.0.1:6342")
        params: dict[str, Any] = {h: parts.hostname for h in spec.hosts}
        if port is not None:
            if spec.url_port is None:
                raise ConfigValidationError(f"live source {url!r}: a {spec.title} source takes no port")
            params[spec.url_port] = port
        pre: dict[str, str] = {}
        for key, text in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
            if key in ("preprocess", "preprocess_input", "preprocess_output"):
                pre[key] = text
            else:
                params[key] = _value(text)
        source = cls(detector, params, url, **pre)
        source.frame_pipeline()  # a bad pipeline fails here, where the source is configured
        return source

    def frame_pipeline(self) -> Any:
        """The ``preprocess`` pipeline as a FrameStackPipeline, or None."""
        if self.preprocess is None:
            return None
        from raytile.pipeline.frame_stacks import FrameStackPipeline

        return FrameStackPipeline.from_yaml(self.preprocess, self.preprocess_input, self.preprocess_output)

    def open(self) -> Any:
        """The open connection (``LiveContext.make_connection(detector).open(**params)``)."""
        try:
            return detector_spec(self.detector, "live source: detector").builder().open(**self.params)
        except TypeError as e:  # an unknown query field
            raise ConfigValidationError(f"live source {self.url!r}: {e}") from None

    def next_acquisition(self, ctx: Any, conn: Any, timeout: float, nav_shape: tuple[int, ...] | None = None,
                         frames_per_partition: int | None = None, preprocess: Any = None) -> DataSet | None:
        """The next acquisition on ``conn`` (passive: something else starts it) as a data set of ``ctx``,
        or None if none started within ``timeout`` seconds."""
        pending = conn.wait_for_acquisition(timeout if math.isfinite(timeout) else None)
        if pending is None:
            return None
        return make_acquisition_on(ctx, conn=conn, pending_aq=pending, nav_shape=nav_shape,
                                   frames_per_partition=frames_per_partition,
                                   preprocess=preprocess if preprocess is not None else self.frame_pipeline())

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detector": self.detector, "url": self.url}
        pre = self.frame_pipeline()
        if pre is not None:
            out["preprocess"] = pre.describe()
        return out
