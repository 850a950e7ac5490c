"""Invariants every policy must keep, on random workloads and clusters."""

from hypothesis import given, settings, target
from hypothesis import strategies as st

from dlsched.cluster import parse_cluster_spec
from dlsched.jobs import JobSpec, Status
from dlsched.metrics import fair_share_index
from dlsched.policies.catalog import make_policy
from dlsched.sim import SimConfig
from dlsched.sim.engine import Simulator
from dlsched.state.invariants import problems
from example_counts import examples

POLICIES = ["fifo", "sjf", "srtf", "tiresias", "edf", "genie"]


def checked(sim: Simulator) -> Simulator:
    """Check the state's invariants (no GPU double-booked, gang, free index, occupancy,
    memory) after every plan the simulator applies."""
    state, apply = sim.state, sim.state.apply

    def apply_and_check(plan):
        apply(plan)
        assert not problems(state), problems(state)

    state.apply = apply_and_check
    return sim


@st.composite
def workloads(draw):
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([1, 2, 4]))
    total = nodes * per_node
    n = draw(st.integers(1, 12))
    jobs = []
    for k in range(n):
        submit, duration = float(draw(st.integers(0, 200))), float(draw(st.integers(1, 300)))
        # a deadline, for EDF and GENIE; below 0, before its submission (a job late on arrival)
        slack = draw(st.one_of(st.none(), st.floats(-0.5, 5.0)))
        jobs.append(
            JobSpec(
                job_id=f"j{k}",
                submit_time_s=submit,
                num_gpus=draw(st.integers(1, total)),
                duration_s=duration,
                tenant=draw(st.sampled_from(["a", "b"])),
                deadline_s=None if slack is None else max(0.0, submit + slack * duration),
            )
        )
    return f"{nodes}x{per_node}", jobs


config_strategy = st.builds(
    SimConfig,
    restart_overhead_s=st.sampled_from([0.0, 30.0]),
    checkpoint_interval_s=st.sampled_from([None, 40.0]),
    node_events=st.sampled_from([(), ((50.0, "down", 0), (120.0, "up", 0))]),
)


def simulate_checked(cluster, jobs, policy, config, **params):
    return checked(
        Simulator(parse_cluster_spec(cluster), jobs, make_policy(policy, **params), config)
    ).run()


@settings(max_examples=examples(60), deadline=None)
@given(
    workloads(),
    st.sampled_from(POLICIES),
    st.sampled_from(["strict", "backfill", "greedy"]),
    config_strategy,
    st.sampled_from(["best-fit", "consolidated", "spread"]),
)
def test_invariants(workload, policy, scan, config, placement):
    cluster, jobs = workload
    params = (
        {"thresholds_gpu_s": [50, 400], "starvation_factor": 1.5} if policy == "tiresias" else {}
    )
    if policy != "genie":  # GENIE's pass is its own (greedy)
        params["scan"] = scan
    result = simulate_checked(cluster, jobs, policy, config, placement=placement, **params)
    # every job finishes exactly once
    assert sorted(j.job_id for j in result.jobs) == sorted(s.job_id for s in jobs)
    for j in result.jobs:
        assert j.status is Status.DONE and j.finish is not None
        # JCT is never below the job's run time
        assert j.finish - j.spec.submit_time_s >= j.spec.duration_s - 1e-6
        assert j.first_start >= j.spec.submit_time_s
        if policy in ("fifo", "sjf"):
            assert j.preemptions == 0
    assert 0 <= result.gpu_busy_s <= result.gpu_capacity_s + 1e-6
    # the fair-share index, where two tenants competed, is a Jain index of two: 1/2 to 1
    index = fair_share_index(result, lambda tenant: 1.0)
    assert index is None or 0.5 - 1e-9 <= index <= 1.0 + 1e-9
    # every plan was applied, so a preemptive policy never had to rebuild its heaps
    assert getattr(result.policy, "resyncs", 0) == 0


@settings(max_examples=examples(20), deadline=None)
@given(workloads(), st.sampled_from(POLICIES))
def test_same_inputs_give_identical_results(workload, policy):
    cluster, jobs = workload

    def outcome():
        r = simulate_checked(cluster, jobs, policy, SimConfig())
        return [(j.job_id, j.first_start, j.finish, j.gpus, j.preemptions) for j in r.jobs]

    assert outcome() == outcome()


@settings(max_examples=examples(20), deadline=None)
@given(workloads(), st.sampled_from(POLICIES), config_strategy)
def test_dropping_stale_completions_changes_no_outcome(workload, policy, config):
    """The loop's completion heap rebuilt without stale entries at every change, or never:
    the same runs (the heap's order does not depend on its shape)."""
    from dlsched.sim import engine

    cluster, jobs = workload

    def outcome(factor):
        saved, engine.STALE_COMPLETIONS_FACTOR = engine.STALE_COMPLETIONS_FACTOR, factor
        try:
            r = simulate_checked(cluster, jobs, policy, config)
        finally:
            engine.STALE_COMPLETIONS_FACTOR = saved
        return r.events, [
            (j.job_id, j.first_start, j.finish, j.gpus, j.preemptions) for j in r.jobs
        ]

    assert outcome(0) == outcome(10**9)


SHARING_MODELS = ["resnet18", "shufflenet_v2_x1_0", "vgg16", "dqn", "bert", "gpt2"]


@st.composite
def model_workloads(draw):
    cluster, jobs = draw(workloads())
    from dataclasses import replace

    return cluster, [replace(j, model=draw(st.sampled_from(SHARING_MODELS))) for j in jobs]


@settings(max_examples=examples(40), deadline=None)
@given(
    model_workloads(),
    st.sampled_from(["sjf-ffs", "sjf-bsbf", "sjf-bsbf-consolidated"]),
    st.sampled_from(["strict", "backfill", "greedy"]),
    st.sampled_from(["V100", "RTXA6000*1"]),  # its 48 GiB matter here, not its speed
)
def test_sharing_invariants(workload, policy, scan, gpu_type):
    from dlsched.perf.model import PerfModel
    from dlsched.perf.speed import PerfSpeed

    cluster_spec, jobs = workload
    cluster = parse_cluster_spec(f"{cluster_spec}:{gpu_type}")

    result = checked(
        Simulator(
            cluster,
            jobs,
            make_policy(policy, scan=scan),
            SimConfig(),
            workload=PerfSpeed(PerfModel(), cluster),
        )
    ).run()
    for j in result.jobs:
        assert j.status is Status.DONE
        assert j.finish - j.spec.submit_time_s >= j.spec.duration_s - 1e-6
        assert j.preemptions == 0


def needs_every_victim(sim: Simulator) -> Simulator:
    """After every plan the simulator applies, check that each job it preempts is one a start
    of the same plan needs (issue 25, 12): a start uses its GPUs, and no start that uses them
    could be placed (by the policy's own placement) on its GPUs and those idle after the
    plan, without the victim's."""
    from dlsched.state.free import FreeGpus

    state, apply, place = sim.state, sim.state.apply, sim.policy.place

    def apply_and_check(plan):
        victims = {v.job_id: set(v.gpus) for v in plan.preempt}
        apply(plan)
        if not victims:
            return
        taken_from_victims = set().union(*victims.values())
        idle = {g for gpus in state.free.free for g in gpus} - taken_from_victims
        for victim, gpus in victims.items():
            users = [job for job, _ in plan.start if gpus & set(job.gpus)]
            assert users, f"{victim} was preempted for no start"
            assert any(needs(job, gpus, idle) for job in users), (
                f"every start on {victim}'s GPUs could do without them"
            )

    def needs(job, gpus, idle) -> bool:
        """The start could not be placed on its GPUs and those idle, without ``gpus``."""
        if len(job.gpus) != job.num_gpus:  # an elastic job grown as it starts: not known
            return True
        without = (set(job.gpus) | idle) - gpus
        free = FreeGpus(state.cluster, state.free.usable)
        nodes = state.cluster.nodes
        free.take([g for nid in state.free.usable for g in nodes[nid].gpu_ids if g not in without])
        return place(free, job.num_gpus, job.spec.gpu_types) is None

    state.apply = apply_and_check
    return sim


@settings(max_examples=examples(80), deadline=None)
@given(
    workloads(),
    st.sampled_from(["srtf", "tiresias", "elastic-tiresias", "elastic-fifo"]),
    st.sampled_from(["strict", "backfill", "greedy"]),
    st.sampled_from(["best-fit", "consolidated", "spread"]),
    st.data(),
)
def test_a_preemptive_policy_preempts_only_jobs_a_start_needs(
    workload, policy, scan, placement, data
):
    from dataclasses import replace

    cluster, jobs = workload
    if policy.startswith("elastic"):  # some jobs elastic: between 1 GPU and twice their request
        jobs = [
            replace(j, min_gpus=1, max_gpus=2 * j.num_gpus) if data.draw(st.booleans()) else j
            for j in jobs
        ]
    sim = Simulator(
        parse_cluster_spec(cluster),
        jobs,
        make_policy(policy, scan=scan, placement=placement),
        SimConfig(restart_overhead_s=30.0),
    )
    needs_every_victim(sim).run()


@settings(max_examples=examples(40), deadline=None)
@given(model_workloads(), st.booleans(), st.sampled_from([0.0, 30.0]))
def test_srtf_s_worst_running_job_is_the_one_with_the_most_work_left(workload, mixed, pause):
    # SRTF keeps running jobs by slope of "now + work left" (speeds differ by model, placement and
    # GPU type; a restart pauses progress): every pick equals a scan of every running job
    from dlsched.perf.model import PerfModel
    from dlsched.perf.speed import PerfSpeed
    from dlsched.policies.sjf import Srtf

    picks = []

    class CheckedSrtf(Srtf):
        def schedule(self, view):
            self.view = view
            return super().schedule(view)

        def _peek_worst(self):
            got = super()._peek_worst()
            live = [j for j in self.view.running.values() if j.job_id not in self._victims]
            scan = min(live, key=self.order.exact_worst_first, default=None)
            assert got is scan, (got, scan)
            picks.append(got)
            return got

    shape, jobs = workload
    nodes, per_node = map(int, shape.split("x"))
    types = ["V100", "K80", "P100"] if mixed else ["V100"] * 3
    spec = parse_cluster_spec(",".join(f"1x{per_node}:{types[n]}" for n in range(nodes)))
    config = SimConfig(restart_overhead_s=pause)
    sim = Simulator(spec, jobs, CheckedSrtf(), config, workload=PerfSpeed(PerfModel(), spec))
    result = checked(sim).run()
    assert all(j.status is Status.DONE for j in result.jobs)
    target(float(len(picks)))  # steer the search to workloads with many preemption decisions
