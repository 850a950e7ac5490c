"""Small scenarios whose completion times are worked out by hand in each test."""

import pytest

from conftest import ends_within, job, run
from dlsched.sim import SimConfig


def jct(states, jid):
    s = states[jid]
    return s.finish - s.spec.submit_time_s


def test_fifo_strict_blocks_behind_a_large_job():
    # 1 node x 2 GPUs. A runs 0-100 on one GPU. B needs both: waits for A, runs 100-150.
    # Strict FIFO keeps C (1 GPU, submitted after B) behind B: 150-170.
    jobs = [job("A", 0, 1, 100), job("B", 5, 2, 50), job("C", 10, 1, 20)]
    s, _ = run("1x2", jobs, "fifo")
    assert (jct(s, "A"), jct(s, "B"), jct(s, "C")) == (100, 145, 160)
    assert s["B"].first_start == 100 and s["C"].first_start == 150


def test_fifo_backfill_lets_small_jobs_use_idle_gpus():
    # Same jobs: with backfill C takes the idle GPU at once (10-30); B still starts at 100.
    jobs = [job("A", 0, 1, 100), job("B", 5, 2, 50), job("C", 10, 1, 20)]
    s, _ = run("1x2", jobs, "fifo", scan="backfill")
    assert (jct(s, "A"), jct(s, "B"), jct(s, "C")) == (100, 145, 20)


def test_sjf_picks_the_shortest_waiting_job_and_never_preempts():
    # One GPU. A starts at 0 alone and runs to 100. Then C (10 s) before B (50 s).
    jobs = [job("A", 0, 1, 100), job("B", 1, 1, 50), job("C", 2, 1, 10)]
    s, r = run("1x1", jobs, "sjf")
    assert (s["A"].finish, s["C"].finish, s["B"].finish) == (100, 110, 160)
    assert (jct(s, "A"), jct(s, "C"), jct(s, "B")) == (100, 108, 159)
    assert sum(j.preemptions for j in r.jobs) == 0


def test_sjf_on_two_gpus_with_a_two_gpu_job():
    # 2 GPUs. A (1 GPU, 60 s) and B (1 GPU, 100 s) start at 0. At 10, C (2 GPUs, 20 s) and
    # D (1 GPU, 30 s) wait; C is shorter, so strict SJF holds D behind C. A ends at 60: one GPU
    # is free but C needs two, so it waits for B (100). C runs 100-120, then D 120-150.
    jobs = [job("A", 0, 1, 60), job("B", 0, 1, 100), job("C", 10, 2, 20), job("D", 10, 1, 30)]
    s, _ = run("1x2", jobs, "sjf")
    assert [s[x].finish for x in "ABCD"] == [60, 100, 120, 150]
    # with backfill D uses the GPU A leaves (60-90) and C still starts at 100
    s, _ = run("1x2", jobs, "sjf", scan="backfill")
    assert [s[x].finish for x in "ABCD"] == [60, 100, 120, 90]


def test_srtf_preempts_and_charges_the_restart_pause():
    # One GPU, restart pause 30 s. At t=10 B (20 s) beats A's remaining 90 s: A is preempted.
    # B runs 10-30. A restarts at 30, progresses from 60, has 90 s left: ends at 150.
    jobs = [job("A", 0, 1, 100), job("B", 10, 1, 20)]
    s, _ = run("1x1", jobs, "srtf", SimConfig(restart_overhead_s=30))
    assert (jct(s, "A"), jct(s, "B")) == (150, 20)
    assert s["A"].preemptions == 1 and s["B"].preemptions == 0
    assert s["A"].attained_gpu_s == pytest.approx(10 + 120)  # GPU-time held, pause included


def test_srtf_with_periodic_checkpoints_loses_work_since_the_last_one():
    # Checkpoints every 25 s of progress: A's 10 s before the preemption are lost.
    # A restarts at 30, progresses from 60 with all 100 s to do: ends at 160.
    jobs = [job("A", 0, 1, 100), job("B", 10, 1, 20)]
    s, _ = run(
        "1x1",
        jobs,
        "srtf",
        SimConfig(restart_overhead_s=30, checkpoint_interval_s=25, checkpoint_on_preempt=False),
    )
    assert s["A"].finish == 160
    # checkpointing at the preemption instead loses nothing: 150 as above
    s, _ = run("1x1", jobs, "srtf", SimConfig(restart_overhead_s=30, checkpoint_interval_s=25))
    assert s["A"].finish == 150


def test_srtf_gang_preemption_keeps_strict_order():
    # 4 GPUs. b (4 GPUs, 50 s) runs first; a (2 GPUs, 100 s) waits. c (1 GPU, 10 s) arrives at
    # 10 and preempts b (b's remaining 40 > 10). b is next in order but needs 4 GPUs: strict,
    # so a does not jump ahead. c ends at 20; b restarts, pauses 30, runs 40: ends at 90.
    # a starts at 90 and ends at 190.
    jobs = [job("a", 0, 2, 100), job("b", 0, 4, 50), job("c", 10, 1, 10)]
    s, _ = run("1x4", jobs, "srtf", SimConfig(restart_overhead_s=30), scan="strict")
    assert (s["c"].finish, s["b"].finish, s["a"].finish) == (20, 90, 190)
    assert s["a"].first_start == 90


def test_srtf_greedy_scan_starts_later_jobs_past_a_blocked_one():
    # The same jobs under the default greedy scan (the Tiresias simulator's): at 10, b is blocked
    # (3 GPUs free after c took one of its 4), so a starts at once on 2 of them. At 20 c ends;
    # b (40 s left) outranks a (90 s left) and preempts it: b pauses 30 s and ends at 90; a
    # restarts at 90, pauses 30 s, runs its last 90 s: ends at 210.
    jobs = [job("a", 0, 2, 100), job("b", 0, 4, 50), job("c", 10, 1, 10)]
    s, _ = run("1x4", jobs, "srtf", SimConfig(restart_overhead_s=30))
    assert (s["c"].finish, s["b"].finish, s["a"].finish) == (20, 90, 210)
    assert s["a"].first_start == 10 and s["a"].preemptions == 1


def test_tiresias_demotes_after_the_threshold_and_a_higher_queue_preempts():
    # 2 GPUs, one threshold of 100 GPU-s. A (2 GPUs, 200 s) crosses it at t=50: queue 1.
    # B (2 GPUs, 30 s, queue 0) arrives at 60 and preempts A. B runs 60-90. A restarts at 90,
    # pauses 30, and has 200 - 60 = 140 s left: ends at 260.
    jobs = [job("A", 0, 2, 200), job("B", 60, 2, 30)]
    s, _ = run("1x2", jobs, "tiresias", SimConfig(restart_overhead_s=30), thresholds_gpu_s=[100])
    assert (jct(s, "A"), jct(s, "B")) == (260, 30)
    assert s["A"].preemptions == 1


def test_tiresias_does_not_preempt_within_a_queue():
    # C (queue 0) arrives at 20 while A is still in queue 0: it waits. At t=50 A drops to
    # queue 1 and C preempts it (C runs 50-60). B arrives at 60, takes the GPUs C freed
    # (60-90). A restarts at 90, pauses 30, has 150 s left: ends at 270.
    jobs = [job("A", 0, 2, 200), job("C", 20, 2, 10), job("B", 60, 2, 30)]
    s, _ = run("1x2", jobs, "tiresias", SimConfig(restart_overhead_s=30), thresholds_gpu_s=[100])
    assert s["C"].first_start == 50
    assert (jct(s, "A"), jct(s, "B"), jct(s, "C")) == (270, 30, 40)
    assert s["A"].preemptions == 1


@pytest.mark.parametrize("t0", [0, 235_696])
def test_tiresias_with_thresholds_of_milliseconds_ends_and_wakes_once_a_pause(t0):
    # 1 GPU, thresholds 0.001 and 4.001 GPU-s, a 30 s restart pause. A (100 s) starts at t0
    # and crosses 0.001 at t0 + 0.001 (at 235,696.001 the clock's resolution leaves its service
    # a hair below the threshold: the demotion timer was armed at that same instant again, for
    # ever). B (3 s, queue 0) arrives at t0 + 4 and preempts A (queue 1, 4 GPU-s done), and
    # ends at t0 + 7. A restarts, pauses until t0 + 37 and crosses 4.001 a millisecond after:
    # it was woken every millisecond of the pause (30,000 passes). Its 96 s left end at
    # t0 + 133. Wake-ups: A's and B's first demotions, B's timer after it ended, A's during its
    # pause and at its crossing; with the two arrivals and two completions, 9 events.
    jobs = [job("A", t0, 1, 100), job("B", t0 + 4, 1, 3)]
    config = SimConfig(restart_overhead_s=30)
    with ends_within(30):
        s, r = run("1x1", jobs, "tiresias", config, thresholds_gpu_s=[0.001, 4.001])
    assert (jct(s, "A"), jct(s, "B")) == (133, 3)
    assert s["A"].preemptions == 1 and r.events == 9


def test_tiresias_demotes_a_job_started_again_at_the_instant_of_its_crossing():
    # 2 nodes x 4 GPUs, threshold 60 GPU-s, starvation off. A and X (4 GPUs each) start at 0;
    # B (4 GPUs) arrives at 10 and waits (all three in queue 0). At 15 A and X cross 60 GPU-s,
    # and A's node fails: A waits again; X is demoted; A (queue 0) preempts X (queue 1) and
    # starts on X's node, its service already 60. Its demotion was due at once, but its timer
    # was set in the pass whose timers had run: it fired only at the next event, the node's
    # return at 500, while B (queue 0) waited behind it. Now at the next instant the clock can
    # tell, and B preempts A then.
    jobs = [job("A", 0, 4, 1000), job("X", 0, 4, 1000), job("B", 10, 4, 100)]
    config = SimConfig(restart_overhead_s=30, node_events=[(15, "down", 0), (500, "up", 0)])
    s, _ = run("2x4", jobs, "tiresias", config, thresholds_gpu_s=[60], starvation_factor=None)
    assert s["A"].failures == 1 and s["X"].preemptions == 1
    assert s["B"].first_start == pytest.approx(15) and s["A"].preemptions == 1


def test_tiresias_starvation_promotion():
    # 1 GPU, threshold 100 GPU-s, promotion after waiting 2x the last run.
    # A runs 0-150 (queue 1 from t=100); B arrives at 150 in queue 0 and preempts it.
    # A's last run was 150 s: it is promoted at 150 + 300 = 450. B dropped to queue 1 at 250,
    # so A (queue 0) preempts B at 450; A pauses 30 and runs its last 150 s: ends at 630.
    # B has done 300 of 1000 s; it restarts at 630, pauses 30: ends at 1360.
    jobs = [job("A", 0, 1, 300), job("B", 150, 1, 1000)]
    s, _ = run(
        "1x1",
        jobs,
        "tiresias",
        SimConfig(restart_overhead_s=30),
        thresholds_gpu_s=[100],
        starvation_factor=2,
    )
    assert s["A"].finish == 630 and s["B"].finish == 1360
    assert (s["A"].preemptions, s["B"].preemptions) == (1, 1)


def test_node_failure_loses_the_work_since_the_last_periodic_checkpoint():
    # Checkpoints every 30 s: at the failure (t=40) A has done 40 s and keeps 30.
    # It restarts at 40 on node 1, pauses 30, and has 70 s left: ends at 140.
    jobs = [job("A", 0, 1, 100)]
    s, _ = run(
        "2x1",
        jobs,
        "fifo",
        SimConfig(restart_overhead_s=30, checkpoint_interval_s=30, node_events=[(40, "down", 0)]),
    )
    assert s["A"].finish == 140


@pytest.mark.parametrize("interval", [None, 5.0])
def test_a_policy_cycling_without_progress_is_stopped_with_an_error(interval):
    # Quantum 10 GPU-s, periodic checkpoints every 40 s and preemptions that lose work, with
    # promotion: the two jobs take turns forever, each losing what it did. The simulator says so,
    # with a schedule interval too (its ticks alone that change nothing do not count: below).
    from dlsched.sim.engine import SimulationStalled

    jobs = [job("A", 0, 1, 100), job("B", 0, 1, 100)]
    config = SimConfig(
        checkpoint_interval_s=40,
        checkpoint_on_preempt=False,
        stall_limit=1000,
        schedule_interval_s=interval,
    )
    with pytest.raises(SimulationStalled, match="cycling without progress"):
        run("1x1", jobs, "tiresias", config, thresholds_gpu_s=[10], starvation_factor=1)


def test_a_long_job_under_a_short_schedule_interval_is_not_taken_for_a_policy_cycling():
    # 1,666 ticks of a 60 s interval while one job runs 100,000 s: passes without an arrival or
    # a completion, but they change nothing. They were counted as a policy cycling (an error
    # after 100,000 of them by default: a job of 70 days alone under a one-minute interval).
    jobs = [job("A", 0, 1, 100_000)]
    s, _ = run("1x1", jobs, "fifo", SimConfig(schedule_interval_s=60, stall_limit=1000))
    assert s["A"].finish == 100_000


def test_a_schedule_interval_ticking_past_its_bound_stops_with_an_error_naming_it():
    # One job of 1,000 s from 0 under a 10 s interval: ticks at 10, 20, ..., 1,000 (the last at
    # the instant of the finish), 100. A bound of 100 runs; 99 stops the run naming the
    # interval, where 1 ms over a long trace would have run for hours.
    from dlsched.errors import SpecError

    jobs = [job("A", 0, 1, 1000)]
    s, r = run("1x1", jobs, "fifo", SimConfig(schedule_interval_s=10, max_ticks=100))
    assert s["A"].finish == 1000 and r.events == 2 + 100  # an arrival, a completion, the ticks
    with pytest.raises(SpecError, match="schedule_interval_s.*max_ticks=99 times by t=1000s"):
        run("1x1", [job("A", 0, 1, 1000)], "fifo", SimConfig(schedule_interval_s=10, max_ticks=99))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(SpecError, match="max_ticks"):
            SimConfig(max_ticks=bad)


def test_node_failure_requeues_the_job_which_resumes_elsewhere():
    # Two 1-GPU nodes. A runs on node 0 from 0; node 0 fails at 40. A restarts on node 1 at
    # 40, pauses 30, and has 60 s left: ends at 130.
    jobs = [job("A", 0, 1, 100)]
    s, r = run("2x1", jobs, "fifo", SimConfig(restart_overhead_s=30, node_events=[(40, "down", 0)]))
    assert s["A"].finish == 130
    assert s["A"].gpus == (1,) and (s["A"].preemptions, s["A"].failures) == (0, 1)


def test_utilization_and_makespan_by_hand():
    # 2 GPUs; A holds 1 GPU 0-100 and B 1 GPU 0-50: 150 GPU-s of 200 available.
    jobs = [job("A", 0, 1, 100), job("B", 0, 1, 50)]
    from dlsched.metrics import summarize

    _, r = run("1x2", jobs, "fifo")
    summary = summarize(r)
    assert summary["makespan_s"] == 100
    assert summary["gpu_utilization"] == pytest.approx(0.75)
    assert summary["mean_jct_s"] == 75 and summary["mean_queue_s"] == 0


def test_gpu_type_constraint_waits_for_the_right_type():
    # V100 node (GPU 0) and T4 node (GPU 1). A holds the T4 0-100. B may only use a T4: it waits
    # for A although the V100 is idle, then runs 100-150. C (any type) takes the V100 at once.
    jobs = [
        job("A", 0, 1, 100, gpu_types=("T4",)),
        job("B", 1, 1, 50, gpu_types=("T4",)),
        job("C", 2, 1, 10),
    ]
    s, _ = run("1x1:V100,1x1:T4", jobs, "fifo", scan="backfill")
    assert (s["A"].gpus, s["B"].gpus, s["C"].gpus) == ((1,), (1,), (0,))
    assert (s["B"].first_start, s["C"].first_start) == (100, 2)


def test_binned_timeseries_by_hand():
    # 2 GPUs. A holds 1 GPU 0-100, B 1 GPU 0-50; C (2 GPUs) waits 0-100 then runs 100-200.
    # Over 0-200: utilization 1.0 for 0-50, 0.5 for 50-100, 1.0 for 100-200; queue 1 until 100.
    from dlsched.metrics import binned_timeseries, summarize

    jobs = [job("A", 0, 1, 100), job("B", 0, 1, 50), job("C", 0, 2, 100)]
    _, r = run("1x2", jobs, "fifo")
    bins = binned_timeseries(r, max_bins=4)
    assert [b["utilization"] for b in bins] == pytest.approx([1.0, 0.5, 1.0, 1.0])
    assert [b["queue_mean"] for b in bins] == pytest.approx([1, 1, 0, 0])
    assert sum(b["utilization"] for b in bins) / 4 == pytest.approx(summarize(r)["gpu_utilization"])


def test_a_step_within_one_bin_is_counted_as_the_pieces_count_it():
    # binned series take a step that lies in one bin without the generator of pieces: the same
    # overlap to the last bit, and only where the generator gives exactly one piece (random
    # steps, and steps from and to bin edges, where rounding decides)
    import random

    from dlsched.metrics import _bin_pieces, _within_one_bin

    rng = random.Random(3)
    for _ in range(20_000):
        start, bins = rng.choice([0.0, 0.1, 1e6 / 3]), rng.choice([1, 3, 7, 1000])
        width = rng.choice([1.0, 0.1, 1e5 / 7])
        edge = start + rng.randrange(bins) * width
        seg_start = rng.choice([edge, start + rng.uniform(0, bins * width)])
        seg_end = rng.choice(
            [seg_start + rng.uniform(0, 2 * width), start + rng.randrange(bins + 1) * width]
        )
        if seg_start >= seg_end:
            continue
        b = min(bins - 1, int((seg_start - start) / width))
        pieces = list(_bin_pieces(seg_start, seg_end, start, width, bins))
        one = _within_one_bin(seg_start, seg_end, b, start, width, bins)
        assert (one is not None) == (len(pieces) == 1)
        if one is not None:
            assert pieces == [(b, one)]


def test_preemption_stops_only_the_jobs_whose_gpus_the_new_job_takes():
    # 2 nodes x 4 GPUs, SRTF, 30 s restart pause. At 0: a (3 GPUs, 60 s) lands on node 0, v2
    # (4 GPUs, 910 s) on node 1, v1 (1 GPU, 930 s) on node 0's last GPU. At 10, j (4 GPUs,
    # 100 s) outranks v1 (920 s left, the worst) and v2 (900 s left). Taking v1 frees one GPU
    # (not enough); taking v2 too frees node 1, where j goes: v1's GPU is not used, so v1 keeps
    # running and ends at 930. When a ends at 60, v2 (900 left) does not outrank v1 (870 left)
    # and waits for j to end at 110: 30 s pause, 900 s, ends at 1040. Mean JCT 532.5. (Before,
    # v1 was preempted too and ended at 110 + 30 + 920 = 1060, v2 at 990: mean 552.5.)
    jobs = [job("a", 0, 3, 60), job("v2", 0, 4, 910), job("v1", 0, 1, 930), job("j", 10, 4, 100)]
    s, _ = run("2x4", jobs, "srtf")
    assert s["v1"].preemptions == 0 and s["v2"].preemptions == 1
    assert (s["a"].finish, s["j"].finish, s["v1"].finish, s["v2"].finish) == (60, 110, 930, 1040)
    assert sum(jct(s, x) for x in "a v1 v2 j".split()) / 4 == 532.5


def test_preemption_spares_a_victim_the_new_job_can_do_without():
    # issue 25, 12. 2 nodes x 4 GPUs, SRTF, no restart pause. At 0, Z (4 GPUs, 5 s) takes node
    # 0, Q (2, 300 s) and B (2, 900 s) node 1. At 6, P (2, 200 s) and A (1, 1,000 s) go to node
    # 0: one GPU idle there. At 10, j (3 GPUs, 100 s) outranks A (996 s left, the worst) and B
    # (890 s). A's GPU and the idle one are 2: not enough; with B's, 4 over two nodes, and j's
    # placement takes node 0's two and one of B's, so both were preempted. But j fits on B's
    # two and the idle GPU: A is spared and ends at 1,006 (before: 1,106, one preemption). j
    # runs 10-110; B restarts on j's GPUs at 110 with 890 s left: 1,000.
    jobs = [
        job("Z", 0, 4, 5),
        job("Q", 0, 2, 300),
        job("B", 0, 2, 900),
        job("P", 6, 2, 200),
        job("A", 6, 1, 1000),
        job("j", 10, 3, 100),
    ]
    s, _ = run("2x4", jobs, "srtf", SimConfig(restart_overhead_s=0))
    assert (s["A"].preemptions, s["B"].preemptions) == (0, 1)
    assert [s[x].finish for x in ("j", "B", "A")] == [110, 1000, 1006]


def test_tiresias_knows_its_demoted_jobs_through_demotion_promotion_and_finish():
    # the order's low-priority ids (the jobs below the top queue), which the elastic part asks
    # once a pass: in the promotion scenario above, A is demoted at 100 and promoted at 450,
    # B demoted at 250; each leaves them when it ends (the order keeps no level of 0)
    from dlsched.cluster import parse_cluster_spec
    from dlsched.policies.catalog import make_policy
    from dlsched.sim import simulate

    policy = make_policy("tiresias", thresholds_gpu_s=[100], starvation_factor=2)
    order, seen = policy.order, []
    schedule = policy.schedule

    def checked(view):
        plan = schedule(view)
        assert order.low_priority() == {j for j, level in order.level.items() if level > 0}
        seen.append((view.now, sorted(order.low_priority())))
        return plan

    policy.schedule = checked
    jobs = [job("A", 0, 1, 300), job("B", 150, 1, 1000)]
    simulate(parse_cluster_spec("1x1"), jobs, policy, SimConfig(restart_overhead_s=30))
    assert [s for t, s in seen if t in (100, 150, 250, 450, 630, 1360)] == [
        ["A"],
        ["A"],
        ["A", "B"],
        ["B"],
        ["B"],
        [],
    ]


def test_tiresias_threshold_sets():
    from dlsched.errors import SpecError
    from dlsched.policies.catalog import make_policy

    # the default is the authors' simulator's queues (simulator/jobs.py: queue_limit, dlas-gpu)
    assert make_policy("tiresias").params()["thresholds_gpu_s"] == [3250.0, 7200.0]
    assert make_policy("tiresias").params()["scan"] == "greedy"
    assert make_policy("tiresias", thresholds_gpu_s="las-3.2h").params()["thresholds_gpu_s"] == [
        11520.0
    ]
    assert make_policy("tiresias", thresholds_gpu_s="100,200").params()["thresholds_gpu_s"] == [
        100.0,
        200.0,
    ]
    with pytest.raises(SpecError, match="thresholds_gpu_s"):
        make_policy("tiresias", thresholds_gpu_s="fast")
    with pytest.raises(SpecError, match="scan"):
        make_policy("fifo", scan="sideways")


def test_srtf_preempts_the_job_with_the_most_work_left_whatever_its_speed():
    # 2 GPUs, no restart pause. x (1,000 s of work) runs at speed 2, y (800 s) at speed 1, both
    # from 0. At 300, p (450 s) arrives: x has 400 s left, y 500 s. p outranks y only, so y is
    # preempted (the old worst-first heap assumed speed 1 and looked at x only: p waited).
    # p: 300-750; x ends at 500; y resumes there with 500 s left: ends at 1000.
    from dlsched.cluster import parse_cluster_spec
    from dlsched.policies.catalog import make_policy
    from dlsched.sim.engine import Simulator
    from dlsched.workload_model import TraceModel

    class XIsFast(TraceModel):
        def __call__(self, job, gpus):
            return 2.0 if job.job_id == "x" else 1.0

    jobs = [job("x", 0, 1, 1000), job("y", 0, 1, 800), job("p", 300, 1, 450)]
    result = Simulator(
        parse_cluster_spec("1x2"),
        jobs,
        make_policy("srtf"),
        SimConfig(restart_overhead_s=0),
        workload=XIsFast(),
    ).run()
    s = {j.job_id: j for j in result.jobs}
    assert s["p"].first_start == 300 and s["y"].preemptions == 1 and s["x"].preemptions == 0
    assert (s["x"].finish, s["p"].finish, s["y"].finish) == (500, 750, 1000)


def test_the_summary_counts_jobs_gpu_time_and_allocated_gpu_time_apart():
    # a (1 GPU, 100 s) runs from 0; b (1 GPU, 50 s) joins it on the one GPU at 1 (sjf-ffs);
    # with slowdowns of 1 both run at full speed: a 0-100, b 1-51. Jobs' GPU-time: 100 + 50 =
    # 150 s; the GPU was allocated for 100 s.
    from dlsched.cluster import parse_cluster_spec
    from dlsched.jobs import JobSpec
    from dlsched.metrics import summarize
    from dlsched.policies.catalog import make_policy
    from dlsched.sim.engine import Simulator
    from dlsched.workload_model import TraceModel

    class Shares(TraceModel):
        def slowdown(self, job, partner):
            return 1.0

        def memory_mib(self, spec, gpus, accumulation=1):
            return 1000.0

    jobs = [JobSpec("a", 0.0, 1, 100.0, model="m"), JobSpec("b", 1.0, 1, 50.0, model="m")]
    sim = Simulator(
        parse_cluster_spec("1x1"), jobs, make_policy("sjf-ffs"), SimConfig(), workload=Shares()
    )
    summary = summarize(sim.run())
    assert summary["job_gpu_time_s"] == 150 and summary["allocated_gpu_time_s"] == 100
