"""`Hooks`: what an acquisition does at points of its life, LiberTEM-live's interface.

Subclass :class:`Hooks` and pass it to ``LiveContext.make_acquisition(hooks=...)``:

>>> class StartScan(Hooks):
...     def on_ready_for_data(self, env):
...         scan_engine.start()                     # the detector is armed: start the scan
...     def on_determine_nav_shape(self, env):
...         return (env.nimages // 256, 256)        # passive mode: the scan's shape
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Hooks", "ReadyForDataEnv", "DetermineNavShapeEnv"]


class ReadyForDataEnv(NamedTuple):
    """Passed to :meth:`Hooks.on_ready_for_data`: ``aq``, the acquisition about to receive data."""

    aq: Any


class DetermineNavShapeEnv(NamedTuple):
    """Passed to :meth:`Hooks.on_determine_nav_shape`: the acquisition's image count and the
    ``nav_shape`` given to ``make_acquisition`` (may hold ``-1`` placeholders, or be None)."""

    nimages: int
    shape_hint: tuple[int, ...] | None


class Hooks:
    """Override the methods you need; the defaults do nothing."""

    def on_ready_for_data(self, env: ReadyForDataEnv) -> None:
        """Active mode: the detector is armed; trigger the microscope or scan engine here."""

    def on_determine_nav_shape(self, env: DetermineNavShapeEnv) -> tuple[int, ...] | None:
        """Passive mode: the nav shape for ``env.nimages`` images, or None to let raytile decide."""
        return None
