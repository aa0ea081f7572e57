"""`DetectorSpec`: a live detector, registered once by its own package and read everywhere.

``LiveContext.make_connection`` takes its connection builder from here,
:class:`~raytile.live.sources.LiveSource` what a URL's host and port mean, and
``raytile live sim|run`` the default ports, the simulator, the detector's own
command-line arguments and the modules of the extra it needs. A detector is one
package whose ``__init__.py`` registers it with one line::

    register_detector(DetectorSpec(name="merlin", title="Merlin", builder=MerlinConnectionBuilder,
                                   url_port="data_port", ports={"data_port": 6342, "api_port": 6341}, ...))

raytile's own detectors (the packages under :mod:`raytile.live.detectors`) and
those installed packages declare in the entry-point group
``raytile.live.detectors`` are found on the first look-up, each package
imported once; any other registers when its package is imported
(docs/writing_detectors.md).

>>> detector_spec("merlin").ports
{'data_port': 6342, 'api_port': 6341}
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import pkgutil
import threading
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.live.connection import ConnectionBuilder

__all__ = ["DetectorSpec", "SimulatorSpec", "Simulator", "register_detector", "detector_spec", "detector_specs",
           "CLI_HOSTS", "CLI_PORTS", "ENTRY_POINTS"]

#: The hosts and ports ``raytile live run`` has options for (``--data-host``, ``--api-port`` ...): a
#: detector's ``hosts`` and ``ports`` are among them.
CLI_HOSTS = ("api_host", "data_host")
CLI_PORTS = ("data_port", "api_port")


class Simulator(Protocol):
    """What ``raytile live sim`` needs of a simulator: a context manager that serves while it is
    entered, its ports (bound by then) and what it sent."""

    data_port: int
    api_port: int
    frames_sent: int

    @property
    def acquisitions_sent(self) -> int: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A detector without options of its own."""


def _no_open_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {}


def _no_modules(args: argparse.Namespace) -> tuple[str, ...]:
    return ()


@dataclasses.dataclass(frozen=True)
class SimulatorSpec:
    """``raytile live sim <name>``: the detector's simulator on loopback, replaying synthetic frames
    (seed 0) or a data set's.

    ``make(args, frames, nav_shape, n)`` builds the simulator (not entered yet) for the parsed
    command line, the frames to send in a cycle (an array, or a file's
    :class:`~raytile.io.frame_blocks.SequentialFrames`) and the scan's shape and frame count;
    ``frame_dtype(args)`` is the synthetic frames' dtype and ``synthetic(rng, size, args)`` draws
    ``size`` of their values; ``describe(args, dtype)`` is the detail of the line it prints first,
    ``api`` the name of its ``api_port`` there (None: it has none); ``file_dtype(ds, path)`` the dtype a replayed file's
    frames are sent as (None: their own), checking they fit.
    """

    make: Callable[[argparse.Namespace, Any, tuple[int, ...], int], Simulator]
    frame_dtype: Callable[[argparse.Namespace], np.dtype]
    synthetic: Callable[[np.random.Generator, tuple[int, ...], argparse.Namespace], np.ndarray]
    describe: Callable[[argparse.Namespace, np.dtype], str]
    api: str | None = "control"
    file_dtype: Callable[[Any, str], np.dtype | None] | None = None


@dataclasses.dataclass(frozen=True)
class DetectorSpec:
    """A live detector: what every part of raytile needs to know of it.

    - ``name``: ``make_connection(name)``, the URL scheme ``name://host:port``, ``raytile live run name``;
      ``title``: its name in messages (``"DECTRIS"``).
    - ``builder``: ``builder()`` has ``open(**params)``, which returns the open connection (a
      :class:`~raytile.live.connection.LiveConnection`, or a
      :class:`~raytile.live.connection.DataSetConnection`).
    - ``url_port``: the ``open`` parameter a URL's port sets (None: a URL takes no port); ``hosts``:
      those its host sets (and ``raytile live run``'s ``--data-host``/``--api-host``).
    - ``ports``: ``raytile live run|sim``'s default ports, by ``open`` parameter (``data_port``,
      ``api_port``); empty: the detector has no command line.
    - ``simulator``: ``raytile live sim name`` (None: none).
    - ``sim_arguments``/``run_arguments``: add the detector's own options to those commands' parser
      (shared by all detectors: say whose an option is in its help); ``open_arguments(args)``: the
      ``open`` parameters ``raytile live run`` takes from them.
    - ``extra(args)``: the modules of the ``live`` extra the command needs, checked before it starts
      with a message that says what to install.
    """

    name: str
    builder: Callable[[], ConnectionBuilder]
    url_port: str | None = None
    title: str = ""
    hosts: tuple[str, ...] = CLI_HOSTS
    ports: Mapping[str, int] = dataclasses.field(default_factory=dict)
    simulator: SimulatorSpec | None = None
    sim_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    run_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    open_arguments: Callable[[argparse.Namespace], dict[str, Any]] = _no_open_arguments
    extra: Callable[[argparse.Namespace], tuple[str, ...]] = _no_modules

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name != self.name.lower():
            raise ConfigValidationError(f"DetectorSpec: parameter 'name' must be a lower-case identifier (a URL "
                                        f"scheme), got {self.name!r}")
        if not callable(self.builder):
            raise ConfigValidationError(f"DetectorSpec {self.name!r}: parameter 'builder' must be callable, "
                                        f"got {self.builder!r}")
        for field, given, known in (("ports", tuple(self.ports), CLI_PORTS), ("hosts", self.hosts, CLI_HOSTS)):
            unknown = [p for p in given if p not in known]
            if unknown:
                raise ConfigValidationError(f"DetectorSpec {self.name!r}: parameter {field!r} names {unknown}; "
                                            f"the command line has {known}")
        if not self.title:
            object.__setattr__(self, "title", self.name)

    def default_port_help(self, port: str) -> str:
        """``"6342 Merlin"``: this detector's default ``port`` for a command-line help text."""
        return f"{self.ports[port]} {self.title}" if port in self.ports else ""


_SPECS: dict[str, DetectorSpec] = {}
_LOCK = threading.RLock()
_FOUND = False


def register_detector(spec: DetectorSpec) -> DetectorSpec:
    """Register ``spec`` under ``spec.name`` (one line in the detector package's ``__init__.py``);
    another spec already under that name raises ConfigValidationError. Returns ``spec``."""
    if not isinstance(spec, DetectorSpec):
        raise ConfigValidationError(f"register_detector: parameter 'spec' must be a DetectorSpec, got "
                                    f"{type(spec).__name__}")
    with _LOCK:
        known = _SPECS.get(spec.name)
        if known is not None and known != spec:
            raise ConfigValidationError(f"register_detector: a detector {spec.name!r} is registered already "
                                        f"(builder {known.builder!r})")
        _SPECS[spec.name] = spec
    return spec


#: The entry-point group of detector packages installed beside raytile: ``name = "package"``.
ENTRY_POINTS = "raytile.live.detectors"


def _find_own() -> None:
    """Import raytile's detector packages, and those other distributions declare in the
    :data:`ENTRY_POINTS` group, once: each registers itself."""
    global _FOUND
    with _LOCK:
        if _FOUND:
            return
        _FOUND = True
        import raytile.live.detectors as detectors

        for info in pkgutil.iter_modules(detectors.__path__):
            if info.ispkg and info.name != "base":
                importlib.import_module(f"{detectors.__name__}.{info.name}")
        for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
            entry.load()


def detector_specs() -> dict[str, DetectorSpec]:
    """Every registered detector by name, sorted."""
    _find_own()
    with _LOCK:
        return {name: _SPECS[name] for name in sorted(_SPECS)}


def detector_spec(name: str, what: str = "detector") -> DetectorSpec:
    """The detector registered as ``name`` (any case); ConfigValidationError naming ``what`` and the
    known detectors if there is none."""
    specs = detector_specs()
    spec = specs.get(str(name).lower())
    if spec is None:
        raise ConfigValidationError(f"{what} {name!r} is not known; known detectors: {', '.join(specs)}")
    return spec
