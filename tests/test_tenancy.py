"""Tenants: the quota stage (admission, borrowing, reclaim, priority), DRF and finish-time
fairness, with answers worked out by hand; and the stage's guarantees on random workloads."""

import copy
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.admission import QuotaAdmission, reservation, schedule_pass
from dlsched.cluster import parse_cluster_spec
from dlsched.errors import SpecError
from dlsched.jobs import JobSpec, Status
from dlsched.metrics import entitlements, fair_share_index, fairness_summary, quota_summary
from dlsched.policies.catalog import make_policy
from dlsched.sim import SimConfig
from dlsched.sim.engine import Simulator
from dlsched.state.invariants import problems
from dlsched.tenant_quotas import TenantConfig, TenantQuota, equal_shares, load_tenants, philly_vc
from dlsched.workload_model import TraceModel
from example_counts import examples


def run(jobs, config, policy="fifo", cluster="1x4", **params):
    layer = QuotaAdmission(config)
    result = Simulator(
        parse_cluster_spec(cluster),
        jobs,
        make_policy(policy, **params),
        SimConfig(restart_overhead_s=0.0),
        admission=layer,
    ).run()
    return {j.job_id: j for j in result.jobs}, layer


def after_each_plan(sim, note):
    """``note(plan)`` once each plan of the run has applied."""
    apply = sim.state.apply

    def applied(plan):
        out = apply(plan)
        note(plan)
        return out

    sim.state.apply = applied


def test_under_quota_runs_over_quota_waits_even_with_idle_gpus():
    config = TenantConfig({"a": TenantQuota(2), "b": TenantQuota(2)})  # hard quotas
    jobs, _ = run(
        [JobSpec("a1", 0.0, 2, 100.0, tenant="a"), JobSpec("a2", 0.0, 2, 100.0, tenant="a")], config
    )
    assert jobs["a1"].first_start == 0.0
    assert jobs["a2"].first_start == 100.0  # b's 2 GPUs stayed idle: a may not borrow


def test_borrowing_and_its_reclaim_take_exactly_the_youngest_borrowed_jobs():
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    spec = [JobSpec(f"a{i}", float(i), 1, 1000.0, tenant="a") for i in range(4)]
    spec.append(JobSpec("b1", 10.0, 2, 50.0, tenant="b"))
    jobs, layer = run(spec, config)
    assert [jobs[f"a{i}"].first_start for i in range(4)] == [0.0, 1.0, 2.0, 3.0]  # a borrows b's 2
    # b needs its nominal 2 back: a's two youngest (a3, a2) are evicted, no more
    assert jobs["b1"].first_start == 10.0
    assert jobs["a3"].preemptions == jobs["a2"].preemptions == 1
    assert jobs["a0"].preemptions == jobs["a1"].preemptions == 0
    assert layer.evictions == {"a": 2}
    assert jobs["a2"].finish > 1000.0 and jobs["a0"].finish == 1000.0


def test_a_borrowing_limit_bounds_what_a_tenant_takes():
    config = TenantConfig({"a": TenantQuota(2, 1, "lab"), "b": TenantQuota(2, None, "lab")})
    jobs, _ = run([JobSpec(f"a{i}", float(i), 1, 100.0, tenant="a") for i in range(4)], config)
    assert [jobs[f"a{i}"].first_start for i in range(4)] == [0.0, 1.0, 2.0, 100.0]


def test_a_lending_limit_keeps_the_rest_of_a_tenant_s_quota_for_it():
    # 2x4, cohort lab: a (nominal 4, lending limit 1: it keeps 3) and b (nominal 4). b submits
    # eight 1-GPU jobs of 100 s at 0: it takes its 4 and the 1 a lends (b0-b4), and 3 GPUs stay
    # idle, kept for a. a1 (3 GPUs, 50 s) at 10 starts at once and nobody is evicted. b5-b7
    # wait for b's first five to end at 100 (a's kept GPUs idle again from 60). b borrows 1
    # GPU 0..100 s and a lends it: 100 GPU-s each. Without a lending limit b took all 8 at 0
    # and a1 evicted three of them.
    config = TenantConfig(
        {"a": TenantQuota(4, None, "lab", lending_limit=1), "b": TenantQuota(4, None, "lab")}
    )
    spec = [JobSpec(f"b{i}", 0.0, 1, 100.0, tenant="b") for i in range(8)]
    spec.append(JobSpec("a1", 10.0, 3, 50.0, tenant="a"))
    jobs, layer = run(spec, config, cluster="2x4")
    assert [jobs[f"b{i}"].first_start for i in range(8)] == [0.0] * 5 + [100.0] * 3
    assert (jobs["a1"].first_start, jobs["a1"].finish) == (10.0, 60.0)
    assert layer.evictions == {}
    assert layer.borrowed_gpu_s == {"b": 100.0} and layer.lent_gpu_s == {"a": 100.0}


def test_lent_gpu_hours_share_out_only_what_each_tenant_may_lend():
    # 2x4, cohort lab: a (nominal 4, lending limit 1: it may lend 1), b (2) and c (0). c's
    # three 1-GPU jobs of 100 s at 0 all start: the cohort lends 1 + 2 = 3. c borrows 300
    # GPU-s, lent pro rata to what each may lend: a 1/3 (100), b 2/3 (200). Counting a's kept
    # 3 as lendable would split it 4:2 (a 200, b 100).
    config = TenantConfig(
        {
            "a": TenantQuota(4, None, "lab", lending_limit=1),
            "b": TenantQuota(2, None, "lab"),
            "c": TenantQuota(0, None, "lab"),
        }
    )
    spec = [JobSpec(f"c{i}", 0.0, 1, 100.0, tenant="c") for i in range(3)]
    jobs, layer = run(spec, config, cluster="2x4")
    assert [(jobs[f"c{i}"].first_start, jobs[f"c{i}"].finish) for i in range(3)] == [
        (0.0, 100.0)
    ] * 3
    assert layer.borrowed_gpu_s == {"c": 300.0}
    assert layer.lent_gpu_s == pytest.approx({"a": 100.0, "b": 200.0})


def test_a_reclaim_takes_back_only_what_the_kept_quota_does_not_hold():
    # 2x4, cohort lab: a (nominal 4, lending limit 2: it keeps 2), b (4, submits nothing) and
    # c (0). c's six 1-GPU jobs of 100 s at 0 take the 6 GPUs a and b lend. a1 (4 GPUs) at 10
    # gets a's 2 kept GPUs and needs 2 more: c's two most recently admitted jobs (c5, c4) are
    # evicted, no more (reckoned as without a lending limit, the cohort's room was 4 short and
    # four were). They wait for c's other four to end at 100 and run their last 90 s.
    config = TenantConfig(
        {
            "a": TenantQuota(4, None, "lab", lending_limit=2),
            "b": TenantQuota(4, None, "lab"),
            "c": TenantQuota(0, None, "lab"),
        }
    )
    spec = [JobSpec(f"c{i}", 0.0, 1, 100.0, tenant="c") for i in range(6)]
    spec.append(JobSpec("a1", 10.0, 4, 500.0, tenant="a"))
    jobs, layer = run(spec, config, cluster="2x4")
    assert [jobs[f"c{i}"].first_start for i in range(6)] == [0.0] * 6
    assert jobs["a1"].first_start == 10.0 and layer.evictions == {"c": 2}
    assert [jobs[f"c{i}"].preemptions for i in range(6)] == [0] * 4 + [1] * 2
    assert [jobs[f"c{i}"].finish for i in range(6)] == [100.0] * 4 + [190.0] * 2


def test_a_higher_priority_class_preempts_within_its_tenant_only():
    config = TenantConfig({"a": TenantQuota(2), "b": TenantQuota(2)})
    spec = [
        JobSpec("low", 0.0, 2, 100.0, tenant="a"),
        JobSpec("other", 0.0, 2, 100.0, tenant="b", priority=0),
        JobSpec("high", 5.0, 1, 10.0, tenant="a", priority=5),
    ]
    jobs, layer = run(spec, config)
    assert jobs["high"].first_start == 5.0 and jobs["low"].preemptions == 1
    assert jobs["other"].preemptions == 0 and layer.evictions == {"a": 1}


def test_drf_shares_gpus_by_weight():
    spec = [JobSpec(f"{t}{i}", 0.0, 1, 100.0, tenant=t) for t in "ab" for i in range(4)]
    for weights, expected in ((None, {"a": 2, "b": 2}), ("a=3,b=1", {"a": 3, "b": 1})):
        sim = Simulator(
            parse_cluster_spec("1x4"), spec, make_policy("drf", weights=weights), SimConfig()
        )
        result = sim.run()
        first = [j for j in result.jobs if j.first_start == 0.0]
        assert {t: sum(1 for j in first if j.spec.tenant == t) for t in "ab"} == expected


@pytest.mark.parametrize("weights", ["alice", "a=3,b", "a=0", "a=x", "a=inf", "a=1e308"])
def test_a_malformed_weight_is_refused_naming_the_field(weights):
    # "alice" has no "=": it was a bare ValueError from tuple unpacking, not a SpecError
    with pytest.raises(SpecError) as error:
        make_policy("drf", weights=weights)
    assert error.value.field == "weights"


def test_rho_on_a_two_tenant_example():
    # 4 GPUs, 2 tenants: each tenant's own cluster is 2 GPUs. a's 1-GPU job ran 150 s for 100 s
    # of work: 1.5. b's 4-GPU job needs 2x longer on 2 GPUs (200 s) and took 500 s: 2.5.
    from dlsched.jobs import JobSpec, JobState

    jobs = []
    for seq, (tenant, gpus, jct, gpu_time) in enumerate(
        [("a", 1, 150.0, 100.0), ("b", 4, 500.0, 400.0)]
    ):
        j = JobState(JobSpec(tenant, 0.0, gpus, 100.0, tenant=tenant), seq)
        j.finish, j.attained_gpu_s = jct, gpu_time
        jobs.append(j)
    f = fairness_summary({"a": jobs[:1], "b": jobs[1:]}, 4)
    assert f["rho_by_tenant"] == {"a": 1.5, "b": 2.5} and f["max_tenant_rho"] == 2.5
    assert f["jain_index"] == pytest.approx((100 + 400) ** 2 / (2 * (100**2 + 400**2)))


@pytest.mark.parametrize(
    "jobs, expected",
    [
        # a holds all 4 GPUs from 0 to 100; b's 2-GPU job waits from 10 to 100: both fair
        # shares are 2 GPUs, a holds 2x its share and b none: (2 + 0)^2 / (2 (4 + 0)) = 0.5
        ([("a1", "a", 0, 4), ("b1", "b", 10, 2)], 0.5),
        # a's 1 GPU and b's 3 run side by side: each holds its share capped at its demand (an
        # equal split, 2 and 2, would call it 0.8); before and after, one tenant alone
        ([("a1", "a", 0, 1), ("b1", "b", 0, 3)], 1.0),
    ],
    ids=["one-holds-all", "demand-capped"],
)
def test_the_fair_share_index_over_time_by_hand(jobs, expected):
    from conftest import run as simulate_on
    from dlsched.metrics import summarize

    specs = [JobSpec(i, float(t), g, 100.0, tenant=tenant) for i, tenant, t, g in jobs]
    _, result = simulate_on("1x4", specs, "fifo", SimConfig(restart_overhead_s=0.0))
    summary = summarize(result)
    assert summary["fair_share_index"] == pytest.approx(expected)
    # the whole trace's GPU time per tenant cannot tell: it is each tenant's demand
    assert summary["jain_index"] != pytest.approx(expected)


def test_fair_shares_are_of_the_gpus_up_while_a_node_is_down():
    from conftest import run as simulate_on
    from dlsched.metrics import summarize

    # 2 nodes of 2 GPUs: a's job and b0 on node 0, b1 and b2 on node 1, which is down from 100
    # to 600. Meanwhile the 2 GPUs up are shared 1 and 1, as a and b hold them: 1 all along (held
    # to the 4 GPUs of both nodes, b's share would be 3 and the index about 0.9)
    specs = [JobSpec("a0", 0.0, 1, 1000.0, tenant="a")]
    specs += [JobSpec(f"b{i}", 0.0, 1, 1000.0, tenant="b") for i in range(3)]
    config = SimConfig(restart_overhead_s=0.0, node_events=((100.0, "down", 1), (600.0, "up", 1)))
    jobs, result = simulate_on("2x2", specs, "fifo", config)
    assert jobs["b1"].failures == jobs["b2"].failures == 1 and jobs["a0"].failures == 0
    assert summarize(result)["fair_share_index"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "demand, expected",
    [
        ({"a": 4, "b": 4}, {"a": 3.0, "b": 1.0}),  # 4 GPUs split 3:1
        ({"a": 1, "b": 4}, {"a": 1.0, "b": 3.0}),  # a asks for less than its 3: b takes the rest
        ({"a": 1, "b": 1}, {"a": 1.0, "b": 1.0}),  # room for both: each gets what it asks
    ],
)
def test_fair_shares_are_max_min_by_quota_capped_at_demand(demand, expected):
    from dlsched.metrics import _max_min

    weights = {"a": 3.0, "b": 1.0}  # nominal quotas
    assert dict(_max_min(demand, weights.__getitem__, 4)) == pytest.approx(expected)


def test_the_fair_share_index_tells_policies_apart_where_gpu_time_cannot():
    from conftest import run as simulate_on
    from dlsched.metrics import summarize

    # a's eight 1-GPU jobs come first; b's four just after. FIFO gives b a GPU only once a's
    # are all placed; DRF gives b each GPU that frees until their dominant shares are equal
    specs = [JobSpec(f"a{i}", float(i), 1, 1000.0 + 100 * i, tenant="a") for i in range(8)]
    specs += [JobSpec(f"b{i}", 10.0 + i, 1, 3000.0, tenant="b") for i in range(4)]
    index = {}
    for policy in ("fifo", "drf"):
        _, result = simulate_on("1x4", specs, policy, SimConfig(restart_overhead_s=0.0))
        summary = summarize(result)
        index[policy] = (summary["fair_share_index"], summary["jain_index"])
    assert index["fifo"][1] == pytest.approx(index["drf"][1])  # the same GPU time each
    assert index["drf"][0] > index["fifo"][0] + 0.2  # 0.88 against 0.59 when written


def test_ftf_serves_the_tenant_with_the_largest_rho_first():
    # one GPU, busy until 100; a's job has waited since 1, b's since 50: at 100, a's rho is larger
    spec = [
        JobSpec("blocker", 0.0, 1, 100.0, tenant="c"),
        JobSpec("a1", 1.0, 1, 10.0, tenant="a"),
        JobSpec("b1", 50.0, 1, 10.0, tenant="b"),
    ]
    result = Simulator(parse_cluster_spec("1x1"), spec, make_policy("ftf"), SimConfig()).run()
    starts = {j.job_id: j.first_start for j in result.jobs}
    assert starts["a1"] == 100.0 and starts["b1"] == 110.0


def test_configs_default_equal_philly_and_bad_files(tmp_path):
    equal = equal_shares(["x", "y", "z"], 10)
    assert sorted(q.nominal for q in equal.tenants.values()) == [3, 3, 4]
    philly = philly_vc(512)
    assert sum(q.nominal for q in philly.tenants.values()) == 512 and len(philly.tenants) == 11
    assert philly.quota("6214e9").nominal == 93 and philly.quota("unknown").nominal == 0
    good = tmp_path / "q.yaml"
    good.write_text(
        "tenants:\n  a: {nominal: 4, borrowing_limit: 2, cohort: lab, weight: 2}\ndefault: "
        "{nominal: 1}\n"
    )
    config = load_tenants(str(good), [], 8)
    assert config.quota("a").limit == 6 and config.quota("zz").nominal == 1
    bad = tmp_path / "bad.yaml"
    for text, field in (
        ("tenants:\n  a: {nominal: -1}\n", "tenants.a.nominal"),
        ("tenants:\n  a: {nominal: 1, color: red}\n", "tenants.a.color"),
        ("tenants:\n  a: {weight: 0}\n", "tenants.a.weight"),
        # keys YAML reads as a number and as text: their order was asked (TypeError)
        ("tenants:\n  a: {1: 2, color: red}\n", "tenants.a.1"),
        ("tenants: {}\n3: x\nextra: y\n", "quotas.3"),
    ):
        bad.write_text(text)
        with pytest.raises(Exception, match=field.replace(".", r"\.")):
            load_tenants(str(bad), [], 8)


@st.composite
def tenant_cases(draw):
    gpus = draw(st.sampled_from([4, 8]))
    names = ["a", "b", "c"]
    quotas = {}
    for t in names:
        nominal, cohort = draw(st.integers(0, gpus // 2)), draw(st.sampled_from([None, "lab"]))
        lending = draw(st.one_of(st.none(), st.integers(0, nominal))) if cohort else None
        limit = draw(st.one_of(st.none(), st.integers(0, 4)))
        quotas[t] = TenantQuota(nominal, limit, cohort, 1.0, lending)
    jobs = []
    for k in range(draw(st.integers(1, 15))):
        n, elastic = draw(st.integers(1, 2)), draw(st.booleans())
        jobs.append(
            JobSpec(
                f"j{k}",
                float(draw(st.integers(0, 300))),
                n,
                float(draw(st.integers(5, 200))),
                tenant=draw(st.sampled_from(names)),
                priority=draw(st.sampled_from([0, 0, 1])),
                min_gpus=1 if elastic else None,
                max_gpus=2 * n if elastic else None,
            )
        )
    return f"1x{gpus}", TenantConfig(quotas), jobs


@settings(max_examples=examples(60), deadline=None)
@given(
    tenant_cases(),
    st.sampled_from(
        ["fifo", "sjf", "tiresias", "drf", "ftf", "elastic-fifo", "elastic-tiresias", "aryl"]
    ),
)
def test_no_tenant_holds_more_than_its_limit_and_nominal_quota_is_never_withheld(case, policy):
    from dlsched.inference import DemandCycle, DemandStep

    cluster, config, jobs = case
    quotas = config.tenants
    layer = QuotaAdmission(config)
    demand = None
    if policy == "aryl":  # an inference server, loaned and reclaimed in turn (notice 60 s)
        cluster += ",1x4@inference"
        steps = (DemandStep(0.0, 0, 0), DemandStep(100.0, 0, 1), DemandStep(160.0, 1, 1))
        demand = DemandCycle("test", 1, steps, 300.0, 60.0, 0.0)
    sim = Simulator(
        parse_cluster_spec(cluster),
        jobs,
        make_policy(policy),
        SimConfig(restart_overhead_s=0.0, inference_demand=demand),
        workload=PowerLaw(),
        admission=layer,
    )
    state, apply = sim.state, sim.state.apply

    def apply_and_check(plan):
        apply(plan)
        assert not problems(state), problems(state)
        held: dict[str, int] = {}
        for job in state.running.values():
            held[job.spec.tenant] = held.get(job.spec.tenant, 0) + len(job.gpus)
        for tenant, n in held.items():
            assert n <= config.quota(tenant).limit, (tenant, n)
        # nobody borrows what a lending limit keeps: the cohort's tenants count beyond what
        # they keep at most what they may lend (without loans: a job admitted on a loan keeps
        # its admission when the server is taken back, as Kueue's do when capacity goes)
        if demand is None:
            counted, lab = state.admissions.counted, {t for t, q in quotas.items() if q.cohort}
            beyond = sum(max(0, counted.get(t, 0) - quotas[t].kept) for t in lab)
            assert beyond <= sum(quotas[t].nominal - quotas[t].kept for t in lab)
        # a job that fits its tenant's nominal quota is admitted in the pass it could be (or the
        # next, a millisecond later, when the plan itself gave quota back)
        for job in [] if layer._changed else state.pending.values():
            if not job.admitted:
                t = job.spec.tenant
                assert layer.used.get(t, 0) + reservation(job) > config.quota(t).nominal

    state.apply = apply_and_check
    result = sim.run()
    for job in result.jobs:  # every job that could ever be admitted finished
        q = config.quota(job.spec.tenant)
        possible = job.num_gpus <= (q.limit if q.cohort else q.nominal) and (
            q.cohort is None
            or job.num_gpus
            <= q.kept + sum(v.nominal - v.kept for v in quotas.values() if v.cohort == q.cohort)
        )
        if possible:
            assert job.status is Status.DONE, job
    # the fair-share index weighted by nominal quota, with loans and reclaims too: a Jain index
    # of at most three tenants, so 1/3 to 1 where defined
    index = fair_share_index(result, entitlements(config))
    assert index is None or 1 / 3 - 1e-9 <= index <= 1.0 + 1e-9


class _NominatingEveryHead(QuotaAdmission):
    """The stage as it was before heads that fail as the books stand were put aside: every
    bucket's head is nominated in admission order and asked for victims."""

    def _hopeless(self, books, key):
        return False


@settings(max_examples=examples(60), deadline=None)
@given(tenant_cases(), st.sampled_from(["fifo", "tiresias", "elastic-tiresias", "aryl"]))
def test_putting_hopeless_heads_aside_changes_no_decision(case, policy):
    """The stage sets aside the heads that cannot be admitted as the books stand, until the
    pass first admits or evicts; every job's course, every eviction and the GPU-hours
    borrowed and lent are those of the stage that nominates every head."""
    cluster, config, jobs = case
    if policy == "aryl":
        cluster += ",1x4@inference"
    outcomes = []
    for stage in (QuotaAdmission, _NominatingEveryHead):
        layer = stage(copy.deepcopy(config))
        result = Simulator(
            parse_cluster_spec(cluster),
            jobs,
            make_policy(policy),
            SimConfig(restart_overhead_s=0.0),
            workload=PowerLaw(),
            admission=layer,
        ).run()
        courses = [
            (j.job_id, j.first_start, j.finish, j.preemptions, j.executed_gpu_s)
            for j in result.jobs
        ]
        outcomes.append((courses, layer.evictions, layer.borrowed_gpu_s, layer.lent_gpu_s))
    assert outcomes[0] == outcomes[1]


def test_under_a_hard_quota_jobs_are_nominated_by_class_alone():
    # A tenant without a cohort never borrows, so Kueue's order is its class, then submit time.
    # a (hard quota 3) runs L (2 GPUs) from 0; at 10 M (1 GPU) and H (class 1, 2 GPUs) arrive.
    # H goes first and evicts L; M then fits beside H. (Taking M as "within quota" and H as
    # "borrowing" nominated M first: H then evicted M, not started, and L: two evictions, and M
    # admitted again a millisecond later.)
    spec = [
        JobSpec("L", 0.0, 2, 1000.0, tenant="a"),
        JobSpec("M", 10.0, 1, 100.0, tenant="a"),
        JobSpec("H", 10.0, 2, 100.0, tenant="a", priority=1),
    ]
    jobs, layer = run(spec, TenantConfig({"a": TenantQuota(3)}))
    assert (jobs["H"].first_start, jobs["M"].first_start, jobs["L"].finish) == (10, 10, 1100)
    assert layer.evictions == {"a": 1}


def test_a_head_set_aside_is_looked_at_again_after_a_reclaim():
    # Cohort lab: a and b, nominal 2 each, b may borrow 2. b1 (1 GPU) and b3 (3) run from 0 and
    # 1: b holds 4. E (b, 1 GPU) arrives at 10 and cannot be admitted (b at its limit). At 20 H
    # (a, 1 GPU) and F (b, 2 GPUs) arrive. H fits a's nominal quota, so it is nominated before
    # E and F, which would borrow (Kueue's order), and takes a's quota back by evicting b3, the
    # youngest borrower. E, set aside as hopeless when the pass began, is looked at again: b now
    # has room, and E is admitted at 20 beside b1 and H; F, of the same tenant and class, comes
    # after E and finds the cohort's one GPU left too few. At 120 H and E end: b3, older, is
    # admitted again before F (b at its limit then) and runs its 981 s left, so F starts at 1101.
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, 2, "lab")})
    jobs = [
        JobSpec("b1", 0.0, 1, 1000.0, tenant="b"),
        JobSpec("b3", 1.0, 3, 1000.0, tenant="b"),
        JobSpec("E", 10.0, 1, 100.0, tenant="b"),
        JobSpec("H", 20.0, 1, 100.0, tenant="a"),
        JobSpec("F", 20.0, 2, 100.0, tenant="b"),
    ]
    done, layer = run(jobs, config)
    assert layer.evictions == {"b": 1} and done["b3"].first_start == 1.0
    assert done["H"].first_start == 20.0
    assert done["E"].first_start == 20.0
    assert (done["b3"].finish, done["F"].first_start) == (1101.0, 1101.0)


@pytest.mark.parametrize("policy", ["elastic-fifo", "elastic-tiresias"])
def test_a_quota_scale_in_is_not_shrunk_again_by_the_elastic_policy(policy):
    """Found by the property test above. Tenant b (nominal 3 of 8 GPUs) borrows: j11 is elastic
    (1..4 GPUs). When the stage scales j11 in to admit another tenant's job, it frees the GPUs
    in the view it gives the policy; the policy's own shrink rule then released the same GPUs
    again ("GPU 7 is already free") and the simulation stopped."""
    rows = [
        ("j0", 69, 1, 47, "c", 1, None, None), ("j1", 2, 2, 141, "b", 1, None, None),
        ("j2", 1, 2, 8, "c", 0, None, None), ("j3", 2, 2, 128, "c", 1, None, None),
        ("j4", 1, 2, 8, "c", 0, None, None), ("j5", 2, 2, 8, "c", 0, None, None),
        ("j6", 2, 1, 8, "a", 0, None, None), ("j7", 65, 2, 71, "c", 1, 1, 4),
        ("j8", 0, 2, 7, "b", 0, None, None), ("j9", 1, 2, 7, "a", 0, None, None),
        ("j10", 0, 1, 5, "a", 0, None, None), ("j11", 0, 2, 174, "b", 1, 1, 4),
        ("j12", 3, 2, 6, "a", 0, None, None),
    ]  # fmt: skip
    jobs = [
        JobSpec(i, float(t), n, float(d), tenant=who, priority=p, min_gpus=lo, max_gpus=hi)
        for i, t, n, d, who, p, lo, hi in rows
    ]
    config = TenantConfig({t: TenantQuota(n, None, "lab", 1.0) for t, n in zip("abc", (2, 3, 3))})
    sim = Simulator(
        parse_cluster_spec("1x8"),
        jobs,
        make_policy(policy),
        SimConfig(restart_overhead_s=0.0),
        workload=PowerLaw(),
        admission=QuotaAdmission(config),
    )
    state, apply = sim.state, sim.state.apply

    def apply_and_check(plan):
        apply(plan)
        assert not problems(state), problems(state)

    state.apply = apply_and_check
    assert all(j.status is Status.DONE for j in sim.run().jobs)


class PowerLaw(TraceModel):
    """Speed at n GPUs = (n / request) ** 0.8 (for elastic growth)."""

    def __call__(self, job, gpus):
        return (len(gpus) / job.num_gpus) ** 0.8

    def speed_at_size(self, spec, gpus):
        return (gpus / spec.num_gpus) ** 0.8


def test_a_reclaim_shrinks_a_borrowers_elastic_job_before_it_preempts_anyone():
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    spec = [
        JobSpec("e", 0.0, 2, 1000.0, tenant="a", min_gpus=1, max_gpus=4),
        JobSpec("b1", 10.0, 2, 50.0, tenant="b"),
    ]
    layer = QuotaAdmission(config)
    sizes = []
    sim = Simulator(
        parse_cluster_spec("1x4"),
        spec,
        make_policy("elastic-fifo"),
        SimConfig(restart_overhead_s=0.0),
        workload=PowerLaw(),
        admission=layer,
    )

    def record(plan):
        e = sim.state.running.get("e")
        sizes.append((sim.state.now, len(e.gpus) if e else 0))

    after_each_plan(sim, record)
    jobs = {j.job_id: j for j in sim.run().jobs}
    assert (0.0, 4) in sizes  # it grew into b's idle quota
    assert (10.0, 2) in sizes  # b reclaimed: e scaled in to 2, not evicted
    assert jobs["b1"].first_start == 10.0 and jobs["e"].preemptions == 0
    assert layer.evictions == {}


def test_a_job_within_its_nominal_quota_is_admitted_before_one_that_would_borrow():
    # Kueue's order of entries. 1x4, a lab of a and b (nominal 2 each). From 0 a's L (class 2,
    # 2 GPUs) and b's B1 (1 GPU) run: the cohort has 1 GPU left. At 10 a's H (class 1, 1 GPU),
    # which would borrow it, and b's B2 (class 0, 1 GPU), within b's nominal quota, arrive. B2
    # goes first and takes it; H finds no room and borrows the GPU B2 leaves at 110 (110-210):
    # no eviction. (In order of class alone, H borrowed that GPU at 10 and B2 took it back by
    # evicting H; two tenants so placed could take turns for ever.)
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    spec = [
        JobSpec("L", 0.0, 2, 1000.0, tenant="a", priority=2),
        JobSpec("B1", 0.0, 1, 1000.0, tenant="b"),
        JobSpec("H", 10.0, 1, 100.0, tenant="a", priority=1),
        JobSpec("B2", 10.0, 1, 100.0, tenant="b"),
    ]
    jobs, layer = run(spec, config)
    assert (jobs["B2"].first_start, jobs["H"].first_start, jobs["H"].finish) == (10, 110, 210)
    assert jobs["L"].finish == 1000 and jobs["L"].preemptions == 0
    assert layer.evictions == {}


def test_a_job_that_would_borrow_does_not_evict_its_own_tenants_jobs():
    # As above, but H needs 3 GPUs: more than a's nominal quota, so it borrows whatever it
    # evicts. It does not take L's place (Kueue would, at 110, and L would run again from 210
    # to 1100): it waits for room, which L and B1 leave at 1000, and borrows then (1000-1100).
    # Taking L's place would turn a's quota within its nominal into borrowed quota, which a
    # reclaim takes back at once; L, within the nominal quota again, then comes back. The
    # composition search found four tenants doing that in turn for ever, 1 ms apart.
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    spec = [
        JobSpec("L", 0.0, 2, 1000.0, tenant="a"),
        JobSpec("B1", 0.0, 1, 1000.0, tenant="b"),
        JobSpec("H", 10.0, 3, 100.0, tenant="a", priority=1),
        JobSpec("B2", 10.0, 1, 100.0, tenant="b"),
    ]
    jobs, layer = run(spec, config)
    assert jobs["B2"].first_start == 10
    assert (jobs["H"].first_start, jobs["H"].finish) == (1000, 1100)
    assert jobs["L"].finish == 1000 and jobs["L"].preemptions == 0
    assert layer.evictions == {}


def test_growth_is_held_to_the_quota():
    # hard quota 2: the elastic job may not grow into the 2 idle GPUs beyond it
    config = TenantConfig({"a": TenantQuota(2), "b": TenantQuota(2)})
    spec = [JobSpec("e", 0.0, 1, 100.0, tenant="a", min_gpus=1, max_gpus=4)]
    layer = QuotaAdmission(config)
    result = Simulator(
        parse_cluster_spec("1x4"),
        spec,
        make_policy("elastic-fifo"),
        SimConfig(),
        workload=PowerLaw(),
        admission=layer,
    ).run()
    e = result.jobs[0]
    assert e.attained_gpu_s / e.run_time_s == pytest.approx(2.0)  # it ran on 2 GPUs, not 4


def test_the_tenant_usage_series_integrates_to_the_jobs_gpu_time(tmp_path):
    # the binning once dropped the rest of a stretch when float rounding put it on a bin edge
    import csv

    from dlsched.cli import main

    assert (
        main(
            [
                "simulate",
                "--trace",
                "synthetic",
                "--trace-param",
                "num_jobs=300;tenants=3",
                "--cluster",
                "4x8:V100",
                "--policy",
                "tiresias",
                "--out",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    series = list(csv.DictReader((tmp_path / "tenants_timeseries.csv").open()))
    times = sorted({float(r["time_s"]) for r in series})
    width = times[1] - times[0]
    binned, held = {}, {}
    for r in series:
        binned[r["tenant"]] = binned.get(r["tenant"], 0.0) + float(r["gpus"]) * width
    for j in csv.DictReader((tmp_path / "jobs.csv").open()):
        held[j["tenant"]] = held.get(j["tenant"], 0.0) + float(j["gpu_time_s"] or 0)
    assert binned == pytest.approx(held, rel=1e-6)
    # its chart in the report: without quotas, no dotted line of one is named
    assert main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "GPUs per tenant" in page and "dotted: nominal quota" not in page


class BatchInMemory(PowerLaw):
    """24,000 MiB per job spread over its GPUs: on 16,384 MiB GPUs it fits on 2 or more."""

    def memory_mib(self, spec, gpus, accumulation=1):
        return 24_000 / gpus


@pytest.mark.parametrize("policy", ["aryl", "aryl-naive-reclaim"])
def test_a_policy_that_scales_in_further_than_a_reclaim_keeps_its_own_scale_in(policy):
    # 1x4, a lab of a, b and c (nominal 1, 3 and 1: 5 on 4 GPUs). b's elastic E (1-4) runs on
    # all 4 from 0, borrowing 1. At 10 a's A1 fits the cohort's unused quota, and c's C1, within
    # c's nominal quota, takes b's borrowed GPU back: the stage scales E in to 3 GPUs. Aryl,
    # which sees E on those 3, scales it in to 2 to start C1 too. Its scale-in stands (before,
    # the stage's replaced it, and C1 started on a GPU E kept: the run ended blaming Aryl).
    config = TenantConfig(
        {t: TenantQuota(n, None, "lab") for t, n in (("a", 1), ("b", 3), ("c", 1))}
    )
    spec = [
        JobSpec("E", 0.0, 4, 1000.0, tenant="b", min_gpus=1, max_gpus=4),
        JobSpec("A1", 10.0, 1, 100.0, tenant="a"),
        JobSpec("C1", 10.0, 1, 100.0, tenant="c"),
    ]
    sim = Simulator(
        parse_cluster_spec("1x4"),
        spec,
        make_policy(policy),
        SimConfig(restart_overhead_s=0.0),
        workload=PowerLaw(),
        admission=QuotaAdmission(config),
    )
    sizes = []
    after_each_plan(
        sim, lambda plan: sizes.extend((sim.state.now, j.job_id, g) for j, g in plan.resize)
    )
    jobs = {j.job_id: j for j in sim.run().jobs}
    assert (jobs["A1"].first_start, jobs["C1"].first_start, jobs["E"].preemptions) == (10, 10, 0)
    assert sizes[0] == (10.0, "E", (0, 1))


def test_a_reclaim_scales_a_borrower_in_only_as_far_as_its_memory_fits():
    # 1x4, a lab of a (nominal 1) and b (nominal 3). a's elastic E (1..4) borrows all 4 GPUs.
    # b's 3-GPU job arrives: scaling E in to 1 GPU would give b its quota, but E needs 2 for
    # its memory (the stage planned 1 and the state refused it); so E is evicted instead.
    jobs = [
        JobSpec("E", 0.0, 2, 1000.0, tenant="a", min_gpus=1, max_gpus=4),
        JobSpec("B", 10.0, 3, 100.0, tenant="b"),
    ]
    config = TenantConfig(
        {"a": TenantQuota(1, None, "lab", 1.0), "b": TenantQuota(3, None, "lab", 1.0)}
    )
    sim = Simulator(
        parse_cluster_spec("1x4:V100/16384"),
        jobs,
        make_policy("elastic-fifo"),
        SimConfig(),
        workload=BatchInMemory(),
        admission=QuotaAdmission(config),
    )
    done = {j.job_id: j for j in sim.run().jobs}
    assert done["B"].first_start == 10.0 and done["E"].preemptions == 1
    assert done["E"].status is Status.DONE


# -- fair share and quotas count what the state counts ------------------------------------------
def _pass(state):
    return state.apply(schedule_pass(state, state.policy, state.admission))


def _fair_share_after(event, cluster):
    """z0 (tenant z, 2 GPUs) and b0 (tenant b, 2 GPUs) run on 2-GPU nodes; then ``event`` takes
    z0 off its GPUs and a 2-GPU job of each tenant waits for the one node free.
    z holds 0 GPUs and b 2, so DRF starts z's job. (Were z's 2 GPUs still counted, the tie
    would go to b, first by name.)"""
    from dlsched.state.cluster_state import ClusterState

    state = ClusterState(parse_cluster_spec(cluster), make_policy("drf"))
    z0 = state.submit(JobSpec("z0", 0.0, 2, 100.0, tenant="z"))
    b0 = state.submit(JobSpec("b0", 0.0, 2, 100.0, tenant="b"))
    _pass(state)
    assert z0.status is b0.status is Status.RUNNING
    waiting = event(state, z0)
    b1 = state.submit(JobSpec("b1", 0.0, 2, 100.0, tenant="b"))
    assert state.tenant_gpus == {"z": 0, "b": 2}
    _pass(state)
    assert waiting.status is Status.RUNNING and b1.status is Status.PENDING


def test_drf_after_a_node_failure_counts_the_gpus_the_tenant_lost():
    def fail_its_node(state, z0):
        state.node_down(state.cluster.gpu_node[z0.gpus[0]])
        return z0  # it waits again

    _fair_share_after(fail_its_node, "3x2")  # the third node is free


def test_drf_after_a_cancel_counts_the_gpus_the_tenant_gave_up():
    def cancel(state, z0):
        state.cancel(z0)
        return state.submit(JobSpec("z1", 0.0, 2, 100.0, tenant="z"))

    _fair_share_after(cancel, "2x2")  # z0's node is free


def test_ftf_after_a_cancel_counts_only_the_tenants_with_work():
    # 2 x 4 GPUs. z0 (tenant z, all 8) runs from 0; b1 (b, 8 GPUs, 100 s) waits from 0. At 150 z0
    # is cancelled (z has no other job) and a1 (a, 1 GPU, 100 s) arrives. N = 2 tenants with
    # work (a, b): each one's own cluster is 8 / 2 = 4 GPUs. rho(a) = (0 + 100) / 100 = 1;
    # rho(b) = (150 + 100) / max(100, 800 / 4) = 1.25, so b1 starts and a1 waits (7 GPUs would
    # be left for a1 otherwise, too few for b1). Were z still counted (N = 3, 8/3 GPUs each),
    # rho(b) = 250 / 300 = 0.83 < 1 and a1 would start first.
    from dlsched.state.cluster_state import ClusterState
    from dlsched.view import Plan

    state = ClusterState(parse_cluster_spec("2x4"), make_policy("ftf"))
    z0 = state.submit(JobSpec("z0", 0.0, 8, 1000.0, tenant="z"))
    state.apply(Plan(start=[(z0, tuple(range(8)))]))
    b1 = state.submit(JobSpec("b1", 0.0, 8, 100.0, tenant="b"))
    state.advance_to(150.0)
    state.cancel(z0)
    a1 = state.submit(JobSpec("a1", 150.0, 1, 100.0, tenant="a"))
    assert not any(state.tenant_gpus.values())
    _pass(state)
    assert b1.status is Status.RUNNING and a1.status is Status.PENDING
    assert not problems(state)


def test_drf_under_quotas_counts_a_start_the_stage_cut():
    # 1 x 8 GPUs; z may use 4 (hard), b 8. z_run (2) and b_run (2) start at 0. At 1 the elastic
    # z0 (asks 4, at least 1) arrives: DRF plans 4, the stage cuts it to 1 + the 1 GPU z has
    # left = 2. b_fill (2) takes the last 2 GPUs. At 2, z1 (2) and b1 (2) arrive: z1 does not
    # fit z's quota (4 + 2 > 4), b1 is admitted but no GPU is free. At 50 z_run ends: z holds 2
    # (z0) and b 4, so z1 (admitted now: 2 + 2 = 4) starts before b1.
    config = TenantConfig({"z": TenantQuota(4), "b": TenantQuota(8)})
    spec = [
        JobSpec("z_run", 0.0, 2, 50.0, tenant="z"),
        JobSpec("b_run", 0.0, 2, 1000.0, tenant="b"),
        JobSpec("z0", 1.0, 4, 1000.0, tenant="z", min_gpus=1, max_gpus=4),
        JobSpec("b_fill", 1.5, 2, 1000.0, tenant="b"),
        JobSpec("z1", 2.0, 2, 100.0, tenant="z"),
        JobSpec("b1", 2.0, 2, 100.0, tenant="b"),
    ]
    jobs, _ = run(spec, config, policy="drf", cluster="1x8")
    assert jobs["z0"].first_start == 1.0 and jobs["b_fill"].first_start == 1.5
    assert jobs["z1"].first_start == 50.0 and jobs["b1"].first_start == 150.0


def test_the_quota_charge_follows_aryl_s_reclaim_scale_in():
    # One owned server and one inference server, 4 GPUs each; z may use 8. The inference side
    # lends its server; the elastic e (asks 4, 2..8) starts and grows onto the loan: z uses 8,
    # and z1 (2 GPUs) is not admitted. The inference side takes its server back: Aryl scales e
    # in to the owned server's 4 GPUs, so z uses 4 and z1 is admitted (4 + 2 = 6 <= 8); Aryl's
    # base demand then shrinks e to 2 to start z1 on the other 2: z uses 4. (Charged for e's 8
    # still, z1 would wait for quota until e ends.)
    from dlsched.state.cluster_state import ClusterState

    config = TenantConfig({"z": TenantQuota(8)})
    layer = QuotaAdmission(config)
    state = ClusterState(
        parse_cluster_spec("1x4:V100,1x4:V100@inference"),
        make_policy("aryl"),
        workload=PowerLaw(),
        admission=layer,
    )
    state.set_inference_demand(0)
    e = state.submit(JobSpec("e", 0.0, 4, 1000.0, tenant="z", min_gpus=2, max_gpus=8))
    _pass(state)
    assert len(e.gpus) == 8 and layer.usage(state, "z") == 8
    z1 = state.submit(JobSpec("z1", 0.0, 2, 100.0, tenant="z"))
    _pass(state)
    assert layer.usage(state, "z") == 8  # z1 waits for quota
    state.set_inference_demand(1)
    assert e.gpus == (0, 1, 2, 3) and state.tenant_gpus == {"z": 4}
    assert layer.usage(state, "z") == 4
    _pass(state)
    assert e.gpus == (0, 1) and z1.gpus == (2, 3) and layer.usage(state, "z") == 4


def test_the_quota_charge_follows_a_reclaim_preemption():
    # As above, but r (4) holds the owned server, so e (asks 4, 2..8) runs on the loaned one
    # alone, at 4. The reclaim preempts e, which then waits at its base size 2: z uses r's 4 +
    # 2 = 6, and z1 (2) is admitted (6 + 2 <= 8). (Charged for e's 4 still: 10 > 8, refused.)
    from dlsched.state.cluster_state import ClusterState

    config = TenantConfig({"z": TenantQuota(8)})
    layer = QuotaAdmission(config)
    layer.log = []
    state = ClusterState(
        parse_cluster_spec("1x4:V100,1x4:V100@inference"),
        make_policy("aryl"),
        workload=PowerLaw(),
        admission=layer,
    )
    r = state.submit(JobSpec("r", 0.0, 4, 1000.0, tenant="z"))
    _pass(state)
    state.set_inference_demand(0)
    e = state.submit(JobSpec("e", 0.0, 4, 1000.0, tenant="z", min_gpus=2, max_gpus=8))
    _pass(state)
    assert r.gpus == (0, 1, 2, 3) and e.gpus == (4, 5, 6, 7)
    assert layer.usage(state, "z") == 8
    state.set_inference_demand(1)
    assert e.status is Status.PENDING and e.preemptions == 1
    assert layer.usage(state, "z") == 6
    z1 = state.submit(JobSpec("z1", 0.0, 2, 100.0, tenant="z"))
    _pass(state)
    assert ("admitted", z1) in [(kind, job) for kind, job, _ in layer.log]
    assert layer.usage(state, "z") == 8
    z = layer.usage_by_tenant(state)["z"]  # what the server's API and metrics show
    assert (z.used, z.held, z.borrowed, z.waiting_for_quota) == (8, 4, 0, 0)
    z2 = state.submit(JobSpec("z2", 0.0, 1, 100.0, tenant="z"))
    _pass(state)
    z = layer.usage_by_tenant(state)["z"]
    assert (z.used, z.waiting_for_quota) == (8, 1) and z2.status is Status.PENDING


def test_borrowed_and_lent_gpu_hours_count_up_to_the_finish_and_name_the_lender():
    # a (nominal 2) runs one 4-GPU job for 1,000 s on 1x4 and borrows b's 2 GPUs all along; b
    # submits nothing. Borrowed by a = lent by b = 2 GPUs x 1,000 s = 2,000/3,600 GPU-h.
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    layer = QuotaAdmission(config)
    result = Simulator(
        parse_cluster_spec("1x4"),
        [JobSpec("a1", 0.0, 4, 1000.0, tenant="a")],
        make_policy("fifo"),
        SimConfig(restart_overhead_s=0.0),
        admission=layer,
    ).run()
    table = quota_summary(result)["tenants"]
    assert table["a"]["borrowed_gpu_h"] == pytest.approx(2000 / 3600)
    assert table["b"]["lent_gpu_h"] == pytest.approx(2000 / 3600)
    assert table["a"]["lent_gpu_h"] == table["b"]["borrowed_gpu_h"] == 0.0


def test_lent_gpu_hours_name_only_the_borrower_s_cohort_and_never_exceed_unused_quota():
    # 2x4 (8 GPUs). Cohort x: a (nominal 2) and b (2); cohort y: c (2), d (2). Each of a1 and
    # c1 (4 GPUs each) runs 0..1,000 s. a borrows b's 2 GPUs and c borrows d's 2: b and d each
    # lent 2,000 GPU-s. Before, all the borrowing was pooled and shared out over every cohort's
    # unused quota, which gave the same here only by symmetry: see the next case.
    config = TenantConfig(
        {
            "a": TenantQuota(2, None, "x"),
            "b": TenantQuota(2, None, "x"),
            "c": TenantQuota(2, None, "y"),
            "d": TenantQuota(2, None, "y"),
        }
    )
    layer = QuotaAdmission(config)
    Simulator(
        parse_cluster_spec("2x4"),
        [JobSpec("a1", 0.0, 4, 1000.0, tenant="a"), JobSpec("c1", 0.0, 4, 1000.0, tenant="c")],
        make_policy("fifo"),
        SimConfig(restart_overhead_s=0.0),
        admission=layer,
    ).run()
    assert layer.borrowed_gpu_s == {"a": 2000.0, "c": 2000.0}
    assert layer.lent_gpu_s == {"b": 2000.0, "d": 2000.0}
    # Cohort x as above; cohort y: c (nominal 4) submits nothing. a borrows b's 2 GPUs and
    # nothing of c's, which is in another cohort: b lent 2,000 GPU-s, c nothing (the pooled
    # rule gave b 2 x 2/6 and c 2 x 4/6 GPUs).
    config = TenantConfig(
        {
            "a": TenantQuota(2, None, "x"),
            "b": TenantQuota(2, None, "x"),
            "c": TenantQuota(4, None, "y"),
        }
    )
    layer = QuotaAdmission(config)
    Simulator(
        parse_cluster_spec("2x4"),
        [JobSpec("a1", 0.0, 4, 1000.0, tenant="a")],
        make_policy("fifo"),
        SimConfig(restart_overhead_s=0.0),
        admission=layer,
    ).run()
    assert layer.borrowed_gpu_s == {"a": 2000.0}
    assert layer.lent_gpu_s == {"b": 2000.0}


def _beside_an_idle_inference_server(jobs, config):
    """``jobs`` under aryl and ``config``'s quotas on 1 training and 1 inference server of 4
    GPUs each, the inference side idle (its server loaned from 0), restarts free: the jobs as
    they ended, and the quota stage."""
    from dlsched.inference import DemandCycle, DemandStep

    idle = DemandCycle("idle", 1, (DemandStep(0.0, 0, 0),), 1e9, 60.0, 0.0)
    layer = QuotaAdmission(config)
    done = Simulator(
        parse_cluster_spec("1x4:V100,1x4:V100@inference"),
        jobs,
        make_policy("aryl"),
        SimConfig(restart_overhead_s=0.0, inference_demand=idle),
        admission=layer,
    ).run()
    return done.jobs, layer


def test_gpus_borrowed_on_a_loaned_server_are_lent_by_no_tenant():
    # 1 training server and 1 idle inference server (loaned from 0), 4 GPUs each; a and b have
    # 2 GPUs each in one cohort, and e, which the configuration does not name, the default's 2
    # in it. From 0 to 100 s a runs five 1-GPU jobs and e one; from 10 to 60 s b runs b1 (2
    # GPUs). a borrows 3 all along; what the others leave unused of their nominal quotas lends
    # it, the loan the rest:
    #   0-10 s:   b lends 2, e 1           b 20, e 10 GPU-s
    #   10-60 s:  e lends 1, the loan 2    e 50
    #   60-100 s: b lends 2, e 1           b 80, e 40
    # so b lent 100 and e 100. Before, only tenants the configuration names lent, each its share
    # of all that was borrowed whatever lent it: b 3 x 10 + 3 x 40 = 150, e nothing.
    config = TenantConfig(
        {"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")},
        TenantQuota(2, None, "lab"),
    )
    jobs = [JobSpec(f"a{i}", 0.0, 1, 100.0, tenant="a") for i in range(5)]
    jobs += [JobSpec("e1", 0.0, 1, 100.0, tenant="e"), JobSpec("b1", 10.0, 2, 50.0, tenant="b")]
    done, layer = _beside_an_idle_inference_server(jobs, config)
    assert [(j.first_start, j.finish) for j in done] == [(0.0, 100.0)] * 6 + [(10.0, 60.0)]
    assert layer.borrowed_gpu_s == {"a": 300.0}
    assert layer.lent_gpu_s == pytest.approx({"b": 100.0, "e": 100.0})


def test_borrowed_gpu_hours_follow_a_quota_change():
    # 1x4, cohort lab: a (nominal 2) runs a1 (4 GPUs) from 0, borrowing 2 of b's (nominal 2).
    # At 500 a's nominal becomes 4 (the server's admin API): a borrows nothing from then. At
    # 800 a2 (a, 1 GPU) is admitted to wait for a GPU: a counts 5, borrowing 1, until a1
    # finishes at 1,000 and a2 starts (a counts 1). Borrowed by a = lent by b = 2 x 500
    # (before the change) + 1 x 200 = 1,200 GPU-s (200 when the time before the change was
    # charged at the new quota).
    from dlsched.state.cluster_state import ClusterState

    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    layer = QuotaAdmission(config)
    state = ClusterState(parse_cluster_spec("1x4"), make_policy("fifo"), admission=layer)
    a1 = state.submit(JobSpec("a1", 0.0, 4, 1000.0, tenant="a"))
    _pass(state)
    assert len(a1.gpus) == 4
    state.advance_to(500.0)
    layer.set_quota("a", TenantQuota(4, None, "lab"), state.now)
    _pass(state)
    state.advance_to(800.0)
    a2 = state.submit(JobSpec("a2", 800.0, 1, 100.0, tenant="a"))
    _pass(state)
    assert a2.admitted and not a2.gpus
    state.advance_to(1000.0)
    state.finish(a1)
    _pass(state)
    assert a2.gpus
    state.advance_to(1100.0)
    state.finish(a2)
    _pass(state)
    assert layer.borrowed_gpu_s == {"a": 1200.0}
    assert layer.lent_gpu_s == {"b": 1200.0}


def test_a_job_the_policy_preempts_is_not_also_scaled_in_by_the_stage():
    """Found by a random search over small cases (Philly under philly-vc quotas and
    elastic-tiresias stopped the same way). 1x2, cohort lab: a nominal 1, b 2, c 1. At t=144
    j4 (a, elastic 1..4) runs on both GPUs, borrowing 1, and has left Tiresias' first queue. At
    t=250 j2 (b, within its nominal quota) arrives: the stage scales j4 in to 1 GPU to reclaim
    b's quota, and in the same pass elastic-tiresias preempts j4 for j2 (a higher queue). The
    plan held both, and the state refused it ("resized job j4: it is pending"): the run
    stopped. The preemption must win: j4 leaves both GPUs, once, and is not resized."""
    q = {"a": TenantQuota(1, None, "lab"), "b": TenantQuota(2, None, "lab")}
    q["c"] = TenantQuota(1, None, "lab")
    spec = [
        JobSpec("j2", 250.0, 2, 815.0, tenant="b", min_gpus=1, max_gpus=4),
        JobSpec("j3", 25.0, 1, 1187.0, tenant="c"),
        JobSpec("j4", 91.0, 2, 709.0, tenant="a", min_gpus=1, max_gpus=4),
        JobSpec("j5", 44.0, 1, 1592.0, tenant="b", min_gpus=1, max_gpus=2),
    ]
    result = Simulator(
        parse_cluster_spec("1x2"),
        spec,
        make_policy("elastic-tiresias", thresholds_gpu_s="100,1000"),
        SimConfig(restart_overhead_s=0.0),
        workload=PowerLaw(),
        admission=QuotaAdmission(TenantConfig(q)),
    ).run()
    jobs = {j.job_id: j for j in result.jobs}
    assert jobs["j4"].first_start == 144.0 and jobs["j2"].first_start == 250.0
    assert (jobs["j4"].preemptions, jobs["j4"].resizes) == (1, 0)
    assert all(j.status is Status.DONE for j in result.jobs)


@pytest.mark.parametrize("policy", ["elastic-fifo", "elastic-tiresias", "aryl"])
def test_a_quota_cut_never_starts_an_elastic_job_below_where_its_memory_fits(policy):
    # 1x4 of 16,384 MiB GPUs, a's hard quota 2. R (1 GPU) runs 0-100; E (elastic 1..4, asks 2,
    # 24,000 MiB: fits on 2 or more) arrives at 1. Before, the quota stage counted E at its
    # minimum, 1, admitted it beside R and cut its start to 1 GPU: 24,000 MiB on one GPU. Its
    # base size is now 2, the fewest where it fits: it waits for R, then runs 100-200 on 2.
    jobs = [
        JobSpec("R", 0.0, 1, 100.0, tenant="a"),
        JobSpec("E", 1.0, 2, 100.0, tenant="a", min_gpus=1, max_gpus=4),
    ]
    config = TenantConfig({"a": TenantQuota(2), "b": TenantQuota(2)})
    sim = Simulator(
        parse_cluster_spec("1x4:V100/16384"),
        jobs,
        make_policy(policy),
        SimConfig(restart_overhead_s=0.0),
        workload=BatchInMemory(),
        admission=QuotaAdmission(config),
    )
    sizes = []

    def record(plan):
        e = sim.state.running.get("E")
        sizes.append(len(e.gpus) if e else 0)

    after_each_plan(sim, record)
    done = {j.job_id: j for j in sim.run().jobs}
    assert set(sizes) == {0, 2}
    assert (done["E"].first_start, done["E"].finish) == (100.0, 200.0)


class PairMemory(BatchInMemory):
    """A sharing pair's numbers: E's 12,000 MiB spread over its GPUs, B's 8,000 on one; each
    slows the other by 1.5. On 16,384 MiB GPUs E fits beside B on 2 GPUs, not on 1."""

    def memory_mib(self, spec, gpus, accumulation=1):
        return (12_000 / gpus if spec.model == "me" else 8_000) / accumulation

    def slowdown(self, job, partner):
        return 1.5


def _pair_under_quota(cluster: str, quotas=None, more=(), note=None, memory_mib=16384) -> dict:
    """B (tenant a) and F (b), 1 GPU each for 1000 s from 0; E (a, elastic 1..2, asks 2, 100 s)
    at 10, and ``more``; a's hard quota 2, b's 1 (or ``quotas``); sjf-ffs on ``cluster`` of
    ``memory_mib`` GPUs. ``note(sim, plan)`` after each plan."""
    jobs = [
        JobSpec("B", 0.0, 1, 1000.0, tenant="a", model="mb"),
        JobSpec("F", 0.0, 1, 1000.0, tenant="b", model="mb"),
        JobSpec("E", 10.0, 2, 100.0, tenant="a", model="me", min_gpus=1, max_gpus=2),
        *more,
    ]
    quotas = quotas or TenantConfig({"a": TenantQuota(2), "b": TenantQuota(1)})
    sim = Simulator(
        parse_cluster_spec(f"{cluster}:V100/{memory_mib}"),
        jobs,
        make_policy("sjf-ffs"),
        SimConfig(restart_overhead_s=0.0),
        workload=PairMemory(),
        admission=QuotaAdmission(quotas),
    )
    if note is not None:
        after_each_plan(sim, lambda plan: note(sim, plan))
    return {j.job_id: j for j in sim.run().jobs}


def test_a_quota_cut_of_a_start_that_shares_a_gpu_keeps_the_idle_one():
    # 3x1 GPUs; a's hard quota 2. B (a) and F (b) run on GPUs 0 and 1 from 0. E (a, elastic
    # 1..2, asks 2) arrives at 10: sjf-ffs starts it on the idle GPU 2 and beside B on GPU 0.
    # a may take one GPU more, so the stage cuts E to 1: it kept GPU 0 (the node order), where
    # E's 12,000 MiB on one GPU beside B's 8,000 exceed 16,384, and the state refused the plan
    # (the run failed, blaming the policy). Now it keeps the idle GPU: E runs alone from 10 at
    # (1/2)**0.8 of its speed on 2 GPUs, to 10 + 100 / 0.574 = 184.1.
    done = _pair_under_quota("3x1")
    assert (done["E"].first_start, done["E"].gpus) == (10.0, (2,))
    assert done["E"].finish == pytest.approx(10 + 100 / 0.5**0.8)
    assert done["B"].shared_s == 0.0


def test_a_quota_cut_to_idle_gpus_starts_the_job_at_its_full_batch():
    # As above on 12,000 MiB GPUs: sjf-ffs plans E beside B at 2 sub-batches (6,000 + 8,000 MiB
    # would not fit at one). Cut to the idle GPU, E shares nothing: it runs at its full batch,
    # 12,000 MiB. It ran at 2 sub-batches alone, its memory counted at 6,000, so a job could be
    # paired beside it that no longer fit when it went back to its full batch (found by the
    # composition search: the plan was refused and the run ended blaming the policy).
    seen = []

    def record(sim, plan):
        if e := sim.state.running.get("E"):
            seen.append((sim.state.now, e.gpus, e.accumulation, e.memory_mib))

    _pair_under_quota("3x1", note=record, memory_mib=12000)
    assert seen[0] == (10.0, (2,), 1, 12_000.0)


def test_a_quota_cut_that_would_not_fit_beside_a_partner_withdraws_the_start():
    # 2x1 GPUs: B (a) and F (b) on GPUs 0 and 1 until 1000. E (a, 1..2, asks 2) arrives at 10:
    # sjf-ffs starts it beside both (6,000 + 8,000 MiB on each). Cut to the 1 GPU a may take,
    # E would need 12,000 beside 8,000 on 16,384: it waits instead, and starts at 1000 on
    # both GPUs, idle then (a's quota has room for its request), to end at 1100.
    done = _pair_under_quota("2x1")
    assert (done["E"].first_start, done["E"].finish) == (1000.0, 1100.0)
    assert done["B"].shared_s == done["F"].shared_s == 0.0


def test_growth_beside_another_job_does_not_borrow():
    # 3x1 GPUs, a lab of a, b and c (nominal 2, 1 and 1: 4 on 3 GPUs). B (a) and F (b) run on
    # GPUs 0 and 1; E (a, elastic 1..2, asks 2) arrives at 10 and sjf-ffs starts it on the idle
    # GPU 2 and beside B on GPU 0: a would borrow the cohort's spare GPU. Beside B, E cannot
    # scale in, so a reclaim would evict it whole; its growth may not borrow, and it runs
    # alone on GPU 2, 10 to 10 + 100 / 0.5**0.8 = 184.1. C (c, 1 GPU) then fits at 20 beside B,
    # each slowed 1.5 (C ends at 170, B at 1050). Before, E borrowed GPU 0, C took it back at
    # 20 by evicting E, which ran again from 120 to 260 (and, in other cases, the two tenants
    # took turns for ever: tests/test_composition.py).
    quotas = TenantConfig({t: TenantQuota(n, None, "lab") for t, n in zip("abc", (2, 1, 1))})
    starts: list = []
    more = [JobSpec("C", 20.0, 1, 100.0, tenant="c", model="mb")]
    done = _pair_under_quota(
        "3x1",
        quotas,
        more,
        lambda sim, plan: starts.extend((sim.state.now, j.job_id, g) for j, g in plan.start),
    )
    assert starts == [(0, "B", (0,)), (0, "F", (1,)), (10, "E", (2,)), (20, "C", (0,))]
    assert done["E"].finish == pytest.approx(10 + 100 / 0.5**0.8) and done["E"].preemptions == 0
    assert (done["C"].finish, done["B"].finish) == (170.0, 1050.0)


@pytest.mark.parametrize("policy", ["srtf", "tiresias"])
def test_a_preemptive_policy_frees_only_the_gpus_a_job_scaled_in_this_pass_still_holds(policy):
    # the quota stage scales E (elastic, 1..2) in from GPUs 0 and 1 to GPU 0 and shows the
    # policy GPU 1 idle; preempting E for A (2 GPUs) released the GPUs E held before, GPU 1
    # twice: the pass raised "GPU 1 is already free"
    from dlsched.cluster import parse_cluster_spec
    from dlsched.policies.base import Plan
    from dlsched.state.cluster_state import ClusterState

    state = ClusterState(parse_cluster_spec("1x2"), make_policy(policy))
    e = state.submit(JobSpec("E", 0.0, 2, 1000.0, min_gpus=1))
    state.apply(Plan(start=[(e, (0, 1))]))
    if policy == "tiresias":  # E is demoted below the first queue, so A outranks it
        state.policy.order.level["E"] = 1
        state.policy.running_order(state).rekey(e)
    state.submit(JobSpec("A", 0.0, 2, 10.0))
    plan = state.policy.schedule(state.without(freed=[(e, (1,))]))
    assert [j.job_id for j in plan.preempt] == ["E"]
    assert [(j.job_id, sorted(g)) for j, g in plan.start] == [("A", [0, 1])]


def test_a_reclaim_evicts_lower_priority_first_then_the_youngest():
    # issue 25, 8. As above, but a3 (the youngest) is of a higher class. Kueue orders reclaim
    # candidates by lower priority first, then most recently admitted: b1 takes back a2's and
    # a1's GPUs at 10, and a3 keeps running (2 evictions). Before, the youngest went first:
    # a3 and a2, and a3, back in the queue, then evicted a's own lower-class a1 to run again
    # (3 evictions).
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    spec = [JobSpec(f"a{i}", float(i), 1, 1000.0, tenant="a") for i in range(3)]
    spec.append(JobSpec("a3", 3.0, 1, 1000.0, tenant="a", priority=5))
    spec.append(JobSpec("b1", 10.0, 2, 50.0, tenant="b"))
    jobs, layer = run(spec, config)
    assert jobs["b1"].first_start == 10.0
    assert [jobs[f"a{i}"].preemptions for i in range(4)] == [0, 1, 1, 0]
    assert layer.evictions == {"a": 2}
    assert (jobs["a0"].finish, jobs["a3"].finish) == (1000.0, 1003.0)


def test_a_reclaim_takes_a_lower_class_running_job_before_a_higher_class_one_not_started():
    # Kueue's candidate order has no notion of a job not started: class first. On 6 GPUs, c
    # (no cohort) holds 3 until 100; b's L runs on its nominal 2 from 0; b's H (class 1)
    # borrows a's 2 at 1 but finds 1 GPU free: admitted, waiting. a's A, within a's nominal
    # quota, takes the 2 back at 2: L gives way (class 0), H starts on its GPUs, A waits for
    # C's (100-400), and L, without quota until A ends, runs its 998 s left from 400: one
    # eviction. Taking the job not started first (H), H then evicted L, its tenant's own lower
    # class, to be admitted again, at 2.001 (two evictions, and the search found the stage
    # cycling on that order: tenants' high-class jobs evicted and evicting in turn).
    config = TenantConfig(
        {
            "a": TenantQuota(2, None, "lab"),
            "b": TenantQuota(2, None, "lab"),
            "c": TenantQuota(3),  # hard
        }
    )
    spec = [
        JobSpec("C", 0.0, 3, 100.0, tenant="c"),
        JobSpec("L", 0.0, 2, 1000.0, tenant="b"),
        JobSpec("H", 1.0, 2, 500.0, tenant="b", priority=1),
        JobSpec("A", 2.0, 2, 300.0, tenant="a"),
    ]
    jobs, layer = run(spec, config, cluster="1x6")
    assert layer.evictions == {"b": 1}
    assert [jobs[k].preemptions for k in "LHA"] == [1, 0, 0]
    assert (jobs["H"].first_start, jobs["H"].finish) == (2.0, 502.0)
    assert (jobs["A"].first_start, jobs["A"].finish) == (100.0, 400.0)
    assert jobs["L"].finish == 1398.0


def test_loaned_inference_servers_are_borrowable_by_the_cohort():
    # issue 25, 10. 1 training server and 1 inference server (4 GPUs each), inference idle so
    # the server is loaned from 0. a and b have 2 GPUs each in one cohort. a's six 1-GPU jobs
    # all start at 0: 4 within the cohort's nominal 4, 2 on the loan (before, the cohort's
    # nominal total capped a at 4 and two waited to 100 beside 4 idle GPUs). b's 2-GPU job at
    # 10 fits on the loan's other 2 GPUs: nobody is evicted.
    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    jobs = [JobSpec(f"a{i}", 0.0, 1, 100.0, tenant="a") for i in range(6)]
    jobs.append(JobSpec("b1", 10.0, 2, 50.0, tenant="b"))
    finished, layer = _beside_an_idle_inference_server(jobs, config)
    done = {j.job_id: j for j in finished}
    assert [done[f"a{i}"].first_start for i in range(6)] == [0.0] * 6
    assert (done["b1"].first_start, done["b1"].finish) == (10.0, 60.0)
    assert layer.evictions == {} and sum(j.preemptions for j in done.values()) == 0


@pytest.mark.parametrize("period_s, interval_s", [(300.0, None), (100_000.0, 1.0)])
def test_a_job_no_quota_admits_ends_the_simulation_under_a_demand_cycle(period_s, interval_s):
    # Found by the property test above with loans. c has no quota, so c1 is never admitted;
    # the inference demand cycle has events for ever, and the simulation ran on until it was
    # stopped as stalled (100,000 passes). A whole cycle with nothing running and nothing
    # left to arrive now ends it, and c1 is counted as never started. With a schedule interval
    # the interval ticked through all of that cycle, a pass a second (a demand curve may span
    # 1e10 s); after one interval of quiet ticks only the cycle's own events wake the loop.
    from dlsched.inference import DemandCycle, DemandStep

    steps = (DemandStep(0.0, 0, 0), DemandStep(period_s / 3, 0, 1), DemandStep(period_s / 2, 1, 1))
    demand = DemandCycle("test", 1, steps, period_s, 60.0, 0.0)
    config = TenantConfig({"a": TenantQuota(2)})
    jobs = [JobSpec("a1", 0.0, 1, 50.0, tenant="a"), JobSpec("c1", 0.0, 1, 50.0, tenant="c")]
    sim = Simulator(
        parse_cluster_spec("1x4,1x4@inference"),
        jobs,
        make_policy("aryl"),
        SimConfig(inference_demand=demand, schedule_interval_s=interval_s),
        admission=QuotaAdmission(config),
    )
    result = sim.run()
    done = {j.job_id: j for j in result.jobs}
    assert done["a1"].finish == 50.0 and done["c1"].first_start is None
    assert result.schedule_calls < 200  # (50 s of ticks while a1 runs, one quiet second)


def test_a_job_takes_back_borrowed_gpus_and_its_own_lower_class_job_s_in_one_step():
    # issue 25, 7. One cohort of 8 GPUs: a and b have 4 each. At 0, a's L (class 0, 2 GPUs)
    # and b's three 2-GPU jobs (6: b borrows 2) fill the cluster. At 10, a's H (class 5, 4
    # GPUs): a would count 6, over its nominal 4, so borrowed GPUs alone cannot be reclaimed
    # for it; and evicting L alone leaves the cohort full. Kueue takes both: L gives way
    # (a within its nominal), and b's youngest job gives back the 2 it borrowed. H runs
    # 10-110. Before, H waited for b's jobs to end at 1000.
    config = TenantConfig({"a": TenantQuota(4, None, "lab"), "b": TenantQuota(4, None, "lab")})
    spec = [JobSpec("L", 0.0, 2, 1000.0, tenant="a")]
    spec += [JobSpec(f"b{i}", 0.0, 2, 1000.0, tenant="b") for i in range(3)]
    spec.append(JobSpec("H", 10.0, 4, 100.0, tenant="a", priority=5))
    jobs, layer = run(spec, config, cluster="1x8")
    assert (jobs["H"].first_start, jobs["H"].finish) == (10.0, 110.0)
    assert [jobs[x].preemptions for x in ("L", "b0", "b1", "b2")] == [1, 0, 0, 1]
    assert layer.evictions == {"a": 1, "b": 1}


def test_a_refused_plan_takes_back_the_admissions_and_evictions_of_its_pass():
    # As the borrowing case above, on the state: a (nominal 2 of the cohort's 4) runs a0..a3, so
    # borrows b's 2; b1 (2 GPUs) arrives, the stage evicts a3 and a2 (running) and admits b1.
    # The pass's plan is refused (a start on a GPU that does not exist): a2 and a3 run on,
    # admitted at their places, b1 waits to be admitted, no eviction is counted. The next pass,
    # its plan valid, evicts the same two.
    from dlsched.errors import PlanError
    from dlsched.state.cluster_state import ClusterState
    from dlsched.view import Plan

    config = TenantConfig({"a": TenantQuota(2, None, "lab"), "b": TenantQuota(2, None, "lab")})
    layer = QuotaAdmission(config)
    layer.log = []
    state = ClusterState(parse_cluster_spec("1x4:V100"), make_policy("fifo"), admission=layer)
    a = [state.submit(JobSpec(f"a{i}", 0.0, 1, 1000.0, tenant="a")) for i in range(4)]
    _pass(state)
    numbers = {j.job_id: n for j, (n, _) in zip(a, state.admissions.by_tenant["a"].values())}
    state.advance_to(10.0)
    b1 = state.submit(JobSpec("b1", 10.0, 2, 50.0, tenant="b"))
    plan = schedule_pass(state, state.policy, layer)
    assert sorted(j.job_id for j in plan.preempt) == ["a2", "a3"] and b1.admitted
    bad = Plan(plan.start + [(b1, (9,))], plan.preempt)
    with pytest.raises(PlanError):
        state.apply(bad)
    assert [j.status for j in a] == [Status.RUNNING] * 4 and all(j.admitted for j in a)
    assert {j: n for j, (n, _) in state.admissions.by_tenant["a"].items()} == numbers
    assert not b1.admitted and b1.status is Status.PENDING
    assert layer.evictions == {} and layer.usage(state, "a") == 4
    assert problems(state) == []
    _pass(state)
    assert sorted(j.job_id for j in a if j.status is Status.PENDING) == ["a2", "a3"]
    assert b1.status is Status.RUNNING and layer.evictions == {"a": 2}
    assert problems(state) == []


@pytest.mark.parametrize(
    "quota, field",
    [
        ("{nominal: 1000000000000}", "nominal"),  # past any cluster's GPUs: taken
        ("{nominal: 2, borrowing_limit: 1000000000000}", "borrowing_limit"),
        ("{nominal: 2, lending_limit: 1000000000000, cohort: c}", "lending_limit"),
        ("{nominal: 2, weight: 1.0e+308}", "weight"),  # two such summed to infinity
    ],
)
def test_a_quota_past_its_bound_is_refused_naming_the_field(tmp_path, quota, field):
    from dlsched.tenant_quotas import load_tenants

    path = tmp_path / "q.yaml"
    path.write_text(f"tenants:\n  a: {quota}\n")
    with pytest.raises(SpecError, match="must be") as e:
        load_tenants(str(path), ["a"], 16)
    assert e.value.field == f"tenants.a.{field}"


@pytest.mark.parametrize(
    "quota, reason",
    [
        ("{nominal: 2, lending_limit: 3, cohort: c}", "at most the nominal quota (2)"),
        ("{nominal: 2, lending_limit: 1}", "lends to a cohort: give the tenant one"),
        ("{nominal: 2, lending_limit: -1, cohort: c}", "must be an integer"),
    ],
)
def test_a_lending_limit_past_the_nominal_quota_or_without_a_cohort_is_refused(
    tmp_path, quota, reason
):
    from dlsched.tenant_quotas import load_tenants

    path = tmp_path / "q.yaml"
    path.write_text(f"tenants:\n  a: {quota}\n")
    with pytest.raises(SpecError, match=re.escape(reason)) as e:
        load_tenants(str(path), ["a"], 16)
    assert e.value.field == "tenants.a.lending_limit"


def test_hard_quotas_keep_no_lending_limit():
    config = TenantConfig({"a": TenantQuota(4, None, "lab", lending_limit=1)})
    assert config.quota("a").kept == 3
    hard = config.without_borrowing().quota("a")
    assert (hard.cohort, hard.lending_limit, hard.kept) == (None, None, 0)


def test_a_tenant_s_priority_is_refused_as_doing_nothing_but_the_0_exports_wrote(tmp_path):
    # admission ranks by each job's priority class; a tenant's was taken, shown, and never read
    from dlsched.tenant_quotas import load_tenants

    path = tmp_path / "q.yaml"
    for value in ("5", "-1", "true", "1000000000000000000000000000000"):
        path.write_text(f"tenants:\n  a: {{nominal: 2, priority: {value}}}\n")
        with pytest.raises(SpecError, match="a tenant has no priority class") as e:
            load_tenants(str(path), ["a"], 16)
        assert e.value.field == "tenants.a.priority"
    path.write_text("tenants:\n  a: {nominal: 2, priority: 0}\n")
    assert load_tenants(str(path), ["a"], 16).quota("a").nominal == 2


def test_a_policy_hears_of_the_cancel_of_a_job_the_stage_evicted():
    # 1x2, a lab of a and b (nominal 1 each); Tiresias demotes a job past 10 GPU-s. a's A (2
    # GPUs) borrows b's GPU from 0 and is demoted at 5; at 10 b's B reclaims it: A is evicted
    # and waits to be admitted again, and Tiresias keeps its queue for then. A user cancels it
    # at 20: the policy is told, and Tiresias forgets it. (Before, nobody told it: a server
    # kept the queue of every job so evicted and cancelled for ever; found by the service's
    # random sequences once they had priority classes.)
    from dlsched.state.cluster_state import ClusterState

    config = TenantConfig({"a": TenantQuota(1, None, "lab"), "b": TenantQuota(1, None, "lab")})
    policy = make_policy("tiresias", thresholds_gpu_s="10")
    state = ClusterState(parse_cluster_spec("1x2"), policy, admission=QuotaAdmission(config))
    a = state.submit(JobSpec("A", 0.0, 2, 1000.0, tenant="a"))
    _pass(state)
    state.advance_to(5.0)
    _pass(state)
    assert a.status is Status.RUNNING and policy.order.level == {"A": 1}
    state.advance_to(10.0)
    b = state.submit(JobSpec("B", 10.0, 1, 100.0, tenant="b"))
    _pass(state)
    assert b.status is Status.RUNNING and a.status is Status.PENDING and not a.admitted
    assert policy.order.level == {"A": 1}  # kept for its return
    state.advance_to(20.0)
    state.cancel(a)
    assert policy.order.level == {} and "A" not in policy.order.offset
    assert not problems(state)
