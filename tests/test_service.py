"""The scheduling service's transitions, with an in-memory executor and a fake clock: the
runtime's logic without Ray or PyTorch, in milliseconds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.jobs import Status
from dlsched.policies.catalog import POLICIES
from dlsched.runtime.executor_api import CLUSTER, JOB, MEMORY, Outcome
from dlsched.runtime.profiling_queue import DEFAULT_PAIR_WAIT_S
from dlsched.runtime.service import MAX_CLUSTER_FAILURES, SWEEP_EVERY_S, SchedulerService
from dlsched.runtime.store import CANCELLED, DONE, FAILED, FINAL, QUEUED, RUNNING, SQLiteStore
from dlsched.state.invariants import problems
from example_counts import examples
from fake_executor import Clock, FakeExecutor

SPEC = {"entrypoint": "dlsched.workloads.lm:build", "batch_size": 8, "iterations": 100}


class Setup:
    def __init__(
        self,
        tmp_path,
        policy="fifo",
        nodes=None,
        params=None,
        store=None,
        inference=(),
        clock=None,
        **kw,
    ) -> None:
        self.clock = clock or Clock()
        self.store = store or SQLiteStore(tmp_path / "db.sqlite")
        self.executor = FakeExecutor(nodes or {"n0": 2}, inference)
        self.service = SchedulerService(
            self.store, self.executor, policy, params, clock=self.clock, **kw
        )
        self.tenant = (
            self.store.create_tenant("alice", "hash-alice")["id"]
            if not self.store.tenants()
            else self.store.tenants()[0]["id"]
        )

    def submit(self, **spec) -> str:
        return self.store.add_job(self.tenant, {**SPEC, **spec})["id"]

    def step(self, seconds: float = 1.0):
        self.clock.advance(seconds)
        plan = self.service.step()
        assert not problems(self.service.state), problems(self.service.state)
        return plan

    def status(self, job_id: str) -> str:
        return self.store.job(job_id)["status"]

    def state(self, job_id: str):
        return self.service.live[job_id].state


def test_fifo_runs_finishes_and_forgets_a_job(tmp_path):
    s = Setup(tmp_path)
    a = s.submit(gpus=2)
    s.step()
    assert s.status(a) == RUNNING and s.executor.runs[a].placement == [("n0", 0), ("n0", 1)]
    s.executor.finish(a)
    s.step()
    assert s.status(a) == DONE
    assert a not in s.service.live and not s.service.state.running  # nothing kept in memory


def test_the_loop_takes_a_report_at_once_not_at_its_next_pass(tmp_path):
    import time

    s = Setup(tmp_path, interval_s=3600.0)  # left alone, the next pass is an hour away
    a = s.submit(gpus=1)
    s.service.start()  # its first pass starts the job
    try:
        deadline = time.monotonic() + 10
        while a not in s.executor.runs and time.monotonic() < deadline:
            time.sleep(0.01)  # (the store says running before the executor is told)
        assert s.status(a) == RUNNING
        s.executor.finish(a)
        s.executor.on_report()  # what the executor does with news
        while s.status(a) != DONE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.status(a) == DONE
    finally:
        s.service.stop()


def test_a_finished_jobs_checkpoint_is_deleted_after_the_retention_only(tmp_path):
    s = Setup(tmp_path, checkpoint_retention_s=3600.0)
    a, b = s.submit(gpus=1), s.submit(gpus=1)
    s.step()
    s.executor.finish(a)
    s.step()  # a done; b still running
    s.step(3000.0)
    assert ("discard", a) not in s.executor.log  # not yet an hour
    s.step(700.0)
    assert ("discard", a) in s.executor.log and ("discard", b) not in s.executor.log
    s.step(4000.0)
    assert s.executor.log.count(("discard", a)) == 1  # once


def test_a_tenant_s_finished_jobs_are_kept_up_to_the_bound_and_the_retention(tmp_path):
    # issue 29, 7: cancelled and finished jobs (up to 64 KiB of args each) were kept for ever
    s = Setup(tmp_path, nodes={"n0": 4}, finished_kept_per_tenant=2, job_retention_s=86400.0)
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    alice_jobs = [s.submit(gpus=1) for _ in range(4)]
    bobs = s.store.add_job(bob, {**SPEC, "gpus": 1})["id"]
    s.step()
    for job in [*alice_jobs[:3], bobs]:
        s.executor.finish(job)
        s.step()
    s.store.update_job(alice_jobs[3], cancel_requested=True)  # cancelled: finished too
    s.step(SWEEP_EVERY_S)
    gone = alice_jobs[:2]  # alice's two oldest; her newest two and bob's one are kept
    assert [s.store.job(j) is None for j in alice_jobs] == [True, True, False, False]
    assert all(not s.store.events(j) for j in gone) and s.store.job(bobs) is not None
    assert all(("discard", j, True) in s.executor.log for j in gone)  # their logs too
    assert s.store.runs(0, 2e10, "alice") and all(
        r["job_id"] not in gone for r in s.store.runs(0, 2e10)
    )
    running = s.submit(gpus=1)
    s.step()
    s.step(86400.0)  # past the retention: every finished job goes, a running one stays
    assert [s.store.job(j) for j in [*alice_jobs[2:], bobs]] == [None, None, None]
    assert s.status(running) == RUNNING


def test_a_long_running_server_keeps_nothing_of_finished_jobs(tmp_path):
    # the old books kept every job, its heap entries and its profile for ever
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 2}, max_profiling=3)
    for _ in range(30):
        ids = [s.submit(gpus=1, duration_s=100) for _ in range(3)]
        s.step()
        for _ in range(2):  # each profiling run holds one of the two GPUs: two at a time
            s.executor.finish_profiling()
            s.step()
        s.step()
        for jid in ids:
            if jid in s.executor.runs:
                s.executor.finish(jid)
        s.store.update_job(ids[-1], cancel_requested=True)
        s.step()
        s.step()
        for jid in list(s.executor.runs):
            s.executor.finish(jid)
        s.step()
    assert (
        all(r["status"] in (DONE, CANCELLED) for r in s.store.jobs()) and len(s.store.jobs()) == 90
    )
    assert s.service.live == {} and s.service.speed.profiles == {}
    assert not s.service.state.pending and not s.service.state.running


def share_one_gpu(s: Setup) -> tuple[str, str]:
    """a runs alone on the GPU, then b (profiled: its memory fits beside a's) joins it."""
    a = s.submit(gpus=1, duration_s=1000)
    s.step()
    s.executor.finish_profiling()
    s.step()
    b = s.submit(gpus=1, duration_s=500)
    s.step()
    s.executor.finish_profiling()
    s.step()
    assert s.executor.runs[a].placement == s.executor.runs[b].placement == [("n0", 0)]
    return a, b


def test_cancel_of_a_sharing_job_gives_its_partner_back_its_speed(tmp_path):
    # sjf-ffs pairs b with a on the one GPU (memory fits); cancelling b must restore a's speed
    # and sharing state (the old books left a slowed and "sharing")
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    a, b = share_one_gpu(s)
    ja, jb = s.state(a), s.state(b)
    assert ja.status is Status.RUNNING and jb.status is Status.RUNNING
    assert ja.sharing and ja.rate < 1
    s.store.update_job(b, cancel_requested=True)
    s.step()
    assert s.status(b) == CANCELLED and b not in s.executor.runs
    assert not ja.sharing and ja.rate == 1.0 and ja.accumulation == 1


def test_the_allocated_gpus_gauge_counts_a_shared_gpu_once_and_only_gpus_in_service(tmp_path):
    # it summed the jobs' GPUs: 2 of 1 here, and a node's GPUs taken out of service (out of
    # the total) still counted as allocated
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    share_one_gpu(s)

    def gauges():
        get = s.service.metrics.registry.get_sample_value
        return get("dlsched_gpus_allocated"), get("dlsched_gpus_total")

    assert gauges() == (1, 1)
    s.service.set_node("n0", "cordoned")  # its jobs run on
    s.step()
    assert gauges() == (0, 0) and len(s.service.state.running) == 2


def test_failure_of_one_partner_requeues_it_and_restores_the_other(tmp_path):
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    a, b = share_one_gpu(s)
    s.executor.crash(b)
    s.step()
    row = s.store.job(b)
    assert row["failures"] == 1 and s.state(b).failures == 1  # counted once
    # b went back to the queue and, the GPU holding only a again, shares it anew
    assert s.status(b) == RUNNING and row["attempt"] == 2
    assert s.state(a).sharing and s.state(b).sharing


def test_a_sharing_job_past_its_memory_grant_fails_alone_and_runs_again_unshared(tmp_path):
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    a, b = share_one_gpu(s)
    # each runs capped at its grant: the profile's 500 + 10 x 8 MiB at its batch of 8 (sjf-ffs
    # gives it one sub-batch), plus the 10% headroom
    for job in (a, b):
        assert s.executor.runs[job].config["memory_grant_mib"] == pytest.approx(580 * 1.1)
    s.executor.crash(
        b,
        "Traceback ...\ntorch.OutOfMemoryError: exceeded its memory grant of 638 MiB on a shared "
        "GPU (700 MiB in use)",
        cause=MEMORY,
    )
    s.step()
    row = s.store.job(b)
    assert row["failures"] == 0 and s.state(b).failures == 0  # not counted as its failure
    assert any(
        "exceeded its memory grant of 638 MiB" in e["message"] and "to run alone" in e["message"]
        for e in s.store.events(b)
    )
    # a kept running, alone again; b waits: it may neither join a nor be joined
    assert s.status(a) == RUNNING and s.executor.runs[a].attempt == 1 and not s.state(a).sharing
    assert s.status(b) == QUEUED
    s.executor.finish(a)
    s.step()
    assert s.status(b) == RUNNING and "memory_grant_mib" not in s.executor.runs[b].config
    c = s.submit(gpus=1, duration_s=10)  # shorter: sjf-ffs would pair it with b if it could
    s.step()
    s.executor.finish_profiling()
    s.step()
    assert s.status(c) == QUEUED and not s.state(b).sharing
    # an out-of-memory of an uncapped run is its own failure, counted
    s.executor.crash(b, "torch.OutOfMemoryError: CUDA out of memory", cause=MEMORY)
    s.step()
    assert s.store.job(b)["failures"] == 1


def test_a_profiling_run_holds_a_gpu_in_the_books_and_delays_a_job_that_needs_it(tmp_path):
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 2})
    a = s.submit(gpus=2, duration_s=100)
    b = s.submit(gpus=1, duration_s=500)
    s.step()  # both profile at once, each on a whole GPU of its own
    assert s.executor.profiling_gpus == {a: ([("n0", 0)], 2), b: ([("n0", 1)], 2)}
    assert s.service.state.leases == {a: (0,), b: (1,)} and s.service.state.free.total == 0
    [node] = s.service.snapshot()["nodes"]  # the dashboard's GPU map
    assert node["jobs_by_gpu"] == {0: f"{a} (profiling)", 1: f"{b} (profiling)"}
    s.executor.finish_profiling(only=(a,))
    s.step()
    assert s.status(a) == QUEUED  # b's run holds one of the two GPUs a needs
    assert any(e["message"] == "profiling on n0/gpu1" for e in s.store.events(b))
    s.executor.finish_profiling()
    s.step()
    assert s.status(a) == RUNNING and s.service.state.leases == {}  # then b waits for a
    assert s.status(b) == QUEUED


def test_a_profiling_run_beside_a_job_is_capped_at_the_gpus_rest_and_may_need_a_whole_one(
    tmp_path,
):
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    a = s.submit(gpus=1, duration_s=1000)
    s.step()
    s.executor.finish_profiling()
    s.step()
    b, c = s.submit(gpus=1, duration_s=500), s.submit(gpus=1, duration_s=400)
    s.step()
    # no GPU is free: b profiles beside a, capped at the GPU's 16384 MiB less a's 580 x 1.1;
    # c waits, as the GPU's second place is b's run now (nobody joins a meanwhile)
    assert s.executor.profiling == [b] and s.executor.profiling_gpus[b] == ([("n0", 0)], 1)
    room = 16384 - 580 * 1.1
    assert s.executor.log[-1] == ("profile", b)
    assert s.service.state.leases == {b: (0,)}
    assert any(
        f"beside a job, capped at {room:,.0f} MiB" in e["message"] for e in s.store.events(b)
    )
    # the run ran out of that memory: b waits for a whole GPU, and c's turn comes meanwhile
    s.executor.fail_profiling(b, "profiling failed: torch.OutOfMemoryError: exceeded its memory")
    s.step()
    assert s.status(b) == QUEUED and s.store.job(b)["profile"] is None
    assert any("waits for a whole GPU" in e["message"] for e in s.store.events(b))
    assert s.executor.profiling == []  # b first in its tenant's turn: no whole GPU yet
    s.executor.finish(a)
    s.step()
    assert s.executor.profiling == [b] and s.executor.profiling_gpus[b] == ([("n0", 0)], 2)
    s.executor.finish_profiling()
    s.step()
    # c's turn takes the GPU b's run left, before the scheduling pass: b waits for it
    assert s.executor.profiling == [c] and s.status(b) == QUEUED
    s.executor.finish_profiling()
    s.step()  # c, the shorter, starts; b joins it at the next pass (memory fits)
    s.step()
    assert s.status(b) == RUNNING and s.status(c) == RUNNING


def test_a_job_s_speed_is_not_measured_while_a_profiling_run_is_beside_it(tmp_path):
    # a's iteration time beside b's profiling run (which slows it) is neither its solo time nor
    # a pair's: it was taken as a's solo speed, and a sharing job's as its pair's slowdown
    from fake_executor import PROFILE

    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    a = s.submit(gpus=1, duration_s=1000)
    s.step()
    s.executor.finish_profiling()
    s.step()
    meter = s.service.live[a].meter
    for iteration in (10, 20):  # the first report ends its start's pause; then 10 in 1 s
        s.executor.report_progress(a, iteration, 100, 0.1)
        s.step(1.0)
    assert meter.speeds == {"1x1": [10, 1.0]}
    b = s.submit(gpus=1, duration_s=500)
    s.step()
    assert s.service.state.leases == {b: (0,)}  # beside a
    for iteration in (25, 30):  # 5 in 1 s beside the run: not measured
        s.executor.report_progress(a, iteration, 100, 0.2)
        s.step(1.0)
    assert meter.speeds == {"1x1": [10, 1.0]}
    too_big = {**PROFILE, "fixed_mib": 16000.0}  # b cannot join a: a stays alone
    s.executor.finish_profiling(too_big)
    s.step(1.0)
    for iteration in (40, 50):  # from the run's end: 10 in 1 s again
        s.executor.report_progress(a, iteration, 100, 0.1)
        s.step(1.0)
    assert meter.speeds == {"1x1": [20, 2.0]}
    # a run that begins and ends between two of a's reports: the stretch over it is dropped
    s.store.update_job(b, cancel_requested=True)
    s.step(1.0)
    c = s.submit(gpus=1, duration_s=400)
    s.step(1.0)
    assert s.service.state.leases == {c: (0,)}
    s.executor.finish_profiling(too_big)
    s.step(1.0)
    s.executor.report_progress(a, 55, 100, 0.2)  # 5 in 3 s, over c's run
    s.step(1.0)
    assert meter.speeds == {"1x1": [20, 2.0]}


def test_a_profiling_run_counts_in_its_tenant_s_use_until_it_ends_or_its_node_goes(tmp_path):
    # its GPUs are its tenant's while it runs, as a running job's would be: in the quota's use,
    # fair share and the dashboard's figures
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1, "n1": 1})
    a, b = s.submit(gpus=1, duration_s=100), s.submit(gpus=1, duration_s=100)

    def use() -> tuple[int, int, int]:
        u = s.service.admission.usage_by_tenant(s.service.state)[s.tenant]
        return s.service.state.tenant_gpus.get(s.tenant, 0), u.used, u.held

    s.step()  # each profiles on a GPU of its own
    assert use() == (2, 2, 2)
    [(node, _)] = s.executor.profiling_gpus[b][0]
    s.executor.lose_node(node)
    s.step()  # b's lease ended with its node; b waits for a GPU to profile on
    assert use() == (1, 1, 1) and list(s.service.state.leases) == [a]
    gpu = 0 if node == "n1" else 1
    s.executor.finish_profiling()
    s.step()  # a's lease ends, and b profiles on the GPU it freed before a may start there
    assert s.status(a) == QUEUED and s.service.state.leases == {b: (gpu,)}
    assert use() == (1, 2, 1)  # b's run; a waits, admitted, and counts its base size
    s.executor.finish_profiling()
    s.step()  # b's lease ends; one of the two runs, the other waits
    assert s.service.state.leases == {} and use() == (1, 2, 1)
    assert {s.status(a), s.status(b)} == {RUNNING, QUEUED}


def test_a_node_lost_under_a_profiling_run_ends_its_lease_and_the_job_is_profiled_again(
    tmp_path,
):
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1, "n1": 1})
    a = s.submit(gpus=1, duration_s=100)
    s.step()
    [(node, _)] = s.executor.profiling_gpus[a][0]
    s.executor.lose_node(node)
    s.step()
    # the cluster's failure, not the job's: a runs again on the node left, its old lease gone
    assert s.status(a) == QUEUED and s.store.job(a)["failures"] == 0
    assert s.executor.profiling == [a] and s.executor.profiling_gpus[a][0] != [(node, 0)]
    assert list(s.service.state.leases) == [a]
    assert any("profiled again (1 of" in e["message"] for e in s.store.events(a))
    s.executor.finish_profiling()
    s.step()
    assert s.status(a) == RUNNING


def test_a_job_cancelled_after_its_profiling_failed_for_the_cluster_is_not_profiled_again(
    tmp_path,
):
    # the retry composes with cancels: the cancel is read first, and the failed run's outcome
    # then finds the job gone (no retry, no lease, no turn held)
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    a = s.submit(gpus=1, duration_s=100)
    s.step()
    s.executor.fail_profiling(a, "profiling failed: GetTimeoutError", CLUSTER)
    s.store.update_job(a, cancel_requested=True)
    s.step()
    assert s.status(a) == CANCELLED and s.executor.profiling == []
    assert s.service.state.leases == {} and not s.service.to_profile.running
    b = s.submit(gpus=1, duration_s=100)
    s.step()
    assert s.executor.profiling == [b]  # a holds no turn


@pytest.mark.parametrize(
    "nodes, gpus, expected",
    [
        ({"n0": 1, "n1": 1}, 2, [("n0", 0), ("n1", 0)]),  # alone, and 2 workers across nodes
        ({"n0": 1}, 1, [("n0", 0)]),  # alone only
    ],
)
def test_genie_profiles_on_a_cluster_without_a_node_of_two_gpus(tmp_path, nodes, gpus, expected):
    # GENIE's run waited for two free GPUs of one node, which such a cluster never has: the
    # job waited for ever, its only event "submitted"
    s = Setup(tmp_path, policy="genie", nodes=nodes)
    a = s.submit(gpus=gpus, duration_s=100)
    s.step()
    assert s.executor.profiling == [a]
    assert sorted(s.executor.profiling_gpus[a][0]) == expected
    s.executor.finish_profiling()
    s.step()
    assert s.status(a) == RUNNING


def test_genie_profiles_a_job_that_may_run_on_one_gpu_only_on_one(tmp_path):
    # it was timed on 2 workers as well, holding 3 GPUs for measurements it can never use
    s = Setup(tmp_path, policy="genie", nodes={"n0": 2, "n1": 1})
    a = s.submit(gpus=1, duration_s=10_000)
    s.step()
    assert s.executor.profiling_gpus[a][0] == [("n1", 0)]  # the fullest node's free GPU
    assert ("profile", a) in s.executor.log and not s.executor.placements[a]
    b = s.submit(gpus=2, duration_s=10_000)
    s.step()  # the pair of n0 is free: b, which may run on 2, is timed there
    assert sorted(s.executor.profiling_gpus[b][0]) == [("n0", 0), ("n0", 1)]
    assert s.executor.placements[b]


def test_genie_waits_for_two_gpus_of_one_node_where_a_node_has_them_up_to_a_bound(tmp_path):
    s = Setup(tmp_path, policy="genie", nodes={"n0": 2, "n1": 1})
    a, b = s.submit(gpus=1, duration_s=10_000), s.submit(gpus=1, duration_s=10_000)
    s.step()  # each may run on one GPU only: profiled on one
    s.executor.finish_profiling()
    s.step()
    assert s.status(a) == RUNNING and s.status(b) == RUNNING
    c = s.submit(gpus=2, duration_s=100)  # may run on 1 or 2: timed on 2 workers as well
    s.step()  # one GPU of n0 is free, but not two: c's run waits for a pair
    [free] = [g for g, load in s.executor.gpu_load().items() if load == 0]
    assert free[0] == "n0" and s.executor.profiling == [] and s.status(c) == QUEUED
    s.step(DEFAULT_PAIR_WAIT_S - 1)  # c has waited 59 s
    assert s.executor.profiling == []
    s.step()  # 60 s: long enough; it is profiled on the one free GPU
    assert s.executor.profiling_gpus[c][0] == [free]


def test_profiling_failed_by_the_cluster_is_retried_a_bounded_number_of_times(tmp_path):
    s = Setup(tmp_path, policy="sjf-ffs", nodes={"n0": 1})
    a = s.submit(gpus=1, duration_s=100)
    for _ in range(MAX_CLUSTER_FAILURES):
        s.step()
        s.executor.fail_profiling(a, "profiling failed: GetTimeoutError", CLUSTER)
    s.step()
    assert s.status(a) == QUEUED and s.executor.profiling == [a]
    s.executor.fail_profiling(a, "profiling failed: GetTimeoutError", CLUSTER)
    s.step()
    assert s.status(a) == FAILED and s.executor.profiling == []
    assert s.service.state.leases == {}
    # a failure of the job's own program is final at once
    b = s.submit(gpus=1, duration_s=100)
    s.step()
    s.executor.fail_profiling(b, "profiling failed: Traceback ... SyntaxError")
    s.step()
    assert s.status(b) == FAILED and "SyntaxError" in s.store.job(b)["message"]


def test_node_loss_requeues_its_jobs_and_they_run_elsewhere(tmp_path):
    s = Setup(tmp_path, nodes={"n0": 2, "n1": 2})
    a = s.submit(gpus=2)
    b = s.submit(gpus=2)
    s.step()
    on_n1 = a if s.executor.runs[a].placement[0][0] == "n1" else b
    other = b if on_n1 == a else a
    s.executor.lose_node("n1")
    s.step()
    assert s.store.job(on_n1)["failures"] == 1 and s.status(on_n1) == QUEUED
    s.executor.finish(other)
    s.step()
    s.step()
    assert s.status(on_n1) == RUNNING and s.executor.runs[on_n1].placement[0][0] == "n0"
    # its second run is attempt 2, as the store shows it (the lost run's reports are stale)
    assert s.store.job(on_n1)["attempt"] == s.executor.runs[on_n1].attempt == 2
    s.executor.restore_node("n1")
    s.step()
    assert 1 not in s.service.state.down_nodes


def test_an_operator_cordons_and_drains_a_node_and_a_restarted_server_keeps_it_out(tmp_path):
    s = Setup(tmp_path, nodes={"n0": 2, "n1": 2})
    a = s.submit(gpus=2)
    s.step()
    node = s.executor.runs[a].placement[0][0]
    other = "n1" if node == "n0" else "n0"
    # cordoned: a runs on; b waits for the other node's GPUs, not a's once a ends
    assert s.service.set_node(node, "cordoned") == {"name": node, "in_service": False}
    b, c = s.submit(gpus=2), s.submit(gpus=2)
    s.step()
    assert s.status(a) == RUNNING and s.executor.runs[b].placement[0][0] == other
    s.executor.finish(a)
    s.step()
    s.step()
    assert s.status(c) == QUEUED  # a's GPUs are not offered
    nodes = {n["name"]: n for n in s.service.snapshot()["nodes"]}
    assert (nodes[node]["in_service"], nodes[other]["in_service"]) == (False, True)
    # back in service: c starts there; drained: c checkpoints (a graceful stop) and waits
    s.service.set_node(node, "ready")
    s.step()
    assert s.executor.runs[c].placement[0][0] == node
    s.service.set_node(node, "drained")
    assert ("stop", c, True) in s.executor.log
    assert s.status(c) == QUEUED and s.store.job(c)["preemptions"] == 1
    assert s.store.job(c)["failures"] == 0
    s.step()
    assert s.status(c) == QUEUED
    # a new server on the same database keeps the node out of service
    t = Setup(tmp_path, nodes={"n0": 2, "n1": 2}, store=s.store)
    assert node in {t.service.node_names[n] for n in t.service.state.cordoned}
    t.step()
    t.step()  # b and c wait again (the server restarted): one of them runs, on the other node
    (running,) = [j for j in (b, c) if t.status(j) == RUNNING]
    assert t.executor.runs[running].placement[0][0] == other
    t.service.set_node(node, "ready")
    t.step()
    assert t.status(b) == RUNNING and t.status(c) == RUNNING


def test_the_gpus_in_use_are_those_jobs_hold_not_those_out_of_service_down_or_serving(
    tmp_path, monkeypatch, capsys
):
    # a node cordoned with no job on it, a node lost and an inference server held by inference
    # were "in use" (the total less the free GPUs): 7/8 GPUs in use with one job of one GPU
    import argparse

    from dlsched.runtime import client as cli

    nodes = {"n0": 2, "n1": 2, "n2": 2, "i0": 2}
    s = Setup(tmp_path, "aryl", nodes=nodes, inference=("i0",))
    a = s.submit(gpus=1)
    s.step()
    (node,) = {n for n, _ in s.executor.runs[a].placement}
    lost, cordoned = sorted({"n0", "n1", "n2"} - {node})
    s.executor.lose_node(lost)
    s.service.set_node(cordoned, "cordoned")
    s.step()
    snap = s.service.snapshot()
    assert (snap["gpus_total"], snap["gpus_in_use"]) == (8, 1)
    assert (snap["gpus_serving_inference"], snap["gpus_out_of_service"]) == (2, 4)
    monkeypatch.setattr(cli, "_call", lambda *_: type("R", (), {"json": lambda _: snap})())
    cli.cmd_status(argparse.Namespace())
    assert capsys.readouterr().out.splitlines()[0] == (
        "policy aryl: 1/8 GPUs in use (2 serving inference, 4 out of service or down), "
        "1 running, 0 queued"
    )
    # a server from before these fields (the client is installed apart): as it counted then
    for field in ("gpus_in_use", "gpus_serving_inference", "gpus_out_of_service"):
        del snap[field]
    cli.cmd_status(argparse.Namespace())
    assert capsys.readouterr().out.startswith("policy aryl: 7/8 GPUs in use, 1 running")


def test_at_shutdown_a_job_that_ended_is_done_and_the_others_wait_from_their_checkpoint(
    tmp_path,
):
    # what the executor reported as its runs ended at shutdown was never read: a job done
    # meanwhile was queued to run again, a checkpointed one's iteration not kept
    s = Setup(tmp_path, nodes={"n0": 2, "n1": 2})
    a, b, c = s.submit(gpus=2), s.submit(gpus=1), s.submit(gpus=1)
    s.step()
    runs = dict(s.executor.runs)
    s.service.stop()
    outcomes = [
        Outcome(a, runs[a].attempt, "done", 100),
        Outcome(b, runs[b].attempt, "stopped", 40),  # a graceful stop: checkpointed
        Outcome(c, runs[c].attempt, "stopped", 10, "did not stop in time: killed"),
    ]
    assert s.service.requeue_at_shutdown(outcomes) == 1
    assert [s.status(j) for j in (a, b, c)] == [DONE, QUEUED, QUEUED]
    assert s.store.job(b)["iteration"] == 40
    events = [e["message"] for e in s.store.events(b)]
    assert events[-1] == "server stopped: checkpointed, resumes from there when it starts again"
    assert s.store.events(c)[-1]["message"].startswith("server stopped: resumes from its last")


def test_a_job_failing_three_times_fails_for_good(tmp_path):
    s = Setup(tmp_path, nodes={"n0": 1})
    a = s.submit(gpus=1)
    for _ in range(3):
        s.step()
        s.executor.crash(a)
    s.step()
    row = s.store.job(a)
    assert row["status"] == FAILED and row["failures"] == 3
    assert a not in s.service.live and not s.service.state.pending


def test_a_start_the_cluster_failed_does_not_use_up_the_job_s_failures(tmp_path):
    # workers Ray could not place, a port the node had none of: requeued and not counted; past
    # MAX_CLUSTER_FAILURES of them they count again, so a job cannot restart for ever
    s = Setup(tmp_path, nodes={"n0": 1})
    a = s.submit(gpus=1)
    for n in range(1, MAX_CLUSTER_FAILURES + 1):
        s.step()
        s.executor.crash(a, "workers not placed within 120 s", cause=CLUSTER)
        s.step()
        row = s.store.job(a)
        assert row["status"] in (QUEUED, RUNNING) and row["failures"] == 0
        assert s.state(a).failures == 0
        assert f"not counted as its failure ({n} of {MAX_CLUSTER_FAILURES} such)" in " ".join(
            e["message"] for e in s.store.events(a)
        )
    s.executor.crash(a, "workers not placed within 120 s", cause=CLUSTER)
    s.step()
    assert s.store.job(a)["failures"] == 1  # the 11th counts
    s.executor.crash(a)  # the job's own failures count as before
    s.step()
    assert s.store.job(a)["failures"] == 2


def test_measured_progress_moves_the_projection_and_tells_the_policy(tmp_path):
    # SRTF: a's measured iteration time says it has far more left than b's estimate; a new
    # short job must preempt a, not b (the old books kept a's stale remaining time)
    s = Setup(tmp_path, policy="srtf", nodes={"n0": 2})
    a = s.submit(gpus=1, iterations=1000)  # estimate: 1000 x 0.1 s = 100 s
    b = s.submit(gpus=1, duration_s=200)
    s.step()
    s.executor.report_progress(a, iteration=10, iterations=1000, iteration_s=5.0)
    s.step()  # its run's first report: the start's pause, not yet a speed
    before = s.state(a).version
    s.executor.report_progress(a, iteration=20, iterations=1000, iteration_s=5.0)
    s.step(50)  # 10 iterations in 50 s by the server's clock: 4,900 s left
    assert s.state(a).version > before
    assert s.state(a).spec.duration_s == pytest.approx(5000)
    c = s.submit(gpus=1, duration_s=150)
    s.step()
    assert s.status(a) == QUEUED and s.status(b) == RUNNING and s.status(c) == RUNNING
    assert s.store.job(a)["preemptions"] == 1 and s.state(a).preemptions == 1


@pytest.mark.parametrize("claimed", [{}, {"duration_s": 50}])
def test_a_job_s_duration_is_measured_on_the_gpus_it_asked_for_whatever_it_claimed(
    tmp_path, claimed
):
    # 1,000 iterations on 2 GPUs asked, grown to 4: 100 iterations in 50 s there, by the server's
    # clock (the program says 0.01 s). At the request that is 0.5 x 2 ** 0.9 s an iteration
    # (the runtime's scaling, RUNTIME_SCALING_EXPONENT), so 933 s in all, and the 800 left take
    # 400 s on the 4. Before, the time on 4 was taken as the time on 2 (a projection 1.87x too
    # early), and a claimed duration_s (50 s) was kept for ever.
    s = Setup(tmp_path, "elastic-fifo", nodes={"n0": 4})
    e = s.submit(gpus=2, min_gpus=1, max_gpus=4, iterations=1000, **claimed)
    s.step()
    assert len(s.state(e).gpus) == 4
    s.executor.report_progress(e, iteration=100, iterations=1000, iteration_s=0.01)
    s.step(10)
    s.executor.report_progress(e, iteration=200, iterations=1000, iteration_s=0.01)
    s.step(50)
    job = s.state(e)
    assert job.spec.duration_s == pytest.approx(1000 * 0.5 * 2**0.9)
    assert s.service.state.projected_finish(job) - s.service.state.now == pytest.approx(400)
    assert s.service.predicted_finish(e) == pytest.approx(s.clock() + 400)
    # what `dlsched jobs` shows: the server's 0.5 s an iteration on the 4, not the program's 0.01
    row = s.store.job(e)
    assert row["measured_iteration_s"] == pytest.approx(0.5) and row["iteration_s"] == 0.01


def test_a_tenant_claiming_a_short_job_is_ranked_by_its_measured_length(tmp_path):
    # SRTF: alice claims 10 s for a job of 1,000 iterations of 1 s; bob's 200 s job waits
    # behind the claim only until alice's first measurement, then preempts her
    s = Setup(tmp_path, policy="srtf", nodes={"n0": 1})
    liar = s.submit(gpus=1, iterations=1000, duration_s=10)
    s.step()
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    honest = s.store.add_job(bob, {**SPEC, "gpus": 1, "duration_s": 200})["id"]
    s.executor.report_progress(liar, iteration=5, iterations=1000, iteration_s=0.001)
    s.step()
    assert s.status(liar) == RUNNING and s.status(honest) == QUEUED  # 10 s claimed
    s.executor.report_progress(liar, iteration=15, iterations=1000, iteration_s=0.001)
    s.step(10)  # 10 iterations in 10 s: 985 s left
    assert s.status(liar) == QUEUED and s.status(honest) == RUNNING


def test_a_job_stopped_before_its_first_iteration_says_so(tmp_path):
    # the event said "stopped at iteration None (stopped while starting)"
    s = Setup(tmp_path, policy="srtf", nodes={"n0": 1})
    long = s.submit(gpus=1, duration_s=1000)
    s.step()
    short = s.submit(gpus=1, duration_s=10)
    s.step()  # preempts long, whose workers were still starting: no iteration to report
    assert s.status(long) == QUEUED and s.status(short) == RUNNING
    stopped = s.executor.outcomes[-1]
    stopped.iteration, stopped.detail = None, "stopped while starting"
    s.step()
    messages = [e["message"] for e in s.store.events(long)]
    assert "stopped before its first iteration (stopped while starting)" in messages


@pytest.mark.parametrize(
    "lie, named",
    [
        ({"iteration": float("nan")}, "iteration nan is not a whole number in 0..100"),
        ({"iteration": 5, "iteration_s": float("inf")}, "iteration_s inf is not a number"),
        ({"iteration": 10**12}, "not a whole number in 0..100"),
        ({"iteration": 5, "iterations": 10**6}, "iterations 1000000 is not the job's 100"),
        ({"iteration": 5, "loss": float("-inf")}, "loss -inf is not a finite number"),
        ({"iteration": "(not a number)"}, "iteration '(not a number)'"),
        ("(not a mapping)", "not a mapping"),
    ],
)
def test_a_false_progress_report_is_dropped_named_and_stops_nobody(tmp_path, lie, named):
    # alice's job reports nonsense every pass; bob's job, submitted behind it, is scheduled all
    # the same, and alice's report reaches neither the books nor the store
    s = Setup(tmp_path, nodes={"n0": 1})
    liar = s.submit(gpus=1)
    s.step()
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    honest = s.store.add_job(bob, {**SPEC, "gpus": 1})["id"]
    s.executor.progress_of[liar] = lie
    for _ in range(3):
        s.step()
    row = s.store.job(liar)
    assert row["iteration"] is None or row["iteration"] == 0
    assert s.state(liar).done_s == 0.0 and s.state(liar).spec.duration_s == 10.0
    events = [e["message"] for e in s.store.events(liar)]
    assert [m for m in events if "progress report dropped" in m] == [
        f"progress report dropped ({n} so far): " + events[-1].split(": ", 1)[1] for n in (1, 2)
    ]
    assert named in events[-1]
    s.executor.finish(liar)
    s.step()
    assert s.status(liar) == DONE and s.status(honest) == RUNNING


def test_preemption_during_a_background_resize(tmp_path):
    # e (elastic 2..4) and f share the node; f ends, e grows to 4 in the background; before the
    # new workers switch in, e is demoted and a new job preempts it: the resize is dropped, the
    # late "switched" report is ignored, and e resumes later
    s = Setup(
        tmp_path,
        policy="elastic-tiresias",
        nodes={"n0": 4},
        params={"thresholds_gpu_s": "50", "shrink_when_waiting": 100},
    )
    e = s.submit(gpus=2, min_gpus=2, max_gpus=4, batch_size=8)
    f = s.submit(gpus=2)
    s.step()
    assert s.status(e) == RUNNING and s.status(f) == RUNNING
    s.executor.finish(f)
    s.step()
    assert s.executor.runs[e].resize_to is not None and s.service.state.resizing(s.state(e))
    g = s.submit(gpus=4)
    s.step(60)  # e has 2 x 60 GPU-seconds > 50: demoted, g preempts it
    assert s.status(e) == QUEUED and s.status(g) == RUNNING
    assert not s.service.state.resizing(s.state(e))
    s.executor.finish(g)
    s.step()
    assert s.status(e) == RUNNING and s.store.job(e)["attempt"] == 2


def test_a_job_starts_on_the_gpus_a_scale_in_of_the_same_pass_frees(tmp_path):
    # e (elastic 1..4) starts on the node's 4 GPUs; g (2 GPUs) arrives: one pass shrinks e and
    # starts g where e's leaving workers are (they exit at their next mini-batch boundary),
    # and e counts as resizing until its executor reports the switch
    s = Setup(tmp_path, policy="elastic-tiresias", nodes={"n0": 4})
    e = s.submit(gpus=2, min_gpus=1, max_gpus=4, batch_size=8)
    s.step()
    assert len(s.executor.runs[e].placement) == 4
    g = s.submit(gpus=2)
    s.step()
    rejected = s.service.metrics.registry.get_sample_value("dlsched_rejected_plans_total")
    assert s.status(g) == RUNNING and rejected == 0
    assert len(s.executor.runs[e].resize_to) == 2 and s.service.state.resizing(s.state(e))
    s.executor.switched(e)
    s.step()
    assert not s.service.state.resizing(s.state(e)) and s.status(e) == RUNNING


def test_a_restarted_server_resumes_running_jobs_and_keeps_counts(tmp_path):
    s = Setup(tmp_path, nodes={"n0": 1})
    a = s.submit(gpus=1)
    s.step()
    s.executor.crash(a)
    s.step()
    assert s.status(a) == RUNNING and s.store.job(a)["failures"] == 1
    # the server dies; a new one opens the same database with a new executor
    t = Setup(tmp_path, nodes={"n0": 1}, store=s.store)
    assert s.status(a) == QUEUED
    t.step()
    assert t.status(a) == RUNNING and t.state(a).failures == 1
    t.executor.crash(a)
    t.step()
    assert t.store.job(a)["failures"] == 2


# -- random sequences ----------------------------------------------------------------------------
def _accounts_agree(store) -> None:
    """Each job's runs (the usage) agree with its status: one open run of its GPUs while it
    runs, none otherwise, and its runs never overlap."""
    rows = {r["id"]: r for r in store.jobs()}
    runs: dict[str, list] = {}
    for job_id, start, end, gpus in store._db.execute(
        "SELECT job_id, start, end, gpus FROM runs ORDER BY n"
    ):
        runs.setdefault(job_id, []).append((start, end, gpus))
    for jid, row in rows.items():
        mine = runs.get(jid, [])
        open_ = [r for r in mine if r[1] is None]
        if row["status"] == RUNNING:
            assert len(open_) == 1 and open_[0][2] == len(row["gpus"]), (jid, mine, row["gpus"])
        else:
            assert not open_, f"{jid} is {row['status']} with a run open: {mine}"
        for (s0, e0, _), (s1, _, _) in zip(mine, mine[1:], strict=False):
            assert e0 is not None and s0 <= e0 <= s1, (jid, mine)


def _views_agree(s: Setup, tenants: list[str], rows: dict) -> None:
    """What the API shows agrees with what runs: the snapshot's running jobs are the store's,
    each run's GPUs are the books' (the new ones, once a background resize is under way), each
    tenant's GPUs held under its quota are those its runs and profiling runs use, and a tenant's
    view names no other tenant's job."""
    service = s.service
    snap = service.snapshot()
    assert set(snap["running"]) == {j for j, r in rows.items() if r["status"] == RUNNING}
    for jid, run in s.executor.runs.items():
        books = service._placement(service.state.running[jid].gpus)
        assert sorted(run.resize_to or run.placement) == sorted(books), (jid, run, books)
    used: dict[str, int] = {}
    for jid, run in s.executor.runs.items():
        t = rows[jid]["tenant_id"]
        used[t] = used.get(t, 0) + len(run.resize_to or run.placement)
    for jid, (gpus, _) in s.executor.profiling_gpus.items():
        t = rows[jid]["tenant_id"]
        used[t] = used.get(t, 0) + len(gpus)
    standing = service.quotas()["tenants"]
    for t in tenants:
        held = standing[t]["gpus_held"] if t in standing else 0
        assert held == used.get(t, 0), (t, standing.get(t), used)
    for t in tenants:
        view = service.snapshot(t)
        mine = {j for j, r in rows.items() if r["tenant_id"] == t}
        assert set(view["running"]) <= mine and set(view["queue"]) <= mine
        for node in view["nodes"]:
            for holders in node["holders"].values():
                for h in holders:
                    assert h["job"] in mine or h["job"] == "(another tenant)", (t, h)


def _whatif(path, history: dict, policy: str) -> None:
    import yaml

    from dlsched.cli import main
    from dlsched.runtime.export import history_csv

    (path / "history.csv").write_text(history_csv(history))
    argv = ["whatif", "--trace", str(path / "history.csv"), "--cluster", history["cluster"]]
    argv += ["--server-policy", policy, "--policies", "srtf", "--out", str(path / "w")]
    if history.get("quota_config"):
        (path / "quotas.yaml").write_text(yaml.safe_dump(history["quota_config"]))
        argv += ["--quotas", str(path / "quotas.yaml")]
    assert main([*argv, "--no-progress", "--no-cache"]) == 0


def _action_lists(kinds: list[str], min_size: int, max_size: int) -> st.SearchStrategy:
    """Lists of (kind, pick, n): ``pick`` chooses among tenants, jobs and nodes, ``n`` a size."""
    action = st.tuples(st.sampled_from(kinds), st.integers(0, 50), st.integers(1, 4))
    return st.lists(action, min_size=min_size, max_size=max_size)


ACTIONS = _action_lists(
    ["submit"] * 3
    + ["cancel", "finish", "finish", "crash", "lose", "restore", "maintain", "remove", "switch"]
    + ["profiled", "demand", "demand", "quota", "restart", "progress", "unprofiled", "tick"],
    1,
    40,
)


@settings(  # 250 examples: about 5 s
    max_examples=examples(250),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(sorted(POLICIES)),
    st.booleans(),
    ACTIONS,
)
def test_random_sequences_across_tenants_quotas_loans_and_restarts_keep_books_and_accounts(
    tmp_path_factory, policy, with_quotas, actions
):
    _random_sequence(tmp_path_factory, policy, with_quotas, actions)


# Tenants contending for their quotas: the sequences above reach a reclaim seldom (no eviction
# in 250 of them, two seeds, counted), as most of their actions are not submits and most of
# them are short. These are mostly submits, at least ten actions, every one under quotas: 17 to
# 89 evictions (40 on average) and 0 to 9 reclaim shrinks (2.75) in 100, eight seeds counted.
QUOTA_ACTIONS = _action_lists(
    ["submit"] * 4
    + ["finish", "cancel", "crash", "lose", "restore", "quota", "remove"]
    + ["demand", "tick"],
    10,
    30,
)


@settings(  # 60 examples: about 3.5 s
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.sampled_from(sorted(POLICIES)), QUOTA_ACTIONS)
def test_random_sequences_of_tenants_contending_for_quotas_keep_books_and_accounts(
    tmp_path_factory, policy, actions
):
    _random_sequence(tmp_path_factory, policy, True, actions)


def test_a_scale_in_under_way_is_not_resized_over(tmp_path_factory):
    # Found by the random sequences below (``--hypothesis-seed=108``), cut to six actions:
    # job-1 scaled in off n1 in the background and, before its executor switched, Aryl grew it
    # onto the lent i0: the second resize replaced the first under way, and the old worker on
    # n1 (given back in the books, where job-3 started and scaled out) stayed to the switch.
    # A background scale-in in the runtime now counts as resizing until its switch.
    actions = [("submit", 0, 1), ("submit", 0, 1), ("restart", 0, 1), ("submit", 0, 1)]
    actions += [("demand", 0, 1), ("submit", 0, 1)]
    _random_sequence(tmp_path_factory, "aryl", False, actions)


def test_a_borrower_shrunk_by_a_reclaim_then_preempted_by_its_policy_is_preempted_not_evicted(
    tmp_path_factory,
):
    # found by the sequences of tenants contending for quotas: alice's elastic job-4 runs on 3
    # GPUs over her quota; bob's quota goes to 3 and his job reclaims: the quota stage shrinks
    # job-4, and Tiresias (job-4 demoted past its threshold) preempts what is left for carol's
    # job. A policy's preemption: not an eviction (the metric counts none); before, its event
    # said "evicted" (and, for a while, the metric and the events disagreed)
    actions = [("submit", 0, 2), ("submit", 1, 4), ("submit", 0, 1), ("submit", 0, 1)]
    actions += [("finish", 0, 1), ("cancel", 0, 1), ("cancel", 1, 1), ("quota", 10, 3)]
    actions += [("submit", 23, 2), ("submit", 1, 2)]
    s = _random_sequence(tmp_path_factory, "elastic-tiresias", True, actions)
    told = [e["message"] for e in s.store.events("job-4")]
    assert "preempted by elastic-tiresias: checkpoints and waits" in told, told
    assert not any(m.startswith("evicted") for m in told), told


def _evictions_counted(s: Setup) -> float:
    """``dlsched_evicted_jobs_total`` over every tenant and reason."""
    return sum(
        sample.value
        for metric in s.service.metrics.evicted_jobs.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


def _random_sequence(tmp_path_factory, policy, with_quotas, actions) -> Setup:
    # every policy through random events: submits (elastic ones too, of three priority
    # classes) by three tenants in a cohort (their quotas changed through the API, or none),
    # cancels, finishes, crashes, progress, failed profiling runs, nodes lost and back, nodes
    # cordoned, drained and put back by the operator (kept across restarts), tenants removed,
    # an
    # inference server lent and reclaimed, server restarts on the same database; the books,
    # the executor, the accounting and the API's views checked after each, and the history
    # replayed at the end (a GENIE server's whose jobs had no deadline was refused)
    from dlsched.tenant_quotas import TenantConfig, TenantQuota
    from fake_executor import PROFILE

    path = tmp_path_factory.mktemp("svc")
    nominal = {"alice": 3, "bob": 2, "carol": 1}
    quotas = (
        TenantConfig({t: TenantQuota(n, None, "lab") for t, n in nominal.items()})
        if with_quotas
        else None
    )

    def setup(store=None, clock=None) -> Setup:
        return Setup(
            path,
            policy=policy,
            nodes={"n0": 4, "n1": 2, "i0": 2},
            inference=("i0",),
            store=store,
            params={"thresholds_gpu_s": "100"} if "tiresias" in policy else None,
            quotas=quotas,
            clock=clock,
        )

    s = setup()
    s.service.set_inference_demand(0)  # the server is lent from the start (to aryl)
    tenants = [s.tenant] + [s.store.create_tenant(t, f"hash-{t}")["id"] for t in ("bob", "carol")]
    submitted: list[str] = []
    removed: set[str] = set()
    # the statuses when this server started (its metrics count from there), the jobs then, and
    # the evictions its events told
    since_start: tuple[Counter, int, int] = (Counter(), 0, 0)

    def evictions_told() -> int:
        return s.store._db.execute(
            "SELECT COUNT(*) FROM events WHERE message LIKE 'evicted:%' "
            "OR message LIKE 'admission withdrawn%'"
        ).fetchone()[0]

    def check() -> None:
        rows = {r["id"]: r for r in s.store.jobs()}
        assert set(rows) == set(submitted), "a job was lost or invented"
        for jid, row in rows.items():
            live = s.service.live.get(jid)
            if row["status"] in FINAL:
                assert live is None, f"{jid} is {row['status']} but still in the books"
            elif row["status"] == RUNNING:
                assert live is not None and live.state.status is Status.RUNNING
                assert jid in s.service.state.running
                assert jid in s.executor.runs, f"{jid} runs in the books, not in the executor"
            elif live is not None:  # queued (or still profiling, then not yet in the books)
                assert live.state.status is Status.PENDING and jid in s.service.state.pending
        assert set(s.executor.runs) <= set(s.service.state.running)
        # every worker is on a GPU the books give its job, but a scale-in's leaving ones
        for jid, run in s.executor.runs.items():
            job = s.service.state.running[jid]
            extra = run.workers() - set(s.service._placement(job.gpus + job.leaving))
            assert extra <= run.leaving_at_boundary(), (
                f"{jid}'s workers on {extra}, not in the books"
            )
        _accounts_agree(s.store)
        _views_agree(s, tenants, rows)
        # the transitions metric (since this server started) adds up to the statuses' change
        flow: dict[str, float] = {}
        for metric in s.service.metrics.transitions.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    old, new = sample.labels["from_state"], sample.labels["to_state"]
                    flow[old] = flow.get(old, 0) - sample.value
                    flow[new] = flow.get(new, 0) + sample.value
        now = Counter(r["status"] for r in rows.values())
        for status in {*now, *flow, *since_start[0]}:
            arrived = len(submitted) - since_start[1] if status == QUEUED else 0
            change = now[status] - since_start[0][status] - arrived
            assert flow.get(status, 0) == change, (status, flow, now, since_start)
        # each eviction the metric counts, a job's events tell (a shrunk borrower is neither)
        assert _evictions_counted(s) == evictions_told() - since_start[2]
        for jid in (j for j, row in rows.items() if row["status"] == RUNNING):
            told = [e["message"] for e in s.store.events(jid)]  # an evicted job does not run on
            withdrawn = [i for i, m in enumerate(told) if m.startswith("admission withdrawn")]
            assert not withdrawn or any(m.startswith("started") for m in told[withdrawn[-1] :])

    for kind, pick, n in actions:
        running = sorted(s.executor.runs)
        if kind == "submit":
            spec: dict = {"gpus": n, "batch_size": 8, "duration_s": 50.0 * (1 + pick % 4)}
            if pick % 3 == 0:
                spec.update(min_gpus=1, max_gpus=min(4, n + 2), gpus=min(n, 4))
            if pick % 4 == 1:
                spec["deadline"] = s.clock() + 20.0 * pick
            spec["priority"] = (pick // 3) % 3  # a higher class may evict lower ones
            tenant = tenants[pick % 3]
            if tenant not in removed:
                submitted.append(s.store.add_job(tenant, {**SPEC, **spec})["id"])
        elif kind == "cancel" and submitted:
            s.store.update_job(submitted[pick % len(submitted)], cancel_requested=True)
        elif kind == "finish" and running:
            s.executor.finish(running[pick % len(running)])
        elif kind == "crash" and running:
            s.executor.crash(running[pick % len(running)])
        elif kind == "lose":
            s.executor.lose_node(["n0", "n1", "i0"][pick % 3])
        elif kind == "restore":
            s.executor.restore_node(["n0", "n1", "i0"][pick % 3])
        elif kind == "remove" and pick % 5 == 0:  # the admin removes a tenant (its jobs go)
            tenant = tenants[pick % 3]
            if s.service.remove_tenant(tenant) is None:
                assert tenant in removed
            removed.add(tenant)
        elif kind == "maintain":  # an operator cordons, drains or puts back a node
            service = ["cordoned", "drained", "ready", "ready"][n - 1]
            s.service.set_node(["n0", "n1", "i0"][pick % 3], service)
        elif kind == "switch":
            resizing = [j for j in running if s.executor.runs[j].resize_to]
            if resizing:
                s.executor.switched(resizing[pick % len(resizing)])
        elif kind == "profiled":  # from 0.6 to 15.6 GiB at its batch: pairs fit on 16 or not
            s.executor.finish_profiling({**PROFILE, "fixed_mib": 500.0 + 300.0 * pick})
        elif kind == "demand":
            s.service.set_inference_demand(pick % 2)  # lend the server, or take it back
        elif kind == "quota" and with_quotas:
            lending = {"lending_limit": pick % 3} if pick % 3 <= n % 4 else {}
            s.service.set_quota(tenants[pick % 3], {"nominal": n % 4, "cohort": "lab", **lending})
        elif kind == "progress" and running:
            s.executor.report_progress(running[pick % len(running)], pick + 1, 100, 0.05 * n)
        elif kind == "unprofiled" and s.executor.profiling:  # its program's fault, or the cluster's
            cause = CLUSTER if pick % 2 else JOB
            s.executor.fail_profiling(s.executor.profiling[0], "profiling failed", cause)
        elif kind == "restart":
            statuses = Counter(r["status"] for r in s.store.jobs())
            since_start = (statuses, len(submitted), evictions_told())
            s = setup(s.store, s.clock)  # the server dies (its runs with it) and a new one starts
        s.step(float(pick))
        check()
    # then let everything end: no job is lost, none is charged after its end (a removed tenant's
    # quota too, which it lends to the cohort: set to 0, a job larger than the others' quotas
    # could never be admitted)
    for tenant in tenants if with_quotas else ():
        s.service.set_quota(tenant, {"nominal": nominal[tenant], "cohort": "lab"})
    for node in ("n0", "n1", "i0"):
        s.executor.restore_node(node)
        s.service.set_node(node, "ready")
    for _ in range(200):
        s.executor.finish_profiling()
        for jid in list(s.executor.runs):
            if s.executor.runs[jid].resize_to:
                s.executor.switched(jid)
            else:
                s.executor.finish(jid)
        s.step(10.0)
        check()
        if all(r["status"] in FINAL for r in s.store.jobs()):
            break
    assert all(r["status"] in FINAL for r in s.store.jobs()), [
        (r["id"], r["status"], r["message"]) for r in s.store.jobs()
    ]
    # and the policy keeps nothing of a job that ended (a server runs for months)
    decider = s.service.policy
    for part in (decider, *(getattr(decider, a, None) for a in ("order", "elastic", "sharing"))):
        for name, kept in getattr(part, "__dict__", {}).items():
            if isinstance(kept, dict):
                assert not set(kept) & set(submitted), (name, sorted(set(kept) & set(submitted)))
    # and its history replays: under the server's policy and its quotas (dlsched whatif)
    history = s.service.export(0.0, float("inf"))
    if history["jobs"]:
        _whatif(path, history, policy)
    return s


def test_profiling_runs_are_bounded_and_the_rest_wait(tmp_path):
    # a sharing policy profiles each job first; 50 submits at once start at most 2 profiling
    # runs (the documented default), and every job is profiled in turn
    s = Setup(tmp_path, policy="sjf-bsbf", nodes={"n0": 4})
    jobs = [s.submit(gpus=1, duration_s=100) for _ in range(50)]
    s.step()
    assert len(s.executor.profiling) == 2 and len(s.service.to_profile.running) == 2
    profiled = 0
    while profiled < 50:
        profiled += len(s.executor.profiling)
        s.executor.finish_profiling()
        s.step()
        assert len(s.executor.profiling) <= 2
    assert sum(1 for e in s.executor.log if e[0] == "profile") == 50
    assert all(j in s.service.live for j in jobs if s.status(j) != "done")


def test_profiling_slots_go_to_tenants_in_turn(tmp_path):
    # issue 29, 5: alice's four jobs take both slots and queue two more; bob's one job, submitted
    # next, gets the first slot that frees, before alice's third (a single queue made it wait
    # for all of alice's). Alone, a tenant uses every slot.
    s = Setup(tmp_path, policy="sjf-bsbf", nodes={"n0": 4})
    a = [s.submit(gpus=1, duration_s=100) for _ in range(4)]
    s.step()
    assert s.executor.profiling == a[:2]
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    b = s.store.add_job(bob, {**SPEC, "gpus": 1, "duration_s": 100})["id"]
    s.step()
    assert s.executor.profiling == a[:2]  # no slot free
    s.executor.finish_profiling(only=(a[0],))
    s.step()
    assert s.executor.profiling == [a[1], b]
    s.executor.finish_profiling(only=(b,))
    s.step()
    assert s.executor.profiling == [a[1], a[2]]  # bob has none waiting: alice takes both again


def test_a_job_is_profiled_only_once_its_tenant_s_quota_could_admit_it(tmp_path):
    # alice's quota is 1 GPU and her first job holds it: her second would only wait for quota
    # after its profiling run, so it is not profiled (its run would hold a GPU bob's job needs)
    # until her first is done; bob's job is profiled and runs meanwhile. A job of a higher
    # class may take the place of her first, so it is profiled at once.
    from dlsched.tenant_quotas import TenantConfig, TenantQuota

    quotas = TenantConfig({"alice": TenantQuota(1), "bob": TenantQuota(3)})
    s = Setup(tmp_path, policy="sjf-bsbf", nodes={"n0": 4}, quotas=quotas)
    first = s.submit(gpus=1, duration_s=100)
    s.step()
    s.executor.finish_profiling()
    s.step()
    assert s.status(first) == RUNNING
    second, dropped = s.submit(gpus=1, duration_s=100), s.submit(gpus=1, duration_s=100)
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    theirs = s.store.add_job(bob, {**SPEC, "gpus": 3, "duration_s": 100})["id"]
    s.step()
    assert s.executor.profiling == [theirs]  # alice's second waits without a run
    # and is seen to wait for quota (before: not counted, and its events said only "submitted")
    assert s.service.quotas()["tenants"]["alice"]["waiting_for_quota"] == 2
    assert 'dlsched_pending_jobs{reason="quota",tenant="all"} 2.0' in (
        s.service.metrics.render().decode()
    )
    assert "its profiling run waits for its tenant's quota" in [
        e["message"] for e in s.store.events(second)
    ]
    s.store.update_job(dropped, cancel_requested=True)  # cancelled while it waits: forgotten
    s.step()
    assert s.status(dropped) == "cancelled" and dropped not in s.service.to_profile
    s.executor.finish_profiling()
    s.step()
    assert s.status(theirs) == RUNNING and s.executor.profiling == []
    urgent = s.submit(gpus=1, duration_s=100, priority=1)
    s.step()
    assert s.executor.profiling == [urgent]
    s.executor.finish_profiling()
    s.executor.finish(first)
    s.step()
    assert s.executor.profiling == [second]  # her quota has room again


def test_aryl_lends_an_idle_inference_server_and_takes_it_back(tmp_path):
    s = Setup(tmp_path, "aryl", nodes={"n0": 2, "i0": 2}, inference=("i0",), reclaim_notice_s=30.0)
    assert s.executor.stand_ins == {"i0"}  # inference holds its server at start
    # and so needs it, as the pools say until it tells otherwise (they said a demand of 0)
    assert (s.service.pools()["demand"], s.service.pools()["held"]) == (1, 1)
    s.service.set_inference_demand(0)
    assert (s.service.pools()["demand"], s.service.pools()["held"]) == (0, 0)
    assert s.executor.stand_ins == set() and s.service.pools()["loaned"] == ["i0"]
    e = s.submit(gpus=2, min_gpus=1, max_gpus=4, batch_size=8)
    s.step()
    # e's base (1 GPU) on the owned node, its 3 extras on the loaned server first, then owned
    assert s.status(e) == RUNNING
    assert sorted(s.executor.runs[e].placement) == [("i0", 0), ("i0", 1), ("n0", 0), ("n0", 1)]
    pools = s.service.set_inference_demand(1)  # the autoscaler wants it back
    assert pools["reclaiming"] == [] and pools["returning"] == ["i0"]
    assert s.executor.runs[e].resize_to == [("n0", 0), ("n0", 1)]  # scaled in, not preempted
    assert s.state(e).preemptions == 0
    s.step()
    assert s.service.pools()["returning"] == ["i0"]  # its workers there have not left yet
    s.executor.switched(e)
    s.step()
    assert s.service.pools()["returning"] == [] and s.service.pools()["returned"] == 1
    assert "i0" in s.executor.stand_ins
    with pytest.raises(Exception, match="servers"):
        s.service.set_inference_demand(2)


def test_a_worker_left_on_a_reclaimed_server_is_killed_at_the_end_of_the_notice(tmp_path):
    s = Setup(tmp_path, "aryl", nodes={"n0": 2, "i0": 2}, inference=("i0",), reclaim_notice_s=30.0)
    s.service.set_inference_demand(0)
    e = s.submit(gpus=2, min_gpus=1, max_gpus=4, batch_size=8)
    s.step()
    s.service.set_inference_demand(1)
    s.step(10)
    assert s.status(e) == RUNNING and ("evict", "i0") not in s.executor.log
    s.step(25)  # the scale-in never switched: 35 s > 30 s
    assert ("evict", "i0") in s.executor.log
    # killed, requeued and started again in the same pass, on the owned node only
    assert s.state(e).failures == 1 and s.store.job(e)["attempt"] > 1
    assert s.status(e) == RUNNING and all(n == "n0" for n, _ in s.executor.runs[e].placement)
    s.step()
    assert s.service.pools()["returned"] == 1


def test_quotas_admit_borrow_reclaim_and_account(tmp_path):
    from dlsched.runtime.usage import usage_report
    from dlsched.tenant_quotas import TenantConfig, TenantQuota

    quotas = TenantConfig(
        {"alice": TenantQuota(2, None, "lab"), "bob": TenantQuota(2, None, "lab")}
    )
    s = Setup(tmp_path, "fifo", nodes={"n0": 4}, quotas=quotas)
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    a = s.submit(gpus=4)  # alice borrows bob's idle 2 GPUs
    s.step(10)
    assert s.status(a) == RUNNING and s.service.quotas()["tenants"]["alice"]["borrowed"] == 2
    assert s.service.snapshot()["over_quota"] == {"alice": {"nominal": 2, "reserved": 4}}
    b = s.store.add_job(bob, {**SPEC, "gpus": 2})["id"]
    s.step(10)  # bob reclaims: alice's job is evicted
    assert s.status(a) == QUEUED and s.state(a).preemptions == 1
    assert any("evicted: its tenant borrowed GPUs" in e["message"] for e in s.store.events(a))
    assert s.status(b) == RUNNING
    q = s.service.quotas()["tenants"]
    assert q["alice"]["waiting_for_quota"] == 1 and q["bob"]["reserved"] == 2
    s.executor.finish(b)
    s.step(10)
    assert s.status(a) == RUNNING  # readmitted once bob is done
    s.executor.finish(a)
    s.step(10)
    report = usage_report(s.store, 0, s.clock() + 1)
    by = {t["tenant"]: t for t in report["tenants"]}
    # alice: 4 GPUs for 10 s, then 4 for 10 s; bob 2 GPUs for 10 s
    assert by["alice"]["gpu_hours"] == pytest.approx(80 / 3600) and by["bob"][
        "gpu_hours"
    ] == pytest.approx(20 / 3600)
    # queued: 10 s before its first pass, 10 s evicted
    assert by["alice"]["preemptions"] == 1 and by["alice"]["queued_s"] == pytest.approx(20, abs=0.5)
    with pytest.raises(Exception, match="nominal"):
        s.service.set_quota("bob", {"nominal": -1})
    s.service.set_quota("bob", {"nominal": 3, "cohort": "lab"})
    assert s.service.quotas("bob")["tenants"]["bob"]["nominal"] == 3


def test_recent_jobs_are_the_active_ones_and_the_latest_ended(tmp_path):
    store = SQLiteStore(tmp_path / "db.sqlite")
    a, b = (store.create_tenant(t, f"hash-{t}")["id"] for t in ("a", "b"))
    ids = [store.add_job(a if k % 2 else b, SPEC)["id"] for k in range(10)]
    for jid in ids[:8]:
        store.update_job(jid, status=DONE)
    rows, total = store.recent_jobs(None, 3)
    assert total == 10 and [r["id"] for r in rows] == ids[::-1][:5]  # 2 queued + the 3 latest done
    rows, total = store.recent_jobs(a, 1)
    assert total == 5 and [r["id"] for r in rows] == [ids[9], ids[7]]


def _older_database(path, *statements: str) -> SQLiteStore:
    """A store opened on a database an older server wrote (``statements`` made it)."""
    import sqlite3

    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()
    return SQLiteStore(path)


def test_a_database_from_before_the_measured_columns_keeps_its_jobs_and_gains_them(tmp_path):
    # a server upgraded over its database: the jobs table as it was before the server kept its
    # measurements (no `measured`, no `measured_iteration_s`)
    store = _older_database(
        tmp_path / "db.sqlite",
        "CREATE TABLE jobs (n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, "
        "tenant_id TEXT NOT NULL, spec TEXT NOT NULL, status TEXT NOT NULL, submitted REAL NOT "
        "NULL, started REAL, finished REAL, gpus TEXT, attempt INTEGER NOT NULL DEFAULT 0, "
        "iteration INTEGER NOT NULL DEFAULT 0, iteration_s REAL, preemptions INTEGER NOT NULL "
        "DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL "
        "DEFAULT 0, message TEXT NOT NULL DEFAULT '', profile TEXT)",
        "INSERT INTO jobs (id, tenant_id, spec, status, submitted, iteration_s) "
        "VALUES ('job-1', 'alice', '{}', 'done', 1.0, 0.25)",
    )
    old = store.job("job-1")
    assert old["iteration_s"] == 0.25 and old["measured_iteration_s"] is None
    store.update_job("job-1", measured={"starts": []}, measured_iteration_s=0.5)
    assert store.job("job-1")["measured_iteration_s"] == 0.5


def test_old_node_events_are_pruned_but_each_node_s_last_of_each_sort(tmp_path):
    store = SQLiteStore(tmp_path / "db.sqlite")
    for t, kind, node in [
        (1.0, "down", "n0"),
        (2.0, "up", "n0"),
        (3.0, "cordon", "n0"),
        (4.0, "drain", "n1"),
        (5.0, "uncordon", "n1"),
        (6.0, "cordon", "n1"),
        (20.0, "down", "n1"),
    ]:
        store.add_node_event(t, kind, node)
    store.prune(keep_per_tenant=10, finished_before=10.0)
    # n0 is up and out of service, n1 out of service and (later) down: a replay still says so
    assert store.node_events() == [
        (2.0, "up", "n0"),
        (3.0, "cordon", "n0"),
        (6.0, "cordon", "n1"),
        (20.0, "down", "n1"),
    ]
    assert store.node_events(until=6.0) == [(2.0, "up", "n0"), (3.0, "cordon", "n0")]


def test_a_database_from_before_tenants_could_be_removed_keeps_them_and_can_remove_one(tmp_path):
    store = _older_database(
        tmp_path / "db.sqlite",
        "CREATE TABLE tenants (id TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL, token_hash TEXT "
        "UNIQUE NOT NULL, created REAL NOT NULL)",
        "INSERT INTO tenants VALUES ('alice', 'alice', 'hash-a', 1.0)",
    )
    assert [t["name"] for t in store.tenants()] == ["alice"]
    assert store.tenant_by_token_hash("hash-a")["name"] == "alice"
    store.create_tenant("bob", "hash-b")
    assert store.remove_tenant("alice", 2.0) and not store.remove_tenant("alice", 3.0)
    assert [t["name"] for t in store.tenants()] == ["bob"]
    assert store.tenants(removed=True) == [
        {"id": "alice", "name": "alice", "created": 1.0, "removed": 2.0}
    ]


@pytest.mark.parametrize(
    "lie, named",
    [
        # NaN or negative memory: stored as measured, and the job ran on it
        ({"fixed_mib": float("nan")}, "fixed_mib 'nan' is not a number in [-1,048,576, 1,048,576]"),
        ({"per_sample_mib": -1e9}, "per_sample_mib '-1000000000.0' is not a number in [0,"),
        # a text: the service's pass raised TypeError taking the job in
        ({"c0_s": "(not a number)"}, "c0_s '(not a number)' is not a number in (0, 3,600]"),
        ({"local_batch": 0}, "local_batch '0' is not a whole number in [1, 65,536]"),
        ({"points": [[1]]}, "points[0] is not a mapping of batch, iteration_s, memory_mib"),
        ({"placements": [{"gpus": 2, "nodes": 3, "batch": 8, "iteration_s": 0.1}]}, "nodes '3'"),
        ({"extra": "x" * 10_000}, "unknown keys: extra"),
        # in range one by one, but no memory at its own batch: a grant of 0 was no cap at all
        ({"fixed_mib": -80.0, "per_sample_mib": 10.0, "local_batch": 8}, "is not above 0"),
        ("(not a mapping)", "not a mapping: str"),
    ],
)
def test_a_false_profile_fails_its_own_job_only(tmp_path, lie, named):
    # a profiling run's result comes from the tenant's process, which runs its program: alice's
    # job fails with the reason named; bob's job, profiled after it, runs beside nothing of hers
    from fake_executor import PROFILE

    s = Setup(tmp_path, policy="sjf-bsbf", nodes={"n0": 1})
    liar = s.submit(gpus=1, duration_s=1000)
    s.step()
    s.executor.finish_profiling(lie if isinstance(lie, str) else {**PROFILE, **lie})
    s.step()
    assert s.status(liar) == FAILED and s.store.job(liar)["profile"] is None
    assert named in s.store.events(liar)[-1]["message"], s.store.events(liar)[-1]
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    honest = s.store.add_job(bob, {**SPEC, "gpus": 1})["id"]
    s.step()
    s.executor.finish_profiling()
    s.step()
    assert s.status(honest) == RUNNING and liar not in s.executor.runs


@pytest.mark.parametrize("policy", ["sjf-bsbf", "fifo"])
def test_a_stored_profile_from_before_profiles_were_checked_is_not_trusted(tmp_path, policy):
    # a queued job whose profile an older server stored as the tenant's process gave it (NaN
    # memory): a restarted server took it as measured; now it profiles the job again (a policy
    # that needs a profile) or runs it as one never profiled
    from fake_executor import PROFILE

    s = Setup(tmp_path, policy=policy, nodes={"n0": 1})
    job = s.submit(gpus=1, duration_s=1000)
    s.store.update_job(job, profile={**PROFILE, "fixed_mib": float("nan")})
    t = Setup(tmp_path, policy=policy, nodes={"n0": 1}, store=s.store)
    t.step()
    events = [e["message"] for e in t.store.events(job)]
    assert "its stored profile is dropped: an invalid profile: fixed_mib 'nan'" in events[-2]
    assert t.store.job(job)["profile"] is None and job not in t.service.speed.profiles
    if policy == "sjf-bsbf":
        assert t.executor.profiling == [job]
        t.executor.finish_profiling()
        t.step()
        assert t.store.job(job)["profile"] == PROFILE
    assert t.status(job) == RUNNING


def test_tiresias_demotes_a_job_restarted_at_the_instant_it_started_once(tmp_path):
    # a job that failed and started again within one clock reading had two demotion timers for
    # the same run (a run is known by its start time): the first demoted it to the last queue,
    # the second then read the threshold past the last and every pass raised IndexError
    s = Setup(tmp_path, policy="tiresias", params={"thresholds_gpu_s": "100"})
    job = s.submit(gpus=1)
    s.step()
    s.executor.crash(job)
    s.step(0.0)  # requeued and started again at the same instant
    assert s.status(job) == RUNNING and s.store.job(job)["failures"] == 1
    s.step(150.0)  # past its 100 GPU-seconds
    s.step(1.0)
    assert s.service.policy.order.level[job] == 1 and s.status(job) == RUNNING


def test_tiresias_forgets_a_job_cancelled_while_it_waits(tmp_path):
    # a job demoted, preempted, then cancelled while it waited kept its queue in the policy
    # for ever: a server that runs for months grew by every such job
    s = Setup(tmp_path, policy="tiresias", params={"thresholds_gpu_s": "100"}, nodes={"n0": 1})
    job = s.submit(gpus=1)
    s.step()
    s.step(150.0)  # past its 100 GPU-seconds: the second queue
    newer = s.submit(gpus=1)
    s.step()  # the newer job, in the first queue, preempts it
    assert s.status(job) == QUEUED and s.status(newer) == RUNNING
    assert s.service.policy.order.level[job] == 1
    s.store.update_job(job, cancel_requested=True)
    s.step()
    assert s.status(job) == CANCELLED and job not in s.service.policy.order.level


def test_a_job_done_shows_as_done_only_once_its_deadline_is_counted(tmp_path):
    # the status was written first and the deadline counted after it: a reader that saw the
    # job done and read /metrics at once could find it not yet counted (a runtime test did)
    s = Setup(tmp_path)
    job = s.submit(gpus=1, deadline=s.clock() + 3600)
    s.step()
    seen = []
    write = s.store.update_job

    def update_job(jid, **fields):
        if fields.get("status") == DONE:
            met = s.service.metrics.deadlines.labels("met")._value.get()
            seen.append((met, s.store.job(jid)["status"]))
        return write(jid, **fields)

    s.store.update_job = update_job
    s.executor.finish(job)
    s.step()
    assert s.status(job) == DONE and seen == [(1.0, RUNNING)]


@pytest.mark.parametrize("said", [10**30, -3, 10**6])
def test_an_iteration_out_of_its_job_s_range_loses_no_other_outcome(tmp_path, said):
    # a run's process says where it stopped: 10**30 overflowed SQLite's integer and the pass
    # raised, losing the other outcomes polled with it (bob's job stayed running, its GPU held);
    # -3 and past the job's iterations were written as its progress
    s = Setup(tmp_path, nodes={"n0": 2})
    liar = s.submit(gpus=1, iterations=100)
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    honest = s.store.add_job(bob, {**SPEC, "gpus": 1})["id"]
    s.step()
    s.executor.finish(liar)
    s.executor.outcomes[-1].iteration = said
    s.executor.finish(honest)
    s.step()
    assert s.status(honest) == DONE and s.status(liar) == DONE
    assert s.store.job(liar)["iteration"] in (None, 0)


def test_an_outcome_that_cannot_be_recorded_loses_no_other(tmp_path, caplog):
    s = Setup(tmp_path, nodes={"n0": 2})
    first, second = s.submit(gpus=1), s.submit(gpus=1)
    s.step()
    write = s.store.update_job

    def update_job(jid, **fields):
        if jid == first and fields.get("status") == DONE:
            raise OSError("disk full")
        return write(jid, **fields)

    s.store.update_job = update_job
    s.executor.finish(first)
    s.executor.finish(second)
    s.step()
    assert s.status(second) == DONE
    assert f"the outcome of job {first} was not recorded" in caplog.text


def test_a_run_s_usage_starts_and_ends_at_its_events_and_its_finish(tmp_path):
    # the event, the run's stretch (the usage) and the finish were three readings of two clocks:
    # a usage test on a loaded machine found bob's 2.4 s run 52 ms longer than its events said
    s = Setup(tmp_path, nodes={"n0": 2})
    job = s.submit(gpus=2)
    s.step()
    s.step(30.0)
    s.executor.finish(job)
    s.step(7.0)
    events = {e["message"].split()[0]: e["t"] for e in s.store.events(job)}
    [run] = s.store.runs(0, 2e10)
    assert (run["start"], run["end"]) == (events["started"], events["done"])
    assert events["done"] == s.store.job(job)["finished"] == s.clock()


@pytest.mark.parametrize("moment", ["start", "finish"])
def test_a_status_and_its_run_are_written_together_or_not_at_all(tmp_path, moment, caplog):
    # a write that fails half-way (the disk, a crash): the status and the run were two
    # transactions, so a job could show done with its run open (charged its GPUs until any
    # report's end) or running with no run (charged nothing)
    s = Setup(tmp_path, nodes={"n0": 2})
    job = s.submit(gpus=2)
    if moment == "finish":
        s.step()
        s.executor.finish(job)
    before = (s.status(job), s.store.runs(0, 2e10), len(s.store.events(job)))
    fail_on = "INSERT" if moment == "start" else "UPDATE OF end"
    s.store._db.execute(
        f"CREATE TRIGGER broken BEFORE {fail_on} ON runs BEGIN SELECT RAISE(ABORT, 'disk'); END"
    )
    if moment == "start":  # the pass fails
        with pytest.raises(Exception, match="disk"):
            s.service.step()
    else:  # the outcome is not recorded (and the others are: a test above)
        s.service.step()
        assert f"the outcome of job {job} was not recorded" in caplog.text
    assert (s.status(job), s.store.runs(0, 2e10), len(s.store.events(job))) == before


def test_a_restarted_server_ends_the_runs_an_older_one_left_open(tmp_path):
    # what the two writes above left after a crash between them: a job done at 100 s whose run
    # from 40 s never ended was charged until each report's end (here 10,000 s); and a job
    # requeued at 70 s
    from dlsched.runtime.usage import usage_report

    s = Setup(tmp_path, nodes={"n0": 2})
    done, queued = s.submit(gpus=2), s.submit(gpus=1)
    t0 = s.clock()
    for jid, start, gpus in [(done, t0 + 40, 2), (queued, t0 + 50, 1)]:
        s.store._db.execute(
            "INSERT INTO runs (job_id, tenant_id, start, gpus) VALUES (?, ?, ?, ?)",
            (jid, s.tenant, start, gpus),
        )
    s.store.update_job(done, event="done", at=t0 + 100, status=DONE, finished=t0 + 100)
    s.store.update_job(queued, event="preempted", at=t0 + 70)  # requeued, its run left open
    Setup(tmp_path, nodes={"n0": 2}, store=s.store)  # the server restarts on the database
    ends = {r["job_id"]: (r["start"] - t0, r["end"] - t0) for r in s.store.runs(t0, t0 + 1e4)}
    assert ends == {done: (40, 100), queued: (50, 70)}
    report = usage_report(s.store, t0, t0 + 1e4)
    assert report["tenants"][0]["gpu_hours"] == pytest.approx((2 * 60 + 20) / 3600)


@pytest.mark.parametrize("policy", ["fifo", "sjf-bsbf"])
def test_a_stored_job_the_state_refuses_fails_named_and_stops_nobody(tmp_path, policy):
    # a row the API did not check (an older server's, a hand-edited database): it raised in
    # the pass that took it in and stayed queued for ever; the jobs after it waited a pass
    s = Setup(tmp_path, policy=policy)
    bad = s.submit(gpus=1, duration_s=1e12)  # past the longest time a job may have
    good = s.submit(gpus=1)
    s.step()
    s.executor.finish_profiling()
    s.step()
    assert s.status(bad) == FAILED and s.status(good) == RUNNING
    assert (
        "could not be scheduled: SpecError: field 'duration_s'"
        in s.store.events(bad)[-1]["message"]
    )


def test_a_profile_s_line_below_zero_at_a_small_sub_batch_is_no_grant():
    # fixed -200 MiB (a fit's intercept), 50 MiB a sample: 600 MiB at 16 a GPU, but -100 at 2
    # (accumulation 8): no grant, so nobody joins it and it runs uncapped alone, as unknown memory
    from dlsched.jobs import JobSpec
    from dlsched.runtime.speed import RuntimeSpeed

    speed = RuntimeSpeed()
    spec = JobSpec("j", 0.0, num_gpus=1, duration_s=10.0, batch_size=16)
    speed.profiles["j"] = {"fixed_mib": -200.0, "per_sample_mib": 50.0, "c0_s": 0.01, "c1_s": 0.001}
    assert speed.memory_mib(spec, 1) == pytest.approx(600 * 1.1)
    assert speed.memory_mib(spec, 1, accumulation=8) is None
    assert speed.memory_mib(spec, 1, accumulation=4) is None  # exactly 0 (a grant of 0: no cap)
    assert speed.memory_mib(spec, 1, accumulation=2) == pytest.approx(200 * 1.1)


def test_a_node_lost_under_a_scale_in_fails_the_job_whose_leaving_workers_were_there(tmp_path):
    # e (elastic 1..4) runs on both nodes' GPUs; g (2 GPUs) arrives and one pass shrinks e off
    # one node, starting g there. Before e's leaving workers exit, that node is lost: e's old
    # workers die with it, so e is requeued (counted as a failure) as g is, though none of the
    # GPUs e keeps is on the node; the same pass starts one of them again on the node left
    s = Setup(tmp_path, policy="elastic-tiresias", nodes={"n0": 2, "n1": 2})
    e = s.submit(gpus=2, min_gpus=1, max_gpus=4, batch_size=8)
    s.step()
    assert len(s.executor.runs[e].placement) == 4
    g = s.submit(gpus=2)
    s.step()
    kept = {n for n, _ in s.executor.runs[e].resize_to}
    (left,) = {"n0", "n1"} - kept
    assert s.status(g) == RUNNING and {n for n, _ in s.executor.runs[g].placement} == {left}
    s.executor.lose_node(left)
    s.step()
    rows = {job: s.store.job(job) for job in (e, g)}
    assert [r["failures"] for r in rows.values()] == [1, 1]
    assert sorted(r["status"] for r in rows.values()) == [QUEUED, RUNNING]
    _views_agree(s, [s.tenant], {r["id"]: r for r in s.store.jobs()})


def test_a_node_lost_under_a_move_fails_the_job_whose_old_workers_were_there(tmp_path, monkeypatch):
    # e (elastic 1..2) runs on n0; the plug-in moves it to n1 in the background, its old workers
    # training until the switch. n0 is lost first: e fails with its old workers, though every
    # GPU it is moving to is on n1, and the store says so
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    s = Setup(tmp_path, policy="lab_policies:MovesAJobOnce", nodes={"n0": 1, "n1": 1})
    e = s.submit(gpus=1, min_gpus=1, max_gpus=2, batch_size=8)
    s.step()
    assert s.executor.runs[e].placement == [("n0", 0)]
    s.step()
    assert s.executor.runs[e].resize_to == [("n1", 0)] and s.service.state.resizing(s.state(e))
    s.executor.lose_node("n0")
    s.step()
    said = [ev["message"] for ev in s.store.events(e)][-2:]
    assert said == [
        "node n0 lost: requeued, resumes from its last checkpoint",
        "started on n1/gpu0",
    ]
    assert s.store.job(e)["failures"] == 1 and s.service.state.running[e].gpus == (1,)
    assert s.executor.runs[e].placement == [("n1", 0)] and s.executor.runs[e].resize_to is None
    _views_agree(s, [s.tenant], {r["id"]: r for r in s.store.jobs()})


def test_a_borrower_shrunk_to_reclaim_quota_is_resized_not_counted_evicted(tmp_path):
    # bob's elastic job (1..4) grows onto alice's idle half of the node: bob borrows 2 GPUs.
    # alice's 2-GPU job reclaims them by shrinking bob's job to 2: it runs on, resized; no
    # job was evicted (the metric and its events), and bob's job's events say it was shrunk
    from dlsched.tenant_quotas import TenantConfig, TenantQuota

    quotas = TenantConfig(
        {"alice": TenantQuota(2, cohort="lab"), "bob": TenantQuota(2, cohort="lab")}
    )
    s = Setup(tmp_path, policy="elastic-tiresias", nodes={"n0": 4}, quotas=quotas)
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    e = s.store.add_job(bob, {**SPEC, "gpus": 1, "min_gpus": 1, "max_gpus": 4, "batch_size": 8})
    e = e["id"]
    s.step()
    assert len(s.executor.runs[e].placement) == 4
    a = s.submit(gpus=2)
    s.step()
    assert s.status(a) == RUNNING and s.status(e) == RUNNING
    assert len(s.executor.runs[e].resize_to) == 2
    assert _evictions_counted(s) == 0
    messages = [ev["message"] for ev in s.store.events(e)]
    assert not any("admission withdrawn" in m for m in messages), messages
    assert messages[-1] == (
        "resizing in the background to n0/gpu0, n0/gpu1 (its tenant borrowed GPUs another "
        "tenant reclaimed)"
    )


def test_an_epochs_job_s_progress_counts_against_the_count_its_run_reports(tmp_path):
    # a job given in epochs has no iteration count of its own (its run counts its data): a
    # report without the count is no progress yet (before: counted against the spec's
    # estimate of 100 iterations an epoch, 5 of 200 done); with it, the fraction of it
    s = Setup(tmp_path, nodes={"n0": 1})
    spec = {k: v for k, v in SPEC.items() if k != "iterations"}
    job = s.store.add_job(s.tenant, {**spec, "epochs": 2, "gpus": 1})["id"]
    s.step()
    s.executor.progress_of[job] = {"iteration": 5, "iteration_s": 0.1}
    s.step()
    assert s.state(job).done_s == 0.0 and s.store.job(job)["iteration"] in (0, None)
    assert not [e for e in s.store.events(job) if "dropped" in e["message"]]
    s.executor.progress_of[job] = {"iteration": 10, "iterations": 40, "iteration_s": 0.1}
    s.step()
    assert s.store.job(job)["iteration"] == 10
    assert s.state(job).done_s == pytest.approx(s.state(job).spec.duration_s / 4)


def test_per_tenant_metrics_show_each_tenant_s_quota_borrowing_and_gpus(tmp_path):
    # with tenant names exposed (--metrics-tenants): alice (quota 1) borrows a GPU of bob's
    # idle quota; bob holds nothing. Every gauge as the quota stage counts it, and alice's
    # GPUs back to 0 once her job ends
    from dlsched.tenant_quotas import TenantConfig, TenantQuota

    quotas = TenantConfig(
        {"alice": TenantQuota(1, cohort="lab"), "bob": TenantQuota(1, 2, "lab", lending_limit=1)}
    )
    s = Setup(tmp_path, nodes={"n0": 2}, quotas=quotas, metrics_tenants=True)
    a = s.submit(gpus=2)
    s.step()
    assert s.status(a) == RUNNING

    def gauge(name: str, tenant: str) -> float | None:
        return s.service.metrics.registry.get_sample_value(name, {"tenant": tenant})

    assert [gauge(f"dlsched_quota_{g}", "alice") for g in ("nominal_gpus", "used_gpus")] == [1, 2]
    assert gauge("dlsched_quota_borrowed_gpus", "alice") == 1
    assert gauge("dlsched_quota_borrowing_limit_gpus", "alice") == -1  # no limit
    assert gauge("dlsched_quota_borrowing_limit_gpus", "bob") == 2
    assert gauge("dlsched_quota_lending_limit_gpus", "alice") == -1  # all of it may be lent
    assert gauge("dlsched_quota_lending_limit_gpus", "bob") == 1
    assert gauge("dlsched_tenant_gpus_held", "alice") == 2
    assert gauge("dlsched_tenant_gpus_held", "bob") == 0
    s.executor.finish(a)
    s.step()
    assert gauge("dlsched_tenant_gpus_held", "alice") == 0
    assert gauge("dlsched_quota_borrowed_gpus", "alice") == 0
