"""The state's pending queues: the policy's order and buckets, kept through every transition,
and admission (the quota stage's queue holds only the jobs it admitted). Hand-made cases."""

import pytest

from dlsched.admission import QuotaAdmission, schedule_pass
from dlsched.cluster import parse_cluster_spec
from dlsched.errors import PlanError
from dlsched.jobs import JobSpec
from dlsched.policies.catalog import make_policy
from dlsched.state.cluster_state import ClusterState
from dlsched.tenant_quotas import TenantConfig, TenantQuota
from dlsched.view import Plan


def fewest_first(job):
    return job.num_gpus


def by_tenant(job):
    return job.spec.tenant


def spec(jid, gpus, submit=0.0, tenant="t"):
    return JobSpec(jid, submit, gpus, 100.0, tenant=tenant)


def ids(jobs):
    return [j.job_id for j in jobs]


def test_the_queue_follows_arrivals_starts_preemptions_failures_and_cancels():
    state = ClusterState(parse_cluster_spec("1x8:V100"), make_policy("fifo"))
    a, b, c = (
        state.submit(spec(j, n, tenant=t))
        for j, n, t in [("a", 4, "x"), ("b", 1, "y"), ("c", 2, "x")]
    )
    queue = state.queue(fewest_first, by_tenant)
    assert ids(queue) == ["b", "c", "a"]
    assert {t: ids(e[2] for e in bucket) for t, bucket in queue.buckets.items()} == {
        "x": ["c", "a"],
        "y": ["b"],
    }
    state.apply(Plan(start=[(a, (0, 1, 2, 3)), (b, (4,))]))
    assert ids(queue) == ["c"] and set(queue.buckets) == {"x"}  # y's bucket went with b
    state.apply(Plan(preempt=[a]))
    assert ids(queue) == ["c", "a"]
    state.apply(Plan(start=[(a, (0, 1, 2, 3))]))
    state.fail(a)  # a crash: it waits again, at its place
    d = state.submit(spec("d", 3))
    assert ids(queue) == ["c", "d", "a"]
    assert queue.sizes == {2: 1, 3: 1, 4: 1}  # GPUs asked -> jobs waiting that ask so many
    state.cancel(d)
    assert ids(queue) == ["c", "a"] and len(queue) == 2 and queue[1] is a
    assert queue.sizes == {2: 1, 4: 1}  # (a FIFO pass ends early when none of them fits)
    # a prefix of the buckets' merge, as a pass reads the best waiting jobs
    assert next(queue.merged())[2].job_id == "c"
    # a queue asked for later starts from the jobs waiting then
    assert ids(state.queue(lambda j: -j.num_gpus)) == ["a", "c"]


def test_a_scan_gives_the_queue_s_order_and_passes_over_a_bucket_once_skipped():
    state = ClusterState(parse_cluster_spec("1x8:V100"), make_policy("fifo"))
    for jid, n, t in [("a", 4, "x"), ("b", 1, "y"), ("c", 2, "x"), ("d", 3, "y"), ("e", 5, "x")]:
        state.submit(spec(jid, n, tenant=t))
    queue = state.queue(fewest_first, by_tenant)
    assert [(j.job_id, b) for j, b in queue.scan(set())] == [
        ("b", "y"),
        ("c", "x"),
        ("d", "y"),
        ("a", "x"),
        ("e", "x"),
    ]
    skipped: set = set()
    seen = []
    for job, bucket in queue.scan(skipped):
        seen.append(job.job_id)
        if job.job_id == "c":
            skipped.add(bucket)  # x's later jobs, a and e, are never looked at
    assert seen == ["b", "c", "d"]


def test_a_policy_reranks_a_waiting_job_in_its_own_queue():
    level = {"a": 1, "b": 0}
    state = ClusterState(parse_cluster_spec("1x8:V100"), make_policy("fifo"))
    for jid in ("a", "b"):
        state.submit(spec(jid, 1))

    def by_level(job):
        return level[job.job_id]

    queue = state.queue(by_level)
    assert ids(queue) == ["b", "a"]
    level["a"] = -1  # promoted while it waits
    queue.rerank(state.pending["a"])
    assert ids(queue) == ["a", "b"]


def quota_state():
    config = TenantConfig(
        {"x": TenantQuota(nominal=2), "y": TenantQuota(nominal=4)}, TenantQuota(nominal=0)
    )
    stage = QuotaAdmission(config)
    return ClusterState(parse_cluster_spec("1x8:V100"), make_policy("fifo"), admission=stage)


def test_under_quotas_the_policy_queue_lists_only_admitted_jobs():
    state = quota_state()
    a = state.submit(spec("a", 2, 0.0, "x"))
    b = state.submit(spec("b", 2, 1.0, "x"))  # x's quota is 2: b waits for it
    state.submit(spec("c", 1, 2.0, "y"))
    queue = state.queue(fewest_first)
    assert ids(queue) == []  # nothing admitted before the first pass
    plan = schedule_pass(state, state.policy, state.admission)
    assert ids(j for j, _ in plan.start) == ["a", "c"]
    assert ids(queue) == ["c", "a"]  # admitted, not started yet: b is not among them
    assert ids(state.not_admitted(fewest_first)) == ["b"]
    # a plan that starts a job the stage did not admit is refused, and nothing applies: nor
    # the pass's admissions, which the next pass makes again
    with pytest.raises(PlanError, match="job b.*not admitted"):
        state.apply(Plan(start=[(a, (0, 1)), (b, (2, 3))]))
    assert a.status.value == "pending" and not a.admitted and ids(queue) == []
    assert ids(state.not_admitted(fewest_first)) == ["c", "a", "b"]
    plan = schedule_pass(state, state.policy, state.admission)
    assert ids(j for j, _ in plan.start) == ["a", "c"]
    state.apply(plan)
    assert ids(queue) == []
    state.finish(a)  # x's quota comes back: b is admitted at the next pass
    plan = schedule_pass(state, state.policy, state.admission)
    assert ids(j for j, _ in plan.start) == ["b"] and b.admitted


def test_an_evicted_job_leaves_the_policy_queue_until_admitted_again():
    config = TenantConfig(
        {
            "x": TenantQuota(nominal=2, borrowing_limit=4, cohort="c"),
            "y": TenantQuota(nominal=4, cohort="c"),
        },
        TenantQuota(nominal=0),
    )
    state = ClusterState(
        parse_cluster_spec("1x8:V100"), make_policy("fifo"), admission=QuotaAdmission(config)
    )
    a = state.submit(spec("a", 2, 0.0, "x"))
    b = state.submit(spec("b", 4, 1.0, "x"))  # borrows y's unused quota
    state.apply(schedule_pass(state, state.policy, state.admission))
    assert a.status.value == b.status.value == "running"
    state.submit(spec("c", 4, 2.0, "y"))  # y takes its quota back: x's youngest goes
    plan = schedule_pass(state, state.policy, state.admission)
    assert ids(plan.preempt) == ["b"] and not b.admitted
    state.apply(plan)
    assert b.status.value == "pending"
    assert "b" not in ids(state.queue(fewest_first))
    assert ids(state.not_admitted(fewest_first)) == ["b"]


def test_a_bucket_s_totals_follow_its_jobs_exactly_in_any_order():
    # FTF reads each tenant's sums over its waiting jobs from the queue. Float running sums
    # would lose the 1 s: 1e16 + 1 rounds to 1e16 (its spacing is 2), minus 1e16 leaves 0.
    from dlsched.jobs import JobState
    from dlsched.state.queues import PendingQueue

    summed = {"big": 1e16, "one": 1.0, "o": 5.0}  # (past any job's time: a sum's term)
    big, one, other = (
        JobState(JobSpec(n, 0.0, 1, 10.0, tenant=tenant), seq=i)
        for i, (n, tenant) in enumerate([("big", "x"), ("one", "x"), ("o", "y")])
    )
    queue = PendingQueue(
        lambda j: j.seq,
        [big],
        bucket=lambda j: j.spec.tenant,
        totals=lambda j: (summed[j.job_id], 2.5),
    )
    queue.add(one)
    queue.add(other)
    assert queue.bucket_totals("x") == (1e16, 5.0)  # 1e16 + 1 correctly rounded
    queue.remove(big)
    assert queue.bucket_totals("x") == (1.0, 2.5)
    assert queue.bucket_totals("y") == (5.0, 2.5)
    queue.remove(one)  # the bucket goes with its last job, and its sums with it
    assert queue.bucket_totals("x") == ()
    queue.add(big)
    assert queue.bucket_totals("x") == (1e16, 2.5)
    with pytest.raises(ValueError, match="bucket"):
        PendingQueue(lambda j: j.seq, totals=lambda j: (1.0,))


def test_a_bucket_s_totals_count_a_preempted_job_s_work_left_and_the_invariant_sees_drift():
    from dlsched.policies.fairshare import rho_totals, submit_order, tenant_of
    from dlsched.state.invariants import problems

    state = ClusterState(parse_cluster_spec("1x8:V100"), make_policy("ftf"))
    a, b = (state.submit(spec(j, 4, tenant="x")) for j in "ab")  # 100 s of work each
    queue = state.queue(submit_order, tenant_of, rho_totals)
    assert queue.bucket_totals("x") == (0.0, 200.0, 800.0)
    state.apply(Plan(start=[(a, (0, 1, 2, 3))]))
    assert queue.bucket_totals("x") == (0.0, 100.0, 400.0)
    state.advance_to(30.0)
    state.apply(Plan(preempt=[a]))  # back in the queue with less than its 100 s left
    left = a.remaining_s
    assert left < 100.0
    assert queue.bucket_totals("x") == (0.0, 100.0 + left, 4 * (100.0 + left))
    assert not problems(state)
    a.done_s += 10.0  # a waiting job's work changed behind the queue's back: reported
    assert any("bucket 'x' sums" in p for p in problems(state))


def test_a_queue_whose_jobs_leave_from_its_head_reads_as_a_sorted_list_throughout():
    # an unbucketed queue skips the jobs that left from its head instead of moving the list;
    # random joins (mostly at the tail), leaves (mostly from the head) and reads against a
    # sorted list of the same entries
    import random

    from dlsched.jobs import JobState
    from dlsched.state.queues import PendingQueue

    rng = random.Random(11)

    def key(job):
        return job.spec.submit_time_s

    queue, model, seq = PendingQueue(key), [], 0
    for step in range(3000):
        if model and rng.random() < 0.5:
            job = model[0][2] if rng.random() < 0.8 else rng.choice(model)[2]
            queue.remove(job)
            model.remove(next(e for e in model if e[2] is job))
        else:
            submit = seq * 10.0 if rng.random() < 0.8 else rng.uniform(0, seq * 10.0)
            job = JobState(spec(f"j{seq}", 1, submit), seq=seq)
            seq += 1
            queue.add(job)
            model.append((submit, job.seq, job))
            model.sort(key=lambda e: e[:2])
        assert len(queue) == len(model)
        assert ids(queue) == ids(e[2] for e in model), step
        if model and step % 7 == 0:
            i = rng.randrange(len(model))
            assert queue[i] is model[i][2] and queue[-1] is model[-1][2]
            assert list(queue.entries) == model
