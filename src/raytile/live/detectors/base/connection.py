"""``libertem_live.detectors.base.connection`` at its ported path: the base classes of a detector connection.

:class:`PendingAcquisition` is what ``conn.wait_for_acquisition`` returns (passive mode): its image
count and, if the detector knows it, its nav shape. A class of the user's (a mock, a detector of their
own) subclasses it and defines ``nimages``; ``nav_shape`` defaults to None (unknown), as in
LiberTEM-live. raytile's own pending acquisitions (Merlin, DECTRIS, memory) are instances of it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PendingAcquisition", "DetectorConnection"]


class PendingAcquisition:
    """An acquisition the detector announced; pass it to ``LiveContext.make_acquisition(pending_aq=...)``."""

    @property
    def nimages(self) -> int:
        """The number of images the acquisition will send (0: continuous)."""
        raise NotImplementedError(f"{type(self).__name__} must define nimages")

    @property
    def nav_shape(self) -> tuple[int, ...] | None:
        """The scan shape, if the detector knows it; None otherwise."""
        return None


class DetectorConnection:
    """Base class of a detector connection: ``wait_for_acquisition``, ``close`` and the context manager."""

    def wait_for_acquisition(self, timeout: float | None = None) -> PendingAcquisition | None:
        """The next acquisition armed by someone else, or None after ``timeout`` seconds (None: wait)."""
        raise NotImplementedError(f"{type(self).__name__} must define wait_for_acquisition")

    def close(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define close")

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
