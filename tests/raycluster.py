"""A real local Ray cluster for the tests of `load.distributed` (tests/distributed/, marked `ray`: CI's Ray step).

Three nodes on one host, every one on 127.0.0.1: Ray's one-host multi-node helper
(`ray.cluster_utils.Cluster`), each node a raylet of its own with 1 CPU and an object store of 80 MiB,
usage reporting off. Ray resolves 127.0.0.1 to the host's primary address unless
`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` is in the environment (its loopback mode, which its command line
refuses for more than one node, hence the helper); the processes it starts inherit it, and so does the
driver, which then joins on loopback too. Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KEY_ENV = "LOADGATE_RAY_TEST_KEY"
KEY = "sk-ray-only-in-the-environment-7f3a9c"  # set in every node's environment and the driver's
NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 * 2**20, "node_ip_address": "127.0.0.1",
                             "include_dashboard": False}


@contextlib.contextmanager
def local_cluster(temp: Path, nodes: int = 3, env: dict[int, dict[str, str]] | None = None) -> Iterator[Any]:
    """A cluster of `nodes` raylets on 127.0.0.1 (node 0 the head, its temp folder `temp`); `env`: more
    environment variables for node k (k >= 1)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ[KEY_ENV] = KEY
    # Ray records the head's address in <its default temp folder>/ray_current_cluster whatever temp_dir
    # the head was given, and fails where that folder does not exist (a machine that never ran Ray:
    # FileNotFoundError '/tmp/ray/ray_current_cluster'): its default is made this cluster's own.
    os.environ["RAY_TMPDIR"] = str(temp)
    (temp / "ray").mkdir(parents=True, exist_ok=True)
    import ray
    from ray.cluster_utils import Cluster

    with contextlib.suppress(Exception):
        ray.shutdown()  # a driver joined to another cluster of this session
    c = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "temp_dir": str(temp)})
    try:
        for k in range(1, nodes):
            c.add_node(**NODE_ARGS, env_vars={KEY_ENV: KEY, **(env or {}).get(k, {})})
        c.wait_for_nodes()
        yield c
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        c.shutdown()
