"""Node failures and repairs from a file (``--node-events``), a sweep's ``node_events`` and the
simulator's own list: cases by hand, and every bad input named."""

import csv
import json

import pytest

from dlsched.cli import main
from dlsched.cluster import parse_cluster_spec
from dlsched.errors import SpecError
from dlsched.jobs import JobSpec
from dlsched.metrics import summarize
from dlsched.node_events import read_node_events
from dlsched.policies.catalog import make_policy
from dlsched.sim.engine import SimConfig, Simulator
from dlsched.sweep.spec import parse_spec

HEADER = "time_s,kind,node\n"


def _write(path, text):
    path.write_text(text)
    return str(path)


def _simulate(tmp_path, events_text, *extra):
    trace = _write(
        tmp_path / "trace.csv",
        "job_id,tenant,submit_time_s,num_gpus,duration_s\na,t,0,8,1000\n",
    )
    events = _write(tmp_path / "events.csv", events_text)
    out = tmp_path / "out"
    code = main(
        [
            "simulate",
            "--trace",
            trace,
            "--cluster",
            "1x8:V100",
            "--policy",
            "fifo",
            "--no-perf",
            "--no-cache",
            "--node-events",
            events,
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]
    )
    return code, out


def test_a_node_down_then_up_stops_its_job_which_restarts_when_it_returns(tmp_path, capsys):
    # One 8-GPU node; a job of 1,000 s from 0. The node goes down at 100 (the job fails,
    # having done 100 s: it checkpoints nothing, but loses nothing without a checkpoint
    # interval) and comes back at 200: the job restarts there, pauses 30 s and runs its last
    # 900 s, ending at 1,130.
    code, out = _simulate(tmp_path, HEADER + "100,down,0\n200,up,0\n")
    assert code == 0
    (row,) = csv.DictReader((out / "jobs.csv").open())
    assert float(row["finish_s"]) == 1130.0
    assert (row["failures"], row["preemptions"]) == ("1", "0")
    assert float(row["queue_s"]) == 100.0  # down from 100 to 200
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["node_events"] == 2  # counted, not listed
    # (a reader of the table would not guess it)
    assert "note: 1 runs failed (nodes down) and lost no work" in capsys.readouterr().out


def test_a_failure_from_a_file_loses_the_work_since_the_last_checkpoint(tmp_path, capsys):
    # The same, with a checkpoint every 60 s: at 100 the job keeps 60 s of its 100, and
    # ends at 200 + 30 + 940 = 1,170.
    code, out = _simulate(
        tmp_path, HEADER + "100,down,0\n200,up,0\n", "--checkpoint-interval-s", "60"
    )
    (row,) = csv.DictReader((out / "jobs.csv").open())
    assert float(row["finish_s"]) == 1170.0
    assert "lost no work" not in capsys.readouterr().out


def test_an_event_before_the_first_arrival_happens_at_it():
    # Two 1-GPU nodes, two 100-s jobs at 1,000; node 0 is down from 0 to 2,000. The clock
    # starts at the first arrival: node 0's failure takes effect there, one GPU runs the jobs
    # one after the other (1,000-1,200), busy all along. The clock went back to 0 for the
    # event before: 1,200 s of one GPU's capacity counted, utilization 1/6.
    jobs = [
        JobSpec(job_id=name, tenant="t", submit_time_s=1000.0, num_gpus=1, duration_s=100.0)
        for name in ("a", "b")
    ]
    config = SimConfig(node_events=[(0.0, "down", 0), (2000.0, "up", 0)])
    result = Simulator(parse_cluster_spec("2x1:V100"), jobs, make_policy("fifo"), config).run()
    summary = summarize(result)
    assert [(j.first_start, j.finish) for j in result.jobs] == [(1000, 1100), (1100, 1200)]
    assert summary["makespan_s"] == 200
    assert summary["gpu_utilization"] == 1.0


def test_events_at_one_instant_apply_in_the_order_given():
    # Two 1-GPU nodes. Node 0 goes down at 10; at 50 it comes up and goes down again, in that
    # order: it stays down. "long" (20-220) runs on node 1, so "late" (submitted at 100) waits
    # for it until 220. (Sorted by kind, "down" then "up", node 0 would be up: "late" at 100.)
    jobs = [
        JobSpec(job_id="long", tenant="t", submit_time_s=20.0, num_gpus=1, duration_s=200.0),
        JobSpec(job_id="late", tenant="t", submit_time_s=100.0, num_gpus=1, duration_s=10.0),
    ]
    events = [(10.0, "down", 0), (50.0, "up", 0), (50.0, "down", 0)]
    result = Simulator(
        parse_cluster_spec("2x1:V100"), jobs, make_policy("fifo"), SimConfig(node_events=events)
    ).run()
    assert [(j.first_start, j.finish) for j in result.jobs] == [(20, 220), (220, 230)]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            HEADER + "100,down,0\n200,sideways,0\n",
            "row 2: field 'kind': must be one of down, up, cordon",
        ),
        (HEADER + "nan,down,0\n", "row 1: field 'time_s': 'nan' in column 'time_s' is not finite"),
        (HEADER + "-1,down,0\n", "row 1: field 'time_s': must be a number >= 0"),
        (HEADER + "1,down,1.5\n", "row 1: field 'node': '1.5' in column 'node' is not a whole"),
        (HEADER + "1,down,1\n", "row 1: field 'node': no node 1: the cluster's are 0..0"),
        (HEADER + "1,down,-2\n", "row 1: field 'node': must be a node number >= 0"),
        ("time_s,kind\n1,down\n", "field 'node': column missing from the header"),
    ],
)
def test_a_bad_event_file_is_refused_naming_row_and_field_and_writes_nothing(
    tmp_path, capsys, text, message
):
    code, out = _simulate(tmp_path, text)
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_file_that_is_not_text_or_not_there_names_the_option(tmp_path):
    binary = tmp_path / "events.csv"
    binary.write_bytes(b"\x89PNG\x00\xff")
    with pytest.raises(SpecError, match="cannot be read as a UTF-8 CSV") as e:
        read_node_events(binary)
    assert e.value.field == "node_events"
    with pytest.raises(SpecError, match="no such file") as e:
        read_node_events(tmp_path / "missing.csv")
    assert e.value.field == "node_events"


@pytest.mark.parametrize(
    "events, field",
    [
        ([(1.0, "down")], "node_events[0]"),
        ([(0.0, "up", 0), (float("inf"), "down", 0)], "node_events[1].time_s"),
        ([(1.0, "down", True)], "node_events[0].node"),
        ([(1.0, "Down", 0)], "node_events[0].kind"),
    ],
)
def test_the_simulator_s_own_list_is_checked_naming_the_event(events, field):
    with pytest.raises(SpecError) as e:
        SimConfig(node_events=events)
    assert e.value.field == field


def test_an_event_on_a_node_the_cluster_lacks_is_refused_before_the_run():
    jobs = [JobSpec(job_id="a", tenant="t", submit_time_s=0.0, num_gpus=1, duration_s=10.0)]
    config = SimConfig(node_events=[(5.0, "down", 2)])
    with pytest.raises(SpecError, match="no node 2: the cluster's are 0..1") as e:
        Simulator(parse_cluster_spec("2x1:V100"), jobs, make_policy("fifo"), config)
    assert e.value.field == "node_events[0].node"


def test_a_sweep_reads_its_event_file_when_the_spec_is_checked(tmp_path):
    spec = {"runs": {"trace": "muri-3", "policy": "fifo"}, "axes": {"limit": [10]}}
    good = _write(tmp_path / "good.csv", HEADER + "10,down,0\n")
    spec["runs"]["node_events"] = good
    assert parse_spec(spec).runs[0].get("node_events") == good
    spec["runs"]["node_events"] = _write(tmp_path / "bad.csv", HEADER + "10,off,0\n")
    with pytest.raises(SpecError, match="row 1: field 'kind'") as e:
        parse_spec(spec)
    assert e.value.field == "runs.node_events"


def test_a_sweep_checks_its_event_nodes_against_each_run_s_cluster_before_any_run(tmp_path):
    from dlsched.sweep import run_sweep

    # node 5 goes down at the start and comes back: a 6-node cluster has it, a 4-node one not
    events = _write(tmp_path / "events.csv", HEADER + "0,down,5\n50000,up,5\n")
    spec = {
        "runs": {"trace": "muri-3", "limit": 40, "policy": "fifo", "node_events": events},
        "axes": {"cluster": ["6x8:V100", "4x8:V100"]},
    }
    out = tmp_path / "out"
    with pytest.raises(SpecError, match="on cluster 4x8:V100: .*row 1: field 'node': no node 5"):
        run_sweep(spec, out, sequential=True)
    assert not (out / "runs").exists()
    spec["axes"]["cluster"] = ["6x8:V100"]
    result = run_sweep(spec, out, sequential=True)
    (row,) = result.rows
    assert result.ok and row["config.node_events"] == 2


def _run(cluster, jobs, events, policy="fifo", **config):
    sim = Simulator(
        parse_cluster_spec(cluster),
        jobs,
        make_policy(policy),
        SimConfig(node_events=events, **config),
    )
    return {j.job_id: j for j in sim.run().jobs}


def _job(name, submit, gpus, duration, **fields):
    return JobSpec(name, submit, gpus, duration, tenant="t", **fields)


def test_a_cordoned_node_takes_no_new_job_and_lets_its_own_run_to_their_end():
    # Two 4-GPU nodes, FIFO. a (0-100) runs on node 0, cordoned at 10: a runs on to 100, but
    # its GPUs are not offered again. b (at 20) takes node 1 (20-120); c (at 30) waits for it
    # (120-220) instead of taking node 0 at 100; d (at 40) waits until node 0 is back, at 150.
    jobs = [_job(n, t, 4, 100.0) for n, t in (("a", 0.0), ("b", 20.0), ("c", 30.0), ("d", 40.0))]
    events = [(10.0, "cordon", 0), (150.0, "uncordon", 0)]
    done = _run("2x4:V100", jobs, events)
    assert [(done[n].first_start, done[n].finish) for n in "abcd"] == [
        (0, 100),
        (20, 120),
        (120, 220),
        (150, 250),
    ]
    assert done["a"].gpus == (0, 1, 2, 3) and done["d"].gpus == (0, 1, 2, 3)
    assert done["c"].gpus == (4, 5, 6, 7)
    assert (done["a"].preemptions, done["a"].failures) == (0, 0)


def test_a_drained_node_s_jobs_checkpoint_and_move_where_a_failure_loses_work():
    # Two 4-GPU nodes, a checkpoint every 60 s. a (0-100) on node 0; node 0 is drained at 10: a
    # is preempted (it checkpoints: it keeps its 10 s), restarts on node 1 at once, pauses 30 s
    # and runs its last 90 s: it ends at 130, a preemption and no failure. The node going down
    # instead loses the 10 s since its last checkpoint (at 0): 10 + 30 + 100 = 140, a failure.
    jobs = [_job("a", 0.0, 4, 100.0)]
    drained = _run("2x4:V100", jobs, [(10.0, "drain", 0)], checkpoint_interval_s=60.0)["a"]
    assert (drained.finish, drained.gpus, drained.preemptions, drained.failures) == (
        130,
        (4, 5, 6, 7),
        1,
        0,
    )
    failed = _run("2x4:V100", jobs, [(10.0, "down", 0)], checkpoint_interval_s=60.0)["a"]
    assert (failed.finish, failed.preemptions, failed.failures) == (140, 0, 1)


def test_a_sharing_policy_pairs_no_new_job_with_one_on_a_cordoned_node():
    # Two 1-GPU nodes, SJF-BSBF: a (on GPU 0) and x (on GPU 1) run 1,000 s of cifar10; b (at
    # 20, 100 s) shares GPU 0 with a (both 28 s slower) as nothing is free. With node 0
    # cordoned at 10, b pairs with x on GPU 1 instead.
    from dlsched.perf.model import PerfModel
    from dlsched.perf.speed import PerfSpeed

    nodes = parse_cluster_spec("2x1:V100")
    jobs = [
        _job(name, submit, 1, duration, model="cifar10", batch_size=64)
        for name, submit, duration in (("a", 0.0, 1000.0), ("x", 0.0, 1000.0), ("b", 20.0, 100.0))
    ]
    placed = []
    for events in ([], [(10.0, "cordon", 0)]):
        config = SimConfig(node_events=events)
        sim = Simulator(nodes, jobs, make_policy("sjf-bsbf"), config, PerfSpeed(PerfModel(), nodes))
        done = {j.job_id: j for j in sim.run().jobs}
        placed.append((done["b"].first_start, done["b"].gpus, done["a"].gpus, done["x"].gpus))
    assert placed == [(20, (0,), (0,), (1,)), (20, (1,), (0,), (1,))]
