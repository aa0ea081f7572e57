"""`ReadLeases`: the files a memory-mapped read is reading, held still while it reads them.

Why. A tile of the mmap backend is a view of the file's pages; if the file is
truncated while a view is read, the pages past the new end vanish and the
reading thread gets SIGBUS: the process dies, with no message. On Ray that
is a worker, which is replaced (the task runs again and finds the file too
short); with the inline executor it is the user's process (a notebook
kernel). A vanished page cannot be survived in-process, so it must not
vanish while it is read.

How. A Linux *read lease* (``fcntl(F_SETLEASE, F_RDLCK)``) on a file makes
the kernel hold back any other opener for writing and any truncation of it
until the lease holder lets go (at most ``/proc/sys/fs/lease-break-time``,
45 s by default), and tells the holder: ``F_GETLEASE`` stops saying
``F_RDLCK``. The mmap backend leases each file of a partition when it first
maps it, checks the file's size under the lease, and asks
:meth:`ReadLeases.check` before it hands out each block of tiles: the
consumer is done with the block before, so no view is being read then. A
broken lease is let go at once (the writer goes on) and the read ends with
a :class:`~raytile.common.errors.DataSetException` naming the file: "too
short" (as a Ray worker reports it after its replacement) if the file
shrank meanwhile, else "opened for writing". The break is signalled with
``SIGURG`` (``F_SETSIG``), whose default action is to be ignored (the
default ``SIGIO`` would end the process).

Cost: six system calls per file and partition and one per block of tiles
(microseconds; see benchmarks/bench_truncation.py).

Where no lease can be taken (not Linux, a file of another user without
``CAP_LEASE``, a file system without leases such as NFS, a file open for
writing somewhere), :func:`unleased_policy` says what the backend does:
``"read"`` (the default) reads those files with ``preadv`` into memory of
its own, which cannot fault; ``"map"`` maps them unguarded, for processes
whose death is survived (Ray's worker actors set it, see
actors/worker.py).
"""

from __future__ import annotations

import os
import signal
import time

from raytile.common.errors import DataSetException

try:
    import fcntl

    _LEASES = hasattr(fcntl, "F_SETLEASE") and hasattr(fcntl, "F_SETSIG")
except ImportError:  # not POSIX: no leases, and nothing below calls fcntl (every lease starts in take)
    _LEASES = False

__all__ = ["ReadLeases", "unleased_policy", "set_unleased_policy", "UNLEASED_POLICIES"]

#: What the mmap backend does with a file it cannot lease (see the module doc).
UNLEASED_POLICIES = ("read", "map")
_policy = "read"
#: After a broken lease, how long to wait for the writer's truncation (to name it as such).
SETTLE_S = 1.0


def unleased_policy() -> str:
    """``"read"`` or ``"map"``: how this process reads files it cannot lease."""
    return _policy


def set_unleased_policy(policy: str) -> None:
    """Set :func:`unleased_policy` for this process (``"map"`` where a SIGBUS only costs a retry)."""
    global _policy
    if policy not in UNLEASED_POLICIES:
        raise ValueError(f"policy must be one of {UNLEASED_POLICIES}, got {policy!r}")
    _policy = policy


class ReadLeases:
    """Read leases on the files one read job maps, by file index; :meth:`release` them at its end.

    >>> leases = ReadLeases()
    >>> leases.take(0, path)       # True: leased, its size checked under the lease with size(0)
    >>> leases.check()             # before each block: raises DataSetException after a break
    >>> leases.release()
    """

    def __init__(self) -> None:
        self._held: dict[int, tuple[int, str, int]] = {}  # file index -> (fd, path, bytes needed)

    def take(self, f: int, path: str) -> bool:
        """Lease file ``f`` at ``path``; False if that is not possible here (see the module doc)."""
        if f in self._held:
            return True
        if not _LEASES:
            return False
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise DataSetException(f"{path}: cannot open: {e}") from None
        try:
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError:  # EACCES (not the owner), EAGAIN (open for writing), EINVAL (no leases here)
            os.close(fd)
            return False
        self._held[f] = (fd, path, 0)
        return True

    def size(self, f: int) -> int:
        """The size of leased file ``f`` now (it cannot shrink while the lease holds)."""
        return os.fstat(self._held[f][0]).st_size

    def need(self, f: int, nbytes: int) -> None:
        """Note that the read needs the first ``nbytes`` of leased file ``f`` (named if it shrinks)."""
        fd, path, _ = self._held[f]
        self._held[f] = (fd, path, nbytes)

    def check(self) -> None:
        """Raise DataSetException if another process began to write or truncate a leased file; the
        leases are let go first, so that it goes on."""
        for fd, path, need in self._held.values():
            if fcntl.fcntl(fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK:
                self._broken(fd, path, need)

    def _broken(self, fd: int, path: str, need: int) -> None:
        self.release(keep=fd)
        deadline = time.monotonic() + SETTLE_S
        size = os.fstat(fd).st_size
        while size >= need and time.monotonic() < deadline:  # the writer may truncate right after its open
            time.sleep(0.01)
            size = os.fstat(fd).st_size
        os.close(fd)
        if size < need:
            raise DataSetException(f"{path}: file is too short: the read needs {need} bytes, the file has {size} "
                                   "(truncated while it was read?)")
        raise DataSetException(f"{path}: another process opened the file for writing while it was read; "
                               "run again once it is written")

    def release(self, keep: int | None = None) -> None:
        """Let go of every lease and close the files (but the descriptor ``keep``, whose lease goes)."""
        held, self._held = self._held, {}
        for fd, _, _ in held.values():
            try:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            except OSError:
                pass
            if fd != keep:
                os.close(fd)
