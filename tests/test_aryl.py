"""Aryl: the knapsack, reclaim by server preemption cost, the notice the state enforces, and
loaning invariants over random demand curves and workloads."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.cluster import parse_cluster_spec
from dlsched.inference import DemandCycle, DemandStep, demand_cycle, load_curve, servers_needed
from dlsched.jobs import JobSpec, Status
from dlsched.policies import knapsack
from dlsched.policies.catalog import make_policy
from dlsched.sim import SimConfig
from dlsched.sim.engine import Simulator
from dlsched.state.cluster_state import ClusterState
from dlsched.state.costs import Costs
from dlsched.state.invariants import problems
from dlsched.view import Plan
from dlsched.workload_model import TraceModel
from example_counts import examples


class PowerLaw(TraceModel):
    """Speed at n GPUs = (n / request) ** exponent: diminishing returns."""

    def __init__(self, exponent=0.8):
        self.exponent = exponent

    def __call__(self, job, gpus):
        return (len(gpus) / job.num_gpus) ** self.exponent

    def speed_at_size(self, spec, gpus):
        return (gpus / spec.num_gpus) ** self.exponent


# -- the knapsack -----------------------------------------------------------------------------
def brute_force(groups, capacity):
    best = 0.0
    for choice in itertools.product(*[range(-1, len(g)) for g in groups]):
        weight = sum(groups[g][i][0] for g, i in enumerate(choice) if i >= 0)
        if weight <= capacity:
            best = max(best, knapsack.total_value(groups, list(choice)))
    return best


def test_knapsack_small_instance_exact_optimum():
    # capacity 4. Greedy by the first marginal would take A's 1 GPU (6) and then be stuck
    # with B's poor single option; the optimum is B's 3 GPUs (10) and A's 1 (6) = 16.
    groups = [
        [(1, 6.0), (2, 7.0)],  # A
        [(1, 1.0), (3, 10.0)],  # B: not concave, so the DP runs
        [(2, 5.0)],
    ]  # C
    chosen = knapsack.solve(groups, 4)
    assert chosen == [0, 1, -1]
    assert knapsack.total_value(groups, chosen) == 16.0 == brute_force(groups, 4)


def test_knapsack_concave_fast_path_gives_the_same_optimum():
    groups = [[(1, 5.0), (2, 9.0), (3, 12.0)], [(1, 4.0), (2, 7.5)], [(1, 4.5)]]
    assert knapsack._concave_marginals(groups) is not None
    for capacity in range(7):
        fast = knapsack.total_value(groups, knapsack.solve(groups, capacity))
        assert (
            fast
            == knapsack.total_value(groups, knapsack.solve_dp(groups, capacity))
            == brute_force(groups, capacity)
        )


@settings(max_examples=examples(80), deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(1, 4), st.floats(0.0, 20.0, allow_nan=False)),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 8),
)
def test_knapsack_dp_matches_brute_force(groups, capacity):
    chosen = knapsack.solve(groups, capacity)
    weight = sum(groups[g][i][0] for g, i in enumerate(chosen) if i >= 0)
    assert weight <= capacity
    assert abs(knapsack.total_value(groups, chosen) - brute_force(groups, capacity)) < 1e-9


# -- reclaim -----------------------------------------------------------------------------------
def loaned_state(**policy_params):
    """1 owned server and 3 inference servers (4 GPUs each), all three loaned."""
    cluster = parse_cluster_spec("1x4:V100,3x4:V100@inference")
    policy = make_policy("aryl", **policy_params)
    state = ClusterState(
        cluster, policy, Costs(restart_overhead_s=30.0), workload=PowerLaw(), reclaim_notice_s=60.0
    )
    state.set_inference_demand(0)
    assert sorted(state.loans.loaned) == [1, 2, 3]
    return state, policy


def start(state, spec, gpus):
    """Submit a job and start it on ``gpus`` by hand (Aryl reads it from the state)."""
    job = state.submit(spec)
    state.apply(Plan(start=[(job, tuple(gpus))]))
    return job


def test_the_state_counts_running_elastic_jobs_and_their_gpus_above_base():
    # e asks 2 of 1..4 (base 1: no memory limit) and speeds up with every GPU (power law)
    state = ClusterState(parse_cluster_spec("2x4:V100"), make_policy("aryl"), workload=PowerLaw())
    e = start(state, JobSpec("e", 0.0, 2, 1000.0, min_gpus=1, max_gpus=4), [0, 1, 2])  # base 1
    rigid = start(state, JobSpec("r", 0.0, 2, 1000.0), [4, 5])
    assert list(state.running_elastic) == ["e"] and state.elastic_extra_gpus == 2
    assert state.elastic_grown_gpus == 1  # above its request
    assert list(state.elastic_above_base) == list(state.elastic_growable) == ["e"]
    state.apply(Plan(resize=[(e, (0, 1, 2, 3))]))
    assert state.elastic_extra_gpus == 3 and state.elastic_grown_gpus == 2
    assert state.elastic_growable == {}  # at its maximum
    # a what-if where it scaled in to GPUs 0 and 1: 1 above its base, those GPUs its own
    view = state.without(freed=[(e, (2, 3))])
    assert view.elastic_extra_gpus == 1 and view.gpus_of(e) == (0, 1) and e.gpus == (0, 1, 2, 3)
    assert view.elastic_grown_gpus == 0 and list(view.elastic_growable) == ["e"]
    gone = state.without(gone=[e])
    assert gone.running_elastic == gone.elastic_above_base == gone.elastic_growable == {}
    assert gone.elastic_extra_gpus == gone.elastic_grown_gpus == 0
    assert state.elastic_extra_gpus == 3 and list(state.elastic_above_base) == ["e"]
    state.apply(Plan(preempt=[e]))
    assert state.running_elastic == state.elastic_above_base == {}
    assert state.elastic_extra_gpus == state.elastic_grown_gpus == 0
    assert rigid.job_id in state.running


def test_a_plan_that_was_not_applied_leaves_no_trace_in_the_next_pass():
    # an elastic job (request 2, up to 4) on GPUs 0-1 of a 4-GPU server: the pass grows it onto
    # GPUs 2-3. Refused (not applied), the next pass must plan the same growth again: Aryl
    # reads the job's size from the state, not from its own last plan.
    state = ClusterState(parse_cluster_spec("1x4:V100"), make_policy("aryl"), workload=PowerLaw())
    e = start(state, JobSpec("e", 0.0, 2, 1000.0, min_gpus=1, max_gpus=4), [0, 1])
    first = state.policy.schedule(state)
    assert first.resize == [(e, (0, 1, 2, 3))]
    assert state.policy.schedule(state).resize == first.resize


def test_reclaim_scales_in_extras_first_then_preempts_the_cheapest_server_only():
    state, _ = loaned_state()
    # server 1 (GPUs 4-7): a rigid 2-GPU job (costs 2 x 30 s); server 2 (8-11): only the extra
    # workers of an elastic job whose base is on the owned server (costs nothing); server 3
    # (12-15): a rigid 4-GPU job (costs 4 x 30 s)
    rigid2 = start(state, JobSpec("r2", 0.0, 2, 1000.0), [4, 5])
    elastic = start(
        state, JobSpec("e", 0.0, 4, 1000.0, min_gpus=2, max_gpus=8), [0, 1, 2, 3, 8, 9, 10, 11]
    )
    rigid4 = start(state, JobSpec("r4", 0.0, 4, 1000.0), [12, 13, 14, 15])
    state.set_inference_demand(1)
    assert state.loans.stats.reclaims == 1 and 2 not in state.loans.loaned
    assert elastic.status is Status.RUNNING and elastic.gpus == (
        0,
        1,
        2,
        3,
    )  # scaled in, kept going
    assert elastic.preemptions == 0 and state.loans.stats.reclaim_scale_ins == 1
    assert state.loans.stats.reclaim_preemptions == 0
    assert state.loans.stats.returned == 1  # empty at once: handed back
    state.set_inference_demand(2)  # one more: 60 beats 120
    assert rigid2.status is Status.PENDING and rigid2.preemptions == 1
    assert rigid4.status is Status.RUNNING
    assert state.loans.stats.reclaim_preemptions == 1 and sorted(state.loans.loaned) == [3]
    assert not problems(state)


def test_cost_is_recomputed_after_each_pick():
    state, policy = loaned_state()
    # an elastic job (base 4) on servers 1 and 2, a rigid 3-GPU job on server 3 (3 x 30 s)
    big = start(state, JobSpec("big", 0.0, 4, 1000.0, min_gpus=4, max_gpus=8), list(range(4, 12)))
    small = start(state, JobSpec("small", 0.0, 3, 1000.0), [12, 13, 14])
    assert policy.server_cost(state, 1, set()) == policy.server_cost(state, 2, set()) == 0.0
    # once server 2 is picked (free: big scales in to server 1), server 1 would preempt big
    # (8 x 30 s): the second pick is server 3 (90)
    assert policy.server_cost(state, 1, {2}) == 240.0
    nodes, plan = policy.reclaim(state, 2)
    assert nodes == [2, 3]
    assert plan.preempt == [small] and plan.resize == [(big, (4, 5, 6, 7))]


def test_naive_reclaim_takes_the_most_recently_loaned():
    state, policy = loaned_state(reclaim="recent")
    state.loans.loaned[2] = 5.0  # loaned last
    nodes, _ = policy.reclaim(state, 1)
    assert nodes == [2]


class Stubborn:
    """A policy that picks servers but never moves their jobs: the state's deadline must."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def reclaim(self, view, count):
        nodes, _ = self.inner.reclaim(view, count)
        return nodes, Plan()


def test_the_state_preempts_what_is_left_at_the_end_of_the_notice():
    state, policy = loaned_state()
    state.policy = Stubborn(policy)
    job = start(state, JobSpec("r", 0.0, 4, 1000.0), [4, 5, 6, 7])
    state.loans.loaned.pop(2), state.loans.loaned.pop(3)  # only server 1 is loaned
    state.free.retire_node(2), state.free.retire_node(3)
    state.set_inference_demand(3)
    assert job.status is Status.RUNNING and 1 in state.loans.reclaiming
    state.advance_to(59.0)
    state.enforce_reclaims()
    assert job.status is Status.RUNNING
    state.advance_to(60.0)
    state.enforce_reclaims()
    assert job.status is Status.PENDING and state.loans.stats.forced_preemptions == 1
    assert not state.loans.reclaiming and state.loans.stats.returned_late == 0


def test_bad_demand_is_refused_with_the_field():
    state, _ = loaned_state()
    for bad in (-1, 4, 1.5, True):
        try:
            state.set_inference_demand(bad)
        except Exception as e:
            assert "servers" in str(e)
        else:
            raise AssertionError(f"{bad!r} accepted")


# -- the demand curve --------------------------------------------------------------------------
def test_scaling_rule_and_announcement_ahead():
    curve = load_curve("genai")
    needed = servers_needed(curve, 20, peak_share=0.9)
    assert max(needed) == 18 and min(needed) >= 0
    cycle = demand_cycle(curve, 20, notice_s=600.0)
    for step in cycle.steps:  # announced = the most needed within the next 10 minutes
        window = [n for t, n in zip(curve.times, needed) if step.time_s < t <= step.time_s + 600.0]
        assert step.announced == max([step.needed, *window])


def test_a_demand_file_that_is_not_utf8_text_is_named(tmp_path):
    from dlsched.errors import SpecError

    path = tmp_path / "demand.csv"
    path.write_bytes(b"\xff\xfetime_s,load\n0,1\n60,2\n")  # UTF-16's mark: a traceback before
    with pytest.raises(SpecError, match="cannot be read as a UTF-8 CSV file") as e:
        load_curve(str(path))
    assert e.value.field == "inference_demand"


@pytest.mark.parametrize(
    "rows, reason",
    [
        # a step every 2e-9 s, for as long as jobs ran: the replay stalled, blamed on the policy
        ("0,1\n0.000000001,2\n", "at least 1 s apart"),
        ("0,1\n1e300,2\n", "spans more than 1e\\+10 s"),
    ],
)
def test_a_demand_curve_the_replay_cannot_step_through_is_named(tmp_path, rows, reason):
    from dlsched.errors import SpecError

    path = tmp_path / "demand.csv"
    path.write_text("time_s,load\n" + rows)
    with pytest.raises(SpecError, match=reason) as e:
        load_curve(str(path))
    assert e.value.field == "inference_demand"


# -- invariants over random demand and workloads ------------------------------------------------
@st.composite
def loaning_cases(draw):
    owned, lent = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([2, 4]))
    jobs = []
    for k in range(draw(st.integers(1, 14))):
        n = draw(st.integers(1, owned * per_node))
        elastic = draw(st.booleans())
        jobs.append(
            JobSpec(
                f"j{k}",
                float(draw(st.integers(0, 300))),
                n,
                float(draw(st.integers(5, 400))),
                min_gpus=max(1, n // 2) if elastic else None,
                max_gpus=min(2 * n, (owned + lent) * per_node) if elastic else None,
            )
        )
    times = sorted(set(draw(st.lists(st.integers(1, 500), max_size=8))))
    steps = [DemandStep(0.0, 0, 0)]
    for t in times:
        need = draw(st.integers(0, lent))
        steps.append(DemandStep(float(t), need, need))
    cycle = DemandCycle("random", lent, tuple(steps), 600.0, 0.0, 1.0)
    return f"{owned}x{per_node},{lent}x{per_node}@inference", jobs, cycle


@settings(max_examples=examples(60), deadline=None)
@given(
    loaning_cases(),
    st.sampled_from(["aryl", "aryl-no-elastic", "aryl-naive-reclaim"]),
    st.sampled_from([0.0, 30.0]),
    st.sampled_from(["background", "stop-resume"]),
)
def test_loaning_never_leaves_inference_short(case, policy, notice, mechanism):
    spec, jobs, cycle = case
    # announcements: the step's need, made ``notice`` ahead (a cycle of its own)
    ahead = DemandCycle(
        "ahead",
        cycle.servers,
        tuple(
            DemandStep(
                max(0.0, s.time_s - notice),
                s.needed,
                max(
                    s.needed,
                    *(o.needed for o in cycle.steps if s.time_s <= o.time_s <= s.time_s + notice),
                ),
            )
            for s in cycle.steps
        ),
        cycle.period_s,
        notice,
        1.0,
    )
    sim = Simulator(
        parse_cluster_spec(spec),
        jobs,
        make_policy(policy),
        SimConfig(
            inference_demand=ahead,
            reclaim_notice_s=notice,
            resize_mechanism=mechanism,
            restart_overhead_s=10.0,
        ),
        workload=PowerLaw(),
    )
    state, apply = sim.state, sim.state.apply

    def apply_and_check(plan):
        apply(plan)
        assert not problems(state), problems(state)

    state.apply = apply_and_check
    result = sim.run()
    assert all(j.status is Status.DONE for j in result.jobs)
    assert result.loaning.stats.returned_late == 0
    assert result.loaning.max_short <= 0
    assert result.loaning.short_server_s == 0.0


def test_ablations_are_aryl_with_one_default_changed_and_bad_parameters_are_named():
    assert make_policy("aryl-base").params() == {
        **make_policy("aryl").params(),
        "loaning": False,
        "elasticity": False,
    }
    assert make_policy("aryl-no-loan", loaning=True).loans_servers is True
    for field, value in (("loaning", "yes"), ("reclaim", "cheapest")):
        try:
            make_policy("aryl", **{field: value})
        except Exception as e:
            assert field in str(e)
        else:
            raise AssertionError(f"{field}={value!r} accepted")


class BatchInMemory(PowerLaw):
    """24,000 MiB of a job's batch state spread over its GPUs: on 16,384 MiB GPUs it fits on
    2 or more, not on 1."""

    def memory_mib(self, spec, gpus, accumulation=1):
        return 24_000 / gpus


def test_a_scale_in_for_base_demand_stops_where_the_job_s_memory_still_fits():
    # E (elastic 1..4) starts alone and takes all 4 GPUs. N (3 GPUs, rigid) arrives: scaling E
    # in to 1 GPU would make room, but E's memory needs 2; Aryl scaled it to 1 anyway and the
    # state refused the plan ("24000 MiB per GPU at 1 GPUs exceeds their 16384 MiB"). Now E
    # keeps 2 and N waits for it.
    jobs = [
        JobSpec("E", 0.0, 2, 1000.0, min_gpus=1, max_gpus=4),
        JobSpec("N", 10.0, 3, 100.0),
    ]
    sim = Simulator(
        parse_cluster_spec("1x4:V100/16384"),
        jobs,
        make_policy("aryl"),
        SimConfig(),
        workload=BatchInMemory(),
    )
    sizes = []
    apply = sim.state.apply

    def watch(plan):
        sizes.extend(len(gpus) for job, gpus in plan.resize + plan.start if job.job_id == "E")
        apply(plan)

    sim.state.apply = watch
    done = {j.job_id: j for j in sim.run().jobs}
    assert sizes and min(sizes) >= 2
    assert done["N"].first_start >= done["E"].finish_time
    assert done["E"].preemptions == 0


def test_an_elastic_job_starts_where_its_memory_fits_not_at_its_minimum():
    # muri-3 under aryl stopped: 'resized job muri-3-128: 16444 MiB per GPU at 19 GPUs exceeds
    # their 16384 MiB'. Its gpt2 job (batch 128, 32 GPUs asked, 16..64) needs 19,172 MiB per GPU
    # at 16 GPUs, 16,444 at 19 and 15,716 at 20: Aryl started it at 16 plus 3 extras where 19
    # were idle. Now its base is 20, so with 19 idle it waits for the 13-GPU job to end.
    from dlsched.perf.model import PerfModel
    from dlsched.perf.speed import PerfSpeed

    cluster = parse_cluster_spec("4x8:V100")
    blocker = JobSpec("b", 0.0, 13, 1000.0, model="cifar10", batch_size=13 * 64)
    gpt2 = JobSpec("g", 1.0, 32, 5000.0, model="gpt2", batch_size=128, min_gpus=16, max_gpus=64)
    workload = PerfSpeed(PerfModel(), cluster)
    assert workload.memory_mib(gpt2, 19) > 16384 >= workload.memory_mib(gpt2, 20)
    policy = make_policy("aryl")
    starts = []
    schedule = policy.schedule

    def recording(view):
        plan = schedule(view)
        starts.extend((j.job_id, len(g), view.now) for j, g in plan.start)
        return plan

    policy.schedule = recording
    result = Simulator(cluster, [blocker, gpt2], policy, SimConfig(), workload=workload).run()
    g = next(s for s in starts if s[0] == "g")
    assert g[1] >= 20 and g[2] >= 1000.0, starts  # after the blocker, on 20 or more
    assert all(j.finish is not None for j in result.jobs)


def test_extras_go_where_they_are_fast_and_are_valued_at_their_placement():
    # issue 25, 5. 1 training server with 2 GPUs and 1 loaned inference server. J (cifar10,
    # elastic 1..2, 1,000 s on 1 GPU) starts at 0. Before, its extra GPU went to the loaned
    # server, valued at the speed of one node, and the job ran across two nodes slower than on
    # one GPU: 1,790 s. Now the extra goes to its own node (J ends at 1,000 / its speed on
    # GPUs 0 and 1); with that GPU taken by B, the only extra is across nodes, which the
    # knapsack values as slower: J is not grown and ends at 1,000.
    from dlsched.inference import DemandCycle, DemandStep
    from dlsched.perf.model import PerfModel
    from dlsched.perf.speed import PerfSpeed

    idle = DemandCycle("idle", 1, (DemandStep(0.0, 0, 0),), 1e9, 60.0, 0.0)
    cluster = parse_cluster_spec("1x2:V100,1x4:V100@inference")
    j = JobSpec("J", 0.0, 1, 1000.0, model="cifar10", batch_size=64, min_gpus=1, max_gpus=2)
    config = SimConfig(restart_overhead_s=0.0, inference_demand=idle)
    for jobs in ([j], [JobSpec("B", 0.0, 1, 5000.0), j]):
        workload = PerfSpeed(PerfModel(), cluster)
        result = Simulator(cluster, jobs, make_policy("aryl"), config, workload=workload).run()
        done = {s.job_id: s for s in result.jobs}
        if len(jobs) == 1:
            speed = workload(done["J"], (0, 1))
            assert speed > 1.0
            assert done["J"].finish == pytest.approx(1000.0 / speed)
            assert done["J"].attained_gpu_s == pytest.approx(2 * done["J"].finish)
        else:
            assert done["J"].finish == 1000.0 and done["J"].attained_gpu_s == 1000.0


def test_extra_slots_take_the_job_s_own_nodes_then_loaned_then_the_fewest_free_first():
    from dlsched.policies.aryl import ExtraSlots
    from dlsched.state.free import FreeGpus

    # four 4-GPU nodes (node n holds GPUs 4n..4n+3) and a T4 one (16..19)
    free = FreeGpus(parse_cluster_spec("4x4:V100,1x4:T4"))
    free.take([0, 1, 2])  # node 0: GPU 3 free
    free.take([4, 5])  # node 1: 6, 7 free
    free.take([8])  # node 2: 9, 10, 11 free; node 3 and the T4 node: all four free
    slots = ExtraSlots(free, loaned={3})
    # order: loaned node 3, then owned by fewest free: 0 (1), 1 (2), 2 (3), T4 node (4)
    assert slots.take(own={2}, k=5, types=None) == (9, 10, 11, 12, 13)  # own node 2 first
    assert slots.take(own={0}, k=3, types=None) == (3, 12, 13)
    assert slots.take(own=set(), k=7, types=None) == (12, 13, 14, 15, 3, 6, 7)
    assert slots.take(own={1}, k=3, types=("T4",)) == (16, 17, 18)  # its own node is a V100
    assert slots.take(own={4}, k=9, types=("T4",)) == (16, 17, 18, 19)  # what there is


SPREAD_CLUSTER = parse_cluster_spec("3x4:V100,2x4:K80,2x4:P100")


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_the_speed_over_several_nodes_is_bounded_as_aryl_assumes(data):
    # Aryl skips valuing extras that can only go to other nodes when no count of them is
    # faster than none, by the model's spread_speed: any placement of n GPUs over two or more
    # nodes, of types including T, is no faster than spread_speed(n, T).
    from dlsched.jobs import JobState
    from dlsched.perf.model import PerfModel
    from dlsched.perf.speed import PerfSpeed
    from dlsched.perf.zoo import ZOO

    workload = PerfSpeed(PerfModel(), SPREAD_CLUSTER)
    model = data.draw(st.sampled_from(sorted(ZOO)))
    asked = data.draw(st.integers(1, 16))
    batch = data.draw(st.one_of(st.none(), st.integers(asked, 64 * asked)))
    job = JobState(spec=JobSpec("j", 0.0, asked, 100.0, model=model, batch_size=batch), seq=0)
    job.accumulation = data.draw(st.integers(1, 4))
    all_gpus = range(len(SPREAD_CLUSTER.gpu_node))
    gpus = tuple(
        data.draw(st.lists(st.sampled_from(all_gpus), min_size=2, max_size=16, unique=True))
    )
    nodes = {SPREAD_CLUSTER.gpu_node[g] for g in gpus}
    if len(nodes) < 2:
        return
    types = sorted({SPREAD_CLUSTER.nodes[n].gpu_type for n in nodes})
    some = data.draw(st.lists(st.sampled_from(types), min_size=1, unique=True))
    bound = workload.spread_speed(job, len(gpus), some)
    assert workload(job, gpus) <= bound
    if set(some) == set(types):
        assert workload(job, gpus) == bound
