"""A collective whose ranks cannot start: the gate's failure names the ranks' own error, not only srun's
bookkeeping line after it (issue 22: an image without Open MPI must fail with the reason)."""

from __future__ import annotations

from gpufleet.validate.slurm import CollectiveRun
from gpufleet.validate.suite import _parse_run, _stderr_cause

# The stderr of 'srun --container-image=<an image without Open MPI> ... all_reduce_perf' on a local cluster
# (the containers test of tests/cluster/test_local_cluster.py, 2026-11-24), as srun forwarded it.
NO_MPI = """GPUFLEET_NCCL_ENV host=ctr-compute-0 fabric=ethernet transport=Socket file=/etc/gpufleet/nccl.env
/opt/gpufleet/mpi-perf/bin/all_reduce_perf: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory
GPUFLEET_NCCL_ENV host=ctr-compute-1 fabric=ethernet transport=Socket file=/etc/gpufleet/nccl.env
/opt/gpufleet/mpi-perf/bin/all_reduce_perf: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory
srun: error: ctr-compute-0: task 0: Exited with exit code 127
srun: launch/slurm: _step_signal: Terminating StepId=8.0
srun: error: ctr-compute-1: task 1: Exited with exit code 127
"""  # noqa: E501


def test_the_cause_is_the_ranks_error_not_sruns_exit_line() -> None:
    assert "libmpi.so.40: cannot open shared object file" in _stderr_cause(NO_MPI)


def test_only_srun_lines_give_sruns_last_line() -> None:
    assert _stderr_cause("srun: error: n1: task 0: Exited with exit code 1\n") == (
        "srun: error: n1: task 0: Exited with exit code 1"
    )
    assert _stderr_cause("") == ""


def test_a_run_that_could_not_start_fails_naming_the_missing_library() -> None:
    run = CollectiveRun(
        collective="all_reduce", nodes=("ctr-compute-0", "ctr-compute-1"), command="srun ...", rc=1,
        stdout="", stderr=NO_MPI, seconds=3.0,
    )  # fmt: skip
    tests = _parse_run(run, "all_reduce.log")
    failures = " ".join(failure for test in tests for failure in test.failures)
    assert "libmpi.so.40" in failures, failures
    # Issue 38: the cause first, srun's bookkeeping after it (it was buried at the end of a table cell).
    assert failures.startswith("/opt/gpufleet/mpi-perf/bin/all_reduce_perf: error while loading shared "
                               "libraries: libmpi.so.40"), failures  # fmt: skip


def test_slurmstepds_cancel_notice_is_not_the_cause() -> None:
    # The order the CI run of 2026-11-24 saw: slurmstepd's cancel notice after the ranks' errors.
    cancelled = (
        "slurmstepd-ctr-compute-0: error: *** STEP 8.0 ON ctr-compute-0 CANCELLED AT 2026-11-24T22:14:07 ***"
    )
    stderr = NO_MPI + cancelled + "\n"
    assert "libmpi.so.40: cannot open shared object file" in _stderr_cause(stderr)


# The same step when one node's rank failed before the other node's container had started: srun terminated
# the step, and pyxis on the other node reported its container start killed (error code 143) and slurmstepd
# its spank plugin failed, after the loader's line (the containers test of tests/cluster/
# test_local_cluster.py, 2026-11-27).
NO_MPI_CONTAINER_KILLED = """GPUFLEET_NCCL_ENV host=e2e-compute-0 fabric=ethernet transport=Socket file=/etc/gpufleet/nccl.env
/opt/gpufleet/mpi-perf/bin/all_reduce_perf: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory
srun: error: e2e-compute-0: task 0: Exited with exit code 127
srun: launch/slurm: _step_signal: Terminating StepId=38.0
slurmstepd-e2e-compute-1: error: pyxis: container start failed with error code: 143
slurmstepd-e2e-compute-1: error: pyxis: printing enroot log file:
slurmstepd-e2e-compute-1: error: pyxis:     Terminated
slurmstepd-e2e-compute-1: error: pyxis: container was not started successfully by another task
slurmstepd-e2e-compute-1: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1
slurmstepd-e2e-compute-1: error: Failed to invoke spank plugin stack
srun: error: e2e-compute-1: task 1: Exited with exit code 1
"""  # noqa: E501


def test_pyxis_lines_of_a_container_start_the_step_killed_are_not_the_cause() -> None:
    assert "libmpi.so.40: cannot open shared object file" in _stderr_cause(NO_MPI_CONTAINER_KILLED)


def test_pyxis_own_failure_is_the_enroot_logs_line() -> None:
    """A container that failed to start on its own (pyxis prints enroot's log as above; the enroot line is
    the shape of 8fdf70f's /shared failure): that line is the cause, not spank's that follow it."""
    stderr = (
        "slurmstepd-n1: error: pyxis: container start failed with error code: 1\n"
        "slurmstepd-n1: error: pyxis: printing enroot log file:\n"
        "slurmstepd-n1: error: pyxis:     enroot-mount: failed to mount: /shared at /x: Invalid argument\n"
        "slurmstepd-n1: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1\n"
        "slurmstepd-n1: error: Failed to invoke spank plugin stack\n"
        "srun: error: n1: task 0: Exited with exit code 1\n"
    )
    assert _stderr_cause(stderr).endswith("enroot-mount: failed to mount: /shared at /x: Invalid argument")


# The same broken image on Slurm 24.11.5 (the containers test of tests/cluster/test_local_cluster.py,
# 2026-11-27 18:28): srun says "Terminating StepId", and pyxis on the cancelled node only that its child died.
NO_MPI_ON_24_11 = """GPUFLEET_NCCL_ENV host=e2e-compute-1 fabric=ethernet transport=Socket file=/etc/gpufleet/nccl.env
/opt/gpufleet/mpi-perf/bin/all_reduce_perf: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory
GPUFLEET_NCCL_ENV host=e2e-compute-0 fabric=ethernet transport=Socket file=/etc/gpufleet/nccl.env
/opt/gpufleet/mpi-perf/bin/all_reduce_perf: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory
srun: error: e2e-compute-1: task 1: Exited with exit code 127
srun: Terminating StepId=38.0
slurmstepd: error: *** STEP 38.0 ON e2e-compute-0 CANCELLED AT 2026-11-27T18:28:07 ***
slurmstepd: error: pyxis: child 7595 terminated with signal 15
srun: error: e2e-compute-0: task 0: Exited with exit code 127
"""  # noqa: E501


def test_slurm_24_11s_step_end_lines_are_not_the_cause() -> None:
    assert "libmpi.so.40: cannot open shared object file" in _stderr_cause(NO_MPI_ON_24_11)
