"""A parameter-server role (scheduler or server) of MXNet's KVStore.

Importing ``mxnet`` with ``DMLC_ROLE`` set to ``scheduler`` or ``server`` starts that role
and exits when the job is done (``mxnet/kvstore/kvstore_server.py`` does it at import time),
so this module only sets the OpenMP threads first and imports MXNet.
"""

import os
import sys


def main() -> None:
    role = os.environ.get("DMLC_ROLE")
    if role not in ("scheduler", "server"):
        sys.exit(f"workloads.serve runs a scheduler or server: set DMLC_ROLE (got {role!r})")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import mxnet  # noqa: F401  (runs the role until the workers finish, then exits)


if __name__ == "__main__":
    main()
