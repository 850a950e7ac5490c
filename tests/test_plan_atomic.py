"""A plan is applied in full or not at all: a bad entry anywhere leaves the state as it was."""

import pytest

from dlsched.cluster import parse_cluster_spec
from dlsched.errors import PlanError
from dlsched.jobs import JobSpec, JobState
from dlsched.policies.catalog import make_policy
from dlsched.state.cluster_state import ClusterState
from dlsched.view import Plan
from test_sharing import TableSpeed


def books(state: ClusterState) -> tuple:
    """Everything a half-applied plan would change."""
    jobs = {**state.pending, **state.running}
    return (
        sorted(state.pending),
        sorted(state.running),
        [sorted(f) for f in state.free.free],
        state.free.total,
        dict(state.tenant_gpus),
        [[j.job_id for j in holders] for holders in state.occupancy.jobs],
        list(state.occupancy.memory),
        {
            jid: (j.status, j.gpus, j.preemptions, j.version, j.accumulation, j.memory_mib)
            for jid, j in jobs.items()
        },
    )


def make_state(cluster="1x4:V100", memory=None, policy="sjf-ffs"):
    speed = TableSpeed(
        {(x, y): 1.1 for x in ("ma", "mb") for y in ("ma", "mb")},
        memory or {"ma": 12000, "mb": 6000},
        {2: 1.25},
    )
    return ClusterState(parse_cluster_spec(cluster), make_policy(policy), workload=speed)


def spec(jid, gpus=1, model="mb", tenant="t"):
    return JobSpec(jid, 0.0, gpus, 100.0, model=model, batch_size=64, tenant=tenant)


def test_a_bad_start_after_valid_entries_changes_nothing():
    state = make_state()
    a, b = state.submit(spec("a", 2)), state.submit(spec("b", 2))
    c = state.submit(spec("c", 2, model="ma"))
    state.apply(Plan(start=[(a, (0, 1))]))
    before = books(state)
    # preempting a and starting b on its GPUs is fine; c cannot join b on GPU 1 (6,000 +
    # 12,000 MiB > 16,384)
    plan = Plan(preempt=[a], start=[(b, (0, 1)), (c, (1, 2))])
    with pytest.raises(PlanError, match=r"job c: GPU 1: 6000 \+ 12000 MiB exceeds"):
        state.apply(plan)
    assert books(state) == before
    # the same plan without the bad entry applies, and says what it changed
    applied = state.apply(Plan(preempt=[a], start=[(b, (0, 1)), (c, (2, 3))]))
    assert [j.job_id for j in applied.started] == ["b", "c"]
    assert [j.job_id for j in applied.preempted] == ["a"]
    assert state.tenant_gpus == {"t": 4} and a.preemptions == 1


def test_a_join_is_checked_against_memory_after_the_plans_preemptions():
    # a (12,000 MiB at full batch) shares GPU 0 with b at 2 sub-batches (6,000). Preempting b
    # puts a back at full batch, so c (6,000) no longer fits beside it: 18,000 > 16,384.
    state = make_state("1x1:V100")
    b, a, c = state.submit(spec("b")), state.submit(spec("a", model="ma")), state.submit(spec("c"))
    state.apply(Plan(start=[(b, (0,))]))
    state.apply(Plan(start=[(a, (0,))], accumulation={"a": 2}))
    before = books(state)
    with pytest.raises(PlanError, match=r"job c: GPU 0: 12000 \+ 6000 MiB exceeds"):
        state.apply(Plan(preempt=[b], start=[(c, (0,))]))
    assert books(state) == before
    # at two sub-batches c fits (12,000 + 3,000)
    state.apply(Plan(preempt=[b], start=[(c, (0,))], accumulation={"c": 2}))
    assert state.occupancy.memory[0] == 15000 and b.status.value == "pending"


class ShrinkGrowsMemory(TableSpeed):
    """Model "ma" holds 16,000 MiB of activations spread over its GPUs; "mb" 12,000 on one."""

    def memory_mib(self, spec, gpus, accumulation=1):
        return (16_000 / gpus if spec.model == "ma" else 12_000) / accumulation

    def checkpoint_mib(self, spec):
        return None


def test_a_join_is_checked_against_memory_after_the_plans_resizes():
    # e (elastic, 4,000 MiB per GPU on 4 GPUs) is scaled in to 3 GPUs by the plan: 5,333 MiB
    # per GPU. c (12,000 MiB) joining it on GPU 2 fits beside the 4,000 it holds now, not
    # beside the 5,333 it will hold (the check read the first: found by tests/test_composition.py,
    # a quota scale-in that overrode the policy's own and left its start on that GPU).
    state = ClusterState(
        parse_cluster_spec("1x4:V100"),
        make_policy("sjf-ffs"),
        workload=ShrinkGrowsMemory(
            {(x, y): 1.1 for x in ("ma", "mb") for y in ("ma", "mb")}, {}, {}
        ),
    )
    e = state.submit(JobSpec("e", 0.0, 4, 100.0, model="ma", batch_size=64, min_gpus=1, max_gpus=4))
    c = state.submit(spec("c", model="mb"))
    state.apply(Plan(start=[(e, (0, 1, 2, 3))]))
    before = books(state)
    with pytest.raises(PlanError, match=r"job c: GPU 2: 5333 \+ 12000 MiB exceeds"):
        state.apply(Plan(resize=[(e, (0, 1, 2))], start=[(c, (2,))]))
    assert books(state) == before
    state.apply(Plan(resize=[(e, (0, 1, 2))], start=[(c, (3,))]))  # on the GPU e leaves


@pytest.mark.parametrize(
    "bad, reason",
    [
        (lambda a, b, x: Plan(start=[(b, (2,)), (b, (3,))]), "job b: it is running"),
        (lambda a, b, x: Plan(preempt=[a, a]), "job a: it is pending"),
        (lambda a, b, x: Plan(start=[(x, (2,))]), "job x: it is not a live job"),
        (lambda a, b, x: Plan(start=[(b, (2, 2))]), "job b: 1 distinct GPUs"),
        (lambda a, b, x: Plan(start=[(b, (7,))]), "job b: onto GPU 7"),
        (lambda a, b, x: Plan(start=[(b, (2,))], accumulation={"b": 0}), "sub-batch count 0"),
        (lambda a, b, x: Plan(resize=[(b, (2,))]), "job b: it is pending"),
    ],
)
def test_each_kind_of_bad_entry_is_named_and_nothing_applies(bad, reason):
    state = make_state()
    a, b = state.submit(spec("a", 2)), state.submit(spec("b"))
    state.apply(Plan(start=[(a, (0, 1))]))
    stranger = JobState(spec=spec("x"), seq=99)
    before = books(state)
    with pytest.raises(PlanError, match=reason):
        state.apply(bad(a, b, stranger))
    assert books(state) == before


def test_an_elastic_job_resized_twice_in_one_plan_is_refused():
    state = make_state("1x4:V100", {"mb": 100})
    e = state.submit(JobSpec("e", 0.0, 2, 100.0, model="mb", min_gpus=1, max_gpus=4))
    state.apply(Plan(start=[(e, (0, 1))]))
    before = books(state)
    with pytest.raises(PlanError, match="resizes it twice"):
        state.apply(Plan(resize=[(e, (0,)), (e, (0, 1, 2))]))
    assert books(state) == before


def test_a_preemption_never_applied_is_planned_again_at_the_next_pass():
    # SRTF on 4 GPUs: a (4 GPUs, 1000 s) runs; b (4 GPUs, 50 s) arrives at 10 and preempts it.
    # The plan is not applied (refused, or skipped by the runtime): a still runs, and the next
    # pass must see it as running, and preempt it again.
    policy = make_policy("srtf")
    state = ClusterState(parse_cluster_spec("1x4:V100"), policy)
    state.submit(JobSpec("a", 0.0, 4, 1000.0))
    state.apply(policy.schedule(state))
    state.advance_to(10.0)
    state.submit(JobSpec("b", 10.0, 4, 50.0))
    first = policy.schedule(state)
    again = policy.schedule(state)
    for plan in (first, again):
        assert [j.job_id for j in plan.preempt] == ["a"]
        assert [j.job_id for j, _ in plan.start] == ["b"]
    state.apply(again)
    assert [j.job_id for j in policy.schedule(state).preempt] == []
    # the state's index of running jobs, not a copy of the policy's: b runs, a waits
    running = state.running_drift(policy.order.linear_key)
    assert "b" in running and "a" not in running and len(running) == 1


def test_a_start_never_applied_is_not_counted_by_tiresias():
    # Tiresias bounds what preempting could free by the GPUs of running jobs per queue, as the
    # state counts them: a start planned but never applied is not in the count
    policy = make_policy("tiresias")
    state = ClusterState(parse_cluster_spec("1x4:V100"), policy)
    state.submit(JobSpec("a", 0.0, 4, 1000.0))
    policy.schedule(state)  # not applied
    plan = policy.schedule(state)
    assert [j.job_id for j, _ in plan.start] == ["a"]
    assert policy.running_order(state).head_gpus == {}
    state.apply(plan)
    assert policy.running_order(state).head_gpus == {0: 4}  # queue 0 (the key's first is -0)


def test_a_job_cannot_join_a_gpu_a_profiling_run_holds():
    # a profiling run holds GPU 0's second place beside a (ClusterState.lease): a plan that
    # puts b there too is refused whole (a sharing pass once did: three on a GPU of two)
    state = make_state("1x2:V100")
    a, b = state.submit(spec("a")), state.submit(spec("b"))
    state.apply(Plan(start=[(a, (0,))]))
    state.lease("profiling c", (0,))
    before = books(state)
    with pytest.raises(PlanError, match="job b: GPU 0 holds a profiling run"):
        state.apply(Plan(start=[(b, (0,))]))
    assert books(state) == before
    state.release("profiling c")
    state.apply(Plan(start=[(b, (0,))]))  # once it ended, b may join a
    assert [j.job_id for j in state.occupancy.jobs[0]] == ["a", "b"]


def test_a_job_cannot_join_a_gpu_of_a_node_out_of_service():
    # the state refuses what a sharing pass (or a plug-in) might plan: a new job beside one on a
    # cordoned node; the job already there runs on
    state = make_state("1x2:V100")
    a, b = state.submit(spec("a")), state.submit(spec("b"))
    state.apply(Plan(start=[(a, (0,))]))
    state.cordon(0)
    before = books(state)
    with pytest.raises(PlanError, match="job b: GPU 0: its node is out of service"):
        state.apply(Plan(start=[(b, (0,))]))
    assert books(state) == before and a.gpus == (0,)
    state.uncordon(0)
    state.apply(Plan(start=[(b, (0,))]))  # back in service, b may join a
    assert [j.job_id for j in state.occupancy.jobs[0]] == ["a", "b"]


@pytest.mark.parametrize("policy", ["sjf-ffs", "sjf-bsbf"])
def test_a_sharing_policy_pairs_no_job_with_one_beside_a_profiling_run(policy):
    # a runs on GPU 0 with a profiling run beside it, GPU 1 idle: b goes to GPU 1; c then
    # joins b on GPU 1, not a on GPU 0
    state = make_state("1x2:V100", policy=policy)
    a = state.submit(spec("a"))
    state.apply(Plan(start=[(a, (0,))]))
    state.lease("profiling", (0,))
    b = state.submit(spec("b"))
    plan = state.policy.schedule(state)
    assert plan.start == [(b, (1,))]
    state.apply(plan)
    c = state.submit(spec("c"))
    plan = state.policy.schedule(state)
    assert plan.start == [(c, (1,))]  # beside b, not a


@pytest.mark.parametrize("policy", ["sjf-ffs", "sjf-bsbf"])
def test_a_profiling_run_beside_one_gpu_of_a_job_leaves_its_other_gpus_open(policy):
    # a holds GPUs 0-3 with a profiling run beside it on GPU 0: b (2 GPUs) joins a on GPUs 1
    # and 2, as a run may be leased beside a job that has a partner. It once waited for the
    # run's end, and in the runtime for as long as runs of new jobs followed each other there
    state = make_state("1x4:V100", policy=policy)
    a = state.submit(spec("a", 4))
    state.apply(Plan(start=[(a, (0, 1, 2, 3))]))
    state.lease("profiling", (0,))
    b = state.submit(spec("b", 2))
    plan = state.policy.schedule(state)
    assert plan.start == [(b, (1, 2))]
    state.apply(plan)
    assert [len(state.occupancy.jobs[g]) for g in range(4)] == [1, 2, 2, 1]
