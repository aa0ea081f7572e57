"""`TaskMessage`: what the driver sends a worker actor for one partition.

The message names the values the task needs by their cache keys, not the
values themselves: the run's parameters by ``(run_id, version)`` and an
in-memory partition's frames by the hex of their object ref. A worker that
lacks a value gets it shipped beside the message the first time (see
:mod:`raytile.actors.cache`). The message travels packed (:meth:`TaskMessage.packed`:
one ``bytes`` argument, pickled by the C pickler), or as it is when it holds
Ray object refs that Ray must track.
"""

from __future__ import annotations

from dataclasses import dataclass

from raytile.actors.cache import pack, unpack
from raytile.runtime.params import PartitionTask

__all__ = ["TaskMessage"]


@dataclass(frozen=True)
class TaskMessage:
    """One partition task and the keys of the cached values it needs."""

    #: The task, without the frames the driver ships apart (shared in-memory frames, a stream's frames).
    task: PartitionTask
    #: The run's parameters version: ``(run_id, version)``.
    params_key: tuple[str, int]
    #: The hex of the object ref of an in-memory partition's frames; None if it carries or reads its own.
    data_key: str | None = None

    def packed(self) -> bytes | TaskMessage:
        """The message as ``run_task`` receives it: pickled bytes, or itself if it holds Ray refs."""
        data = pack(self)
        return self if data is None else data

    @staticmethod
    def unpacked(message: bytes | TaskMessage) -> TaskMessage:
        """The message :meth:`packed` made; raises what unpickling raises if it cannot be read."""
        opened = unpack(message) if isinstance(message, bytes) else message
        if not isinstance(opened, TaskMessage):
            raise TypeError(f"a task message was expected, got {type(opened).__name__}")
        return opened
