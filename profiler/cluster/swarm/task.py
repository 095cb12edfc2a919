"""The process on the controller that stands for one Swarm service of a cell.

``SwarmCluster.start`` starts ``python -m profiler.cluster.swarm.task`` in a process
group of its own (``popen_in_group``) and writes it one JSON line on stdin: the
manager's address and the service to create. This process then

- creates the service (one task, pinned to its node, no restart);
- follows its task until it ends (the Engine API has no wait on a service: a poll every
  ``POLL_S``), writing a line to the process's log when the task is rejected, waits
  for resources or ends otherwise than by exiting (a node that went down);
- exits with the task's exit status (137 for a container killed with SIGKILL, 125 for
  a task that never ran), which the runner judges as it judges any process's;
- on SIGTERM, SIGHUP or SIGINT (the runner ending the cell, Ctrl-C, or the controller
  dying: its parent-death signal is SIGTERM) removes the service, which stops the
  container, and exits 143; and removes it as well when the task ended by itself.

What a SIGKILL of this process leaves (a service, the cell's network) is removed by
the cell's ``collect``, the sweep's ``close`` or, after a controller killed with
``kill -9``, the next sweep on the same Swarm (everything carries ``edgeprof.*`` labels).
"""

from __future__ import annotations

import json
import signal
import sys
import threading

POLL_S = 0.2
ENDED = {"complete", "failed", "rejected", "shutdown", "orphaned", "remove"}
NEVER_RAN = 125  # as `docker run` exits when the container could not be run
GONE = 137


def main() -> int:
    request = json.loads(sys.stdin.readline())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    import docker
    from docker.errors import DockerException

    host = request.get("host")
    client = docker.DockerClient(base_url=host, timeout=60) if host else docker.from_env()
    service = request["service"]
    name = service["name"]
    try:
        service_id = client.api.create_service(**service)["ID"]
    except DockerException as exc:
        _say(f"cannot create service {name}: {exc}")
        return NEVER_RAN
    try:
        return _follow(client, service_id, name, request.get("node", "?"), stop)
    finally:
        try:
            client.api.remove_service(service_id)
        except DockerException:
            pass  # gone already, or the cell's collect removes it
        client.close()


def _follow(client, service_id: str, name: str, node: str, stop: threading.Event) -> int:
    from docker.errors import DockerException, NotFound

    said = ""
    while not stop.wait(POLL_S):
        try:
            tasks = client.api.tasks(filters={"service": service_id})
        except NotFound:
            _say(f"service {name} was removed by someone else while its task ran")
            return GONE
        except DockerException as exc:
            line = f"the Swarm manager does not answer about service {name}: {exc}"
            if line != said:
                _say(line)
                said = line
            continue
        if not tasks:
            continue
        status = tasks[0].get("Status", {})
        state, error = status.get("State", ""), status.get("Err", "")
        if state in ENDED:
            code = status.get("ContainerStatus", {}).get("ExitCode")
            if state == "complete":
                return 0
            if state == "failed" and code:
                _say(f"task of service {name} on node {node} exited {code}"
                     + (f" ({error})" if error else ""))
                return int(code)
            _say(f"task of service {name} on node {node} ended {state}"
                 + (f": {error}" if error else ""))
            return NEVER_RAN if state == "rejected" or code is None else GONE
        if error and error != said:  # pending: "no suitable node (insufficient ...)"
            _say(f"task of service {name} on node {node} is {state}: {error}")
            said = error
    return 128 + signal.SIGTERM


def _say(line: str) -> None:
    print(f"edgeprof swarm: {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
