"""The optional methods of a UDF as typing protocols, at LiberTEM's names (``libertem.udf.UDFFrameMixin`` ...).

A UDF implements one of ``process_tile``, ``process_frame`` or
``process_partition`` and, optionally, ``preprocess`` and ``postprocess``
(see :class:`~raytile.udf.base.UDF`). These protocols name each of them, for
type annotations, for ``isinstance`` checks and as bases a ported UDF may
list (``class MyUDF(UDF, UDFFrameMixin)``). They are ``runtime_checkable``:
an instance matches when it has the method; :class:`~raytile.udf.base.UDF`
leaves the methods it does not implement as ``None``, which Python's
protocol check treats as absent.

>>> from raytile.udf import UDF, UDFFrameMixin, UDFTileMixin
>>> class PerFrame(UDF):
...     def process_frame(self, frame):
...         pass
>>> isinstance(PerFrame(), UDFFrameMixin), isinstance(PerFrame(), UDFTileMixin)
(True, False)

Listed as a base, a protocol's method raises ``NotImplementedError`` until
the UDF defines it. Put ``UDF`` first among the bases so that the methods a
UDF does not define stay ``None`` (as the runtime expects).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["UDFFrameMixin", "UDFTileMixin", "UDFPartitionMixin", "UDFPreprocessMixin", "UDFPostprocessMixin"]


@runtime_checkable
class UDFFrameMixin(Protocol):
    """A UDF that processes one frame at a time: ``frame`` has the data set's signal shape."""

    def process_frame(self, frame: Any) -> None:
        raise NotImplementedError


@runtime_checkable
class UDFTileMixin(Protocol):
    """A UDF that processes tiles: ``tile`` is ``(frames, *signal region)``, see ``self.meta.slice``."""

    def process_tile(self, tile: Any) -> None:
        raise NotImplementedError


@runtime_checkable
class UDFPartitionMixin(Protocol):
    """A UDF that processes a whole partition at once: ``partition`` is ``(frames, *sig)``."""

    def process_partition(self, partition: Any) -> None:
        raise NotImplementedError


@runtime_checkable
class UDFPreprocessMixin(Protocol):
    """A UDF with ``preprocess``: runs once on the main node before any task, and in each partition
    before its data, with ``self.results`` viewing the whole buffers (e.g. to initialise them)."""

    def preprocess(self) -> None:
        raise NotImplementedError


@runtime_checkable
class UDFPostprocessMixin(Protocol):
    """A UDF with ``postprocess``: runs in each partition after its data, before the results go back."""

    def postprocess(self) -> None:
        raise NotImplementedError
