"""docs/writing-a-policy.md's policy (examples/smallest_first.py), unchanged, in the simulator
(by ``module:Class`` and from Python) and on the server over the embedded Ray cluster."""

import json
from pathlib import Path

import pytest

from conftest import job, run
from runtime_helpers import EMULATED

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
TUTORIAL = "smallest_first:SmallestFirst"


@pytest.fixture(autouse=True)
def examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_the_tutorial_policy_starts_the_fewest_gpus_first_and_backfills():
    # a holds the 4 GPUs until 100; then d (4 GPUs, first to arrive), b (2) and c (1) wait.
    # Fewest first: c and b start at 100 (3 GPUs), d cannot (1 free) and waits for both (110).
    jobs = [job("a", 0, 4, 100), job("d", 0.5, 4, 50), job("b", 1, 2, 10), job("c", 1, 1, 10)]
    states, _ = run("1x4", jobs, TUTORIAL)
    assert states["c"].first_start == states["b"].first_start == 100.0
    assert states["d"].first_start == 110.0 and states["d"].finish == 160.0


def test_the_tutorial_policy_runs_from_python_on_a_bundled_trace():
    from smallest_first import SmallestFirst

    import dlsched

    workload = dlsched.load_workload("muri-3", "16x8:V100")
    by_object = dlsched.simulate(workload, SmallestFirst())
    by_name = dlsched.simulate(workload, TUTORIAL)
    assert by_object.summary["jobs_completed"] == len(workload.jobs) == 992
    assert by_object.summary["policy"] == "smallest-first" and by_name.summary["policy"] == TUTORIAL
    assert by_object.jobs == by_name.jobs  # the same policy, however it is named


def test_the_readme_s_python_example_runs(tmp_path, monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    example = readme.split("## From Python")[1].split("```python")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in printed] == ["fifo", "tiresias", "sjf-bsbf"]
    summary = json.loads((tmp_path / "out" / "py" / "summary.json").read_text())
    assert summary["policy"] == "sjf-bsbf" and summary["jobs_completed"] == 5000


@pytest.mark.runtime
@pytest.mark.parametrize("harness", [(TUTORIAL, None)], indirect=True)
def test_the_tutorial_policy_runs_on_the_server(harness):
    h = harness
    alice = h.tenant("alice")
    blocker = h.submit(alice, **EMULATED, gpus=1, batch_size=8, iterations=60)
    h.wait_status(blocker, "running")
    big = h.submit(alice, **EMULATED, gpus=4, batch_size=8, iterations=10)
    small = h.submit(alice, **EMULATED, gpus=1, batch_size=8, iterations=10)
    # 3 GPUs free: the 1-GPU job starts past the 4-GPU one, which waits for the blocker
    h.wait_status(small, "running", "done")
    assert h.job(big)["status"] == "queued"
    for j in (blocker, small, big):
        h.wait_status(j, "done")
    assert h.job(big)["started"] >= h.job(blocker)["finished"]
