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
