"""One Ray worker node joined to a cluster on 127.0.0.1, for tests/test_ray_nodes.py: run by the Python the node
is to have (a bare environment holding only Ray, or an aarch64 Python), it imports Ray and the standard library
alone.

It does what `ray start --address ADDRESS --node-ip-address 127.0.0.1` does, which Ray refuses under the
variable that keeps every node on loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, tests/test_ray.py): it starts
the node's raylet and agents with Ray's own node class (as ray.cluster_utils does), prints one JSON line
({"node_id", "seconds"}) and, at end of input, ends the node's processes.

Its runtime environments go in a folder of their own in the session (`runtime_resources-NAME`): nodes on one
machine would otherwise share one and set up the same environment at once, as nodes of a real cluster, each on
its own machine, never do.

    python raynode.py ADDRESS NAME CPUS [LABEL=VALUE ...]
"""

from __future__ import annotations

import json
import sys
import time

import ray._private.node
import ray._private.parameter
import ray._private.services

#: how long the node's raylet may take to register with the head: Ray allows 30 s, which an emulated aarch64
#: node's agents (Python under QEMU user mode) miss on a loaded 2-core machine; a native node registers in 1-2 s
REGISTER_WAIT_S = 300


def _patient_get_node(get_node):
    """Ray's own lookup of this node in the head's table, retried for REGISTER_WAIT_S before it gives up."""
    def lookup(gcs_address, node_id):
        deadline = time.monotonic() + REGISTER_WAIT_S
        while True:
            try:
                return get_node(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    return lookup


def main(argv: list[str]) -> int:
    address, name, cpus = argv[0], argv[1], int(argv[2])
    labels = dict(a.split("=", 1) for a in argv[3:])
    t0 = time.perf_counter()
    params = ray._private.parameter.RayParams(
        gcs_address=address, node_ip_address="127.0.0.1", num_cpus=cpus, num_gpus=0, labels=labels,
        object_store_memory=150 << 20, min_worker_port=0, max_worker_port=0, node_manager_port=0,
        runtime_env_dir_name=f"runtime_resources-{name}")
    params.dashboard_agent_listen_port = None  # any free port: the head's agent has the default one
    ray._private.services.get_node = _patient_get_node(ray._private.services.get_node)
    node = ray._private.node.Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    try:
        print(json.dumps({"node_id": node.node_id, "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
        sys.stdin.read()
    finally:
        node.kill_all_processes(check_alive=False, allow_graceful=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
