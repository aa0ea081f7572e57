"""Progress reporting: a hook for GUIs and a tqdm bar for terminals and notebooks."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

__all__ = ["ProgressReporter", "TqdmProgressReporter", "ProgressState", "ProgressTally", "replay_progress"]


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


@dataclass(frozen=True)
class ProgressState:
    """A run's progress so far; ``total_frames`` is -1 before the run started."""

    total_frames: int = -1
    total_partitions: int = 0
    frames: int = 0
    partitions: int = 0
    finished: bool = False


class ProgressTally(ProgressReporter):
    """Records a run's progress, for a reporter in another process (see :func:`replay_progress`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = ProgressState()

    @property
    def state(self) -> ProgressState:
        with self._lock:
            return self._state

    def start(self, run_id: str, total_frames: int, total_partitions: int) -> None:
        with self._lock:
            self._state = ProgressState(total_frames, total_partitions)

    def advance(self, run_id: str, frames: int) -> None:
        with self._lock:
            self._state = replace(self._state, frames=self._state.frames + frames)

    def partition_done(self, run_id: str, partitions_done: int) -> None:
        with self._lock:
            self._state = replace(self._state, partitions=partitions_done)

    def finish(self, run_id: str) -> None:
        with self._lock:
            self._state = replace(self._state, finished=True)


def replay_progress(reporter: ProgressReporter, run_id: str, seen: ProgressState, now: ProgressState) -> None:
    """Tell ``reporter`` what happened between two states of a :class:`ProgressTally`."""
    if now.total_frames < 0:
        return
    if seen.total_frames < 0:
        reporter.start(run_id, now.total_frames, now.total_partitions)
    if now.frames > seen.frames:
        reporter.advance(run_id, now.frames - seen.frames)
    if now.partitions > seen.partitions:
        reporter.partition_done(run_id, now.partitions)
    if now.finished and not seen.finished:
        reporter.finish(run_id)
