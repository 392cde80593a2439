"""Run as a script by the tests (the ``cluster_check`` fixture): a local two-node Ray
cluster (ray.cluster_utils.Cluster) with a world's hosts spread over both nodes, then a
runbook comparison run as tasks on that cluster; prints JSON."""
import json
import sys
import time

import ray
from ray.cluster_utils import Cluster

from orchestrator.batch.comparison import compare
from orchestrator.hosting.inprocess import InProcessHost
from orchestrator.hosting.ray_hosting import RayHost
from orchestrator.runs.runner import RunSpec, prepare


#: the comparison run on the cluster; tests/test_compare.py runs it one by one and compares
COMPARE = {"playbook": "tests/playbooks/mini_loop.yaml.j2", "runbooks": ["none", "tests/playbooks/fix_early.yaml"],
           "seeds": 3, "sweep": {"clients": [1000, 2000]}}


def _schedulable_everywhere(deadline: float) -> None:
    """One task pinned to each node, until every node has run one. A node is "Alive" in
    ray.nodes() before the head's scheduler sees its resources, and until then a soft node
    affinity (what RayHost(spread=True) asks, so that a host can go elsewhere) quietly
    falls back on the head (a CI run got every host on one node), and a hard one fails at
    once (unschedulable): hence the retries."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, max_retries=0)
    def node_id():
        return ray.get_runtime_context().get_node_id()

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    while True:
        pinned = [node_id.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                  for n in nodes]
        try:
            if sorted(ray.get(pinned, timeout=30)) == nodes:
                return
        except Exception:  # (unschedulable yet, or slow)
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"pinned tasks did not run on each of the nodes {nodes}")
        time.sleep(0.5)


def main(ticks: int) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()  # hosts are dealt only over the nodes alive when they are made
    ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR")
    deadline = time.monotonic() + 60
    while sum(n["Alive"] for n in ray.nodes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        _schedulable_everywhere(time.monotonic() + 120)
        _, _, _, plan = prepare(RunSpec(runbook="protect-early", seed=2, duration=ticks))
        clean, hosted = InProcessHost(plan), RayHost(plan, placement="kind", spread=True)
        try:
            same = all(clean.step().metrics == hosted.step().metrics for _ in range(ticks))
            nodes = sorted({w["node"] for w in hosted.where.values()})
        finally:
            hosted.close()
        table = compare(COMPARE["playbook"], COMPARE["runbooks"], COMPARE["seeds"], COMPARE["sweep"], address=cluster.address)
        print(json.dumps({"same": same, "host_nodes": len(nodes), "cluster_nodes": len(ray.nodes()),
                          "hosts": len(hosted.where), "compare": table.to_csv(index=False)}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]))
