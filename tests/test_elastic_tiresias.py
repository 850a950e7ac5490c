"""Elastic Tiresias: grows into idle GPUs by marginal speedup, gives GPUs back when jobs wait."""

import pytest

from conftest import ends_within
from dlsched.admission import QuotaAdmission
from dlsched.cluster import parse_cluster_spec
from dlsched.errors import SpecError
from dlsched.jobs import JobSpec
from dlsched.policies.catalog import make_policy
from dlsched.sim import SimConfig
from dlsched.sim.engine import Simulator
from dlsched.tenant_quotas import TenantConfig, TenantQuota
from dlsched.workload_model import TraceModel


class SizeTable(TraceModel):
    """Speed by (model, GPUs), relative to the job's speed at its request."""

    def __init__(self, table):
        self.table = table

    def __call__(self, job, gpus):
        return self.table[job.spec.model][len(gpus)] / self.table[job.spec.model][job.num_gpus]

    def speed_at_size(self, spec, gpus):
        t = self.table[spec.model]
        return t[gpus] / t[spec.num_gpus] if gpus in t else None


LINEARISH = {"m": {1: 0.6, 2: 1.0, 3: 1.3, 4: 1.6}, "flat": {1: 1.0, 2: 1.05, 3: 1.08, 4: 1.1}}


def run(jobs, cluster="1x4", policy="elastic-tiresias", params=None, admission=None, **cfg):
    sim = Simulator(
        parse_cluster_spec(cluster),
        jobs,
        make_policy(policy, **(params or {})),
        SimConfig(**cfg),
        workload=SizeTable(LINEARISH),
        admission=admission,
    )
    result = sim.run()
    return {j.job_id: j for j in result.jobs}, result


def test_an_elastic_job_alone_starts_at_its_maximum():
    # Nothing waits, 4 GPUs idle: E (asks 2, may use 1..4) starts on 4 at speed 1.6: 100/1.6.
    s, _ = run([JobSpec("e", 0.0, 2, 100.0, model="m", min_gpus=1, max_gpus=4)])
    assert s["e"].finish == pytest.approx(100 / 1.6) and s["e"].resizes == 0


def test_grows_when_gpus_free_up_and_gives_them_back_when_a_job_arrives():
    # A (2 GPUs, 50 s, not elastic) and E (2 of 1..4, 200 s) start at 0. At 50 A ends: E grows
    # to 4 in the background (old speed until 80, then 1.5 s switch): done 80 by 80, the rest
    # at 1.6 from 81.5. B (2 GPUs) arrives at 100: E gives its 2 extra GPUs back (scale-in, no
    # pause) and B starts at once. E: done 80 + 1.6 * 18.5 = 109.6 at 100, then 90.4 s at 1.0.
    jobs = [
        JobSpec("a", 0.0, 2, 50.0, model="m"),
        JobSpec("e", 0.0, 2, 200.0, model="m", min_gpus=1, max_gpus=4),
        JobSpec("b", 100.0, 2, 30.0, model="m"),
    ]
    s, r = run(jobs)
    assert s["b"].first_start == 100 and s["b"].finish == pytest.approx(130)
    # after b leaves at 130, e grows again: 30 more s done at 1.0 by 130 (139.6 total), then the
    # background switch at 160 (old speed until then: 169.6 done), 1.5 s pause, 30.4 s at 1.6
    assert s["e"].finish == pytest.approx(161.5 + 30.4 / 1.6)
    assert s["e"].resizes == 3


def test_leftover_gpus_go_to_the_largest_marginal_speedup():
    # Two elastic jobs asking 1 GPU each on 4 GPUs. Relative to its request, "m" gains 0.67
    # then 0.5 per extra GPU, "flat" 0.05: both spare GPUs go to x, which starts on 3 and ends
    # at 100 / 2.17 = 46.2; only then does y grow (one resize).
    jobs = [
        JobSpec("x", 0.0, 1, 100.0, model="m", min_gpus=1, max_gpus=3),
        JobSpec("y", 0.0, 1, 100.0, model="flat", min_gpus=1, max_gpus=3),
    ]
    s, _ = run(jobs)
    assert len(s["x"].gpus) == 3 and s["x"].resizes == 0
    assert s["x"].finish == pytest.approx(100 / (1.3 / 0.6))
    assert s["y"].resizes == 1


def test_sizes_stay_within_min_and_max():
    import random

    rng = random.Random(3)
    jobs = []
    for i in range(30):
        n = rng.choice([1, 2, 4])
        elastic = rng.random() < 0.6
        jobs.append(
            JobSpec(
                f"j{i}",
                float(rng.randint(0, 500)),
                n,
                float(rng.randint(20, 400)),
                model="m" if n <= 2 else "flat",
                min_gpus=max(1, n // 2) if elastic else None,
                max_gpus=min(4, 2 * n) if elastic else None,
            )
        )
    sim = Simulator(
        parse_cluster_spec("2x4"),
        jobs,
        make_policy("elastic-tiresias", shrink_when_waiting=2, thresholds_gpu_s=[100]),
        SimConfig(),
        workload=SizeTable(
            {"m": {1: 0.6, 2: 1.0, 3: 1.3, 4: 1.6}, "flat": {2: 0.6, 3: 0.8, 4: 1.0}}
        ),
    )
    sizes = []
    original = sim.state.apply

    def checked(plan):
        original(plan)
        for job in sim.state.running.values():
            low, high = job.spec.gpu_range
            assert low <= len(job.gpus) <= high
            sizes.append(len(job.gpus) - job.num_gpus)

    sim.state.apply = checked
    result = sim.run()
    assert all(j.finish is not None for j in result.jobs)
    assert any(d > 0 for d in sizes) and any(d < 0 for d in sizes)  # it both grew and shrank


def test_a_job_shrunk_for_waiting_jobs_is_not_grown_back_while_they_wait():
    # elastic-fifo, shrink when more than 0 wait. A (2 GPUs of 1..2, 100 s) runs alone from 0.
    # B (4 GPUs) arrives at 10 and waits for A: A shrinks to 1 (scale-in, no pause) and, since
    # B still waits, is not grown back into the 3 idle GPUs (that would repeat at every event).
    # A: 10 s done by 10, then 90 s at speed 0.6 -> 160; B runs 160..170.
    jobs = [
        JobSpec("a", 0.0, 2, 100.0, model="m", min_gpus=1, max_gpus=2),
        JobSpec("b", 10.0, 4, 10.0, model="m"),
    ]
    s, _ = run(jobs, policy="elastic-fifo", params={"shrink_when_waiting": 0})
    assert s["a"].resizes == 1 and s["a"].finish == pytest.approx(160)
    assert s["b"].first_start == pytest.approx(160) and s["b"].finish == pytest.approx(170)


class WithMemory(SizeTable):
    """Model "m" holds 20,000 MiB per GPU on 1 GPU and 10,000 on 2 (global batch kept)."""

    def memory_mib(self, spec, gpus, accumulation=1):
        return 20000 / gpus / accumulation


def test_a_shrink_that_would_overflow_gpu_memory_does_not_happen():
    # As above, but A cannot shrink to 1 GPU: 20,000 MiB do not fit a 16,384 MiB V100. It keeps
    # its 2 GPUs and ends at 100; B then runs 100..110. (Shrinking used to ignore memory.)
    jobs = [
        JobSpec("a", 0.0, 2, 100.0, model="m", min_gpus=1, max_gpus=2),
        JobSpec("b", 10.0, 4, 10.0, model="m"),
    ]
    sim = Simulator(
        parse_cluster_spec("1x4:V100/16384"),
        jobs,
        make_policy("elastic-fifo", shrink_when_waiting=0),
        SimConfig(),
        workload=WithMemory(LINEARISH),
    )
    s = {j.job_id: j for j in sim.run().jobs}
    assert s["a"].resizes == 0 and s["a"].finish == pytest.approx(100)
    assert s["b"].finish == pytest.approx(110)


def test_the_state_refuses_a_resize_whose_memory_does_not_fit():
    from dlsched.errors import PlanError
    from dlsched.state.cluster_state import ClusterState
    from dlsched.view import Plan

    state = ClusterState(
        parse_cluster_spec("1x4:V100/16384"), make_policy("fifo"), workload=WithMemory(LINEARISH)
    )
    a = state.submit(JobSpec("a", 0.0, 2, 100.0, model="m", min_gpus=1, max_gpus=2))
    state.apply(Plan(start=[(a, (0, 1))]))
    with pytest.raises(PlanError, match="exceeds"):
        state.apply(Plan(resize=[(a, (0,))]))


def test_elastic_fifo_without_elastic_jobs_is_fifo():
    import random

    rng = random.Random(5)
    jobs = [
        JobSpec(
            f"j{i}",
            float(rng.randint(0, 2000)),
            rng.choice([1, 1, 2, 4, 8]),
            float(rng.randint(10, 900)),
        )
        for i in range(200)
    ]
    finishes = {}
    for name in ("fifo", "elastic-fifo"):
        result = Simulator(parse_cluster_spec("2x8"), jobs, make_policy(name), SimConfig()).run()
        finishes[name] = {j.job_id: j.finish for j in result.jobs}
    assert finishes["fifo"] == finishes["elastic-fifo"]


@pytest.mark.parametrize("name", ["elastic-tiresias", "elastic-fifo"])
def test_a_plan_that_is_never_applied_leaves_nothing_behind(name):
    # The state refused the plan, or the runtime's executor failed it: the next pass must see
    # the cluster as it is. E (asks 1 of 1..4) runs alone on 1 of 4 GPUs: each pass plans to grow
    # it to 4 (the first did not change the policy's idea of its size) and counts no GPU above
    # its request (one preempting could free).
    from dlsched.state.cluster_state import ClusterState
    from dlsched.view import Plan

    policy = make_policy(name)
    state = ClusterState(parse_cluster_spec("1x4"), policy, workload=SizeTable(LINEARISH))
    e = state.submit(JobSpec("e", 0.0, 1, 100.0, model="m", min_gpus=1, max_gpus=4))
    state.apply(Plan(start=[(e, (0,))]))
    first = policy.schedule(state)
    second = policy.schedule(state)
    assert [(j.job_id, g) for j, g in first.resize] == [("e", (0, 1, 2, 3))]
    assert [(j.job_id, g) for j, g in second.resize] == [("e", (0, 1, 2, 3))]
    assert policy.elastic.extra_gpus == 3  # in the pass: what its plan grew
    state.apply(second)
    assert state.elastic_grown_gpus == 3 and state.elastic_growable == {}
    assert policy.schedule(state).resize == []


def test_with_growth_and_the_shrink_for_waiting_jobs_off_it_is_tiresias():
    """The ablation's control (docs/experiments/elastic.md): with rules 3 and 4 off, elastic
    Tiresias makes Tiresias's decisions, job for job, and with growth alone it does not."""
    import dlsched

    workload = dlsched.load_workload("muri-3", "7x8:V100", load=0.7, elastic_fraction=0.5)
    plain = dlsched.simulate(workload, "tiresias").jobs
    off = {"grow": False, "shrink_when_waiting": 10**9}
    neither = dlsched.simulate(workload, "elastic-tiresias", params=off).jobs
    assert [(j["job_id"], j["finish_s"]) for j in neither] == [
        (j["job_id"], j["finish_s"]) for j in plain
    ]
    grown = dlsched.simulate(workload, "elastic-tiresias", params={"shrink_when_waiting": 10**9})
    assert grown.summary["resizes"] > 0 and grown.jobs != plain
    with pytest.raises(SpecError, match="grow"):
        dlsched.simulate(workload, "elastic-tiresias", params={"grow": "no"})


def test_a_grown_job_gives_back_only_what_the_waiting_job_needs():
    # E (asks 1, may use 1..4) runs alone on all 4 GPUs; B (2 GPUs) arrives at 100. E gives back
    # the 2 B needs and keeps 2: all 4 busy until B ends at 400. It gave back all 3 extras
    # before, and as a pass grows no job it shrank, one GPU sat idle until B ended (in the
    # runtime, whose passes are periodic, the next pass grew E again: a second resize).
    jobs = [
        JobSpec("e", 0.0, 1, 3000.0, model="m", min_gpus=1, max_gpus=4),
        JobSpec("b", 100.0, 2, 300.0, model="m"),
    ]
    s, r = run(jobs)
    assert s["b"].first_start == 100 and s["b"].finish == pytest.approx(400)
    # GPUs in use, a step series: 4 from 0 on, never fewer before B ends
    assert r.ts_used[0] == 4 and all(used == 4 for t, used in zip(r.ts_time, r.ts_used) if t < 400)
    assert s["e"].resizes == 2  # 4 -> 2 at 100, back to 4 at 400


def test_a_job_shrunk_below_its_request_is_woken_once_at_its_crossing():
    # 4 GPUs, thresholds 100 and 300 GPU-s, shrinking as soon as one job waits. E (asks 2, 1..2,
    # 200 s) runs alone on 2: queue 1 at 50 (100 GPU-s), its next timer for 300 at 50 + 200 / 2
    # = 150. B (3 GPUs, 1000 s) arrives at 60 and waits: E, of a lower queue, scales in to 1
    # (free in the background) and B starts. E has 120 GPU-s then and gains 1 a second: at 150
    # the timer finds 210 and wakes again at the crossing, 150 + 90 = 240. It woke at 195,
    # 217.5, ... (half of what was left each time, on the GPUs it asked for) 28 times more.
    # E's last 140 s of work at 0.6 end at 60 + 140 / 0.6; B at 1060. Events: 2 arrivals, 2
    # completions, 5 wake-ups (E at 50, 150 and 240; B's demotions at 93.3 and 160).
    jobs = [
        JobSpec("e", 0.0, 2, 200.0, model="m", min_gpus=1, max_gpus=2),
        JobSpec("b", 60.0, 3, 1000.0, model="m"),
    ]
    s, r = run(jobs, params={"thresholds_gpu_s": [100, 300], "shrink_when_waiting": 0})
    assert s["e"].finish == pytest.approx(60 + 140 / 0.6) and s["e"].resizes == 1
    assert s["b"].first_start == 60 and s["b"].finish == 1060
    assert r.events == 9


def test_a_job_started_grown_is_demoted_at_its_crossing_on_the_gpus_it_got():
    # 4 GPUs, one threshold of 100 GPU-s. E (asks 1, may use 1..4) starts alone on 4 at 0 and
    # crosses 100 GPU-s at 25. B (4 GPUs) arrives at 50 and, of the top queue, preempts E (of
    # the lower one) at once. (A timer set on the 1 GPU E asked for demoted it at 100.)
    jobs = [
        JobSpec("e", 0.0, 1, 1000.0, model="m", min_gpus=1, max_gpus=4),
        JobSpec("b", 50.0, 4, 100.0, model="m"),
    ]
    s, _ = run(jobs, params={"thresholds_gpu_s": [100]})
    assert s["b"].first_start == 50 and s["e"].preemptions == 1


def test_a_job_grown_while_it_runs_is_demoted_at_its_crossing_on_the_gpus_it_got():
    # A (3 GPUs, 10 s) and E (asks 1, 1..4) start at 0. At 10 E has 10 GPU-s and grows to 4:
    # it crosses 100 GPU-s by 10 + 90 / 4 = 32.5 (or sooner). B (4 GPUs) arrives at 50 and
    # preempts E at once. (A timer set on E's 1 GPU demoted it at 100.)
    jobs = [
        JobSpec("a", 0.0, 3, 10.0, model="m"),
        JobSpec("e", 0.0, 1, 1000.0, model="m", min_gpus=1, max_gpus=4),
        JobSpec("b", 50.0, 4, 100.0, model="m"),
    ]
    s, _ = run(jobs, params={"thresholds_gpu_s": [100]})
    assert s["e"].resizes == 1 and s["e"].preemptions == 1
    assert s["b"].first_start == 50


def test_a_growth_the_quota_stage_cuts_at_every_pass_wakes_the_replay_no_sooner():
    # Tenant a may hold 1 GPU: elastic Tiresias plans E (asks 1, 1..4, 600 s) on 4 at
    # every pass and the stage cuts it back to 1. E's demotion timer, set on the 4 GPUs, would
    # have woken the replay at the crossing on 4 (25 s), and each pass there again at a quarter
    # of what was left (a run of passes with no end before the real crossing); on the GPUs it
    # got, it wakes once, at 100. Events: the arrival, that wake-up, the completion.
    jobs = [JobSpec("e", 0.0, 1, 600.0, model="m", min_gpus=1, max_gpus=4, tenant="a")]
    quotas = QuotaAdmission(TenantConfig({"a": TenantQuota(nominal=1)}))
    with ends_within(20):
        s, r = run(jobs, params={"thresholds_gpu_s": [100]}, admission=quotas)
    assert s["e"].finish == 600 and s["e"].resizes == 0
    assert r.events == 3
