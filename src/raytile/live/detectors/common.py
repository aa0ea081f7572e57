"""``libertem_live.detectors.common`` at its ported path: what the detectors share.

LiberTEM-live's scripts and test helpers import from here: :class:`UndeadException`
(a thread that did not stop when asked),
:func:`cleanup_handle_dir` (removes a shared-memory socket file and its folder) and
:func:`set_thread_name`. The thread base classes of LiberTEM-live's simulators are
not here: raytile's simulators (:mod:`raytile.live.detectors.merlin.sim`,
:mod:`raytile.live.detectors.dectris.sim`) are built otherwise.
"""

from __future__ import annotations

import pathlib
import threading

from raytile.common.errors import UndeadException

__all__ = ["UndeadException", "cleanup_handle_dir", "set_thread_name"]


def cleanup_handle_dir(path: str | pathlib.Path | None) -> None:
    """Remove the socket file ``path`` (if it exists yet) and then its folder, if it is empty; None: nothing.

    LiberTEM-live keeps a shared-memory handle as a socket file in a temporary folder of its own.
    """
    if path is None:
        return
    p = pathlib.Path(path)
    if p.exists():
        p.unlink()
    if p.parent.exists():
        p.parent.rmdir()


def set_thread_name(name: str) -> None:
    """Name the current thread (Python's name; profilers and ``threading.enumerate`` show it)."""
    threading.current_thread().name = str(name)
