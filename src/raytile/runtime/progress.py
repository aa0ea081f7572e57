"""Progress reporting: a hook for GUIs and a tqdm bar for terminals and notebooks."""

from __future__ import annotations

import threading

__all__ = ["ProgressReporter", "TqdmProgressReporter"]


class ProgressReporter:
    """Receives a run's progress; subclass it to drive a GUI.

    ``start`` once with the number of frames to process, ``advance`` for
    every finished tile (frames done since the last call), ``finish`` once.
    Calls come from the coordinator's thread.
    """

    def start(self, run_id: str, total_frames: int, total_partitions: int) -> None:
        pass

    def advance(self, run_id: str, frames: int) -> None:
        pass

    def partition_done(self, run_id: str, partitions_done: int) -> None:
        pass

    def finish(self, run_id: str) -> None:
        pass


class TqdmProgressReporter(ProgressReporter):
    """A tqdm bar over frames, fed per tile; closes at the end of the run."""

    def __init__(self, desc: str = "raytile"):
        self._desc = desc
        self._bar = None
        self._lock = threading.Lock()

    def start(self, run_id: str, total_frames: int, total_partitions: int) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total_frames, desc=self._desc, unit="frame", unit_scale=True)

    def advance(self, run_id: str, frames: int) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.update(frames)

    def partition_done(self, run_id: str, partitions_done: int) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.set_postfix(partitions=partitions_done, refresh=False)

    def finish(self, run_id: str) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
