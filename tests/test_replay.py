"""What-if replays: what the service measures of real runs, the export of its history, the
history trace adapter, and the replay held against the measured JCTs (answers by hand)."""

from __future__ import annotations

import argparse
import json
import socket

import pytest

from dlsched.cli import main
from dlsched.errors import SpecError
from dlsched.jobs import JobSpec, JobState
from dlsched.node_events import read_node_events
from dlsched.runtime.executor_api import CLUSTER
from dlsched.runtime.export import COLUMNS, history_csv
from dlsched.runtime.measure import JobMeter, config_key, shared_slowdown, solo_iteration_s
from dlsched.runtime.speed import RuntimeSpeed
from dlsched.traces import detect_format, load_trace
from test_service import Setup


def test_the_service_measures_start_up_and_solo_speed_and_exports_them(tmp_path):
    s = Setup(tmp_path, nodes={"n0": 2})
    a = s.submit(gpus=2, iterations=100)
    s.step()  # t=1: a starts
    s.executor.report_progress(a, iteration=10, iterations=100, iteration_s=0.1)
    s.step(3.0)  # t=4: 10 iterations 3 s after its start
    s.executor.report_progress(a, iteration=30, iterations=100, iteration_s=0.1)
    s.step(2.0)  # t=6: 20 more in 2 s
    s.executor.report_progress(a, iteration=60, iterations=100, iteration_s=0.1)
    s.step(4.0)  # t=10: 30 more in 4 s
    s.executor.finish(a)
    s.step(1.0)
    history = s.service.export(0.0, float("inf"))
    [row] = history["jobs"]
    assert row["iteration_s"] == pytest.approx(6.0 / 50)  # 50 iterations in 6 s
    # the start-up leaves the 10 first iterations at the measured speed: 3 - 10 x 0.12 s
    assert row["iteration_source"] == "measured" and row["startup_s"] == pytest.approx(1.8)
    # submitted on the real clock, a moment after the fake one started
    assert (
        row["jct_s"] == pytest.approx(11.0, abs=0.1)
        and row["status"] == "done"
        and row["submit_s"] == 0
    )
    assert history["cluster"] == "1x2:emulated/16384@training" and history["policy"] == "fifo"

    path = tmp_path / "history.csv"
    path.write_text(history_csv(history))
    assert detect_format(path) == "history"
    trace = load_trace(str(path))
    [spec] = trace.jobs
    assert spec.duration_s == pytest.approx(100 * 0.12) and spec.startup_s == pytest.approx(1.8)
    assert trace.replay[a]["jct_s"] == row["jct_s"]


def test_a_start_that_failed_before_any_progress_is_part_of_the_jobs_start_up(tmp_path):
    # On a loaded machine a job's gang was not ready in 60 s (the cluster's failure) and its
    # relaunch started at once. The replay has no failures, so it must start the job as late as
    # the server did: the start-up is the failed run's time and the relaunch's pause, a first
    # start. Before, the failed run left no start at all and the relaunch counted as a restart,
    # so the replay gave the job the other jobs' typical start-up and ran it a minute early.
    s = Setup(tmp_path, nodes={"n0": 2})
    a = s.submit(gpus=2, iterations=100)
    s.step()  # t=1: a starts
    s.step(60.0)
    s.executor.crash(a, "gang not ready in 60 s", cause=CLUSTER)
    s.step(1.0)  # t=62: failed, requeued and relaunched
    assert s.store.job(a)["attempt"] == 2 and s.store.job(a)["status"] == "running"
    s.step(4.0)
    s.executor.report_progress(a, iteration=10, iterations=100, iteration_s=0.1)
    s.step(1.0)  # t=67: 10 iterations 66 s after its first launch
    s.executor.report_progress(a, iteration=30, iterations=100, iteration_s=0.1)
    s.step(2.0)  # t=69: 20 more in 2 s
    s.executor.finish(a)
    s.step(1.0)
    [row] = s.service.export(0.0, float("inf"))["jobs"]
    assert row["iteration_s"] == pytest.approx(0.1)
    assert row["startup_s"] == pytest.approx(66.0 - 10 * 0.1)
    assert row["restart_s"] == 0.0  # no other job: no typical restart either


def test_a_job_done_before_any_progress_report_is_exported_from_its_run(tmp_path):
    s = Setup(tmp_path, nodes={"n0": 2})
    a = s.submit(gpus=1, iterations=100)
    s.step()
    s.executor.finish(a)
    s.step(12.0)  # one run of 12 s, nothing measured on the way
    [row] = s.service.export(0.0, float("inf"))["jobs"]
    assert row["iteration_source"] == "whole-run" and row["iteration_s"] == pytest.approx(0.12)


def test_a_tenant_exports_only_its_own_jobs(tmp_path):
    s = Setup(tmp_path, nodes={"n0": 2})
    mine = s.submit(gpus=1)
    bob = s.store.create_tenant("bob", "hash-bob")["id"]
    theirs = s.store.add_job(
        bob,
        {"entrypoint": "dlsched.workloads.lm:build", "batch_size": 8, "iterations": 100, "gpus": 1},
    )["id"]
    s.step()
    for jid in (mine, theirs):
        s.executor.report_progress(jid, iteration=5, iterations=100, iteration_s=0.1)
    s.step()
    assert {j["job_id"] for j in s.service.export(0, float("inf"))["jobs"]} == {mine, theirs}
    assert [j["job_id"] for j in s.service.export(0, float("inf"), "bob")["jobs"]] == [theirs]


def test_a_restart_pause_and_a_reconfiguration_are_measured_apart():
    m = JobMeter()
    m.launched(0.0, 0, first=True)
    assert not m.observe(1.0, 0, None, "2x1")  # the previous run's report: still waiting
    m.observe(5.0, 10, 0.2, "2x1")  # 5 s - 10 x 0.2 s: 3 s start-up
    m.observe(7.0, 20, 0.2, "2x1")
    m.reconfigured()  # a background resize to 4 workers
    assert not m.observe(8.0, 25, 0.1, "4x1")  # the stretch across the switch is not counted
    m.observe(9.0, 35, 0.1, "4x1")
    m.launched(20.0, 35, first=False)
    m.observe(24.0, 45, 0.1, "4x1")  # 4 s - 1 s: a 3 s restart
    assert m.start_pauses() == [3.0] and m.restart_pauses() == pytest.approx([3.0])
    assert m.iteration_s("2x1") == pytest.approx(0.2) and m.iteration_s("4x1") == pytest.approx(0.1)
    stored = JobMeter.load(json.loads(json.dumps(m.dump())))
    assert stored.speeds == m.speeds and stored.restart_pauses() == pytest.approx([3.0])
    assert JobMeter.load({"starts": [2.5]}).start_pauses() == [2.5]  # a pause stored as a number


def test_two_failed_starts_in_a_row_are_one_start_up():
    m = JobMeter()
    m.launched(0.0, 0, first=True)
    m.failed(60.0)  # a gang not ready
    m.launched(61.0, 0, first=False)  # relaunched at once (a restart, as the service sees it)
    m.failed(100.0)
    m.launched(130.0, 0, first=False)  # 30 s queued before this one: not a pause
    m.observe(140.0, 10, 0.5, "1x1")
    m.observe(145.0, 20, 0.5, "1x1")
    # 60 + 39 s lost, then 10 s to 10 iterations at 0.5 s: a 104 s first start, no restart
    assert m.start_pauses() == pytest.approx([104.0]) and m.restart_pauses() == []


def test_a_pause_is_timed_at_the_measured_speed_not_the_workers_first_average():
    # on a loaded machine the first iterations crawl: at its first report (iteration 20, 60 s
    # after launch) the worker's moving average still says 2.5 s an iteration; later stretches
    # measure 0.2 s. The replay must reach iteration 20 at 60 s: 60 - 20 x 0.2 = 56 s of pause
    # (the worker's figure would say 60 - 20 x 2.5 = 10 s, and the replay would run 46 s ahead).
    m = JobMeter()
    m.launched(100.0, 0, first=True)
    m.observe(160.0, 20, 2.5, "4x1")
    assert m.start_pauses() == [10.0]  # nothing better known yet: the worker's own figure
    m.observe(162.0, 30, 0.2, "4x1")
    assert m.start_pauses() == pytest.approx([56.0])


def test_solo_speed_is_derived_by_the_runtime_model_and_the_sharing_slowdown_measured():
    spec = JobSpec("j", 0.0, num_gpus=4, duration_s=10.0, batch_size=64)
    speed = RuntimeSpeed()
    m = JobMeter(speeds={config_key(2, 1, False): [100, 30.0]})  # ran alone on 2 of its 4 GPUs only
    solo, source = solo_iteration_s(m, spec, speed)
    assert source == "derived" and solo == pytest.approx(0.3 * (2 / 4) ** speed.exponent)
    m = JobMeter(speeds={config_key(4, 1, False): [100, 10.0], config_key(4, 1, True): [50, 7.5]})
    assert shared_slowdown(m, spec, speed, 0.1) == pytest.approx(1.5)
    assert shared_slowdown(JobMeter(speeds={"4x1": [10, 1.0]}), spec, speed, 0.1) is None
    # never alone: its profiling run's time on one worker, else its shared time at the typical
    # slowdown
    one = JobSpec("k", 0.0, num_gpus=1, duration_s=10.0, batch_size=64)
    shared_only = JobMeter(speeds={config_key(1, 1, True): [100, 30.0]})
    assert solo_iteration_s(shared_only, one, speed) is None
    assert solo_iteration_s(shared_only, one, speed, typical_slowdown=1.5) == (
        pytest.approx(0.2),
        "derived-shared",
    )
    speed.profiles["k"] = {
        "c0_s": 0.01,
        "c1_s": 0.002,
        "fixed_mib": 100,
        "per_sample_mib": 1,
        "local_batch": 64,
    }
    assert solo_iteration_s(shared_only, one, speed) == (
        pytest.approx(0.01 + 0.002 * 64),
        "profiled",
    )


def test_a_job_that_never_shared_slows_down_as_the_ones_measured_on_this_cluster():
    speed = RuntimeSpeed()
    a, b, c = (JobSpec(j, 0.0, num_gpus=1, duration_s=1.0, batch_size=8) for j in "abc")
    ja, jb, jc = (JobState(s, i) for i, s in enumerate((a, b, c)))
    for j in "abc":
        speed.profiles[j] = {
            "c0_s": 0.01,
            "c1_s": 0.001,
            "fixed_mib": 1,
            "per_sample_mib": 1,
            "local_batch": 8,
        }
    prior = speed.slowdown(jc, ja)
    assert prior == pytest.approx(1.63, abs=0.01)  # the literature's median, before any measurement
    speed.measured_slowdown("a", 1.1)
    speed.measured_slowdown("b", 1.3)
    assert speed.slowdown(ja, jb) == pytest.approx(1.1) and speed.slowdown(jc, ja) == pytest.approx(
        1.2
    )
    speed.forget("a")  # gone, but still counts for the cluster
    assert "a" not in speed.profiles and speed.slowdown(jc, jb) == pytest.approx(1.2)


def test_one_tenant_s_slowdowns_are_one_vote_in_the_cluster_s_typical_one():
    # issue 29, 7: a tenant whose many jobs report a huge slowdown moved the median every other
    # tenant's jobs are scheduled with. Now each tenant's median is one vote, within the
    # measured pairs' range (1.0 .. 8.6).
    from dlsched.runtime.speed import RuntimeSpeed, measured_pair_slowdowns

    speed = RuntimeSpeed()
    for i in range(9):
        speed.measured_slowdown(f"m{i}", 1000.0, "mallory")
    speed.measured_slowdown("a1", 1.2, "alice")
    speed.measured_slowdown("a2", 1.4, "alice")  # alice's vote: 1.3
    speed.measured_slowdown("b1", 1.5, "bob")
    # median of the votes 8.6 (mallory's, clamped), 1.3 and 1.5: 1.5; before, the median of
    # all 12 values was 1000
    assert speed.typical_slowdown() == pytest.approx(1.5)
    assert measured_pair_slowdowns()[-1] == pytest.approx(8.597, abs=0.001)
    speed.forget("m0")  # a finished job's value still counts, for its tenant
    assert speed.typical_slowdown() == pytest.approx(1.5)
    assert speed.slowdowns["m1"] == 1000.0  # a job's own measurement is its own


def _history(tmp_path, rows: list[dict]):
    path = tmp_path / "h.csv"
    path.write_text(history_csv({"jobs": [{k: r.get(k) for k in COLUMNS} for r in rows]}))
    return path


BASE = {
    "tenant": "t",
    "batch_size": 8,
    "model": "m",
    "restart_s": 0.0,
    "status": "done",
    "preemptions": 0,
}


def _two_jobs(tmp_path):
    """FIFO on 2 GPUs: a (2 GPUs, 100 x 0.1 s, 2 s start-up) ends at 12; b (submitted at 1, 50 x
    0.2 s, 1 s start-up) starts at 12 and ends at 23: JCTs 12 and 22. Measured: 12 and 20."""
    return _history(
        tmp_path,
        [
            {
                **BASE,
                "job_id": "a",
                "submit_s": 0,
                "gpus": 2,
                "iterations": 100,
                "iteration_s": 0.1,
                "startup_s": 2.0,
                "jct_s": 12.0,
                "end_s": 12.0,
            },
            {
                **BASE,
                "job_id": "b",
                "submit_s": 1,
                "gpus": 1,
                "iterations": 50,
                "iteration_s": 0.2,
                "startup_s": 1.0,
                "jct_s": 20.0,
                "end_s": 21.0,
            },
        ],
    )


def test_whatif_replays_the_history_and_reports_its_error_against_the_measured_jcts(
    tmp_path, capsys
):
    path = _two_jobs(tmp_path)
    out = tmp_path / "out"
    assert (
        main(
            [
                "whatif",
                "--trace",
                str(path),
                "--cluster",
                "1x2:emulated/16384",
                "--server-policy",
                "fifo",
                "--policies",
                "sjf",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    report = json.loads((out / "whatif.json").read_text())
    fit = report["policies"]["fifo"]["calibration"]
    assert fit["jobs"] == 2 and fit["mean_jct_simulated_s"] == pytest.approx(17.0)
    assert fit["mean_jct_error"] == pytest.approx(17.0 / 16.0 - 1)
    assert fit["job_error_median"] == pytest.approx(0.05) and fit["job_error_max"] == pytest.approx(
        0.1
    )
    assert report["policies"]["sjf"]["calibration"] is None
    assert "server, measured (fifo)" in capsys.readouterr().out


# one job of a history, as its columns read: 10 iterations of 0.1 s on 1 GPU
ONE_JOB = {
    **BASE,
    "job_id": "a",
    "submit_s": 0,
    "gpus": 1,
    "iterations": 10,
    "iteration_s": 0.1,
    "startup_s": 1,
}


def test_a_bad_history_row_names_its_field_and_a_history_needs_its_cluster(tmp_path):
    good = ONE_JOB
    with pytest.raises(SpecError, match="iteration_s"):
        load_trace(str(_history(tmp_path, [good, {**good, "job_id": "b", "iteration_s": 0}])))
    with pytest.raises(SpecError, match="appears twice"):
        load_trace(str(_history(tmp_path, [good, good])))
    with pytest.raises(SpecError, match="startup_s"):
        load_trace(str(_history(tmp_path, [{**good, "startup_s": -1}])))
    skipped = load_trace(
        str(_history(tmp_path, [good, {**good, "job_id": "b", "gpus": "two"}])), skip_invalid=True
    )
    assert [j.job_id for j in skipped.jobs] == ["a"] and skipped.dropped == {"invalid num_gpus": 1}
    assert (
        main(["simulate", "--trace", str(_history(tmp_path, [good])), "--out", str(tmp_path / "o")])
        == 2
    )


@pytest.mark.parametrize(
    "column, value",
    [
        ("slowdown", 0.0),  # a speed divided by it
        ("c0_s", -5.0),  # a negative iteration time
        ("fixed_mib", 1e300),
        ("profile_s", -5.0),  # the job arrived before it was submitted: an error on submit_time_s
        ("preemptions", -1),
    ],
)
def test_a_history_s_measured_column_out_of_its_range_is_named(tmp_path, column, value):
    # a history file is edited by hand too: these were taken as they were
    row = {
        **ONE_JOB,
        **{"fixed_mib": 100.0, "per_sample_mib": 1.0, "c0_s": 0.01, "c1_s": 0.001},
        **{"local_batch": 8, "slowdown": 1.2, "profile_s": 5.0},
    }
    assert load_trace(str(_history(tmp_path, [row]))).replay["a"]["profile"] is not None
    with pytest.raises(SpecError, match="must be") as e:
        load_trace(str(_history(tmp_path, [{**row, column: value}])))
    assert e.value.field == column


def test_a_policy_sees_a_jobs_estimate_until_it_runs_and_the_job_takes_its_true_time():
    # SJF on one GPU: when a ends at 10, b (10 s, estimated 100 s) and c (50 s, estimated 20 s)
    # wait; SJF picks c by its estimate, c runs its true 50 s, then b: c ends at 60, b at 70
    from dlsched.cluster import load_cluster
    from dlsched.policies.catalog import make_policy
    from dlsched.sim import SimConfig, simulate

    jobs = [
        JobSpec("a", 0.0, 1, 10.0),
        JobSpec("b", 1.0, 1, 10.0, estimate_s=100.0),
        JobSpec("c", 2.0, 1, 50.0, estimate_s=20.0),
    ]
    result = simulate(
        load_cluster("1x1:V100"), jobs, make_policy("sjf"), SimConfig(restart_overhead_s=0.0)
    )
    finish = {j.job_id: j.finish for j in result.jobs}
    assert finish == {"a": 10.0, "c": 60.0, "b": 70.0}
    assert {j.job_id: j.spec.duration_s for j in result.jobs} == {"a": 10.0, "b": 10.0, "c": 50.0}
    with pytest.raises(SpecError, match="estimate_s"):
        JobSpec("d", 0.0, 1, 10.0, estimate_s=0.0)


def test_the_servers_quotas_go_with_the_admins_export_and_read_back(tmp_path):
    import yaml

    from dlsched.tenant_quotas import TenantConfig, TenantQuota, load_tenants

    quotas = TenantConfig(
        {"alice": TenantQuota(2, 1, "lab", 2.0)}, TenantQuota(1, None, "lab"), source="q.yaml"
    )
    s = Setup(tmp_path, nodes={"n0": 4}, quotas=quotas)
    assert (
        s.service.export(0, float("inf"), "alice")["quota_config"] is None
    )  # others' quotas are private
    path = tmp_path / "quotas.yaml"
    path.write_text(yaml.safe_dump(s.service.export(0, float("inf"))["quota_config"]))
    again = load_tenants(str(path), [], 4)
    assert again.tenants == quotas.tenants and again.default == quotas.default


def _run_measured(s: Setup, job: str) -> None:
    """The running ``job`` (100 iterations) reports 10 after 3 s and 60 after 8, and is done
    at 12 s."""
    for i, t in ((10, 3.0), (60, 5.0)):
        s.executor.report_progress(job, iteration=i, iterations=100, iteration_s=0.1)
        s.step(t)
    s.executor.finish(job)
    s.step(4.0)


def test_whatif_fetches_the_history_and_the_quotas_from_a_running_server(tmp_path, capsys):
    from dlsched.runtime.api import create_app, hash_token
    from dlsched.tenant_quotas import TenantConfig, TenantQuota
    from runtime_helpers import HttpServer

    s = Setup(
        tmp_path,
        nodes={"n0": 2},
        quotas=TenantConfig({"alice": TenantQuota(2, None, "lab")}, source="q"),
    )
    a = s.submit(gpus=1, iterations=100)
    s.step()
    _run_measured(s, a)
    http = HttpServer(create_app(s.service, s.store, hash_token("admin-secret")))
    try:
        out = tmp_path / "w"
        assert (
            main(
                [
                    "whatif",
                    "--server",
                    http.url,
                    "--token",
                    "admin-secret",
                    "--policies",
                    "sjf",
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
    finally:
        http.close()
    assert "replaying under the server's quotas" in capsys.readouterr().out
    assert (out / "quotas.yaml").is_file() and (out / "history.csv").is_file()
    report = json.loads((out / "whatif.json").read_text())
    assert (
        report["measured"]["jobs"] == 1 and report["policies"]["fifo"]["calibration"]["jobs"] == 1
    )
    summary = json.loads((out / "fifo" / "summary.json").read_text())
    assert summary["params"]["quotas"] == "quotas.yaml"  # the replay ran under the quota stage


def test_a_replay_of_the_server_s_history_has_its_nodes_lost_and_taken_out_of_service(
    tmp_path, capsys
):
    # the server's node failures and maintenance were not in its history: a what-if replay ran
    # on a cluster that never lost a node
    from dlsched.runtime.api import create_app, hash_token
    from dlsched.runtime.client import cmd_export
    from runtime_helpers import HttpServer

    s = Setup(tmp_path, nodes={"n0": 2, "n1": 2})
    a = s.submit(gpus=1, iterations=100)
    t0 = s.store.job(a)["submitted"]  # (the history's times are from the first submission)
    s.step()
    _run_measured(s, a)
    s.executor.lose_node("n1")
    s.step(1.0)
    down = s.clock() - t0
    s.executor.restore_node("n1")
    s.step(5.0)
    up = s.clock() - t0
    s.clock.advance(2.0)
    s.service.set_node("n0", "drained")
    drained = s.clock() - t0
    s.clock.advance(3.0)
    s.service.set_node("n0", "ready")
    expected = [
        [round(down, 3), "down", 1],
        [round(up, 3), "up", 1],
        [round(drained, 3), "drain", 0],
        [round(drained + 3.0, 3), "uncordon", 0],
    ]
    http = HttpServer(create_app(s.service, s.store, hash_token("admin-secret")))
    try:
        # (the service's clock is a fake one, ahead of the time "until" defaults to)
        until = str(s.clock() + 60.0)
        args = ["--server", http.url, "--token", "admin-secret", "--until", until]
        out = tmp_path / "w"
        argv = ["whatif", *args, "--policies", "sjf", "--out", str(out), "--no-progress"]
        assert main(argv) == 0
        history = s.service.export(0.0, float("inf"))
        export = argparse.Namespace(
            server=http.url,
            token="admin-secret",
            out=str(tmp_path / "h.csv"),
            since=None,
            until=until,
        )
        capsys.readouterr()
        assert cmd_export(export) == 0
    finally:
        http.close()
    assert [list(e) for e in history["node_events"]] == expected
    assert json.loads((out / "fifo" / "summary.json").read_text())["config"]["node_events"] == 4
    assert "--node-events" in capsys.readouterr().out  # the export's replay command names them
    # a replay of the exported file without them says they lie beside it
    argv = ["whatif", "--trace", str(tmp_path / "h.csv"), "--cluster", history["cluster"]]
    argv += ["--server-policy", "fifo", "--out", str(tmp_path / "w2"), "--no-progress"]
    assert main(argv) == 0
    assert "replayed only with --node-events" in capsys.readouterr().out
    assert [list(e) for e in read_node_events(tmp_path / "h.node_events.csv")] == [
        [float(t), kind, node] for t, kind, node in expected
    ]


def test_a_job_whose_profiling_outlasted_its_deadline_is_replayed_late():
    # under a policy that profiles, a job arrives when its profiling ended: job a's took 40 s
    # of its 30 s allowance, and the replay stopped on "deadline_s must be after submit_time_s"
    # (a whatif of such a server failed); it arrives late, its deadline as the server had it
    from conftest import run
    from dlsched.metrics import JOB_COLUMNS, iter_job_values
    from dlsched.policies.catalog import make_policy
    from dlsched.replay import with_profiling

    jobs = [JobSpec("a", 0.0, 1, 100.0, deadline_s=30.0), JobSpec("b", 5.0, 1, 100.0)]
    measured = {"a": {"profile_s": 40.0}, "b": {"profile_s": 10.0}}
    arrived = with_profiling(jobs, measured, make_policy("genie"))
    assert [(j.job_id, j.submit_time_s, j.deadline_s) for j in arrived] == [
        ("b", 15.0, None),
        ("a", 40.0, 30.0),
    ]
    # EDF: b alone at 15 s runs to 115 s; a then runs to 215 s, 185 s past its deadline
    done, result = run("1x1", arrived, "edf")
    assert (done["b"].finish, done["a"].finish) == (115.0, 215.0)
    met = JOB_COLUMNS.index("met_deadline")
    assert {row[0]: row[met] for row in iter_job_values(result.jobs)} == {"a": False, "b": None}


def test_whatif_replays_a_genie_server_whose_jobs_had_no_deadline(tmp_path, capsys):
    # the simulator refuses genie on a workload without deadlines (a forgotten --deadlines);
    # a server's history has its tenants' deadlines as they ran, none here: it was refused,
    # so the server's own policy could not be replayed. Another policy named is refused as in
    # a simulation (edf ran as arrival order, and an elastic one as its order alone)
    from dlsched.runtime.export import history_csv

    s = Setup(tmp_path, policy="genie", nodes={"n0": 2})
    a = s.submit(gpus=1, iterations=100)
    s.step()
    s.executor.finish_profiling()
    s.step()
    _run_measured(s, a)
    path = tmp_path / "history.csv"
    path.write_text(history_csv(s.service.export(0.0, float("inf"))))
    out = tmp_path / "w"
    argv = ["whatif", "--trace", str(path), "--cluster", "1x2:emulated/16384"]
    argv += ["--server-policy", "genie", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    report = json.loads((out / "whatif.json").read_text())
    assert report["policies"]["genie"]["calibration"]["jobs"] == 1
    for other, field in (("edf", "deadlines"), ("elastic-tiresias", "elastic_fraction")):
        capsys.readouterr()
        assert main([*argv[:-3], "--policies", other, "--out", str(tmp_path / other)]) == 2
        assert f"field '{field}': policy '{other}'" in capsys.readouterr().err


def test_a_seed_is_refused_where_a_history_s_replay_draws_nothing_from_it(tmp_path, capsys):
    # a history names its jobs' models: --seed changed nothing, in silence
    argv = ["whatif", "--trace", str(_two_jobs(tmp_path)), "--cluster", "1x2:emulated/16384"]
    argv += ["--server-policy", "fifo", "--no-progress", "--seed", "3"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 2
    assert "field 'seed': --seed does nothing here" in capsys.readouterr().err
    # with elastic jobs drawn, it seeds them
    assert main([*argv, "--elastic-fraction", "0.5", "--out", str(tmp_path / "b")]) == 0


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--trace", "h.csv", "--since", "7d"], "since"),
        (["--trace", "h.csv", "--server", "http://127.0.0.1:9"], "server"),
        (["--server", "http://127.0.0.1:9", "--server-policy", "fifo"], "server_policy"),
    ],
)
def test_whatif_refuses_the_options_of_the_history_it_does_not_read(tmp_path, capsys, argv, field):
    # with --trace the server's options, without it --server-policy, were dropped in silence
    assert main(["whatif", *argv, "--policies", "fifo", "--out", str(tmp_path / "w")]) == 2
    assert f"field '{field}': --{field.replace('_', '-')} does nothing here" in (
        capsys.readouterr().err
    )


def test_whatif_names_an_unknown_policy_before_asking_the_server(tmp_path, capsys):
    # before, the server's answer came first: "no finished or running job to replay", or here
    # a connection error, for a misspelt policy
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"  # a port nothing listens on
    argv = ["whatif", "--server", nobody, "--token", "t", "--policies", "sjf,nope"]
    assert main([*argv, "--out", str(tmp_path / "w"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "'policy'" in err and "nope" in err, err


# GENIE's profiling of a 4-GPU job with batch 8 (per worker 2; measured at 1 and 2): one worker,
# two on one node, two on two nodes, as the runtime's profiling run reports them
GENIE_PROFILE = {
    "fixed_mib": 500.0,
    "per_sample_mib": 10.0,
    "c0_s": 0.01,
    "c1_s": 0.001,
    "local_batch": 2,
    "placements": [
        {"gpus": 1, "nodes": 1, "batch": 1, "iteration_s": 0.011},
        {"gpus": 1, "nodes": 1, "batch": 2, "iteration_s": 0.012},
        {"gpus": 2, "nodes": 1, "batch": 1, "iteration_s": 0.015},
        {"gpus": 2, "nodes": 1, "batch": 2, "iteration_s": 0.016},
        {"gpus": 2, "nodes": 2, "batch": 1, "iteration_s": 0.025},
        {"gpus": 2, "nodes": 2, "batch": 2, "iteration_s": 0.026},
    ],
}


def test_a_genie_history_replays_with_its_profiled_placements_and_molds_as_the_server_did(
    tmp_path,
):
    # issue 25, 4: the export kept one worker's line only, so a replay ran GENIE's jobs as asked
    s = Setup(tmp_path, policy="genie", nodes={"n0": 4})
    a = s.submit(gpus=4, iterations=100, deadline=s.clock.t + 3600)
    s.step()
    s.executor.finish_profiling(GENIE_PROFILE)
    s.step()  # an hour to spare: the fewest GPUs predicted to meet it
    server_gpus = len(s.state(a).gpus)
    assert server_gpus < 4
    s.executor.report_progress(a, iteration=50, iterations=100, iteration_s=0.01)
    s.step(2.0)
    s.executor.finish(a)
    s.step(1.0)
    history = s.service.export(0.0, float("inf"))
    [row] = history["jobs"]
    assert row["placements"].count(";") == 5 and row["placements"].startswith("1/1/1/0.011;")
    path = tmp_path / "history.csv"
    path.write_text(history_csv(history))
    assert load_trace(str(path)).replay[a]["profile"]["placements"] == GENIE_PROFILE["placements"]
    out = tmp_path / "o"
    argv = ["simulate", "--trace", str(path), "--cluster", history["cluster"], "--policy", "genie"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    [replayed] = (out / "jobs.csv").read_text().splitlines()[1:]
    assert float(replayed.split(",")[16]) == server_gpus  # mean_gpus: molded as on the server


def test_queued_and_cancelled_jobs_are_exported_with_the_work_they_had(tmp_path):
    # issue 25, 4: only finished and running jobs were exported, so a replay missed the
    # contention of the jobs still waiting and the GPU time of those cancelled
    s = Setup(tmp_path, nodes={"n0": 2})
    ran, holds = s.submit(gpus=1, iterations=100), s.submit(gpus=1, iterations=100)
    s.step()
    waits = s.submit(gpus=2, iterations=40, duration_s=80.0)  # estimated: 2 s an iteration
    never = s.submit(gpus=2, iterations=10)
    s.step()
    s.executor.report_progress(ran, iteration=10, iterations=100, iteration_s=0.1)
    s.step(2.0)
    s.executor.report_progress(ran, iteration=30, iterations=100, iteration_s=0.1)
    s.step(2.0)
    s.store.update_job(never, cancel_requested=True)  # waiting, never ran: no GPU time
    s.store.update_job(ran, cancel_requested=True)  # after 30 of its 100 iterations
    s.step(1.0)
    assert s.status(waits) == "queued" and s.status(holds) == "running"
    history = s.service.export(0.0, float("inf"))
    rows = {r["job_id"]: r for r in history["jobs"]}
    assert set(rows) == {ran, holds, waits}
    assert history["skipped"] == {"cancelled before it ran": 1}
    assert rows[ran]["status"] == "cancelled" and rows[ran]["iterations"] == 30
    assert rows[ran]["iteration_s"] == pytest.approx(0.1) and rows[ran]["estimate_s"] > 0
    assert rows[waits]["status"] == "queued" and rows[waits]["iteration_source"] == "estimate"
    assert rows[waits]["iteration_s"] == pytest.approx(2.0)
    path = tmp_path / "history.csv"
    path.write_text(history_csv(history))
    durations = {j.job_id: j.duration_s for j in load_trace(str(path)).jobs}
    assert durations[ran] == pytest.approx(3.0) and durations[waits] == pytest.approx(80.0)


def test_a_sweep_of_a_history_reports_each_replay_s_calibration(tmp_path):
    # the experiments' replays (experiments/calibration.py): the same figures as whatif's above
    from dlsched.sweep import run_sweep

    spec = {
        "name": "replays",
        "runs": {
            "trace": str(_two_jobs(tmp_path)),
            "format": "history",
            "cluster": "1x2:emulated/16384",
        },
        "axes": {"policy": ["fifo"]},
    }
    result = run_sweep(spec, tmp_path / "sweep", sequential=True)
    assert result.ok, result.outcome.failed
    (row,) = result.rows
    assert row["calibration.jobs"] == 2
    assert row["calibration.mean_jct_error"] == pytest.approx(17.0 / 16.0 - 1)
    assert row["calibration.job_error_max"] == pytest.approx(0.1)


@pytest.mark.parametrize(
    "cell, reason",
    [
        ("99999999999/1/8/0.05", "nodes <= gpus <= 1,048,576"),  # was taken
        ("2/1/1e300/0.05", r"must be > 0 and <= 1e\+10"),  # was taken
        ("2/3/8/0.1", "nodes <= gpus"),
        ("x" * 100, r"\(100 characters\)"),  # was quoted whole
    ],
)
def test_a_profiled_placement_out_of_range_is_named(cell, reason):
    from dlsched.traces.history import parse_placements

    with pytest.raises(SpecError, match=reason) as e:
        parse_placements(cell)
    assert e.value.field == "placements"
    assert parse_placements("1/1/8/0.05;2/2/8/0.03")[1] == {
        "gpus": 2,
        "nodes": 2,
        "batch": 8.0,
        "iteration_s": 0.03,
    }
