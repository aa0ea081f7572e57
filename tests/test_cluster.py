"""Multi-node behaviour on a simulated cluster: a head with no CPUs and worker nodes of 1 CPU.

The scenarios run in one fresh process (tests/_cluster_scenarios.py: a
process joins one Ray cluster only, and this session holds the local one);
each compares its result with numpy on the same data:

- a run spreads over both worker nodes;
- SIGKILL of one worker process, then of two at once, mid-run;
- a node added mid-run receives partitions of the run in flight;
- a node removed mid-run, with spare CPUs elsewhere and without, on Ray's
  default health checks: the exact clean result, before Ray declares the
  node dead (the pool saw its raylet refuse a connection, and the memory
  data set was put again, so no retry pulls a copy from the lost node), and
  the next run does not wait for the lost node;
- the coordinator as an actor (``coordinator="actor"``): a run over both
  nodes and a worker SIGKILLed mid-run, exact;
- ``Context.make_local`` in another process beside the running cluster
  starts a private instance instead of failing with Ray's ValueError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# the scenarios run in one subprocess of up to 300 s, counted in the first test's setup
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(420)]

SCENARIOS = ["run_across_nodes", "sigkill_one_worker", "node_added_mid_run", "sigkill_two_workers",
             "actor_coordinator_across_nodes", "node_removed_spare_cpus", "node_removed_no_spare", "make_local_beside_a_running_cluster"]


@pytest.fixture(scope="module")
def outcomes() -> dict:
    pytest.importorskip("ray.cluster_utils")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_cluster_scenarios.py")
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300, env=env)
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            found[row["name"]] = row
    assert found, f"no scenario reported (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return found


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario(outcomes, name):
    row = outcomes.get(name)
    assert row is not None, f"scenario {name} did not run"
    assert row["ok"], row["detail"]
