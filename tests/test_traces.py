"""Trace adapters: bundled traces, malformed rows, the generic mapping, the generator."""

import csv
import gzip
import io
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.errors import SpecError
from dlsched.node_events import read_node_events
from dlsched.traces import BUNDLED, load_trace, synthetic
from dlsched.traces.generic import parse_mapping
from example_counts import examples


def test_bundled_philly_has_every_job():
    t = load_trace("philly")
    assert len(t.jobs) == 82247 and t.dropped_total == 0
    assert min(j.submit_time_s for j in t.jobs) == 0
    assert max(j.num_gpus for j in t.jobs) == 128
    assert len({j.tenant for j in t.jobs}) == 15


@pytest.mark.parametrize(
    "name, count",
    [("muri-1", 1494), ("muri-2", 5755), ("muri-3", 992), ("muri-4", 2638), ("pollux-1", 160)],
)
def test_bundled_traces_with_models(name, count):
    t = load_trace(name)
    assert len(t.jobs) == count
    assert all(j.model and j.batch_size for j in t.jobs)


def test_muri_units_are_milliseconds():
    first = min(load_trace("muri-1").jobs, key=lambda j: j.submit_time_s)
    # row 0 of trace1.csv: submit 0 ms, duration 2868294000 ms, dqn, 1 GPU, batch 128 per GPU
    assert (first.submit_time_s, first.duration_s, first.model, first.batch_size) == (
        0,
        2868294.0,
        "dqn",
        128,
    )
    eight = next(j for j in load_trace("muri-1").jobs if j.job_id == "muri-1-1")
    assert (eight.num_gpus, eight.batch_size) == (8, 8 * 128)  # row 1: dqn on 8 GPUs


def test_pollux_durations_come_from_measured_steps_and_step_times():
    from dlsched.perf.measurements import pollux_training_steps
    from dlsched.traces.pollux import measured_iteration_s

    job = next(j for j in load_trace("pollux-1").jobs if j.job_id == "pollux-1-cifar10-0")
    steps = pollux_training_steps("cifar10", 2048)
    assert job.duration_s == pytest.approx(steps * measured_iteration_s("cifar10", 6, 2048))
    assert job.num_gpus == 6 and job.iterations == int(steps)


def test_openb_counts_what_it_drops():
    t = load_trace("openb")
    assert t.rows == 8152
    assert t.dropped == {"no GPU requested": 1088, "never scheduled": 861}
    assert len(t.jobs) == 8152 - 1088 - 861
    assert any(j.gpu_milli < 1000 for j in t.jobs)
    constrained = [j for j in load_trace("openb-gpuspec").jobs if j.gpu_types]
    assert constrained and all(
        set(j.gpu_types) <= {"P100", "T4", "V100M16", "V100M32", "A10", "G2", "G3"}
        for j in constrained
    )


def _write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def test_malformed_row_stops_the_load_naming_row_and_field(tmp_path):
    path = _write(
        tmp_path,
        PHILLY_HEADER + "2017-10-01 00:00:00,100,1,100,vc1\n2017-10-01 00:01:00,abc,1,100,vc1\n",
    )
    with pytest.raises(SpecError) as e:
        load_trace(path)
    assert e.value.row == 2 and e.value.field == "duration_s"
    assert "row 2" in str(e.value) and "abc" in str(e.value)


def test_negative_duration_is_rejected_or_skipped_with_a_count(tmp_path):
    path = _write(
        tmp_path,
        PHILLY_HEADER + "2017-10-01 00:00:00,100,1,100,vc1\n"
        "2017-10-01 00:01:00,-5,1,100,vc1\n2017-10-01 00:02:00,50,2,100,vc2\n"
        "not-a-date,50,2,100,vc2\n",
    )
    with pytest.raises(SpecError, match="duration_s"):
        load_trace(path)
    t = load_trace(path, skip_invalid=True)
    assert [j.duration_s for j in t.jobs] == [100, 50]
    assert t.dropped == {"invalid duration_s": 1, "invalid submit_time_s": 1}
    assert t.rows == 4 and len(t.examples) == 2


def test_missing_column_is_named(tmp_path):
    path = _write(tmp_path, "timestamp,duration,cluster\n2017-10-01 00:00:00,100,vc1\n")
    with pytest.raises(SpecError) as e:
        load_trace(path, fmt="philly")
    assert e.value.field == "num_gpus"


def test_generic_mapping_with_units(tmp_path):
    path = _write(
        tmp_path,
        "id;start;mins;n;user\nx;2024-01-01T00:00:00;2;1;alice\ny;2024-01-01T00:10:00;1.5;2;bob\n",
        "g.csv",
    )
    from dlsched.traces.generic import load_generic

    t = load_generic(
        path, "id=id,submit=start:datetime,duration=mins:min,gpus=n,tenant=user", delimiter=";"
    )
    assert [(j.job_id, j.submit_time_s, j.duration_s, j.num_gpus, j.tenant) for j in t.jobs] == [
        ("x", 0.0, 120.0, 1, "alice"),
        ("y", 600.0, 90.0, 2, "bob"),
    ]


def test_a_datetime_with_an_offset_is_read_at_its_offset(tmp_path):
    # an export in local time across a change of daylight saving time: the second job was
    # submitted 30 minutes after the first (it was read as 30 minutes before, its offset
    # ignored); a time without an offset (or with Z) is UTC, as before
    from dlsched.traces.generic import load_generic

    path = _write(
        tmp_path,
        "id,start,secs,n\n"
        "a,2024-10-27T02:45:00+02:00,60,1\n"
        "b,2024-10-27T02:15:00+01:00,60,1\n"
        "c,2024-10-27T01:30:00,60,1\n"
        "d,2024-10-27T01:40:00Z,60,1\n",
    )
    t = load_generic(path, "id=id,submit=start:datetime,duration=secs,gpus=n")
    assert {j.job_id: j.submit_time_s for j in t.jobs} == {
        "a": 0.0,
        "b": 1800.0,
        "c": 2700.0,
        "d": 3300.0,
    }


def test_a_deadline_may_be_a_datetime_beside_a_datetime_submit(tmp_path):
    # (sacct's Submit and Deadline are both dates and times): the deadline is made relative to
    # the first submission, as the submits are; an empty cell is no deadline
    from dlsched.traces.generic import load_generic

    path = _write(
        tmp_path,
        "id,start,secs,n,dl\n"
        "a,2024-10-27T02:45:00+02:00,60,1,2024-10-27T01:45:00Z\n"
        "b,2024-10-27T02:15:00+01:00,60,1,\n",
    )
    t = load_generic(path, "id=id,submit=start:datetime,duration=secs,gpus=n,deadline=dl:datetime")
    assert {j.job_id: (j.submit_time_s, j.deadline_s) for j in t.jobs} == {
        "a": (0.0, 3600.0),
        "b": (1800.0, None),
    }
    with pytest.raises(SpecError, match="a deadline as a datetime needs submit as one too"):
        load_generic(path, "id=id,submit=secs,duration=secs,gpus=n,deadline=dl:datetime")


def test_an_empty_deadline_cell_means_no_deadline(tmp_path):
    from dlsched.traces.generic import load_generic

    path = _write(tmp_path, "s,d,g,dl\n0,100,1,500\n10,100,1,\n20,100,1,  \n", "d.csv")
    t = load_generic(path, "submit=s,duration=d,gpus=g,deadline=dl")
    assert [j.deadline_s for j in t.jobs] == [500.0, None, None]
    bad = _write(tmp_path, "s,d,g,dl\n0,100,1,soon\n", "bad.csv")
    with pytest.raises(SpecError) as e:
        load_generic(bad, "submit=s,duration=d,gpus=g,deadline=dl")
    assert e.value.field == "deadline_s"


@pytest.mark.parametrize(
    "mapping, message",
    [
        ("submit=a,duration=b", "gpus"),
        ("submit=a,duration=b,gpus=c,colour=d", "unknown field 'colour'"),
        ("submit=a:fortnights,duration=b,gpus=c", "unit 'fortnights'"),
        ("submit", "FIELD=COLUMN"),
        ("submit=a,duration=b,gpus=b,gpus=a", "field 'gpus' is mapped twice"),  # the last won
    ],
)
def test_bad_mappings_are_explained(mapping, message):
    with pytest.raises(SpecError, match=message):
        parse_mapping(mapping)


def test_generic_mapping_to_a_missing_column(tmp_path):
    path = _write(tmp_path, "a,b,c\n1,2,3\n")
    with pytest.raises(SpecError, match="column missing"):
        load_trace(path, mapping="submit=a,duration=b,gpus=nope")


@pytest.mark.parametrize(
    "name, content",
    [
        ("latin.csv", b"timestamp,duration,num_gpus,cluster\n2017-10-03,100,1,v\xe9\n"),
        ("broken.csv.gz", b"\x9d\x14 not gzip"),
        ("cut.csv.gz", gzip.compress(b"timestamp,duration,num_gpus,cluster\n" * 50, mtime=0)[:-20]),
    ],
    ids=["latin-1", "not-gzip", "truncated-gzip"],
)
def test_a_file_that_is_not_utf8_text_or_a_whole_gzip_is_named(tmp_path, name, content):
    # each was a UnicodeDecodeError's, a BadGzipFile's or an EOFError's traceback
    path = tmp_path / name
    path.write_bytes(content)
    for fmt in (None, "philly"):
        with pytest.raises(SpecError, match="cannot be read as a UTF-8 CSV file") as e:
            load_trace(str(path), fmt=fmt)
        assert e.value.field == "trace"


def test_unknown_file_format_asks_for_a_mapping(tmp_path):
    path = _write(tmp_path, "a,b,c\n1,2,3\n")
    with pytest.raises(SpecError, match="--map"):
        load_trace(path)


@pytest.mark.parametrize("text", ["", "\n\n1,2\n"])
def test_a_file_without_a_header_is_named_so(tmp_path, text):
    # (it was "cannot tell the format of it from its header", asking for a mapping)
    with pytest.raises(SpecError, match="has no header: its first line is empty") as e:
        load_trace(_write(tmp_path, text))
    assert e.value.field == "trace"


def test_synthetic_is_seeded_and_follows_the_load():
    a, b, c = (
        synthetic(500, 64, 0.8, seed=1),
        synthetic(500, 64, 0.8, seed=1),
        synthetic(500, 64, 0.8, seed=2),
    )
    assert a.jobs == b.jobs and a.jobs != c.jobs
    assert all(j.num_gpus <= 64 for j in a.jobs)
    busier = synthetic(500, 64, 1.6, seed=1)
    assert busier.jobs[-1].submit_time_s < a.jobs[-1].submit_time_s


def test_every_bundled_trace_is_listed_and_loads_with_no_deadline_and_no_elastic_job():
    # a sweep's spec is checked before its workloads are made on this: a bundled trace's jobs
    # have deadlines and elastic ranges only when the run draws them (dlsched.sweep.spec)
    for name in [*BUNDLED, "synthetic"]:
        jobs = load_trace(name, skip_invalid=True).jobs
        assert jobs
        assert not any(j.deadline_s is not None or j.elastic for j in jobs), name


def test_pollux_steps_are_the_measured_iteration_count():
    # cifar10 at global batch 2048: the last row of validation-2048.csv says iteration 3178
    # (its "progress", 39,070, is not a step count); a job's work is those steps
    from dlsched.perf.measurements import pollux_training_steps
    from dlsched.traces import load_trace

    assert pollux_training_steps("cifar10", 2048) == 3178
    job = next(
        j for j in load_trace("pollux-6").jobs if j.model == "cifar10" and j.batch_size == 2048
    )
    assert job.iterations == 3178
    # between measured batch sizes Pollux interpolates linearly, and so does dlsched
    assert pollux_training_steps("cifar10", 1536) == pytest.approx(
        (pollux_training_steps("cifar10", 1024) + pollux_training_steps("cifar10", 2048)) / 2
    )


def test_the_synthetic_load_is_relative_to_the_cluster_it_runs_on():
    # the generator's rate is load x cluster GPUs / mean GPU-seconds per job: on twice the GPUs
    # the same seeded jobs arrive twice as fast (it used to assume 64 GPUs whatever --cluster)
    from dlsched.prepare import prepare

    small = prepare(
        "synthetic", "64x8", trace_params={"num_jobs": 200, "load": 0.9}, perf=False
    ).jobs
    large = prepare(
        "synthetic", "128x8", trace_params={"num_jobs": 200, "load": 0.9}, perf=False
    ).jobs
    assert [j.num_gpus for j in small] == [j.num_gpus for j in large]
    assert [j.submit_time_s for j in large] == pytest.approx([j.submit_time_s / 2 for j in small])


def test_the_synthetic_realized_load_is_the_offered_load_of_the_drawn_jobs():
    # issue 26, 3: the nominal load uses the log-normal's mean; a finite draw of its heavy tail
    # offers less (here 0.812)
    from dlsched.traces.synthetic import offered_load

    nominal = synthetic(2000, 512, 0.9, seed=4)
    assert offered_load(nominal.jobs, 512) < 0.9  # lighter than its name says
    realized = synthetic(2000, 512, 0.9, seed=4, realized_load=0.9)
    assert offered_load(realized.jobs, 512) == pytest.approx(0.9)
    assert [(j.num_gpus, j.duration_s) for j in realized.jobs] == [
        (j.num_gpus, j.duration_s) for j in nominal.jobs
    ]  # the same jobs, arriving faster
    assert "realized_load=0.9" in realized.name
    with pytest.raises(SpecError, match="realized_load"):
        synthetic(10, 64, realized_load=0)


@pytest.mark.parametrize(
    "params, field, reason",
    [
        ({"num_jobs": 10**11}, "num_jobs", "1..10,000,000"),  # drew until memory ran out
        ({"num_jobs": 2.5}, "num_jobs", "integer"),
        ({"tenants": 10**9}, "tenants", "1..100,000"),  # named each one first
        ({"load": float("inf")}, "load", "finite"),  # every job arrived at 0
        ({"realized_load": float("nan")}, "realized_load", "finite"),
        ({"max_duration_s": -5}, "max_duration_s", ">= 1"),  # was blamed on duration_s
        ({"log_sigma": float("inf")}, "log_sigma", "finite"),
        ({"seed": "abc"}, "seed", "integer"),
        ({"gpu_mix": "abc"}, "gpu_mix", "GPUS:WEIGHT"),  # an AttributeError from the CLI
        ({"gpu_mix": {0: 1}}, "gpu_mix", "sizes >= 1"),
        ({"gpu_mix": {1: -1}}, "gpu_mix", "weights > 0"),
        ({"foo": 1}, "trace_param", "no parameter 'foo'"),  # a TypeError
        # finite but past what a replay's times can hold: an OverflowError or a ValueError
        # from the generator, or an error about a field (submit_time_s) the user never gave
        ({"num_jobs": 10, "log_sigma": 1000}, "log_sigma", "at most 10"),
        ({"num_jobs": 10, "median_duration_s": 1e300}, "median_duration_s", "at most 1e"),
        ({"num_jobs": 10, "max_duration_s": 1e300}, "max_duration_s", "at most 1e"),
        ({"num_jobs": 10, "gpu_mix": {1: 1e308, 2: 1e308}}, "gpu_mix", "finite sum"),
        ({"num_jobs": 10, "load": 1e-300}, "load", "would arrive after 1e"),
        ({"num_jobs": 10, "realized_load": 1e-300}, "realized_load", "would arrive after 1e"),
    ],
)
def test_a_bad_synthetic_parameter_is_named_with_its_bound(params, field, reason):
    with pytest.raises(SpecError, match=reason) as e:
        load_trace("synthetic", **params)
    assert e.value.field == field


def test_a_gpu_mix_written_on_the_command_line_is_the_mapping():
    given = synthetic(200, 64, seed=3, gpu_mix={1: 70, 2: 20, 4: 10}).jobs
    assert synthetic(200, 64, seed=3, gpu_mix="1:70,2:20,4:10").jobs == given
    assert {j.num_gpus for j in given} == {1, 2, 4}


def test_an_evolved_spec_is_validated_as_a_new_one():
    from dataclasses import replace

    from dlsched.jobs import JobSpec

    spec = JobSpec("j", 10.0, 4, 100.0, tenant="t", min_gpus=2)
    assert spec.evolve(model="bert", batch_size=64) == replace(spec, model="bert", batch_size=64)
    with pytest.raises(SpecError, match="min_gpus"):
        spec.evolve(num_gpus=1)  # below its min_gpus of 2
    with pytest.raises(TypeError, match="no field 'gpus'"):
        spec.evolve(gpus=2)


def test_an_unchecked_evolve_copies_exactly_and_only_fields_no_other_constrains():
    from dlsched.jobs import JobSpec

    spec = JobSpec("j", 10.0, 4, 100.0, tenant="t", min_gpus=2, gpu_types=("V100",))
    changes = {"model": "bert", "batch_size": 64, "iterations": 7}
    made = spec.evolve_unchecked(**changes)
    assert made == spec.evolve(**changes) and repr(made) == repr(spec.evolve(**changes))
    assert hash(made) == hash(spec.evolve(**changes))
    with pytest.raises(TypeError, match="'num_gpus' is checked against other fields"):
        spec.evolve_unchecked(num_gpus=1)  # its min_gpus is 2: only evolve may change it


OWN = (
    "job_id,tenant,submit_time_s,num_gpus,duration_s,model,deadline_s\n"
    "a,alice,0,2,100,resnet18,500\n"
    "b,bob,10,1,50,,\n"
    "c,alice,20,4,30,bert,\n"
)


def test_a_csv_with_dlsched_s_own_column_names_needs_no_mapping(tmp_path):
    # before: "cannot tell the format", and a --map of every column to its own name
    trace = load_trace(_write(tmp_path, OWN))
    got = {
        j.job_id: (j.tenant, j.submit_time_s, j.num_gpus, j.duration_s, j.model, j.deadline_s)
        for j in trace.jobs
    }
    assert got == {
        "a": ("alice", 0.0, 2, 100.0, "resnet18", 500.0),
        "b": ("bob", 10.0, 1, 50.0, None, None),
        "c": ("alice", 20.0, 4, 30.0, "bert", None),
    }


def test_a_simulation_s_jobs_csv_replays_as_the_same_jobs(tmp_path):
    from dlsched.cli import main

    first, again = tmp_path / "first", tmp_path / "again"
    args = ["simulate", "--cluster", "1x4:V100", "--policy", "fifo", "--no-progress"]
    assert main([*args, "--trace", _write(tmp_path, OWN), "--out", str(first)]) == 0
    replayed = load_trace(str(first / "jobs.csv"))
    assert [(j.job_id, j.submit_time_s, j.num_gpus, j.duration_s) for j in replayed.jobs] == [
        ("a", 0.0, 2, 100.0),
        ("b", 10.0, 1, 50.0),
        ("c", 20.0, 4, 30.0),
    ]
    assert main([*args, "--trace", str(first / "jobs.csv"), "--out", str(again)]) == 0
    assert (first / "jobs.csv").read_text() == (again / "jobs.csv").read_text()


def test_a_jobs_csv_with_generated_deadlines_replays_with_their_classes(tmp_path):
    # the deadlines came back, their classes (tight, normal, loose) did not: the replay's
    # jobs.csv lost its qos_class column's values, and its summary had one class named ""
    from dlsched.cli import main

    first, again = tmp_path / "first", tmp_path / "again"
    args = ["simulate", "--cluster", "1x4:V100", "--policy", "edf", "--no-progress"]
    trace = _write(tmp_path, "job_id,submit_time_s,num_gpus,duration_s\na,0,2,100\nb,10,1,50\n")
    assert main([*args, "--trace", trace, "--deadlines", "--out", str(first)]) == 0
    replayed = {j.job_id: j.qos_class for j in load_trace(str(first / "jobs.csv")).jobs}
    rows = list(csv.DictReader((first / "jobs.csv").open()))
    assert replayed == {r["job_id"]: r["qos_class"] for r in rows}
    assert set(replayed.values()) <= {"tight", "normal", "loose"}
    assert main([*args, "--trace", str(first / "jobs.csv"), "--out", str(again)]) == 0
    assert (first / "jobs.csv").read_text() == (again / "jobs.csv").read_text()


def test_the_dlsched_format_names_the_columns_it_lacks(tmp_path):
    path = _write(tmp_path, "job_id,num_gpus,duration_s\na,1,10\n")
    with pytest.raises(SpecError, match="--map"):
        load_trace(path)  # not detected: no submit column
    with pytest.raises(SpecError, match="submit_time_s/submit_s") as e:
        load_trace(path, fmt="dlsched")
    assert e.value.field == "format"


def test_a_load_that_would_put_arrivals_past_the_largest_time_is_named():
    from dlsched.prepare import prepare

    with pytest.raises(SpecError, match="would put the last arrival after") as e:
        prepare("philly", "64x8", load=1e-300, perf=False)
    assert e.value.field == "load"  # it was 'submit_time_s', of the first job scaled


def test_a_trace_s_own_deadlines_move_with_their_jobs_at_another_load(tmp_path):
    # each job keeps its allowance (deadline - submit): its deadline stayed where it was, so at
    # load 2 the second job's allowance was 1,000 s instead of its 500 s, and at load 0.5 its
    # deadline fell before its new arrival
    from dlsched.prepare import prepare

    path = _write(tmp_path, "s,d,g,dl\n0,100,1,500\n1000,100,1,1500\n20,100,1,\n")
    mapping = "submit=s,duration=d,gpus=g,deadline=dl"
    jobs = prepare(path, "1x1:V100", mapping=mapping, load=2.0, perf=False).jobs
    assert [(j.submit_time_s, j.deadline_s) for j in jobs] == [
        (0.0, 500.0),
        (10.0, None),
        (500.0, 1000.0),
    ]
    jobs = prepare(path, "1x1:V100", mapping=mapping, load=0.5, perf=False).jobs
    assert [(j.submit_time_s, j.deadline_s) for j in jobs] == [
        (0.0, 500.0),
        (40.0, None),
        (2000.0, 2500.0),
    ]
    far = _write(tmp_path, "s,d,g,dl\n0,100,1,500\n1e9,100,1,9.9e9\n", "far.csv")
    with pytest.raises(SpecError, match="far-2's deadline after 1e\\+10 s") as e:
        prepare(far, "1x1:V100", mapping=mapping, load=0.5, perf=False)
    assert e.value.field == "load"


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["a", "b", "", " x", '"q,"', "1.5", "a\tb"]), max_size=5),
        max_size=8,
    )
)
def test_rows_read_as_dicts_are_what_csv_dictreader_gives(lines):
    # blank lines, rows longer and shorter than the header, a header of any length
    from dlsched.traces.base import _as_dicts

    text = "\n".join(",".join(cells) for cells in lines) + "\n"
    expected = list(csv.DictReader(io.StringIO(text)))
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None) or []
    assert list(_as_dicts(reader, header)) == expected


def test_a_cell_over_the_csv_limit_is_an_error_naming_where(tmp_path):
    # a job id of 200,000 characters: csv's own error escaped as a traceback
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,submit_time_s,num_gpus,duration_s\na,0,1,5\n" + "j" * 200_000 + ",0,1,5\n"
    )
    with pytest.raises(SpecError, match="cannot be read as CSV at line 3: field larger") as e:
        load_trace(str(path))
    assert e.value.field == "trace"


def test_a_long_value_is_quoted_cut_in_the_error_and_long_names_are_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,1," + "9" * 5000 + "\n")
    with pytest.raises(SpecError) as e:
        load_trace(str(path))
    assert "'999" in str(e.value) and "...' (5,000 characters)" in str(e.value)
    assert len(str(e.value)) < 300  # it quoted all 5,000 characters
    path.write_text("job_id,submit_time_s,num_gpus,duration_s\n" + "j" * 257 + ",0,1,5\n")
    with pytest.raises(SpecError, match="1..256 characters") as e:
        load_trace(str(path))
    assert e.value.field == "job_id"


@pytest.mark.parametrize("app", ["", "..", "../cifar10", "x" * 300, "scaling_fits.json"])
def test_a_pollux_application_that_was_not_measured_is_refused_before_it_is_a_path(tmp_path, app):
    # It named a folder: an empty one read the measurements' root (IndexError), one too long
    # for a file name raised OSError, and a relative path could reach any folder.
    path = tmp_path / "w.csv"
    path.write_text(f"name,time,application,num_replicas,batch_size\nj,0,{app},1,128\n")
    with pytest.raises(SpecError) as err:
        load_trace(str(path), fmt="pollux")
    assert err.value.field == "application" and err.value.row == 1


# Every format's columns (the required ones, some optional) and cells to fill them with: empty,
# not numbers, not finite, huge, fractional, dates, names of models and states, placements.
FORMAT_COLUMNS = {
    "philly": "timestamp duration num_gpus cluster status",
    "muri": "job_id num_gpu submit_time iterations model_name batch_size duration interval",
    "pollux": "name time application num_replicas batch_size",
    "openb": "name cpu_milli memory_mib num_gpu gpu_milli gpu_spec qos pod_phase creation_time "
    "deletion_time scheduled_time",
    "history": "job_id tenant submit_s gpus batch_size iterations iteration_s startup_s restart_s "
    "model priority min_gpus max_gpus deadline_s status slowdown placements fixed_mib "
    "per_sample_mib c0_s c1_s local_batch",
    "dlsched": "job_id submit_time_s duration_s num_gpus tenant model batch_size priority "
    "deadline_s",
}
CELLS = "0 1 2 -1 8 1.5 nan inf 1e400 1e308 abc .. 0x10 1_000 1e-320 cifar10 bert imagenet yolov3"
CELLS = [*CELLS.split(), *"Pass Failed LS V100 1/1/64/0.1 a/b/c/d".split()]
CELLS += ["", " 4 ", "9" * 30, "x" * 300, "2017-10-03 14:27:02"]


@settings(max_examples=examples(150), deadline=None)
@given(st.sampled_from(sorted(FORMAT_COLUMNS)), st.data())
def test_any_csv_in_any_format_loads_or_is_refused_naming_a_field(fmt, data):
    columns = FORMAT_COLUMNS[fmt].split()
    kept = [c for c in columns if c not in data.draw(st.sets(st.sampled_from(columns), max_size=1))]
    rows = data.draw(
        st.lists(
            st.lists(st.sampled_from(CELLS), min_size=len(kept), max_size=len(kept)), max_size=5
        )
    )
    text = io.StringIO()
    csv.writer(text).writerows([kept, *rows])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_text(text.getvalue())
        for skip_invalid in (False, True):
            try:
                trace = load_trace(str(path), fmt=fmt, skip_invalid=skip_invalid)
            except SpecError as err:  # (nothing else: no IndexError, OSError, OverflowError...)
                assert err.field
                continue
            assert len(trace.jobs) + trace.dropped_total == trace.rows == len(rows)


def test_a_duplicate_job_id_names_its_row_or_is_skipped_keeping_the_first(tmp_path):
    path = tmp_path / "dups.csv"
    path.write_text(
        "job_id,submit_time_s,num_gpus,duration_s\na,0,1,100\nb,5,1,100\na,10,2,300\nc,20,1,50\n"
    )
    with pytest.raises(SpecError) as e:
        load_trace(str(path))
    assert e.value.field == "job_id" and e.value.row == 3
    assert "duplicate job id 'a', first on row 1" in str(e.value)
    t = load_trace(str(path), skip_invalid=True)
    assert [(j.job_id, j.num_gpus) for j in t.jobs] == [("a", 1), ("b", 1), ("c", 1)]
    assert t.dropped == {"invalid job_id": 1} and t.rows == 4


def test_a_row_with_more_or_fewer_values_than_columns_is_named_or_skipped(tmp_path):
    # csv.DictReader kept a row's excess values aside and filled missing ones with nothing: a
    # row shifted by a stray comma was read as if whole
    path = tmp_path / "shifted.csv"
    path.write_text(
        "job_id,submit_time_s,num_gpus,duration_s,tenant\n"
        "a,0,1,100,x\nb,5,1,100,x,y\nc,10,2,300\nd,20,1,50,z\n"
    )
    with pytest.raises(SpecError) as e:
        load_trace(str(path))
    assert e.value.field == "columns" and e.value.row == 2
    assert "6 values for the header's 5 columns" in str(e.value)
    t = load_trace(str(path), skip_invalid=True)
    assert [j.job_id for j in t.jobs] == ["a", "d"]
    assert t.dropped == {"invalid columns": 2} and t.rows == 4
    events = tmp_path / "events.csv"
    events.write_text("time_s,kind,node\n10,down,0\n20,up\n")
    with pytest.raises(SpecError, match="2 values for the header's 3 columns") as e:
        read_node_events(events)
    assert e.value.field == "columns" and e.value.row == 2
