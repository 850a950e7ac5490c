"""Policies from outside the package: ``package.module:ClassName``, and a plug-in an installed
package declares in the entry point group ``dlsched.policies``; the same class in the
simulator and in the runtime's service. The plug-ins are in tests/plugins/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import job, run
from dlsched.cli import main
from dlsched.errors import PlanError, SpecError
from dlsched.policies.catalog import make_policy
from fake_executor import Clock, FakeExecutor

PLUGINS = Path(__file__).parent / "plugins"
SMALLEST = "lab_policies:SmallestFirst"


@pytest.fixture(autouse=True)
def plugins_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))


def jobs():
    # a holds all 4 GPUs until 100; d (4 GPUs) arrives before b (2) and c (1)
    return [job("a", 0, 4, 100), job("d", 0.5, 4, 50), job("b", 1, 2, 10), job("c", 1, 1, 10)]


def test_a_module_class_plug_in_schedules_in_its_own_order():
    done, _ = run("1x4", jobs(), SMALLEST)
    # fewest GPUs first: c and b start when a ends, d (4 GPUs) once both are done
    assert (done["c"].first_start, done["b"].first_start, done["d"].first_start) == (100, 100, 110)
    fifo, _ = run("1x4", jobs(), "fifo")  # the built-in order, for contrast: d first
    assert (fifo["d"].first_start, fifo["b"].first_start) == (100, 150)


def test_parameters_reach_a_plug_in_and_unknown_ones_are_named():
    assert make_policy(SMALLEST, scan="strict").scan == "strict"
    with pytest.raises(SpecError, match="has no parameter 'speed'"):
        make_policy(SMALLEST, speed=2)


@pytest.mark.parametrize(
    "name, says",
    [
        ("no_such_module:Policy", "cannot import 'no_such_module'"),
        ("lab_policies:Missing", "'lab_policies' has no 'Missing'"),
        ("lab_policies:NOT_A_POLICY", "is not a policy"),
        ("lab_policies:fewest_gpus_first", "is not a policy"),
        ("lab_policies:FailsToStart", "failed to start: RuntimeError: no licence"),
        ("no-such-policy", "unknown policy 'no-such-policy'"),
    ],
)
def test_a_plug_in_that_cannot_be_used_is_named_with_the_reason(name, says):
    with pytest.raises(SpecError, match=says) as error:
        make_policy(name)
    assert error.value.field == "policy"


def test_an_invalid_plan_from_a_plug_in_is_refused_naming_it(tmp_path, capsys):
    with pytest.raises(PlanError, match="lab_policies:StartsOnAMissingGpu"):
        run("1x4", jobs(), "lab_policies:StartsOnAMissingGpu")
    code = main(_simulate(tmp_path, "lab_policies:StartsOnAMissingGpu"))
    assert code != 0 and "lab_policies:StartsOnAMissingGpu" in capsys.readouterr().err


@pytest.mark.parametrize(
    "shape, says",
    [
        ("none", "returned NoneType, not a Plan"),
        ("number", "returned int, not a Plan"),
        ("triple", "returned a malformed plan (ValueError: too many values to unpack"),
        ("not-a-job", "returned a malformed plan (AttributeError"),
        ("gpus-not-a-list", "returned a malformed plan (TypeError"),
        ("preempt-a-name", "returned a malformed plan (AttributeError"),
        ("wakeup-a-word", "asked to be woken at 'soon', not a time in seconds"),
    ],
)
def test_what_is_not_a_plan_is_a_policy_error_not_a_traceback(shape, says):
    # in the simulator; the runtime's service applies plans through the same check
    with pytest.raises(PlanError, match=re.escape(says)) as error:
        run("1x4", jobs(), "lab_policies:Malformed", shape=shape)
    assert str(error.value).startswith("policy lab_policies:Malformed ")


def _simulate(out: Path, policy: str) -> list[str]:
    return [
        "simulate",
        "--trace",
        "synthetic",
        "--trace-param",
        "num_jobs=200",
        "--cluster",
        "4x8:V100",
        "--policy",
        policy,
        "--out",
        str(out),
        "--no-progress",
    ]


def test_an_installed_package_s_plug_in_is_listed_and_runs_by_name(tmp_path, monkeypatch, capsys):
    info = tmp_path / "site" / "lab_policies-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-policies\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dlsched.policies]\nsmallest = lab_policies:SmallestFirst\n"
        "broken = lab_policies:NOT_A_POLICY\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert main(["policies"]) == 0
    listing = capsys.readouterr().out
    assert (
        "fewest GPUs first, with backfill [plug-in lab_policies:SmallestFirst from lab-policies]"
        in listing
    )
    assert "broken" in listing and "cannot be used" in listing
    assert main(_simulate(tmp_path / "out", "smallest")) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["policy"] == "smallest" and summary["jobs_completed"] == 200
    with pytest.raises(SpecError, match="'broken' is not a policy"):
        make_policy("broken")


def test_the_runtime_service_runs_a_plug_in(tmp_path):
    from dlsched.runtime.service import SchedulerService
    from dlsched.runtime.store import RUNNING, SQLiteStore

    store = SQLiteStore(tmp_path / "db.sqlite")
    service = SchedulerService(store, FakeExecutor({"n0": 4}), SMALLEST, clock=Clock())
    tenant = store.create_tenant("alice", "hash")["id"]
    spec = {"entrypoint": "dlsched.workloads.lm:build", "batch_size": 8, "iterations": 10}
    big = store.add_job(tenant, {**spec, "gpus": 4})["id"]
    small = store.add_job(tenant, {**spec, "gpus": 1})["id"]
    service.step()
    # both queued at the first pass: the 1-GPU job goes first, the 4-GPU one does not fit after it
    assert store.job(small)["status"] == RUNNING and store.job(big)["status"] != RUNNING


def test_the_dlsched_command_finds_a_plug_in_in_the_current_directory(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    # the console script: the current directory is not on its sys.path by itself
    command = [str(Path(sys.executable).parent / "dlsched")]
    done = subprocess.run(
        [*command, *_simulate(out, SMALLEST)], cwd=PLUGINS, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "summary.json").read_text())["policy"] == SMALLEST


def test_a_plug_in_s_invalid_plan_is_skipped_and_the_server_keeps_serving(tmp_path, caplog):
    from fastapi.testclient import TestClient

    from dlsched.runtime.api import create_app, hash_token
    from dlsched.runtime.service import SchedulerService
    from dlsched.runtime.store import QUEUED, RUNNING, SQLiteStore

    store = SQLiteStore(tmp_path / "db.sqlite")
    executor = FakeExecutor({"n0": 4})
    service = SchedulerService(store, executor, "lab_policies:InvalidOnce", clock=Clock())
    client = TestClient(create_app(service, store, hash_token("admin")))
    admin = {"Authorization": "Bearer admin"}
    token = client.post("/v1/tenants", json={"name": "alice"}, headers=admin).json()["token"]
    alice = {"Authorization": f"Bearer {token}"}
    spec = {"entrypoint": "dlsched.workloads.lm:build", "batch_size": 8, "iterations": 10}

    def submit(gpus):
        r = client.post("/v1/jobs", json={**spec, "gpus": gpus}, headers=alice)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    a = submit(4)
    service.step()
    assert store.job(a)["status"] == RUNNING and set(executor.runs) == {a}
    b, c = submit(2), submit(1)
    # the plan preempts a, starts b on two of its GPUs, and c on GPU 999: refused as a whole
    service.step()
    assert "plan was refused" in caplog.text and f"job {c}" in caplog.text
    assert store.job(a)["status"] == RUNNING and store.job(b)["status"] == QUEUED
    assert set(executor.runs) == {a} and executor.runs[a].placement == [("n0", i) for i in range(4)]
    books = service.state
    assert set(books.running) == {a} and set(books.pending) == {b, c}
    assert len(books.running[a].gpus) == 4 and books.free.total == 0
    assert sum(books.tenant_gpus.values()) == 4
    assert service.metrics.registry.get_sample_value("dlsched_rejected_plans_total") == 1
    # the server keeps serving, and the next passes schedule as the policy now asks
    assert client.get("/v1/jobs", headers=alice).status_code == 200
    executor.finish(a)
    service.step()
    assert store.job(b)["status"] == RUNNING and store.job(c)["status"] == RUNNING


def _mypy(path: Path) -> str:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--follow-imports=silent",
            "--cache-dir=/dev/null",
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=path.parent,
    )
    return result.stdout


def test_the_type_checker_holds_a_plug_in_to_a_read_only_view(tmp_path):
    # dlsched ships its types (py.typed): a plug-in's author who runs mypy learns that a policy
    # may read a job but not change it; the tutorial's policy checks clean
    meddler = tmp_path / "meddler.py"
    meddler.write_text(
        "from dlsched.policies.base import Plan, Policy, PolicyView\n\n\n"
        "class Meddler(Policy):\n"
        "    def schedule(self, view: PolicyView) -> Plan:\n"
        "        for job in view.running.values():\n"
        "            job.gpus = ()\n"
        "        for job in view.queue(lambda j: j.seq):\n"
        "            job.admitted = True\n"
        "        return Plan()\n"
    )
    out = _mypy(meddler)
    assert 'Property "gpus" defined in "JobView" is read-only' in out, out
    assert 'Property "admitted" defined in "JobView" is read-only' in out, out
    tutorial = Path(__file__).parent.parent / "examples" / "smallest_first.py"
    assert "Success: no issues found" in _mypy(tutorial)


def test_a_plug_in_that_raises_at_every_pass_is_counted_and_logged_at_powers_of_two(
    tmp_path, caplog
):
    from dlsched.runtime.service import SchedulerService
    from dlsched.runtime.store import SQLiteStore

    store = SQLiteStore(tmp_path / "db.sqlite")
    service = SchedulerService(
        store, FakeExecutor({"n0": 4}), "lab_policies:RaisesEveryPass", clock=Clock()
    )
    for _ in range(10):
        service.step_or_log()
    logged = [r for r in caplog.records if "scheduling pass failed" in r.getMessage()]
    assert [r.getMessage().split("(")[1].split()[0] for r in logged] == ["1", "2", "4", "8"]
    assert "a plug-in's bug" in caplog.text  # the traceback
    assert service.metrics.registry.get_sample_value("dlsched_failed_passes_total") == 10
