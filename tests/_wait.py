"""One way for a test to wait for a condition: poll a predicate until it holds or a deadline passes.

Tests wait for effects that happen on other threads, processes or nodes (a replacement actor, a
released object, a pipeline step). A bare ``time.sleep`` either wastes time or is too short on a
busy machine; a hand-written deadline loop easily forgets to fail when the deadline passes.
``wait_until`` returns the predicate's first truthy value and fails the test with the given message
(and the last value seen) when the timeout passes:

    wait_until(lambda: len(ex.actors) >= 2, timeout=60, what="the pool replaced the killed actor")
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, *, interval: float = 0.05, what: str = "") -> T:
    """Call ``predicate`` every ``interval`` s until it returns a truthy value; return that value.

    Raises AssertionError naming ``what`` (or the predicate) and the last value when ``timeout`` s pass.
    The predicate is called at least once, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            name = what or getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"timed out after {timeout} s waiting for {name} (last value: {value!r})")
        time.sleep(interval)
