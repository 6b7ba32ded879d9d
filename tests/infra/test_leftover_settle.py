"""``settle``: after a destroy the leftover finder is read until two reads agree, a read is empty, or a
bound passes; what is still listed says for how long. Reads and the clock are scripted here."""

from __future__ import annotations

from gpufleet.infra.leftovers import Leftover, settle

VM = Leftover("compute.googleapis.com/Instance", "//compute.googleapis.com/projects/p/zones/z/instances/a")
DISK = Leftover("ebs volume", "vol-0a1b2c3d4e5f60718", "available")


class Script:
    """Reads answered in order (the last one repeats); sleeping moves a fake clock."""

    def __init__(self, *reads: list[Leftover]) -> None:
        self.reads = list(reads)
        self.now = 0.0
        self.slept: list[float] = []

    def read(self) -> list[Leftover]:
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def settle(self, **kwargs: float):
        return settle(self.read, clock=lambda: self.now, sleep=self.sleep, **kwargs)


def test_an_empty_first_read_is_final():
    script = Script([])
    settled = script.settle(interval_s=15, bound_s=300)
    assert (settled.leftovers, settled.reads, script.slept) == ([], 1, [])


def test_a_read_that_lags_one_poll_then_clears_leaves_nothing():
    script = Script([VM], [])
    settled = script.settle(interval_s=15, bound_s=300)
    assert settled.leftovers == [] and settled.reads == 2 and settled.agreed, settled
    assert "nothing left" in settled.summary()


def test_what_two_reads_agree_on_is_left_and_says_for_how_long():
    script = Script([VM, DISK], [DISK], [DISK])
    settled = script.settle(interval_s=20, bound_s=300)
    assert settled.agreed and settled.reads == 3, settled
    assert [item.leftover for item in settled.leftovers] == [DISK]
    assert settled.leftovers[0].seconds == 40 and settled.leftovers[0].reads == 3
    assert str(settled.leftovers[0]) == (
        "ebs volume vol-0a1b2c3d4e5f60718 (available): still listed after 40 s (3 read(s) in a row)"
    )


def test_a_state_change_is_not_agreement():
    shutting = Leftover("ec2 instance", "i-0123456789abcdef0", "shutting-down")
    script = Script([shutting], [Leftover("ec2 instance", "i-0123456789abcdef0", "stopping")], [])
    assert script.settle(interval_s=10, bound_s=300).leftovers == []


def test_the_bound_stops_reads_that_keep_changing():
    other = Leftover("ebs volume", "vol-0ffffffffffffffff", "deleting")
    script = Script([VM], [DISK], [other], [VM], [DISK], [other])
    settled = script.settle(interval_s=30, bound_s=60)
    assert not settled.agreed and settled.reads == 3, settled
    assert [item.leftover for item in settled.leftovers] == [other]
    assert settled.leftovers[0].seconds == 0  # a break in the listing restarts the count
    assert "still changed when the 60 s bound passed" in settled.summary()


def test_the_cloud_backends_leftover_step_waits_out_the_lag(monkeypatch, tmp_path):
    """``PulumiBackend.leftovers`` (what ``gpufleet down`` runs after the destroy) polls: a resource
    listed by the first read only is not reported, and the reporter hears why it waited."""
    from gpufleet.infra import leftovers as leftovers_module
    from gpufleet.infra.aws.backend import AwsBackend
    from gpufleet.progress import RecordingReporter

    reads = [[VM], []]
    slept: list[float] = []
    monkeypatch.setattr(leftovers_module.time, "sleep", slept.append)

    class Cloud(AwsBackend):  # PulumiBackend.leftovers, with a cloud's hooks and this listing
        def find_leftovers(self, spec, cluster_id=None):
            return reads.pop(0)

    reporter = RecordingReporter()
    from gpufleet.state import ClusterState

    state = ClusterState("fleet", tmp_path / "fleet")  # no state.json: no id, every listed resource counts
    assert Cloud().leftovers(None, state, reporter) == []  # type: ignore[arg-type]
    assert slept == [leftovers_module.LEFTOVER_INTERVAL_S]
    assert any("nothing left (2 read(s)" in line for line in reporter.lines), reporter.lines
