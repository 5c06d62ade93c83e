"""A local Ray cluster on loopback for tests/test_ray.py, in a process of its own (Ray's clients in the test
process itself hung connecting to a cluster under pytest; a separate process keeps the test's own clean).

Started with the variables tests/test_ray.py sets (RAY_TMPDIR, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, ...), it
starts a head and the worker nodes it is asked for by Ray's cluster utilities, all on 127.0.0.1, prints one
JSON line ({"address", "nodes": {name: node id}, "addresses": [every live node's address]}) and then reads
commands, one a line: `kill NAME` (the node's processes killed, no graceful exit), and end of input: every node
shut down.

    python raycluster.py HEAD_CPUS NAME=CPUS[:ARCH_LABEL] ...
"""

from __future__ import annotations

import json
import sys

import ray
from ray.cluster_utils import Cluster


def main(argv: list[str]) -> int:
    head_cpus, specs = int(argv[0]), argv[1:]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    try:
        nodes = {"head": cluster.head_node}
        for spec in specs:
            name, _, rest = spec.partition("=")
            cpus, _, label = rest.partition(":")
            labels = {"ortbisect/arch": label} if label else {}
            # each node its own runtime environments, as on a machine of its own: nodes sharing the session's
            # folder would set up the job's environment in one place at once
            nodes[name] = cluster.add_node(num_cpus=int(cpus), node_ip_address="127.0.0.1", labels=labels,
                                           runtime_env_dir_name=f"runtime_resources-{name}")
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        addresses = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
        ray.shutdown()
        print(json.dumps({"address": cluster.address, "nodes": {k: n.node_id for k, n in nodes.items()},
                          "addresses": addresses}), flush=True)
        for line in sys.stdin:
            verb, _, name = line.strip().partition(" ")
            if verb == "kill" and name in nodes:
                cluster.remove_node(nodes.pop(name), allow_graceful=False)
                print(json.dumps({"killed": name}), flush=True)
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
