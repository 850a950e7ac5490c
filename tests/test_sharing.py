"""GPU sharing: hand-computed pairs, the benefit test, memory, accumulation."""

import pytest

from dlsched.cluster import parse_cluster_spec
from dlsched.jobs import JobSpec
from dlsched.policies.catalog import make_policy
from dlsched.policies.sharing import t_con, t_seq
from dlsched.sim import SimConfig
from dlsched.sim.engine import Simulator
from dlsched.state.cluster_state import ClusterState


class TableSpeed:
    """A workload model given by tables, so the tests control every number."""

    def __init__(self, xi, memory, accumulation_cost=None):
        self.xi = xi  # (model, partner model) -> slowdown
        self.memory = memory  # model -> MiB per GPU at k = 1 (halved per doubling)
        self.cost = accumulation_cost or {}

    def __call__(self, job, gpus):
        return 1.0 / self.cost.get(job.accumulation, 1.0)

    def slowdown(self, job, partner):
        return self.xi.get((job.spec.model, partner.spec.model))

    def memory_mib(self, spec, gpus, accumulation=1):
        m = self.memory.get(spec.model)
        return None if m is None else m / accumulation

    def accumulation_cost(self, spec, accumulation):
        return self.cost.get(accumulation, 1.0)

    def speed_at_size(self, spec, gpus):
        return None  # not modelled: no elastic job grows


def run(policy, jobs, speed, cluster="1x1:V100"):
    sim = Simulator(
        parse_cluster_spec(cluster), jobs, make_policy(policy), SimConfig(), workload=speed
    )
    result = sim.run()
    return {j.job_id: j for j in result.jobs}, result


B = JobSpec("b", 0.0, 1, 100.0, model="mb", batch_size=64)
A = JobSpec("a", 10.0, 1, 60.0, model="ma", batch_size=64)


def test_a_pair_finishes_when_the_pairwise_formula_says():
    # At t=10: T_b = 90, T_a = 60, xi_a = 1.5, xi_b = 1.2. xi_a T_a = 90 < xi_b T_b = 108, so a
    # ends first: t_con = 90/2 + (1 - 1/2.4) * 1.5 * 60 = 97.5 < t_seq = 90 + 30 = 120: share.
    # a runs at 1/1.5 and ends at 10 + 90 = 100; b does 75 of its 90 s by then and ends at 115.
    speed = TableSpeed({("ma", "mb"): 1.5, ("mb", "ma"): 1.2}, {"ma": 6000, "mb": 6000})
    s, r = run("sjf-bsbf", [B, A], speed)
    assert s["a"].finish == pytest.approx(100) and s["b"].finish == pytest.approx(115)
    mean_from_now = ((s["a"].finish - 10) + (s["b"].finish - 10)) / 2
    assert mean_from_now == pytest.approx(t_con(60, 90, 1.5, 1.2)) == pytest.approx(97.5)
    assert s["a"].shared_s == pytest.approx(90) and s["b"].shared_s == pytest.approx(90)
    assert s["a"].shared_slowdown_s / s["a"].shared_s == pytest.approx(1.5)
    assert r.gpu_shared_s == pytest.approx(90)


def test_the_benefit_test_decides_and_ffs_shares_anyway():
    # xi = 2 both ways: t_con = 45 + (1 - 1/4) * 2 * 60 = 135 > t_seq = 120: BSBF waits, a
    # runs 100-160. FFS shares: a ends at 10 + 120 = 130; b has 30 s left then, ends at 160.
    speed = TableSpeed({("ma", "mb"): 2.0, ("mb", "ma"): 2.0}, {"ma": 6000, "mb": 6000})
    assert not t_con(60, 90, 2, 2) < t_seq(60, 90)
    s, _ = run("sjf-bsbf", [B, A], speed)
    assert (s["a"].first_start, s["a"].finish, s["b"].finish) == (100, 160, 100)
    s, _ = run("sjf-ffs", [B, A], speed)
    assert s["a"].finish == pytest.approx(130) and s["b"].finish == pytest.approx(160)


@pytest.mark.parametrize("policy", ["sjf-bsbf", "sjf-ffs"])
def test_memory_that_does_not_fit_forbids_sharing(policy):
    # 16 GiB V100 (16,384 MiB); b uses 12,000, leaving 4,384. a needs 70,000 / k MiB: only
    # k = 16 (4,375) would fit, and max_accumulation = 8 (8,750 MiB) forbids it: a waits.
    speed = TableSpeed({("ma", "mb"): 1.1, ("mb", "ma"): 1.1}, {"ma": 70000, "mb": 12000})
    sim = Simulator(
        parse_cluster_spec("1x1:V100"),
        [B, A],
        make_policy(policy, max_accumulation=8),
        SimConfig(),
        workload=speed,
    )
    s = {j.job_id: j for j in sim.run().jobs}
    assert s["a"].first_start == 100 and s["a"].shared_s == 0


def test_unknown_memory_or_unmeasured_pair_never_shares():
    for speed in (
        TableSpeed({("ma", "mb"): 1.1, ("mb", "ma"): 1.1}, {"ma": 100}),  # b unknown
        TableSpeed({}, {"ma": 100, "mb": 100}),
    ):  # no xi
        s, _ = run("sjf-ffs", [B, A], speed)
        assert s["a"].first_start == 100


def test_accumulation_keeps_the_optimizer_steps_and_goes_back_to_full_batch():
    # a needs 12,000 MiB: beside b's 6,000 on 16,384 only at k = 2 (6,000). Each step then takes
    # 1.25 x as long (the table's cost), and sharing slows it 1.1 x: its 60 s of work take
    # 82.5 s, ending at 92.5. b runs at 1 / 1.1 meanwhile: 75 of its 90 s done, 15 s left.
    speed = TableSpeed({("ma", "mb"): 1.1, ("mb", "ma"): 1.1}, {"ma": 12000, "mb": 6000}, {2: 1.25})
    sim = Simulator(
        parse_cluster_spec("1x1:V100"), [B, A], make_policy("sjf-ffs"), SimConfig(), workload=speed
    )
    plans = []
    original = sim.state.apply
    sim.state.apply = lambda plan: (plans.append(dict(plan.accumulation)), original(plan))
    s = {j.job_id: j for j in sim.run().jobs}
    assert {"a": 2} in plans
    assert s["a"].finish == pytest.approx(10 + 60 * 1.25 * 1.1)
    # the work done (its solo seconds, i.e. its optimizer steps) is all of it, not more
    assert s["a"].done_s == pytest.approx(60)
    # b, alone again after a leaves, runs at full speed: 90 - 82.5 / 1.1 = 15 s left at 92.5
    assert s["b"].finish == pytest.approx(92.5 + 15)


def test_restore_full_batch_when_the_partner_leaves():
    # b ends first this time (a has 600 s), and a goes back to k = 1 and full speed.
    long_a = JobSpec("a", 10.0, 1, 600.0, model="ma", batch_size=64)
    speed = TableSpeed({("ma", "mb"): 1.1, ("mb", "ma"): 1.1}, {"ma": 12000, "mb": 6000}, {2: 1.25})
    s, _ = run("sjf-ffs", [B, long_a], speed)
    # b: 90 s left at t=10, speed 1/1.1 -> ends at 109. a by then: 99 / 1.375 = 72 s done.
    assert s["b"].finish == pytest.approx(109)
    assert s["a"].finish == pytest.approx(109 + (600 - 72))
    assert s["a"].accumulation == 1 and s["a"].memory_mib == 12000


def test_a_job_back_at_full_batch_counts_its_full_memory():
    # a joins b at k = 2 (6,000 MiB); b ends and a returns to 12,000 MiB. A plan that puts c
    # (6,000 MiB) beside a at full batch would need 18,000 of 16,384: the engine refuses it.
    from dlsched.errors import PlanError
    from dlsched.policies.base import Plan

    c = JobSpec("c", 0.0, 1, 50.0, model="mb", batch_size=64)
    speed = TableSpeed(
        {(x, y): 1.1 for x in ("ma", "mb") for y in ("ma", "mb")},
        {"ma": 12000, "mb": 6000},
        {2: 1.25},
    )
    state = ClusterState(parse_cluster_spec("1x1:V100"), make_policy("fifo"), workload=speed)
    states = {spec.job_id: state.submit(spec) for spec in (B, A, c)}
    state.apply(Plan(start=[(states["b"], (0,))]))
    state.apply(Plan(start=[(states["a"], (0,))], accumulation={"a": 2}))
    assert state.occupancy.memory[0] == 12000
    state.finish(states["b"])
    assert states["a"].accumulation == 1 and state.occupancy.memory[0] == 12000
    with pytest.raises(PlanError, match="exceeds"):
        state.apply(Plan(start=[(states["c"], (0,))]))
    state.apply(Plan(start=[(states["c"], (0,))], accumulation={"c": 2}))  # 3,000 MiB fits


def test_a_what_if_view_frees_a_shared_gpu_only_when_all_its_jobs_are_gone():
    # the quota stage shows the policy the cluster without the jobs it evicts: a GPU two of
    # them shared was released twice ("GPU 0 is already free", the pass raised), and one whose
    # partner stayed was shown idle, so a job was started on it beside the partner (a random
    # composition of sharing and quotas found both)
    from dlsched.policies.base import Plan

    speed = TableSpeed({("ma", "mb"): 1.5, ("mb", "ma"): 1.5}, {"ma": 6000, "mb": 6000})
    state = ClusterState(parse_cluster_spec("1x2:V100"), make_policy("fifo"), workload=speed)
    b, a = state.submit(B), state.submit(A)
    state.apply(Plan(start=[(b, (0,))]))
    state.apply(Plan(start=[(a, (0,))]))
    assert not state.free.is_free(0) and state.free.total == 1
    assert not state.without(gone=[a]).free.is_free(0)  # b still holds it
    both = state.without(gone=[a, b])
    assert both.free.is_free(0) and both.free.total == 2


def test_the_state_keeps_the_jobs_a_job_may_share_with():
    # a sharing pass reads its candidate partners from the state (running jobs alone on their
    # GPUs, model and memory known) instead of scanning every running job: kept through
    # sharing, a partner leaving, preemption, a job of unknown memory and a what-if view
    from dlsched.policies.base import Plan
    from dlsched.state.invariants import problems

    speed = TableSpeed({("ma", "mb"): 1.5, ("mb", "ma"): 1.5}, {"ma": 6000, "mb": 6000})
    state = ClusterState(parse_cluster_spec("1x3:V100"), make_policy("fifo"), workload=speed)
    b, a = state.submit(B), state.submit(A)
    unknown = state.submit(JobSpec("u", 0.0, 1, 50.0, model="mc", batch_size=64))
    state.apply(Plan(start=[(b, (0,))]))
    assert list(state.sharing_candidates) == ["b"]  # (asked first here: built from running)
    state.apply(Plan(start=[(a, (0,)), (unknown, (1,))]))
    assert list(state.sharing_candidates) == []  # a and b share GPU 0; u's memory is unknown
    state.finish(b)
    assert list(state.sharing_candidates) == ["a"]  # alone again
    assert list(state.without(gone=[a]).sharing_candidates) == []
    state.apply(Plan(preempt=[a]))
    assert list(state.sharing_candidates) == []
    assert problems(state) == []


def test_a_sharing_pass_takes_a_job_scaled_in_in_the_same_pass_for_no_partner():
    # the quota stage scales an elastic job in (from GPUs 0 and 1 to 1) and shows the policy
    # GPU 0 idle; the sharing pass read the job's GPUs from the job, not the view, and offered
    # GPU 0 twice, idle and as the partner's: the pass raised "GPU 0 is not free"
    from dlsched.policies.base import Plan

    speed = TableSpeed({("ma", "mb"): 1.5, ("mb", "ma"): 1.5}, {"ma": 4000, "mb": 4000})
    state = ClusterState(parse_cluster_spec("1x2:V100"), make_policy("fifo"), workload=speed)
    e = state.submit(JobSpec("e", 0.0, 2, 100.0, model="mb", batch_size=64, min_gpus=1))
    state.apply(Plan(start=[(e, (0, 1))]))
    state.submit(JobSpec("a", 0.0, 2, 60.0, model="ma", batch_size=64))
    view = state.without(freed=[(e, (0,))])
    plan = make_policy("sjf-ffs").schedule(view)
    assert all(len(set(gpus)) == len(gpus) for _, gpus in plan.start), plan.start


def test_a_plan_cannot_put_a_job_on_a_gpu_of_a_failed_node():
    from dlsched.errors import PlanError
    from dlsched.policies.base import Plan

    speed = TableSpeed({}, {"ma": 100, "mb": 100})
    state = ClusterState(parse_cluster_spec("2x1:V100"), make_policy("fifo"), workload=speed)
    state.node_down(0)
    b = state.submit(B)
    with pytest.raises(PlanError, match="not usable"):
        state.apply(Plan(start=[(b, (0,))]))


def test_the_benefit_test_counts_accumulation_only_while_sharing():
    # b runs alone (170 s of work, from t=0); a (100 s at its full batch) arrives at t=10 and
    # fits beside b only at k = 2, where each of its steps costs f = 1.25 x; both slow each
    # other 1.6 x. T_b = 160, T_a = 100. Sharing now: a at 1 / (1.6 x 1.25) = 0.5 ends at
    # 10 + 200 = 210; b has done 200 / 1.6 = 125 of 160 then and ends at 245: mean 217.5 from
    # t=10 = t_con(100, 160, 1.6 x 1.25, 1.6). Waiting: b ends at 170 and a, alone at its full
    # batch, at 270: mean 210 = t_seq(100, 160) < 217.5, so SJF-BSBF must not share. (The old
    # test took t_seq at a's accumulation-slowed time, 160 + 125 / 2 = 222.5, and shared.)
    assert t_con(100, 160, 1.6 * 1.25, 1.6) == pytest.approx(217.5)
    assert t_seq(100, 160) == pytest.approx(210)
    b = JobSpec("b", 0.0, 1, 170.0, model="mb", batch_size=64)
    a = JobSpec("a", 10.0, 1, 100.0, model="ma", batch_size=64)
    speed = TableSpeed({("ma", "mb"): 1.6, ("mb", "ma"): 1.6}, {"ma": 12000, "mb": 6000}, {2: 1.25})
    s, _ = run("sjf-bsbf", [b, a], speed)
    assert s["b"].finish == pytest.approx(170) and s["a"].finish == pytest.approx(270)
    assert s["a"].shared_s == 0
    # where sharing pays, the pair ends when the corrected t_con says: b (T_b = 300) ends
    # second; a ends at 10 + 2 x 100 = 210, b has 300 - 200 / 1.6 = 175 left, ends at 385:
    # mean from t=10 (200 + 375) / 2 = 287.5 = t_con(100, 300, 2.0, 1.6) < t_seq = 350
    s, _ = run("sjf-bsbf", [JobSpec("b", 0.0, 1, 310.0, model="mb", batch_size=64), a], speed)
    assert s["a"].finish == pytest.approx(210) and s["b"].finish == pytest.approx(385)
    assert t_con(100, 300, 2.0, 1.6) == pytest.approx(287.5)


def test_a_job_sharing_at_a_sub_batch_finishes_alone_at_its_full_batch():
    # xi = 1.1 both ways, f = 1.25: b (T_b = 50 at t=10) ends first, at 10 + 1.1 x 50 = 65; a
    # has done 55 / 1.375 = 40 of its 100 s and runs the last 60 alone at its full batch: ends
    # at 125. Mean from t=10: (55 + 115) / 2 = 85 = t_con(100, 50, 1.1 x 1.25, 1.1) < t_seq 100.
    speed = TableSpeed({("ma", "mb"): 1.1, ("mb", "ma"): 1.1}, {"ma": 12000, "mb": 6000}, {2: 1.25})
    a = JobSpec("a", 10.0, 1, 100.0, model="ma", batch_size=64)
    s, _ = run("sjf-bsbf", [JobSpec("b", 0.0, 1, 60.0, model="mb", batch_size=64), a], speed)
    assert s["b"].finish == pytest.approx(65) and s["a"].finish == pytest.approx(125)
    assert t_con(100, 50, 1.1 * 1.25, 1.1) == pytest.approx(85) and t_seq(100, 50) == pytest.approx(
        100
    )
