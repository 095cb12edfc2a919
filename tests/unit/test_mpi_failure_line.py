"""How the MPI launcher names the rank that failed first, from mpirun's own report
(Open MPI 4.1's words, copied from runs here): the cell's reason is that line."""

from __future__ import annotations

from workloads.mpi import failure_line

SIGNALLED = """\
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node n1 exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""

EXITED = """\
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[26471,1],1]
  Exit code:    3
--------------------------------------------------------------------------
"""


def test_a_rank_killed_by_a_signal_is_named_with_its_node():
    assert failure_line(SIGNALLED, ["n0", "n1"]) == "worker-1 on n1 was killed by signal 9 (Killed)"


def test_a_rank_that_exited_is_named_with_its_code_and_node():
    assert failure_line(EXITED, ["local0", "local1"]) == "worker-1 on local1 exited 3"


def test_nothing_said_is_nothing_named():
    assert failure_line("ORTE was unable to reliably start one or more daemons.\n", ["n0"]) == ""


# What mpirun printed when node local1's daemon failed at start (its own words, then
# the agent's line, ``workloads.mpi.node_line``).
DAEMON_FAILED = """\
--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
--------------------------------------------------------------------------
edgeprof-mpi: node n1: unreachable over SSH (ssh: connect to host 10.0.0.2 port 22: \
Connection refused): check that it is up
edgeprof-mpi: node n1: the MPI daemon (orted) exited 255
"""


def test_a_daemon_that_failed_is_named_by_its_node_first_account():
    assert failure_line(DAEMON_FAILED, ["n0", "n1"]) == (
        "node n1: unreachable over SSH (ssh: connect to host 10.0.0.2 port 22: Connection "
        "refused): check that it is up")


def test_a_rank_failure_outranks_the_daemons_that_went_with_it():
    assert failure_line(SIGNALLED + DAEMON_FAILED, ["n0", "n1"]).startswith("worker-1 on n1")
