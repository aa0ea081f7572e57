"""`RayletWatch`: nodes whose raylet is gone, seen in a second instead of Ray's health checks' 10-30 s.

When a node's raylet dies (the node is killed, its raylet crashes), Ray's
control store marks the node dead only after its health checks fail several
times in a row (Ray's defaults: 15 s or more; measured with
benchmarks/probe_node_loss.py: 10-32 s), and until then tasks sent to the
node's workers wait. The pool asks sooner: a raylet listens on its node
manager port for as long as it lives, so a refused TCP connection to that
port means it is gone.

A refusal counts only for a raylet that accepted a connection before: from a
driver that cannot reach the cluster's nodes directly (Ray Client, a
firewall that rejects) every connection may be refused, and no node is
called gone for that. A connection that times out (a machine that is off
answers nothing) says nothing either: Ray's health checks decide then, and
that node is not tried again (a pool refresh never waits on it twice).

>>> watch = RayletWatch()
>>> watch.gone([("node-a", "10.0.0.5", 40123)])  # accepted: remembered as reachable
set()
>>> watch.gone([("node-a", "10.0.0.5", 40123)])  # refused now (its raylet died)
{'node-a'}
"""

from __future__ import annotations

import socket
from typing import Iterable

__all__ = ["RayletWatch", "CONNECT_TIMEOUT_S"]

#: How long one connection attempt may take (a reachable raylet accepts in well under a millisecond).
CONNECT_TIMEOUT_S = 0.2


class RayletWatch:
    """Remembers which raylets accepted a connection, and names those of them that now refuse one."""

    def __init__(self, timeout: float = CONNECT_TIMEOUT_S):
        self.timeout = timeout
        self._reachable: set[str] = set()
        self._gone: set[str] = set()
        self._silent: set[str] = set()  # connections timed out or failed otherwise: not tried again

    def gone(self, raylets: Iterable[tuple[str, str, int]]) -> set[str]:
        """Node ids, of ``(node_id, host, port)``, whose raylet accepted a connection before and refuses
        one now (or did so at an earlier call: a raylet that comes back has a new node id). Nodes
        not named are forgotten."""
        raylets = list(raylets)
        named = {node_id for node_id, _, _ in raylets}
        self._reachable &= named
        self._gone &= named
        self._silent &= named
        for node_id, host, port in raylets:
            if node_id in self._gone or node_id in self._silent or not host or not port:
                continue
            try:
                with socket.create_connection((host, port), timeout=self.timeout):
                    self._reachable.add(node_id)
            except ConnectionRefusedError:
                if node_id in self._reachable:
                    self._gone.add(node_id)
            except OSError:  # timed out, unreachable: not evidence either way
                if node_id not in self._reachable:
                    self._silent.add(node_id)
        return set(self._gone)
