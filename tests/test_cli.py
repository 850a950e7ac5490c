"""The command line, end to end, on small bundled or generated inputs."""

import contextlib
import io
import json
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.cli import main
from example_counts import examples

SUMMARY_KEYS = {
    "jobs",
    "jobs_completed",
    "mean_jct_s",
    "p99_jct_s",
    "mean_queue_s",
    "makespan_s",
    "gpu_utilization",
}


def test_simulate_writes_summary_jobs_and_timeseries(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "simulate",
                "--trace",
                "muri-3",
                "--cluster",
                "4x8:V100",
                "--policy",
                "tiresias",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["jobs"] == summary["jobs_completed"] == 992
    assert 0 < summary["gpu_utilization"] <= 1
    assert summary["tenants"]["default"]["jobs"] == 992
    lines = (out / "jobs.csv").read_text().splitlines()
    assert len(lines) == 993 and lines[0].startswith("job_id,tenant")
    assert (out / "timeseries.csv").read_text().startswith("time_s,queue_mean")
    assert "tiresias" in capsys.readouterr().out


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [False, True])
def test_a_progress_bar_only_on_a_terminal(tmp_path, capsys, monkeypatch, terminal):
    """In a log or a pipe (CI, ``make demo > log``) a bar is lines of control characters."""
    stderr = _Terminal()
    if terminal:
        monkeypatch.setattr(sys, "stderr", stderr)
    args = ["simulate", "--trace", "muri-3", "--cluster", "4x8:V100", "--policy", "fifo"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    written = stderr.getvalue() if terminal else capsys.readouterr().err
    assert ("fifo:" in written and "job" in written) is terminal, written


def test_simulate_is_deterministic_byte_for_byte(tmp_path):
    args = [
        "simulate",
        "--trace",
        "synthetic",
        "--trace-param",
        "num_jobs=300;load=1.2",
        "--cluster",
        "4x4",
        "--policy",
        "srtf",
        "--seed",
        "7",
        "--no-progress",
    ]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    assert main(args + ["--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "jobs.csv").read_bytes() == (tmp_path / "b" / "jobs.csv").read_bytes()
    assert main(args[:-3] + ["--seed", "8", "--no-progress", "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "a" / "jobs.csv").read_bytes() != (tmp_path / "c" / "jobs.csv").read_bytes()


@pytest.mark.parametrize(
    "args, message",
    [
        # a traceback: no folder for comparison.json
        (["compare", "--policies", ","], "field 'policies': name at least one policy"),
        # a traceback: two runs writing one folder at once
        (["compare", "--policies", "fifo,sjf,fifo"], "field 'policies': 'fifo' is named twice"),
        (["report", "{tmp}/nowhere"], "field 'dir': no such folder"),  # a traceback
    ],
)
def test_bad_compare_and_report_arguments_get_a_clear_error(tmp_path, capsys, args, message):
    workload = ["--trace", "muri-3", "--cluster", "4x8", "--no-progress", "--out", str(tmp_path)]
    args = [a.format(tmp=tmp_path) for a in args] + (workload if args[0] == "compare" else [])
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "fifo").exists()  # nothing ran


def test_compare_prints_a_table_and_writes_a_report(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--trace",
                "pollux-1",
                "--cluster",
                "4x8",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    for name in ("fifo", "sjf", "srtf", "tiresias", "sjf-ffs", "sjf-bsbf"):
        assert name in text
        assert (out / name / "summary.json").is_file()
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 5 and "JCT distribution" in page and "Performance model" in page
    assert len(json.loads((out / "comparison.json").read_text())) == 6
    # the report command renders the same folder again
    assert main(["report", str(out), "--out", str(tmp_path / "again.html")]) == 0
    again = (tmp_path / "again.html").read_text()
    assert again.count("<svg") == 5
    # the policies in the comparison's order (not the folders' names'): rows and colours
    ran = ("fifo", "sjf", "srtf", "tiresias", "sjf-ffs", "sjf-bsbf")
    rows = [again.index(f"<tr><th>{name}</th>") for name in ran]
    assert rows == sorted(rows)


@pytest.mark.parametrize(
    "file, content, reason",
    [
        ("summary.json", b"{cut", "JSONDecodeError"),
        ("summary.json", b"[1, 2]", "summary.json does not hold a summary"),
        ("jobs.csv", None, "No such file or directory"),
        ("jobs.csv", b"x\n1\n", "KeyError: 'jct_s'"),
        ("timeseries.csv", b"\xff\xfe", "UnicodeDecodeError"),
    ],
    ids=["summary-cut", "summary-a-list", "jobs-missing", "jobs-not-ours", "series-not-text"],
)
def test_report_names_a_run_folder_that_is_not_whole(tmp_path, capsys, file, content, reason):
    # each was a traceback
    run = tmp_path / "run"
    args = ["simulate", "--trace", "muri-3", "--cluster", "4x8", "--no-progress"]
    assert main([*args, "--out", str(run)]) == 0
    if content is None:
        (run / file).unlink()
    else:
        (run / file).write_bytes(content)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"field 'dir': {run} is not a whole simulation output (" in err and reason in err


def test_compare_in_forked_processes_writes_what_one_after_another_writes(tmp_path, capsys):
    """--jobs 2 runs the policies in two forked processes: each run's files, the comparison and
    the report are byte for byte those of the runs one after another (but the wall times)."""
    policies = ["fifo", "srtf", "tiresias", "sjf-bsbf"]
    args = ["compare", "--trace", "pollux-1", "--cluster", "4x8", "--no-progress"]
    args += ["--policies", ",".join(policies)]
    for jobs in ("1", "2"):
        assert main(args + ["--jobs", jobs, "--out", str(tmp_path / jobs)]) == 0

    def without_wall(path):
        data = json.loads(path.read_text())
        for summary in data if isinstance(data, list) else [data]:
            assert summary.pop("wall_s") > 0
        return data

    for name in policies:
        one, two = tmp_path / "1" / name, tmp_path / "2" / name
        files = sorted(p.name for p in one.iterdir())
        assert files == sorted(p.name for p in two.iterdir()) and "jobs.csv" in files
        for file in files:
            if file == "summary.json":
                assert without_wall(one / file) == without_wall(two / file)
            else:
                assert (one / file).read_bytes() == (two / file).read_bytes(), (name, file)
    one, two = tmp_path / "1" / "comparison.json", tmp_path / "2" / "comparison.json"
    assert without_wall(one) == without_wall(two)
    # the page (which shows the wall times) is the same page whenever it is rendered: its SVGs
    # carry no date and no random ids
    for page in ("a.html", "b.html"):
        assert main(["report", str(tmp_path / "1"), "--out", str(tmp_path / page)]) == 0
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()


def test_an_error_in_a_forked_run_is_the_command_s_error(tmp_path, capsys):
    args = ["compare", "--trace", "pollux-1", "--cluster", "4x8", "--no-progress"]
    args += ["--policies", "fifo,genie", "--jobs", "2"]
    # a run refuses an option that does nothing as it simulates: in the forked process
    assert main(args + ["--hard-quotas", "--deadlines", "--out", str(tmp_path / "out")]) == 2
    assert "field 'hard_quotas': does nothing without quotas" in capsys.readouterr().err
    # an option a policy lacks, and deadlines it needs, are refused before any run starts
    # (GENIE's refusal of a workload without deadlines came after fifo's whole run)
    assert main(args + ["--scan", "greedy", "--out", str(tmp_path / "scan")]) == 2
    assert "policy 'genie' has no scan" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "deadlines")]) == 2
    assert "field 'deadlines': policy 'genie' schedules by deadlines" in capsys.readouterr().err
    assert not (tmp_path / "scan").exists() and not (tmp_path / "deadlines").exists()
    assert main(args[:-1] + ["0", "--out", str(tmp_path / "out")]) == 2
    assert "field 'jobs': must be at least 1" in capsys.readouterr().err


def test_job_larger_than_the_cluster_stops_before_simulating(tmp_path, capsys):
    code = main(
        [
            "simulate",
            "--trace",
            "philly",
            "--cluster",
            "2x8",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "num_gpus" in err and "asks for" in err
    assert not (tmp_path / "x").exists()


def test_skip_invalid_counts_what_it_dropped(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,100,1,100,a\n"
        "2017-10-01 00:00:10,-1,1,100,a\n2017-10-01 00:00:20,50,64,100,b\n"
    )
    out = tmp_path / "o"
    assert (
        main(
            [
                "simulate",
                "--trace",
                str(trace),
                "--cluster",
                "1x8",
                "--skip-invalid",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["jobs"] == 1
    assert summary["dropped"] == {"invalid duration_s": 1, "larger than the cluster": 1}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trace", "nope"], "neither a bundled trace"),
        (["--trace", "muri-3", "--policy", "lottery"], "unknown policy 'lottery'"),
        (["--trace", "muri-3", "--cluster", "8y8"], "cannot parse '8y8'"),
        (["--trace", "muri-3", "--param", "thresholds_gpu_s=-4"], "field 'thresholds_gpu_s'"),
        # a queue whose threshold is nan or inf: taken
        *(
            (["--trace", "muri-3", "--param", f"thresholds_gpu_s={t}"], "increasing finite")
            for t in ("nan", "3600,1e400")
        ),
        (["--trace", "muri-3", "--param", "colour=red"], "has no parameter 'colour'"),
        # a built-in policy's own check, or its int(), was a traceback
        (
            ["--trace", "muri-3", "--policy", "sjf-bsbf", "--param", "max_accumulation=0"],
            "field 'param': policy 'sjf-bsbf' refused max_accumulation=0: max_accumulation must",
        ),
        (
            ["--trace", "muri-3", "--policy", "elastic-fifo", "--param", "shrink_when_waiting=x"],
            "field 'param': policy 'elastic-fifo' refused shrink_when_waiting='x'",
        ),
        # options that would do nothing (issue 25, 14): each named, nothing simulated
        (["--trace", "muri-3", "--hard-quotas"], "field 'hard_quotas': does nothing without"),
        (
            ["--trace", "muri-3", "--cluster", "4x8", "--inference-demand", "genai"],
            "--inference-demand does nothing: the cluster has no inference pool",
        ),
        (
            ["--trace", "muri-3", "--cluster", "4x8", "--reclaim-notice-s", "60"],
            "--reclaim-notice-s does nothing",
        ),
        (["--trace", "muri-3", "--cluster", "4x8", "--peak-share", "0.5"], "--peak-share does"),
        (
            ["--trace", "muri-3", "--policy", "genie", "--scan", "strict"],
            "field 'scan': policy 'genie' has no scan: --scan does nothing",
        ),
        # a seed that draws nothing: no model (muri-3 names its jobs'), elastic job or deadline
        (["--trace", "muri-3", "--seed", "3"], "field 'seed': --seed does nothing"),
        (["--trace", "philly", "--no-perf", "--seed", "3"], "field 'seed': --seed does nothing"),
        # a slice took -5 as "all but the last five" and 0 as no job at all
        (["--trace", "muri-3", "--limit", "-5"], "field 'limit': must be an integer >= 1"),
        (["--trace", "muri-3", "--limit", "0"], "field 'limit': must be an integer >= 1"),
        # options a trace had no use for were dropped in silence
        (
            ["--trace", "muri-3", "--trace-param", "num_jobs=5"],
            "field 'trace_param': --trace-param sets the synthetic trace's; 'muri-3' takes none",
        ),
        (
            ["--trace", "muri-3", "--map", "submit=ts"],
            "field 'mapping': --map names a CSV file's columns: 'muri-3' has its own reader",
        ),
        (["--trace", "synthetic", "--map", "submit=ts"], "field 'mapping': --map names"),
        # a TypeError's traceback
        (
            ["--trace", "synthetic", "--trace-param", "foo=1"],
            "field 'trace_param': the synthetic trace has no parameter 'foo' (it takes num_jobs",
        ),
        # issue 25, 3: without deadlines GENIE ran silently as arrival order, shrunk to what is
        # idle, and EDF as FIFO
        *(
            (
                ["--trace", "muri-3", "--policy", p],
                f"field 'deadlines': policy '{p}' schedules by deadlines and no job",
            )
            for p in ("genie", "edf")
        ),
        # quotas for other tenants: every job under the default quota (borrowing everything
        # under philly-vc, nothing under a file without cohorts)
        (
            ["--trace", "muri-3", "--quotas", "philly-vc"],
            "field 'quotas': philly-vc names none of this workload's tenants (default)",
        ),
        # an elastic policy without elastic jobs ran as its order alone, and Aryl without an
        # inference pool as aryl-no-loan, under their own names
        *(
            (
                ["--trace", "muri-3", "--policy", p],
                f"field 'elastic_fraction': policy '{p}' resizes elastic jobs and no job of this "
                "workload is elastic",
            )
            for p in ("elastic-tiresias", "elastic-fifo", "aryl", "aryl-no-loan")
        ),
        *(
            (
                ["--trace", "muri-3", "--policy", p, "--no-perf"],
                f"field 'perf': policy '{p}' shares GPUs and this run has no performance model",
            )
            for p in ("sjf-ffs", "sjf-bsbf")
        ),
        (
            [
                "--trace",
                "muri-3",
                "--policy",
                "elastic-fifo",
                "--elastic-fraction",
                "1",
                "--no-perf",
            ],
            "field 'perf': policy 'elastic-fifo' resizes elastic jobs and this run has no "
            "performance model",
        ),
        *(
            (
                ["--trace", "muri-3", "--policy", p],
                f"field 'tenant': policy '{p}' shares the GPUs between tenants and this workload "
                "has one",
            )
            for p in ("drf", "ftf")
        ),
        (
            ["--trace", "muri-3", "--policy", "aryl", "--elastic-fraction", "0.5"],
            "field 'cluster': policy 'aryl' borrows idle inference servers and the cluster has "
            "none",
        ),
    ],
)
def test_bad_arguments_get_a_clear_error(tmp_path, capsys, args, message):
    policy = [] if "--policy" in args else ["--policy", "tiresias"]
    assert main(["simulate", *args, *policy, "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_traces_and_policies_listings(capsys):
    assert main(["policies"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("fifo", "sjf", "srtf", "tiresias"))
    assert main(["traces"]) == 0
    listing = capsys.readouterr().out
    assert "82,247" in listing and "muri-2" in listing and "1,494" in listing


def test_console_script_help():
    out = subprocess.run(
        [sys.executable, "-m", "dlsched.cli", "simulate", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--trace" in out and "--restart-overhead-s" in out


def test_gpu_type_constraints_are_honoured_end_to_end(tmp_path):
    out = tmp_path / "o"
    # a cluster with only some of the openb GPU types: pods that can use none of them are
    # dropped (and counted) with --skip-invalid; the rest all finish. Nobody measured the T4:
    # its speed is given (0.5 of a V100, a chosen value)
    assert (
        main(
            [
                "simulate",
                "--trace",
                "openb-gpuspec",
                "--cluster",
                "40x8:V100M16,40x8:T4*0.5",
                "--policy",
                "fifo",
                "--backfill",
                "--skip-invalid",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dropped"]["larger than the cluster"] > 0
    assert summary["jobs_completed"] == summary["jobs"]


def test_perf_show_prints_the_curve_memory_and_gpu_types(capsys):
    assert main(["perf", "show", "resnet18"]) == 0
    out = capsys.readouterr().out
    assert "samples/s" in out and "speed-up" in out
    assert "MiB per sample" in out and "b128: 6432" in out  # the measured footprint
    assert "K80" in out
    assert main(["perf", "show", "alexnet"]) == 2
    assert "no performance profile for 'alexnet'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, message",
    [
        (["--gpus-per-node", "0"], "field 'gpus_per_node': must be an integer in 1.."),  # was 1/0
        (["--batch", "nan"], "field 'batch': must be a finite number > 0"),  # a table of nan
        (["--batch", "0"], "field 'batch'"),  # the default batch, in silence
        (["--max-gpus", "0"], "field 'max_gpus'"),  # an empty table
    ],
)
def test_perf_show_refuses_what_it_cannot_show(capsys, option, message):
    assert main(["perf", "show", "resnet18", *option]) == 2
    assert message in capsys.readouterr().err


def test_a_reader_that_goes_away_gets_no_traceback():
    # ``dlsched ... | head``: the first write after the reader closed raised BrokenPipeError
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlsched.cli", "perf", "show", "resnet18"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # before the command writes anything
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and b"Traceback" not in err, err.decode()


@pytest.mark.parametrize(
    "server, message",
    [
        ("http://[::1", "field 'server': 'http://[::1' is not a URL"),  # an InvalidURL traceback
        ("ftp://127.0.0.1:1", "is not an http:// or https:// URL"),
        ("127.0.0.1:8000", "is not an http:// or https:// URL"),
        ("http://127.0.0.1:1", "cannot reach the server"),  # a URL: asked, and no answer
    ],
)
def test_a_client_command_names_a_server_address_it_cannot_use(capsys, server, message):
    assert main(["jobs", "--server", server, "--token", "t"]) in (2, 4)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, message",
    [
        (
            ["--port", "70000"],
            "field 'port': must be an integer in 0..65,535",
        ),  # bind()'s traceback
        (["--gpus-per-node", "100000"], "field 'gpus-per-node'"),  # the raylet's argv overflowed
        (["--nodes", "0"], "field 'nodes'"),  # refused only once Ray was up
        (["--interval-s", "0"], "field 'interval-s': must be a number in [0.01, 1e+10]"),  # spun
        (["--checkpoint-retention-h", "nan"], "field 'checkpoint-retention-h'"),  # taken
        # finite, and taken: a loaned server's notice, or a retention, past any time
        (["--checkpoint-retention-h", "1e308"], "field 'checkpoint-retention-h'"),
        (
            ["--inference-nodes", "1", "--reclaim-notice-s", "1e308"],
            "field 'reclaim-notice-s': must be a number in [0,",
        ),
        # no inference server to reclaim: it did nothing, in silence
        (["--reclaim-notice-s", "60"], "field 'reclaim-notice-s': --reclaim-notice-s is a"),
        (["--finished-kept-per-tenant", "0"], "field 'finished-kept-per-tenant'"),
        # beside --trust-tenants (which these tests give) it bounded nothing, in silence (its
        # own bound: tests/test_server_setup.py)
        (["--job-memory-mib", "512"], "field 'job-memory-mib': --job-memory-mib bounds an"),
        # these two were refused only once Ray was up
        (["--job-retention-days", "nan"], "field 'job-retention-days': must be a finite"),
        (["--policy", "tiresias", "--param", "thresholds_gpu_s=x"], "field 'thresholds_gpu_s'"),
        # the embedded cluster's shape beside an attached cluster was dropped in silence
        *(
            (
                ["--ray-address", "127.0.0.1:1", f"--{name}", "1"],
                f"field '{name}': --{name} shapes the embedded cluster",
            )
            for name in ("nodes", "gpus-per-node", "inference-nodes")
        ),
    ],
)
def test_a_server_option_out_of_bounds_stops_it_before_anything_starts(
    tmp_path, capsys, option, message
):
    data = tmp_path / "data"
    assert main(["server", "--data-dir", str(data), "--trust-tenants", *option]) == 2
    assert message in capsys.readouterr().err
    assert not data.exists()


@pytest.mark.parametrize(
    "command, option, message",
    [
        ("simulate", ["--out", "{file}"], "field 'out': cannot make the folder {file}: {file} is"),
        ("simulate", ["--out", "{file}/run"], "field 'out': cannot make the folder {file}/run:"),
        ("compare", ["--out", "{file}", "--policies", "fifo"], "field 'out'"),
        ("simulate", ["--cache-dir", "{file}"], "field 'cache_dir': cannot keep prepared"),
        # the kernel's own file systems: root may write anywhere else (a traceback at the end)
        ("simulate", ["--out", "/proc/dlsched-out"], "field 'out': cannot make the folder /proc"),
        ("compare", ["--out", "/sys/a/b", "--policies", "fifo"], "folder /sys/a/b or write in"),
    ],
)
def test_an_unusable_output_or_cache_folder_is_named_before_any_work(
    tmp_path, capsys, command, option, message
):
    # each was a traceback at the first write, after the simulation had run
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    option = [o.format(file=a_file) for o in option]
    args = [command, "--trace", "muri-3", "--cluster", "4x8", "--no-progress"]
    if "--out" not in option:
        option += ["--out", str(tmp_path / "out")]
    assert main(args + option) == 2
    assert message.format(file=a_file) in capsys.readouterr().err


def test_a_disk_that_fills_up_while_outputs_are_written_is_an_error_not_a_traceback(
    tmp_path, capsys, monkeypatch
):
    import errno

    import dlsched.metrics

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(dlsched.metrics, "_write_csv", full)
    args = ["simulate", "--trace", "muri-3", "--cluster", "4x8", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 1
    assert "dlsched: error: [Errno 28] No space left on device" in capsys.readouterr().err


def test_perf_validate_prints_errors_per_model_and_point(capsys):
    assert main(["perf", "validate", "--model", "bert", "--points"]) == 0
    out = capsys.readouterr().out
    assert out.count("bert nodes=") == 720
    assert "held-out" in out and "External check" in out
    # the external check was every model's whatever --model named
    external = out.split("External check")[1]
    assert "bert " in external and "cifar10" not in external and "(3 points)" in external
    # and a model Gavel has no job type of: a StatisticsError's traceback
    assert main(["perf", "validate", "--model", "ncf"]) == 0
    assert "Gavel measured no job type ncf maps to" in capsys.readouterr().out


def test_no_perf_runs_jobs_at_trace_speed(tmp_path):
    base = [
        "simulate",
        "--trace",
        "muri-3",
        "--cluster",
        "4x8",
        "--policy",
        "fifo",
        "--no-progress",
    ]
    assert main(base + ["--out", str(tmp_path / "a")]) == 0
    assert main(base + ["--no-perf", "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert a["performance_model"] and not b["performance_model"]
    # spread multi-GPU jobs run slower under the model: more GPU time for the same work
    assert a["job_gpu_time_s"] > b["job_gpu_time_s"]


@pytest.mark.parametrize(
    "args, placement", [([], "consolidated"), (["--placement", "spread"], "spread")]
)
def test_a_consolidated_variant_keeps_its_placement_unless_told(tmp_path, args, placement):
    # the CLI used to pass its own default (best-fit) to every policy, so the -consolidated
    # variants ran best-fit
    out = tmp_path / "o"
    assert (
        main(
            [
                "simulate",
                "--trace",
                "muri-3",
                "--cluster",
                "8x8",
                "--policy",
                "sjf-bsbf-consolidated",
                "--limit",
                "50",
                "--out",
                str(out),
                "--no-progress",
            ]
            + args
        )
        == 0
    )
    assert json.loads((out / "summary.json").read_text())["params"]["placement"] == placement


def test_events_and_logs_print_a_tenant_s_control_characters_escaped(monkeypatch, capsys):
    # issue 29: a job's events and log are its tenant's bytes; printed raw, they drive the
    # terminal of whoever reads them (retitle the window, erase lines)
    import argparse

    from dlsched.runtime import client

    class Reply:
        text = "log \x1b[31mred\x1b[0m\n"

        def json(self):
            message = "boom\x1b]0;pwned\x07\r\x1b[2Koops\n\tat line 2"
            return {
                "id": "job-1",
                "status": "failed",
                "events": [{"t": 0.0, "status": "failed", "message": message}],
            }

    monkeypatch.setattr(client, "_call", lambda *args, **kwargs: Reply())
    client.cmd_events(argparse.Namespace(id="job-1"))
    client.cmd_logs(argparse.Namespace(id="job-1"))
    out = capsys.readouterr().out
    assert not set(out) & {"\x1b", "\x07", "\r"}
    assert "boom\\x1b]0;pwned\\x07\\x0d\\x1b[2Koops" in out and "\tat line 2" in out
    assert "log \\x1b[31mred\\x1b[0m" in out


def test_jobs_that_never_ran_are_counted_shown_and_named(tmp_path, capsys):
    # issue 25, 11: with hard quotas of 2 GPUs each, a's 3-GPU job can never run. It is not in
    # the JCTs; the summary counts it, the table has a column for it, a note names the tenant.
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit,gpus,duration,tenant\na1,0,1,100,a\na2,0,3,100,a\nb1,0,2,50,b\n")
    out = tmp_path / "run"
    args = ["simulate", "--trace", str(trace), "--format", "generic", "--cluster", "1x4"]
    args += ["--map", "id=id,submit=submit,gpus=gpus,duration=duration,tenant=tenant"]
    args += ["--policy", "fifo", "--scan", "backfill", "--quotas", "equal", "--hard-quotas"]
    assert main([*args, "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["jobs"], summary["jobs_completed"], summary["never_started"]) == (3, 2, 1)
    assert summary["mean_jct_s"] == 75.0  # a1 and b1 only
    printed = capsys.readouterr().out
    assert "never ran" in printed.splitlines()[0]
    assert (
        "note: 1 jobs never ran and are not in the JCTs; by tenant: a 1 (quota 2 GPUs)" in printed
    )


def test_outputs_are_strict_json_when_a_mean_is_over_no_jobs(tmp_path):
    # with hard quotas of 2 GPUs each, neither 3-GPU job can ever run: no JCT has a mean. JSON
    # has no NaN (Python wrote one, which JavaScript's and most parsers refuse): it is null.
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit,gpus,duration,tenant\na1,0,3,100,a\nb1,0,3,100,b\n")
    out = tmp_path / "cmp"
    args = ["compare", "--trace", str(trace), "--format", "generic", "--cluster", "1x4"]
    args += ["--map", "id=id,submit=submit,gpus=gpus,duration=duration,tenant=tenant"]
    args += ["--policies", "fifo,sjf", "--quotas", "equal", "--hard-quotas"]
    assert main([*args, "--out", str(out), "--no-progress"]) == 0

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    [fifo, _] = json.loads((out / "comparison.json").read_text(), parse_constant=refuse)
    assert fifo["jobs_completed"] == 0 and fifo["mean_jct_s"] is None
    summary = json.loads((out / "fifo" / "summary.json").read_text(), parse_constant=refuse)
    assert summary["never_started"] == 2 and summary["tenants"]["a"]["mean_jct_s"] is None
    assert "no job finished" in (out / "report.html").read_text()  # the JCT plot says so


@pytest.mark.parametrize(
    "rows, extra, reason",
    [
        ("", [], "has no jobs to run"),
        ("a,0,1,x\n", ["--skip-invalid"], "has no jobs to run (1 rows dropped: {'invalid"),
    ],
    ids=["header-only", "every-row-dropped"],
)
def test_a_trace_without_jobs_is_refused_naming_what_was_dropped(
    tmp_path, capsys, rows, extra, reason
):
    # it ran "0 jobs" with exit status 0 and a summary of blanks
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit,gpus,duration\n" + rows)
    args = ["simulate", "--trace", str(trace), "--format", "generic", "--cluster", "1x4"]
    args += ["--map", "id=id,submit=submit,gpus=gpus,duration=duration", *extra]
    assert main([*args, "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert f"field 'trace': {reason}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_prepared_workload_is_cached_reused_rebuilt_when_corrupt_and_missed_when_inputs_change(
    tmp_path, monkeypatch
):
    # issue 26, 2: the second run of the same trace and options skips preparing it
    import dlsched.prepare

    cache = tmp_path / "cache"
    trace = tmp_path / "t.csv"
    trace.write_text("id,submit,gpus,duration\na,0,1,100\nb,10,2,50\n")
    argv = ["simulate", "--trace", str(trace), "--format", "generic", "--cluster", "1x2"]
    argv += ["--map", "id=id,submit=submit,gpus=gpus,duration=duration", "--policy", "fifo"]

    def simulate(out: str, *extra: str) -> None:
        assert main([*argv, "--out", str(tmp_path / out), "--no-progress", *extra]) == 0

    simulate("first", "--cache-dir", str(cache))
    [entry] = (cache / "workloads").iterdir()
    prepared = dlsched.prepare._prepare

    def refuse(*a, **kw):
        raise AssertionError("prepared again")

    monkeypatch.setattr(dlsched.prepare, "_prepare", refuse)
    simulate("second", "--cache-dir", str(cache))  # from the cache: _prepare not called
    first, second = ((tmp_path / o / "jobs.csv").read_text() for o in ("first", "second"))
    assert first == second
    monkeypatch.setattr(dlsched.prepare, "_prepare", prepared)
    entry.write_bytes(entry.read_bytes()[:-10] + b"tampered!!")  # corrupt: rebuilt, not read
    simulate("third", "--cache-dir", str(cache))
    assert (tmp_path / "third" / "jobs.csv").read_text() == first
    assert len(list((cache / "workloads").iterdir())) == 1
    monkeypatch.setattr(dlsched.prepare, "_prepare", refuse)
    simulate("fourth", "--cache-dir", str(cache))  # the rebuilt entry is whole again
    monkeypatch.setattr(dlsched.prepare, "_prepare", prepared)
    trace.write_text("id,submit,gpus,duration\na,0,1,100\nb,10,2,60\n")
    simulate("changed", "--cache-dir", str(cache))  # the trace's contents changed: a miss
    assert len(list((cache / "workloads").iterdir())) == 2
    simulate("seed", "--cache-dir", str(cache), "--seed", "3")  # an option changed: a miss
    assert len(list((cache / "workloads").iterdir())) == 3
    simulate("none", "--cache-dir", str(cache / "unused"), "--no-cache")
    assert not (cache / "unused").exists()


def test_a_cached_workload_reads_back_equal_job_for_job():
    # the cache stores jobs as columns (numbers in arrays): every field survives, None and
    # tuples included (elastic ranges, deadlines and classes, GPU types)
    import pickle
    from dataclasses import replace

    from dlsched.prepare import prepare

    workload = prepare("muri-3", "16x8:V100", elastic_fraction=0.5, deadlines=True)
    jobs = [*workload.jobs[:5], replace(workload.jobs[5], gpu_types=("V100",), priority=2)]
    workload.jobs = jobs
    back = pickle.loads(pickle.dumps(workload))
    assert back.jobs == jobs and back.cluster == workload.cluster
    # (read back without validating again: each field as it was written, ints and floats kept)
    assert [repr(j) for j in back.jobs] == [repr(j) for j in jobs]
    assert [hash(j) for j in back.jobs] == [hash(j) for j in jobs]
    assert any(j.elastic for j in jobs) and any(j.deadline_s is not None for j in jobs)
    workload.jobs = []
    assert pickle.loads(pickle.dumps(workload)).jobs == []


def test_specs_from_columns_refuse_columns_of_unequal_lengths():
    from dlsched.jobs import JOB_SPEC_FIELDS, JobSpec, specs_from_columns

    spec = JobSpec("j1", 0.0, 1, 10.0)
    columns = [[getattr(spec, name)] * 2 for name in JOB_SPEC_FIELDS]
    assert specs_from_columns(columns) == [spec, spec]
    columns[3] = [10.0]
    with pytest.raises(ValueError, match="'duration_s' has 1 values, not 2"):
        specs_from_columns(columns)


def listed_job(jid: str, **fields) -> dict:
    """A job as the API lists it, running on one GPU unless ``fields`` say otherwise."""
    return {
        "id": jid,
        "tenant_id": "alice",
        "status": "running",
        "gpus": [["n0", 0]],
        "spec": {"gpus": 1, "iterations": 1000},
        "iteration": 200,
        "iteration_s": None,
        "preemptions": 0,
        "failures": 0,
        "submitted": 0.0,
        **fields,
    }


def jobs_table(monkeypatch, capsys, jobs: list[dict]) -> tuple[str, dict[str, str]]:
    """``dlsched jobs`` over ``jobs`` as the server's answer: its header and each job's row."""
    import argparse

    from dlsched.runtime import client

    class Reply:
        def json(self):
            return jobs

    monkeypatch.setattr(client, "_call", lambda *args, **kwargs: Reply())
    client.cmd_jobs(argparse.Namespace())
    header, _, *lines = capsys.readouterr().out.splitlines()
    return header, {line.split()[0]: line for line in lines}


def test_jobs_shows_the_gpus_a_job_runs_on_beside_those_it_asked_for(monkeypatch, capsys):
    # GENIE ran a 4-GPU job on 1; a preempted job keeps its last placement in the store but
    # holds nothing while it waits
    def job(jid, status, gpus, asked):
        spec = {"gpus": asked, "iterations": 10}
        return listed_job(jid, status=status, gpus=gpus, spec=spec, iteration=0)

    jobs = [
        job("job-1", "running", [["n1", 1]], 4),
        job("job-2", "queued", [["n0", 0], ["n0", 1]], 4),
        job("job-3", "done", [["n0", 0], ["n0", 1]], 2),
    ]
    _, rows = jobs_table(monkeypatch, capsys, jobs)
    assert " 1 (asked 4) " in rows["job-1"]
    assert " 4 " in rows["job-2"] and "asked" not in rows["job-2"]
    assert " 2 " in rows["job-3"] and "asked" not in rows["job-3"]


def test_jobs_shows_the_iteration_time_the_server_measured_not_the_program_s(monkeypatch, capsys):
    # the program says 10 ms an iteration; the server's clock gave 500 ms (before, the column
    # was the program's claim)
    jobs = [
        listed_job("job-1", iteration_s=0.01, measured_iteration_s=0.5),
        listed_job("job-2", iteration_s=0.01, measured_iteration_s=None),
    ]
    header, rows = jobs_table(monkeypatch, capsys, jobs)
    column = header.split().index("ms/it")
    assert rows["job-1"].split()[column] == "500" and rows["job-2"].split()[column] == "-"


def test_jobs_shows_a_predicted_end_that_has_passed_as_overdue_and_judges_from_now(
    monkeypatch, capsys
):
    # a running job predicted to end 300 s ago (it runs slower than measured): it ends from now
    # on, so a deadline 100 s ago is missed ("late"), though the old prediction came before it
    # (before, "yes", and the end shown as "5.00 min ago" as if it had ended)
    now = time.time()

    def job(jid, predicted, deadline):
        return listed_job(jid, submitted=now - 3600, deadline=deadline, predicted_finish=predicted)

    jobs = [
        job("job-1", now - 300, now - 100),
        job("job-2", now - 300, now + 3600),
        job("job-3", now + 600, now + 3600),
    ]
    _, rows = jobs_table(monkeypatch, capsys, jobs)
    assert "overdue 5.00 min" in rows["job-1"] and rows["job-1"].split()[-1] == "late"
    assert "overdue 5.00 min" in rows["job-2"] and rows["job-2"].split()[-1] == "yes"
    assert "in 10.00 min" in rows["job-3"] and rows["job-3"].split()[-1] == "yes"


@pytest.mark.parametrize(
    "row, field",
    [
        ("j1,1e308,1,100", "submit_time_s"),
        ("j1,0,1,1e308", "duration_s"),
        ("j1,0,1,2e10", "duration_s"),
    ],
    ids=["submit", "duration", "past-the-bound"],
)
def test_a_trace_time_too_large_to_replay_is_refused_naming_its_field(tmp_path, capsys, row, field):
    # finite but near the largest float, it was accepted and overflowed the iteration count the
    # performance model derives from it: a traceback (OverflowError), not an error
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\n" + row + "\n")
    args = ["simulate", "--trace", str(trace), "--cluster", "1x8", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"row 1: field '{field}': must be a number" in err and "1e+10" in err, err
    assert not (tmp_path / "o").exists()


def test_a_trace_job_naming_a_model_without_a_profile_is_refused_when_read(tmp_path, capsys):
    # a job with its model and batch given was started as it was, and its speed asked of the
    # performance model failed the run at its first start as "policy fifo returned a malformed
    # plan"; with --skip-invalid it is dropped and counted like a bad row
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_time_s,num_gpus,duration_s,model,batch_size\n"
        "j1,0,1,100,resnet18,32\nj2,5,1,100,resnet50,32\n"
    )
    args = ["simulate", "--trace", str(trace), "--cluster", "1x8", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "field 'model': job 'j2': no performance profile for 'resnet50'" in err, err
    assert "policy" not in err and not (tmp_path / "o").exists()
    assert main([*args, "--out", str(tmp_path / "o"), "--skip-invalid"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["jobs"] == 1 and summary["dropped"] == {"no performance profile": 1}
    # without the performance model a model is only a name
    assert main([*args, "--out", str(tmp_path / "p"), "--no-perf"]) == 0


@pytest.mark.parametrize(
    "option, value, field, reason",
    [
        # a preempted job paused for ever: Tiresias then cycled, and the replay ended in an
        # error blaming the policy
        ("--restart-overhead-s", "1e308", "restart_overhead_s", "<= 1e+10"),
        ("--stop-resume-s", "inf", "stop_resume_s", "<= 1e+10"),  # was accepted
        ("--checkpoint-mib-s", "1e-300", "checkpoint_mib_s", ">= 0.001"),
        # t + interval == t: the replay stalled, blamed on the policy
        ("--schedule-interval-s", "1e-300", "schedule_interval_s", ">= 0.001"),
        ("--schedule-interval-s", "1e300", "schedule_interval_s", "<= 1e+10"),
        ("--stall-limit", "0", "stall_limit", ">= 1"),
        ("--stall-limit", "100000001", "stall_limit", "at most 100,000,000"),
    ],
)
def test_a_cost_or_interval_past_what_a_replay_can_hold_is_refused_naming_it(
    tmp_path, capsys, option, value, field, reason
):
    args = ["simulate", "--trace", "philly", "--limit", "20", "--cluster", "2x8", option, value]
    assert main([*args, "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"field '{field}': must be a" in err and reason in err, err


def test_the_stall_limit_is_the_command_line_s_and_its_error_names_it(tmp_path, capsys):
    # Two 1-GPU jobs of 100 s on one GPU, Tiresias with a 1 GPU-s queue and promotion after a
    # wait as long as the last run: they take turns every second, 204 events by the end, and
    # no job ends before 199 s. A limit of 50 passes stops the run at 51 s, as if it cycled:
    # the error says how to allow more; the default lets it end.
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,1,100\nb,0,1,100\n")
    args = ["simulate", "--trace", str(trace), "--cluster", "1x1", "--policy", "tiresias"]
    args += ["--param", "thresholds_gpu_s=1", "--param", "starvation_factor=1"]
    args += ["--restart-overhead-s", "0", "--no-perf", "--no-progress"]
    # (exit code 3: a policy error)
    assert main([*args, "--stall-limit", "50", "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err
    assert "50 scheduling passes without an arrival or a completion at t=51s" in err, err
    assert "raise stall_limit, --stall-limit" in err
    assert main([*args, "--out", str(tmp_path / "p")]) == 0
    assert json.loads((tmp_path / "p" / "summary.json").read_text())["events"] == 204


# -- every option with every other -----------------------------------------------------------
# a node's events in time order: each going down comes up, each taken out of service comes back
NODE_EVENTS = st.sampled_from(
    [
        [(100, "down"), (2000, "up")],
        [(50, "cordon"), (3000, "uncordon")],
        [(10, "drain"), (500, "uncordon"), (600, "down"), (700, "up")],
        [(0, "cordon"), (200, "down"), (300, "up"), (900, "uncordon")],
    ]
)


def _policies() -> list[str]:
    from dlsched.policies.catalog import POLICIES

    return sorted(POLICIES)


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_any_combination_of_options_runs_or_is_refused_naming_a_field(tmp_path, data):
    # the simulator's options composed at random on a small synthetic workload: a run ends
    # with its outputs, or exits 2 naming the field at fault; never a traceback, nor a plan
    # the state refuses (exit 3): a quota cut of a sharing start beside a partner did, with
    # elastic jobs and a schedule interval (found by a search of this kind, run longer)
    draw = data.draw
    cluster = draw(
        st.sampled_from(
            ["4x4:V100", "2x8:V100,2x4:K80", "3x4:V100,2x4:V100@inference", "2x2:P100,1x4:V100*2"]
        )
    )
    argv = ["simulate", "--trace", "synthetic", "--cluster", cluster, "--no-progress"]
    argv += ["--trace-param", f"num_jobs={draw(st.sampled_from([5, 40]))}"]
    argv += ["--trace-param", f"tenants={draw(st.sampled_from([1, 3]))}"]
    argv += ["--trace-param", f"load={draw(st.sampled_from([0.5, 2.0]))}"]
    argv += [
        "--seed",
        str(draw(st.integers(0, 99))),
        "--policy",
        draw(st.sampled_from(_policies())),
    ]
    optional = {
        "--scan": st.sampled_from(["strict", "backfill", "greedy"]),
        "--placement": st.sampled_from(["best-fit", "consolidated", "spread"]),
        "--elastic-fraction": st.sampled_from(["0.5", "1.0"]),
        "--quotas": st.just("equal"),
        "--checkpoint-interval-s": st.sampled_from(["10", "600"]),
        "--schedule-interval-s": st.sampled_from(["1", "60"]),
        "--restart-overhead-s": st.sampled_from(["0", "300"]),
        "--resize-mechanism": st.sampled_from(["background", "stop-resume"]),
    }
    if "@inference" in cluster:
        optional["--reclaim-notice-s"] = st.sampled_from(["0", "600"])
        optional["--inference-demand"] = st.sampled_from(["genai", "philly-nodes", "none"])
    for option, values in optional.items():
        if draw(st.booleans()):
            argv += [option, draw(values)]
    for flag in ("--deadlines", "--hard-quotas", "--no-perf"):
        if draw(st.booleans()):
            argv.append(flag)
    if draw(st.booleans()):  # nodes lost, taken out of service and back (node 1 on every cluster)
        events = [(t, kind, 1) for t, kind in draw(NODE_EVENTS)]
        path = tmp_path / "node_events.csv"
        path.write_text("time_s,kind,node\n" + "".join(f"{t},{k},{n}\n" for t, k, n in events))
        argv += ["--node-events", str(path)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([*argv, "--out", str(tmp_path / "o"), "--no-cache"])
    assert code == 0 or (code == 2 and "error: field '" in err.getvalue()), (code, err.getvalue())


@pytest.mark.parametrize(
    "argv, option",
    [
        (["server", "--nodes", "2", "--gpus", "8"], "--gpus 8"),  # was 8 per node: 16 GPUs
        (["simulate", "--trace", "muri-3", "--elastic", "0.5", "--out", "o"], "--elastic 0.5"),
        (["perf", "show", "cifar10", "--gpus", "4"], "--gpus 4"),
    ],
)
def test_an_option_is_known_by_its_whole_name_only(capsys, argv, option):
    # argparse took a prefix of one option as that option, silently (parsed only: a server
    # that started would serve until stopped)
    from dlsched.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2
    assert f"unrecognized arguments: {option}" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["usage"], ["export", "--out", "e.csv"]])
def test_a_bad_until_is_named_as_until(capsys, command):
    # both bounds were read by one function that named 'since' in every error
    argv = [*command, "--server", "http://127.0.0.1:9", "--token", "t"]
    assert main([*argv, "--until", "2026-01-01T00:00:00"]) == 2
    assert "field 'until': '2026-01-01T00:00:00' has no time zone" in capsys.readouterr().err
    assert main([*argv, "--since", "yesterday"]) == 2
    assert "field 'since': expected ISO 8601" in capsys.readouterr().err
