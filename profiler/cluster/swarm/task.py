"""The process on the controller that stands for one Swarm service of a cell.

``SwarmCluster.start`` starts ``python -m profiler.cluster.swarm.task`` in a process
group of its own (``popen_in_group``) and writes it one JSON line on stdin: the
manager's address, the node (name and id), the service to create and where to register
its container. This process then

- creates the service (one task, pinned to its node, no restart);
- follows its task until it ends (the Engine API has no wait on a service: a poll every
  ``POLL_S``), writing a line to the process's log when the task is rejected, waits
  for resources or ends otherwise than by exiting;
- once the task's container runs, writes its id and first pid (both in the task's
  status) to the ``register`` file, whose folder the node's metrics agent reads;
- watches the node (every ``NODE_CHECK_S``): a node the manager no longer counts ready
  (its daemon stopped, the board is off) leaves the task listed as running, and one
  drained has its tasks shut down by the manager: the process says so, naming the
  node, and exits ``GONE``;
- exits with the task's exit status (137 for a container killed with SIGKILL, 125 for
  a task that never ran), which the runner judges as it judges any process's; a
  process that exited with a status of its own (not 128 + a signal's number: mpirun's
  205 is its own) has said why itself (the
  cell's reason is its log's last line: an MPI launcher's names the rank), so this
  process adds no line then;
- on SIGTERM, SIGHUP or SIGINT (the runner ending the cell, Ctrl-C, or the controller
  dying: its parent-death signal is SIGTERM) removes the service, which stops the
  container, waits for the container to end (at most ``STOP_WAIT_S``: the agent takes
  its last sample then), and exits 143; and removes it as well when the task ended by
  itself.

What a SIGKILL of this process leaves (a service, the cell's network) is removed by
the cell's ``collect``, the sweep's ``close`` or, after a controller killed with
``kill -9``, the next sweep on the same Swarm (everything carries ``edgeprof.*`` labels).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from .engine import node_name

POLL_S = 0.2
NODE_CHECK_S = 1.0
CELL_LABEL = "edgeprof.cell"  # the cluster's label of a cell's services
STOP_WAIT_S = 5.0
ENDED = {"complete", "failed", "rejected", "shutdown", "orphaned", "remove"}
NEVER_RAN = 125  # as `docker run` exits when the container could not be run
GONE = 137
SIGNAL_MAX = 64  # a container's 128 + N for N up to this is a signal's; above, its own


def _out_of_service(node: dict) -> str:
    """How a Swarm node (``inspect_node``'s answer) is out of service: "down (heartbeat
    failure)" when the manager no longer counts it ready, "drained (...)" when it takes
    no tasks; "" when it is in service."""
    status = node.get("Status", {})
    if status.get("State", "ready") != "ready":
        return f"{status.get('State')} ({status.get('Message') or 'its daemon does not answer'})"
    if node.get("Spec", {}).get("Availability", "active") == "drain":
        return "drained (availability drain: the manager stops its tasks)"
    return ""


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
    task = _Task(client, service_id, name, request.get("node", "?"), request.get("node_id"),
                 request.get("register"), (service.get("labels") or {}).get(CELL_LABEL))
    try:
        return task.follow(stop)
    finally:
        try:
            client.api.remove_service(service_id)
        except DockerException:
            pass  # gone already, or the cell's collect removes it
        else:
            if stop.is_set():
                task.wait_gone(STOP_WAIT_S)
        client.close()


class _Task:
    """The one task of a service, followed through the manager."""

    def __init__(self, client, service_id: str, name: str, node: str, node_id: str | None,
                 register: dict | None, cell: str | None = None):
        self.client, self.service_id, self.name = client, service_id, name
        self.node, self.node_id, self.register = node, node_id, register
        self.cell = cell
        self._next_node_check = time.monotonic() + NODE_CHECK_S

    def follow(self, stop: threading.Event) -> int:
        from docker.errors import DockerException, NotFound

        said = ""
        while not stop.wait(POLL_S):
            try:
                tasks = self.client.api.tasks(filters={"service": self.service_id})
                down = self._node_down()
            except NotFound:
                _say(f"service {self.name} was removed by someone else while its task ran")
                return GONE
            except DockerException as exc:
                line = f"the Swarm manager does not answer about service {self.name}: {exc}"
                if line != said:
                    _say(line)
                    said = line
                continue
            if not tasks:
                continue
            status = tasks[0].get("Status", {})
            state, error = status.get("State", ""), status.get("Err", "")
            if state in ENDED:
                if state != "complete":
                    # A drained node's tasks are shut down by the manager, and its peers'
                    # fail as their connections to it close, maybe first: name the node.
                    peer = self._peer_gone()
                    if peer:
                        _say(f"{peer}: the task of service {self.name} on node "
                             f"{self.node} ended {state}")
                        return GONE
                return self._ended(state, error, status)
            if down:
                _say(f"node {self.node} is {down}: the task of service {self.name} there is "
                     "lost")
                return GONE
            if state == "running" and self.register:
                self._register(status.get("ContainerStatus", {}))
            if error and error != said:  # pending: "no suitable node (insufficient ...)"
                _say(f"task of service {self.name} on node {self.node} is {state}: {error}")
                said = error
        return 128 + signal.SIGTERM

    def _ended(self, state: str, error: str, status: dict) -> int:
        code = status.get("ContainerStatus", {}).get("ExitCode")
        if state == "complete":
            return 0
        if state == "failed" and code and not 128 < code <= 128 + SIGNAL_MAX and \
                error == f"task: non-zero exit ({code})":
            return int(code)  # the process's own exit: its last line says why, not this
        if state == "failed" and code:
            _say(f"task of service {self.name} on node {self.node} exited {code}"
                 + (f" ({error})" if error else ""))
            return int(code)
        _say(f"task of service {self.name} on node {self.node} ended {state}"
             + (f": {error}" if error else ""))
        return NEVER_RAN if state == "rejected" or code is None else GONE

    def _node_down(self) -> str:
        """How the manager sees the node when it is not ready ("down (heartbeat
        failure)") or no longer takes tasks ("drained (...)"), else ""; asked every
        ``NODE_CHECK_S``."""
        if not self.node_id or time.monotonic() < self._next_node_check:
            return ""
        self._next_node_check = time.monotonic() + NODE_CHECK_S
        return _out_of_service(self.client.api.inspect_node(self.node_id))

    def _peer_gone(self) -> str:
        """Which node of this task's cell is out of service, its own first ("node n1
        is drained (...)", "node n1 is down (...)"); empty when every one is in it."""
        from docker.errors import DockerException

        try:
            ids = {self.node_id} if self.node_id else set()
            if self.cell:
                ids |= {t.get("NodeID") for t in self.client.api.tasks(
                    filters={"label": f"{CELL_LABEL}={self.cell}"}) if t.get("NodeID")}
            for node_id in sorted(ids, key=lambda i: i != self.node_id):  # its own first
                node = self.client.api.inspect_node(node_id)
                gone = _out_of_service(node)
                if gone:
                    return f"node {node_name(node)} is {gone}"
        except DockerException:
            return ""  # the task's own ending is said instead
        return ""

    def _register(self, container: dict) -> None:
        """Tell the node's agent this container: its id and first pid, as one file."""
        if not container.get("ContainerID") or not container.get("PID"):
            return
        path = self.register["path"]
        record = {"role": self.register["role"], "id": container["ContainerID"],
                  "pid": container["PID"]}
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(f"{path}.tmp", "w") as handle:
                json.dump(record, handle)
            os.replace(f"{path}.tmp", path)
        except OSError as exc:
            _say(f"cannot tell the node's agent about the container of {self.name}: {exc}")
        self.register = None

    def wait_gone(self, wait_s: float) -> None:
        """Wait until the removed service's task has stopped its container (the task is
        no longer listed, or has ended), for at most ``wait_s``."""
        from docker.errors import DockerException

        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                tasks = self.client.api.tasks(filters={"service": self.service_id})
            except DockerException:
                return
            if all(t.get("Status", {}).get("State") in ENDED for t in tasks):
                return
            time.sleep(POLL_S / 2)


def _say(line: str) -> None:
    print(f"edgeprof swarm: {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
