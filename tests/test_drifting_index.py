"""The index of running jobs whose order drifts (SRTF's), by hand and against a brute force."""

import random

from dlsched.jobs import JobSpec, JobState, Status
from dlsched.policies.sjf import SrtfOrder
from dlsched.state.drifting import DriftingIndex, rounding_margin


def running(seq, gpus, duration, done=0.0, rate=1.0, progress_at=0.0, resume_at=0.0, **spec):
    job = JobState(JobSpec(f"j{seq}", 0.0, gpus, duration, **spec), seq=seq)
    job.status, job.gpus, job.done_s = Status.RUNNING, tuple(range(gpus)), done
    job.rate, job.progress_at, job.resume_at = rate, progress_at, resume_at
    return job


def exact(now):
    order = SrtfOrder()
    order.now = now
    return order.exact_worst_first


def test_by_hand_worst_bound_and_ended_keys():
    index = DriftingIndex()
    # at t=100: a runs at speed 1 with 500 s left at t=0 (badness 500), b at half speed with
    # 700 s left at t=0 (badness 100 + 700 - 50 = 750), c paused until t=300 with 600 s left
    # (badness 700 until it resumes), each key as (slope, intercept, until)
    a, b, c = running(0, 1, 500.0), running(1, 2, 700.0, rate=0.5), running(2, 4, 600.0)
    index.add(a, 0.0, 500.0, float("inf"))
    index.add(b, 0.5, 700.0, float("inf"))
    index.add(c, 1.0, 600.0, 300.0)
    assert index.worst(exact(100.0), 100.0) is b
    # GPUs of the jobs at least as bad as 600 at t=100: b (750) and c (700)
    assert index.gpus_from(600.0, 100.0) == 2 + 4
    assert index.gpus_from(720.0, 100.0) == 2
    assert index.gpus_from(0.0, 100.0) == 7 and index.gpus_from(800.0, 100.0) == 0
    assert index.ended(299.0) == [] and index.ended(300.0) == [c]
    index.remove(b.job_id)
    assert index.worst(exact(100.0), 100.0) is c and len(index) == 2
    # a job re-keyed before its key ended is not handed back for the old key
    index.add(c, 0.0, 900.0, float("inf"))
    assert index.ended(1e9) == [] and index.gpus_from(850.0, 0.0) == 4


def test_a_near_tie_between_slopes_is_decided_by_the_exact_keys():
    # at t=100 both a (speed 1: badness 750) and b (half speed: 0.5 x 100 + 700 = 750) are as
    # bad by their linear keys; the exact key decides, whichever slope comes first
    a, b = running(0, 1, 750.0), running(1, 2, 700.0, rate=0.5)
    for first, then, exact_key in [(a, b, {0: 1, 1: 0}), (b, a, {0: 0, 1: 1})]:
        index = DriftingIndex()
        for job in (first, then):
            index.add(job, 0.0 if job is a else 0.5, 750.0 if job is a else 700.0, float("inf"))

        def exact_by_hand(job, exact_key=exact_key):
            return exact_key[job.seq]

        chosen = min((a, b), key=exact_by_hand)
        assert index.worst(exact_by_hand, 100.0) is chosen
        # with the chosen one a victim already, the other is the worst
        other = b if chosen is a else a
        assert index.worst(exact_by_hand, 100.0, skip={chosen.job_id}) is other


def test_a_count_asked_to_reach_enough_stops_there_or_is_whole():
    index = DriftingIndex()
    # badness at t=0: 100 (1 GPU), 200 (2), 300 (4), 400 (8) on one slope; 250 (2) on another
    for seq, (gpus, key) in enumerate([(1, 100.0), (2, 200.0), (4, 300.0), (8, 400.0)]):
        index.add(running(seq, gpus, key), 0.0, key, float("inf"))
    index.add(running(4, 2, 250.0, rate=0.5), 0.5, 250.0, float("inf"))
    # from 150: 2 + 4 + 8 + 2 = 16 in all; asked to reach 5 it stops at the worst (8)
    assert index.gpus_from(150.0, 0.0) == 16
    assert index.gpus_from(150.0, 0.0, enough=5) == 8
    # below enough it is the whole count, with the victims left out
    assert index.gpus_from(150.0, 0.0, skip={"j3"}, enough=20) == 8
    assert index.gpus_from(150.0, 0.0, skip={"j3"}) == 8
    assert index.gpus_from(150.0, 0.0, enough=0) == 0


def test_an_elastic_job_counts_its_largest_size():
    index = DriftingIndex()
    index.add(running(0, 2, 100.0, min_gpus=1, max_gpus=8), 0.0, 100.0, float("inf"))
    assert index.gpus_from(0.0, 0.0) == 8


def test_worst_and_bound_agree_with_a_brute_force_over_the_exact_keys():
    rng = random.Random(7)
    for trial in range(200):
        now = rng.choice([0.0, 1e3, 3e6, 7.9e6])
        order = SrtfOrder()
        order.now = now
        index = DriftingIndex()
        jobs = []
        for seq in range(rng.randint(1, 30)):
            # a few speeds, so slopes repeat; some jobs paused to restart
            rate = rng.choice([1.0, 0.5, 0.8, 1.0 / 3])
            since = now - rng.uniform(0, 1e4)
            resume = now + rng.uniform(1, 100) if rng.random() < 0.2 else since
            job = running(
                seq,
                rng.choice([1, 2, 4, 8]),
                rng.uniform(10, 1e6),
                done=rng.uniform(0, 5),
                rate=rate,
                progress_at=since,
                resume_at=resume,
            )
            jobs.append(job)
            index.add(job, *order.linear_key(job))
        assert index.worst(order.exact_worst_first, now) is min(jobs, key=order.exact_worst_first)
        victims = {j.job_id for j in jobs if rng.random() < 0.3}
        left = [j for j in jobs if j.job_id not in victims]
        expected = min(left, key=order.exact_worst_first) if left else None
        assert index.worst(order.exact_worst_first, now, skip=victims) is expected, trial
        pending = JobState(JobSpec("p", now, 1, rng.uniform(10, 1e6)), seq=99)
        outranked = sum(len(j.gpus) for j in jobs if order.rank(j, now) > order.rank(pending, now))
        badness = now + pending.remaining_at(now)
        margin = rounding_margin(badness, now)
        # an upper bound, and tight but for jobs within the rounding of the pending one
        assert index.gpus_from(badness + margin, now) <= outranked, trial
        assert index.gpus_from(badness - margin, now) >= outranked, trial
        # asked to reach enough: the whole count below it, at least enough otherwise
        for skip in (set(), victims):
            whole = index.gpus_from(badness, now, skip)
            enough = rng.randint(0, 40)
            reached = index.gpus_from(badness, now, skip, enough)
            assert reached == whole if whole < enough else reached >= enough, trial
