"""Elastic resizing in the simulator: piecewise speed, stop-resume and background costs."""

import pytest

from dlsched.cluster import parse_cluster_spec
from dlsched.errors import PlanError
from dlsched.jobs import JobSpec
from dlsched.policies.base import Plan, Policy
from dlsched.sim import SimConfig
from dlsched.sim.engine import Simulator
from dlsched.workload_model import TraceModel


class RateBySize(TraceModel):
    """Speed by GPU count: 2 GPUs (the request) 1.0, 4 GPUs 1.6, 1 GPU 0.55."""

    RATES = {1: 0.55, 2: 1.0, 4: 1.6}

    def __call__(self, job, gpus):
        return self.RATES[len(gpus)]


class Script(Policy):
    """Starts the job on GPUs 0-1 at once; at ``at`` resizes it to ``gpus``."""

    name = "script-resize"

    def __init__(self, at, gpus):
        super().__init__()
        self.at, self.gpus, self.done = at, gpus, False

    def schedule(self, view):
        plan = Plan(wakeup_at=None if self.done else self.at)
        for job in view.pending.values():
            plan.start.append((job, (0, 1)))
        if not self.done and view.now >= self.at:
            plan.resize.append((view.running["e"], self.gpus))
            self.done = True
        return plan


E = JobSpec("e", 0.0, 2, 100.0, min_gpus=1, max_gpus=4)


def run(mechanism, at, gpus):
    sim = Simulator(
        parse_cluster_spec("1x4"),
        [E],
        Script(at, gpus),
        SimConfig(resize_mechanism=mechanism, stop_resume_s=30),
        workload=RateBySize(),
    )
    return sim.run().jobs[0]


def test_stop_resume_scale_out_pauses_every_worker():
    # 20 s of progress on 2 GPUs; all pause 30 s; the last 80 s at 1.6 take 50 s: ends at 100.
    job = run("stop-resume", 20, (0, 1, 2, 3))
    assert job.finish == pytest.approx(100)
    assert job.resizes == 1
    assert job.resize_lost_gpu_s == pytest.approx(30 * 4)
    assert job.attained_gpu_s == pytest.approx(2 * 20 + 4 * 80)


def test_background_scale_out_keeps_training_while_new_workers_prepare():
    # New workers prepare 20-50 while the old two go on (done 50 at t=50); the switch pauses
    # 5% of 30 = 1.5 s; the last 50 s at 1.6 take 31.25 s: ends at 82.75.
    job = run("background", 20, (0, 1, 2, 3))
    assert job.finish == pytest.approx(82.75)
    # lost: the two new GPUs idle while preparing, and everyone during the switch
    assert job.resize_lost_gpu_s == pytest.approx(2 * 30 + 1.5 * 4)
    stop_resume = run("stop-resume", 20, (0, 1, 2, 3))
    assert job.resize_lost_gpu_s < stop_resume.resize_lost_gpu_s
    assert job.finish < stop_resume.finish


def test_background_scale_in_costs_the_staying_workers_nothing():
    # 20 s on 2 GPUs, then 1 GPU at 0.55 at once: 80 / 0.55 more seconds.
    job = run("background", 20, (0,))
    assert job.finish == pytest.approx(20 + 80 / 0.55)
    assert job.resize_lost_gpu_s == 0
    shrunk = run("stop-resume", 20, (0,))
    assert shrunk.finish == pytest.approx(20 + 30 + 80 / 0.55)


@pytest.mark.parametrize("gpus", [(), (0, 1, 2, 3, 0)])
def test_a_resize_below_min_or_with_repeated_gpus_is_refused(gpus):
    with pytest.raises(PlanError, match="outside its 1..4"):
        run("background", 20, gpus)


def test_a_resize_above_max_is_refused():
    sim = Simulator(
        parse_cluster_spec("1x8"),
        [E],
        Script(20, tuple(range(6))),
        SimConfig(),
        workload=RateBySize(),
    )
    with pytest.raises(PlanError, match="6 distinct GPUs is outside its 1..4"):
        sim.run()


def test_metrics_count_resizes_lost_gpu_time_and_mean_size():
    from dlsched.metrics import job_rows, summarize

    sim = Simulator(
        parse_cluster_spec("1x4"),
        [E],
        Script(20, (0, 1, 2, 3)),
        SimConfig(resize_mechanism="stop-resume", stop_resume_s=30),
        workload=RateBySize(),
    )
    result = sim.run()
    row = job_rows(result.jobs)[0]
    # held 2 GPUs for 20 s and 4 for 80 s: 3.6 GPUs on average over its 100 s run
    assert row["run_s"] == pytest.approx(100) and row["mean_gpus"] == pytest.approx(3.6)
    assert row["resizes"] == 1 and row["resize_lost_gpu_s"] == pytest.approx(120)
    summary = summarize(result)
    assert summary["resizes"] == 1 and summary["resize_lost_gpu_s"] == pytest.approx(120)
    assert summary["mean_size_vs_requested"] == pytest.approx(3.6 / 2)


def test_a_job_that_is_not_elastic_cannot_be_resized():
    sim = Simulator(
        parse_cluster_spec("1x4"),
        [JobSpec("e", 0.0, 2, 100.0)],
        Script(20, (0, 1, 2, 3)),
        SimConfig(),
        workload=RateBySize(),
    )
    with pytest.raises(PlanError, match="outside its 2..2"):
        sim.run()


class WithCheckpoint(RateBySize):
    def checkpoint_mib(self, spec):
        return 2048.0  # 2 GiB of weights and optimizer state


def test_the_stop_resume_pause_grows_with_the_checkpoint():
    # 30 s restart + writing and reading 2 GiB at 1 GiB/s = 34 s. Resized to 4 GPUs at 20:
    # 20 s done, paused until 54, the other 80 s at 1.6 -> 104; 34 s x 4 GPUs lost.
    sim = Simulator(
        parse_cluster_spec("1x4"),
        [E],
        Script(20.0, (0, 1, 2, 3)),
        SimConfig(resize_mechanism="stop-resume", stop_resume_s=30, checkpoint_mib_s=1024),
        workload=WithCheckpoint(),
    )
    job = sim.run().jobs[0]
    assert job.finish == pytest.approx(104.0) and job.resize_lost_gpu_s == pytest.approx(136.0)
