"""Warnings a task gives on a Ray worker, carried to the process that coordinates the run.

A UDF's ``warnings.warn`` (a ``RuntimeWarning`` of numpy, LiberTEM's
``UseDiscouragedWarning``, a user's own) goes to the worker's log on Ray,
where nobody reads it; inline it reaches the caller. So a worker records
the warnings its task gave (:func:`recording`), its :class:`Reply` carries
them (:data:`WarningRecord`, at most :data:`MAX_RECORDS` different ones a
task), and the executor gives them again where the run is coordinated
(:func:`warn_again`), under that process's warning filters: with Python's
defaults once per location, in ``pytest.warns`` every time.

>>> with recording() as records:
...     warnings.warn("odd frame", UserWarning)
>>> records[0][:2]
(<class 'UserWarning'>, 'odd frame')
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator, Sequence

__all__ = ["WarningRecord", "MAX_RECORDS", "recording", "warn_again"]

#: ``(category, message, filename, lineno)`` of one warning a task gave.
WarningRecord = tuple[type[Warning], str, str, int]
#: Different warnings one task carries back at most (a warning per frame stays one record).
MAX_RECORDS = 16


@contextlib.contextmanager
def recording() -> Iterator[list[WarningRecord]]:
    """Record the warnings given in the block (every one: the worker's own filters would show each
    location once a process, and a long-lived worker runs many tasks); the list holds the different
    ones, at most :data:`MAX_RECORDS`."""
    records: list[WarningRecord] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield records
        finally:
            seen: set[WarningRecord] = set()
            for w in caught:
                record = (w.category, str(w.message), w.filename, w.lineno)
                if record not in seen and len(records) < MAX_RECORDS:
                    seen.add(record)
                    records.append(record)


def warn_again(records: Sequence[WarningRecord], registry: dict) -> None:
    """Give each recorded warning in this process, at its original location; ``registry`` (one per
    executor) is where Python notes the locations shown once."""
    for category, message, filename, lineno in records:
        warnings.warn_explicit(message, category, filename, lineno, registry=registry)
