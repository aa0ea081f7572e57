"""One way for a test to stop a process it started: terminate, wait, kill if it does not go.

Tests start simulators, receivers and CLI commands as subprocesses. Each must be gone when the test
ends, passed or failed, or it leaks into the rest of the session (and holds its ports). A bare
``proc.terminate(); proc.wait(10)`` raises ``TimeoutExpired`` and leaves the process running when it
ignores SIGTERM; ``stop_process`` kills it then:

    proc = subprocess.Popen([...])
    try:
        ...
    finally:
        stop_process(proc)
"""

from __future__ import annotations

import subprocess

__all__ = ["stop_process"]


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    """Stop ``proc`` (SIGTERM, then SIGKILL after ``timeout`` s) and return its exit status.

    A process that has already exited is only reaped.
    """
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(timeout)
