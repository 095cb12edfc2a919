"""A parameter-server role (scheduler or server) of MXNet's KVStore.

Importing ``mxnet`` with ``DMLC_ROLE`` set to ``scheduler`` or ``server`` starts that role
and exits when the job is done (``mxnet/kvstore/kvstore_server.py`` does it at import time,
in ``_init_kvstore_server_module``). This module imports MXNet as a worker would (which
starts nothing: ps-lite reads ``DMLC_ROLE`` only when a role starts), joins the node's CPU
limit (``workloads.node_limits``: the import's 2 CPU-seconds are start-up, not serving),
then puts the role back and starts it the way MXNet's import would have.
"""

import os
import sys


def main() -> None:
    role = os.environ.get("DMLC_ROLE")
    if role not in ("scheduler", "server"):
        sys.exit(f"workloads.serve runs a scheduler or server: set DMLC_ROLE (got {role!r})")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["DMLC_ROLE"] = "worker"
    from mxnet.kvstore import kvstore_server

    from .node_limits import join_cpu_limit

    os.environ["DMLC_ROLE"] = role
    join_cpu_limit()
    kvstore_server._init_kvstore_server_module()  # serves until the workers finish, exits


if __name__ == "__main__":
    main()
