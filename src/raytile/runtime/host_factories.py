"""How ``Context(executor=...)`` finds its run host: factories registered by name.

The runtime layer does not import the layers above it (the Ray actors live in
:mod:`raytile.actors`). Instead a factory is registered per ``(executor,
coordinator)`` pair, as a callable or as a ``"module:attribute"`` string
resolved on first use (so registering costs no import); the package that
provides it registers it (:mod:`raytile.actors` registers Ray's, the
in-process one is registered here). A factory takes the Context's executor
keyword arguments and returns a :class:`~raytile.runtime.host.RunHost` or an
:class:`~raytile.runtime.executor.Executor` (then coordinated in this
process: :class:`~raytile.runtime.host.DriverHost`).

>>> register_host_factory("inline", "driver", "raytile.runtime.inline:InlineExecutor")
>>> make_host("inline", "driver").coordinator
'driver'
"""

from __future__ import annotations

import importlib
import operator
from typing import Any, Callable, Union

from raytile.common.errors import ConfigValidationError
from raytile.runtime.executor import Executor
from raytile.runtime.host import DriverHost, RunHost

__all__ = ["register_host_factory", "make_host", "HostFactory"]

#: A factory: the Context's executor keyword arguments -> a RunHost, or an Executor to coordinate here.
HostFactory = Callable[..., Union[RunHost, Executor]]

_FACTORIES: dict[tuple[str, str], Union[str, HostFactory]] = {}


def register_host_factory(executor: str, coordinator: str, factory: Union[str, HostFactory]) -> None:
    """Make ``Context(executor=executor)`` with runs coordinated at ``coordinator`` (``"driver"`` or
    ``"actor"``) use ``factory`` (a callable, or ``"module:attribute"`` imported on first use)."""
    _FACTORIES[(executor, coordinator)] = factory


def _resolve(target: str) -> HostFactory:
    module, _, attribute = target.partition(":")
    return operator.attrgetter(attribute)(importlib.import_module(module))


def make_host(executor: str, coordinator: str, **executor_kwargs: object) -> RunHost:
    """The run host of a Context with ``executor`` and ``coordinator``, made by the registered factory.

    ImportError propagates (a provider whose module cannot be imported: the CLI falls back to inline);
    an unknown pair raises ConfigValidationError naming the known ones.
    """
    factory = _FACTORIES.get((executor, coordinator))
    if factory is None:
        known = ", ".join(f"executor={e!r} coordinator={c!r}" for e, c in sorted(_FACTORIES))
        raise ConfigValidationError(f"no executor {executor!r} with coordinator={coordinator!r}; known: {known}")
    if isinstance(factory, str):
        factory = _resolve(factory)
    made = factory(**executor_kwargs)
    return made if isinstance(made, RunHost) else DriverHost(made)


def _inline(**_ignored: Any) -> Executor:
    from raytile.runtime.inline import InlineExecutor

    return InlineExecutor()


register_host_factory("inline", "driver", _inline)
