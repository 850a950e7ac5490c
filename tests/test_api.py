"""The REST API over the scheduling service with an in-memory executor (no Ray): the typed job
spec and its bounds, the declared security scheme, access control."""

from __future__ import annotations

import json
import os
from datetime import UTC

import pytest
from fastapi.testclient import TestClient

from dlsched.runtime.api import create_app, hash_token
from dlsched.runtime.service import SchedulerService
from dlsched.runtime.store import SQLiteStore
from fake_executor import Clock, FakeExecutor

LM = {"entrypoint": "dlsched.workloads.lm:build", "args": {"samples": 256}}
OK = {**LM, "gpus": 1, "batch_size": 8, "iterations": 5}


@pytest.fixture
def api(tmp_path):
    store = SQLiteStore(tmp_path / "db.sqlite")
    service = SchedulerService(store, FakeExecutor({"n0": 4}), "fifo", clock=Clock())
    client = TestClient(create_app(service, store, hash_token("admin-secret")))
    client.app_state_service = service  # the tests drive its passes by hand
    admin = {"Authorization": "Bearer admin-secret"}
    token = client.post("/v1/tenants", json={"name": "alice"}, headers=admin).json()["token"]
    return client, {"Authorization": f"Bearer {token}"}, store


def test_the_schema_shows_the_job_fields_with_their_bounds_and_the_bearer_scheme(api):
    client, _, _ = api
    schema = client.get("/openapi.json").json()
    job = schema["components"]["schemas"]["JobRequest"]
    assert {"entrypoint", "gpus", "batch_size", "iterations", "epochs", "duration_s"} <= set(
        job["properties"]
    )
    assert job["properties"]["batch_size"]["maximum"] == 65_536
    assert job["additionalProperties"] is False
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def _nested(levels: int) -> dict:
    args: dict = {}
    inner = args
    for _ in range(levels - 1):
        inner["a"] = {}
        inner = inner["a"]
    return args


@pytest.mark.parametrize(
    "change, field",
    [
        ({"iterations": 10**400}, "iterations"),  # a number that overflows any int64
        ({"batch_size": 10**9}, "batch_size"),
        ({"duration_s": float("inf")}, "duration_s"),
        ({"gpus": "2"}, "gpus"),  # no silent coercion of strings
        ({"gpus": True}, "gpus"),
        ({"gpus": 5}, "gpus"),  # more than the cluster has
        ({"iterations": None}, "iterations"),  # neither iterations nor epochs
        ({"epochs": 2}, "iterations"),  # both
        ({"learning_rate": 2}, "learning_rate"),  # unknown field
        ({"entrypoint": "no-function"}, "entrypoint"),
        ({"gpus": 2, "batch_size": 1}, "batch_size"),
        ({"priority": 10**30}, "priority"),
        ({"deadline": "next tuesday"}, "deadline"),  # unparseable
        ({"deadline": "2020-01-01T00:00:00Z"}, "deadline"),  # before submission
        ({"deadline": "2099-01-01T00:00:00"}, "deadline"),  # no time zone
        ({"deadline": 10**400}, "deadline"),
        ({"within": "2 weeks"}, "within"),
        ({"within": 0}, "within"),
        ({"within": "1h", "deadline": "2099-01-01T00:00:00Z"}, "within"),  # both
        ({"deadline": "2099-01-01T00:00:00Z"}, "deadline"),  # more than 10^8 s (3 years) away
        ({"args": _nested(254)}, "args"),  # issue 29: a 500, stored, and every listing a 500
        ({"args": _nested(33)}, "args"),
        ({"args": {"data": "x" * 70_000}}, "args"),  # over 64 KiB as JSON
    ],
)
def test_a_bad_spec_is_a_422_naming_the_field_and_nothing_is_stored(api, change, field):
    client, alice, store = api
    spec = {k: v for k, v in {**OK, **change}.items() if v is not None}
    body = json.dumps(spec)  # as any client may send it: Infinity, huge integers
    r = client.post("/v1/jobs", content=body, headers={**alice, "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["field"] == field, r.text
    assert store.jobs() == []


def test_a_yaml_spec_s_deadline_is_sent_as_its_text_and_one_without_a_zone_named(
    api, tmp_path, monkeypatch
):
    """`dlsched submit` of a spec with `deadline: 2026-11-23T18:00:00Z`, as docs/runtime.md
    writes it, stopped in the client with a traceback: YAML read the time as a datetime, which
    JSON cannot carry. A time without its zone got the message for an unreadable one."""
    import argparse
    from datetime import datetime, timedelta

    from dlsched.runtime import client as cli

    client, alice, store = api
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    text = tomorrow.isoformat().replace("+00:00", "Z")
    path = tmp_path / "job.yaml"
    path.write_text(
        f"entrypoint: {OK['entrypoint']}\ngpus: 1\nbatch_size: 8\niterations: 5\ndeadline: {text}\n"
    )
    sent = []

    def call(args, method, url, **kwargs):
        sent.append(kwargs["json"])
        r = client.request(method, url, headers=alice, **kwargs)
        assert r.status_code == 201, r.text
        return r

    monkeypatch.setattr(cli, "_call", call)
    assert cli.cmd_submit(argparse.Namespace(spec=str(path))) == 0
    assert sent[0]["deadline"] == text
    job = client.get(f"/v1/jobs/{store.jobs()[0]['id']}", headers=alice).json()
    assert job["deadline"] == tomorrow.timestamp()
    r = client.post("/v1/jobs", json={**OK, "deadline": text[:-1]}, headers=alice)
    assert r.status_code == 422 and "give the time zone" in r.json()["detail"]["message"], r.text


def test_args_32_levels_deep_and_64_kib_are_kept_and_listed(api):
    client, alice, store = api
    deep = {**OK, "args": {**_nested(32), "data": "x" * 60_000}}
    r = client.post("/v1/jobs", json=deep, headers=alice)
    assert r.status_code == 201, r.text
    assert client.get("/v1/jobs", headers=alice).json()[0]["spec"]["args"] == deep["args"]


def test_a_body_that_is_not_an_object_is_a_422(api):
    client, alice, store = api
    r = client.post("/v1/jobs", json=[1, 2], headers=alice)
    assert r.status_code == 422 and store.jobs() == []


def test_a_good_spec_is_stored_normalized(api):
    client, alice, store = api
    r = client.post("/v1/jobs", json={**OK, "duration_s": 120}, headers=alice)
    assert r.status_code == 201, r.text
    spec = store.job(r.json()["id"])["spec"]
    assert spec["duration_s"] == 120 and spec["checkpoint_every"] == 50 and "epochs" not in spec


def test_a_deadline_is_stored_absolute_and_shown_with_the_job(api):
    import time

    client, alice, store = api
    before = time.time()
    r = client.post("/v1/jobs", json={**OK, "within": "2h"}, headers=alice)
    assert r.status_code == 201, r.text
    job = client.get(f"/v1/jobs/{r.json()['id']}", headers=alice).json()
    assert before + 7200 <= job["deadline"] <= time.time() + 7200 and "within" not in job["spec"]
    from datetime import datetime, timedelta

    tomorrow = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    r = client.post(
        "/v1/jobs",
        json={**OK, "deadline": tomorrow.isoformat().replace("+00:00", "Z")},
        headers=alice,
    )
    assert r.status_code == 201, r.text
    assert (
        client.get(f"/v1/jobs/{r.json()['id']}", headers=alice).json()["deadline"]
        == tomorrow.timestamp()
    )


def test_a_tenant_sees_and_touches_only_its_own_jobs(api):
    client, alice, _ = api
    admin = {"Authorization": "Bearer admin-secret"}
    bob = {
        "Authorization": "Bearer "
        + client.post("/v1/tenants", json={"name": "bob"}, headers=admin).json()["token"]
    }
    a1 = client.post("/v1/jobs", json=OK, headers=alice).json()["id"]
    for path in (f"/v1/jobs/{a1}", f"/v1/jobs/{a1}/logs"):
        assert client.get(path, headers=bob).status_code == 404  # as if it did not exist
    assert client.post(f"/v1/jobs/{a1}/cancel", headers=bob).status_code == 404
    assert client.get("/v1/jobs", headers=bob).json() == []
    assert [j["id"] for j in client.get("/v1/jobs", headers=alice).json()] == [a1]
    assert client.post("/v1/tenants", json={"name": "eve"}, headers=alice).status_code == 403
    assert (
        client.post("/v1/jobs", json=OK, headers=admin).status_code == 403
    )  # jobs belong to tenants


def test_tokens(api):
    client, alice, _ = api
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Basic abc"}).status_code == 401
    assert client.get("/v1/tenants", headers=alice).status_code == 403


def test_a_body_over_the_limit_is_a_413_and_nothing_is_stored(api):
    client, alice, store = api
    big = {**OK, "args": {"blob": "x" * (2 << 20)}}  # a 2 MB job spec
    r = client.post("/v1/jobs", json=big, headers=alice)
    assert r.status_code == 413 and r.json()["detail"]["field"] == "body"
    assert store.jobs() == []


def test_tenant_names_are_validated(api):
    client, _, _ = api
    admin = {"Authorization": "Bearer admin-secret"}
    for bad in ("Alice", "ALICE", "a" * 33, "1abc", "ali ce", "admin", "", "al_ice", "alice\n"):
        r = client.post("/v1/tenants", json={"name": bad}, headers=admin)
        assert r.status_code == 422 and r.json()["detail"]["field"] == "name", (bad, r.text)
    assert client.post("/v1/tenants", json={"name": "alice"}, headers=admin).status_code == 409


def test_submits_are_rate_limited_and_queues_bounded_per_tenant(tmp_path):
    from dlsched.runtime.limits import SubmitLimiter

    store = SQLiteStore(tmp_path / "db.sqlite")
    clock = Clock()
    service = SchedulerService(store, FakeExecutor({"n0": 4}), "fifo", clock=clock)
    t = [0.0]
    app = create_app(
        service,
        store,
        hash_token("admin-secret"),
        limiter=SubmitLimiter(per_s=1.0, burst=3, clock=lambda: t[0]),
        max_queued=5,
    )
    client = TestClient(app)
    admin = {"Authorization": "Bearer admin-secret"}
    token = client.post("/v1/tenants", json={"name": "alice"}, headers=admin).json()["token"]
    bob = client.post("/v1/tenants", json={"name": "bob"}, headers=admin).json()["token"]
    alice = {"Authorization": f"Bearer {token}"}
    codes = [client.post("/v1/jobs", json=OK, headers=alice).status_code for _ in range(4)]
    assert codes == [201, 201, 201, 429]  # a burst of 3, then wait
    r = client.post("/v1/jobs", json=OK, headers=alice)
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    # another tenant has its own bucket
    assert (
        client.post("/v1/jobs", json=OK, headers={"Authorization": f"Bearer {bob}"}).status_code
        == 201
    )
    t[0] += 2.0  # two more tokens: 5 queued in all
    assert [client.post("/v1/jobs", json=OK, headers=alice).status_code for _ in range(2)] == [
        201,
        201,
    ]
    t[0] += 10.0
    r = client.post("/v1/jobs", json=OK, headers=alice)  # tokens left, but 5 already wait
    assert r.status_code == 429 and "waiting" in r.json()["detail"]
    assert len(store.jobs("alice")) == 5


def test_status_and_metrics_reveal_no_other_tenant(api):
    client, alice, store = api
    admin = {"Authorization": "Bearer admin-secret"}
    bob = {
        "Authorization": "Bearer "
        + client.post("/v1/tenants", json={"name": "bob"}, headers=admin).json()["token"]
    }
    a1 = client.post("/v1/jobs", json=OK, headers=alice).json()["id"]
    a2 = client.post("/v1/jobs", json={**OK, "gpus": 4, "batch_size": 8}, headers=alice).json()[
        "id"
    ]
    client.app_state_service.step()  # a1 runs, a2 waits
    seen_by_bob = client.get("/v1/cluster", headers=bob).text
    assert a1 not in seen_by_bob and a2 not in seen_by_bob and "alice" not in seen_by_bob
    status = client.get("/v1/cluster", headers=bob).json()
    assert (
        status["running"] == []
        and status["queue"] == []
        and status["queue_by_tenant"] == {"yours": 0, "others": 1}
    )
    assert a1 in client.get("/v1/cluster", headers=alice).text
    assert a1 in client.get("/v1/cluster", headers=admin).text
    metrics = client.get("/metrics").text
    assert "alice" not in metrics and 'dlsched_queue_length{tenant="all"} 1.0' in metrics


def test_export_shows_a_tenant_its_own_history_and_bounds_its_query(api):
    client, alice, store = api
    admin = {"Authorization": "Bearer admin-secret"}
    bob = {
        "Authorization": "Bearer "
        + client.post("/v1/tenants", json={"name": "bob"}, headers=admin).json()["token"]
    }
    mine = client.post("/v1/jobs", json=OK, headers=alice).json()["id"]
    theirs = client.post("/v1/jobs", json=OK, headers=bob).json()["id"]
    service = client.app_state_service
    service.step()
    for jid in (mine, theirs):
        service.executor.report_progress(jid, iteration=2, iterations=5, iteration_s=0.1)
    service.step()
    assert {j["job_id"] for j in client.get("/v1/export", headers=admin).json()["jobs"]} == {
        mine,
        theirs,
    }
    assert [j["job_id"] for j in client.get("/v1/export", headers=alice).json()["jobs"]] == [mine]
    for bad in ({"since": -1}, {"since": "nan"}, {"until": "soon"}):
        r = client.get("/v1/export", params=bad, headers=alice)
        # the parameter named, not where it was ("query")
        assert r.status_code == 422 and r.json()["detail"]["field"] == [*bad][0], (bad, r.text)
    assert client.get("/v1/export").status_code in (401, 403)


def test_a_database_outside_the_data_directory_is_the_server_s_alone(tmp_path):
    # issue 29: with --db elsewhere, it was created with the umask's mode (world-readable)
    old = os.umask(0o022)
    try:
        store = SQLiteStore(tmp_path / "elsewhere" / "db.sqlite")
        store.create_tenant("alice", "hash")
    finally:
        os.umask(old)
    for f in (tmp_path / "elsewhere").iterdir():
        assert f.stat().st_mode & 0o077 == 0, (f.name, oct(f.stat().st_mode))


def test_a_nearly_full_disk_refuses_new_jobs_with_503_and_keeps_the_accepted(tmp_path):
    # issue 29, 4: with the data disk full every submit was a 500. Now new work waits for the
    # reserve (a clear 503 naming the disk), and what was accepted stays.
    import shutil

    from dlsched.runtime.limits import DiskReserve

    store = SQLiteStore(tmp_path / "db.sqlite")
    service = SchedulerService(store, FakeExecutor({"n0": 4}), "fifo", clock=Clock())
    free = shutil.disk_usage(tmp_path).free
    reserve = DiskReserve(tmp_path, reserve=0)
    client = TestClient(create_app(service, store, hash_token("admin-secret"), disk=reserve))
    admin = {"Authorization": "Bearer admin-secret"}
    token = client.post("/v1/tenants", json={"name": "alice"}, headers=admin).json()["token"]
    alice = {"Authorization": f"Bearer {token}"}
    first = client.post("/v1/jobs", json=OK, headers=alice)
    assert first.status_code == 201
    reserve.reserve = free + (1 << 40)  # more than the disk has free
    r = client.post("/v1/jobs", json=OK, headers=alice)
    assert r.status_code == 503 and r.headers["retry-after"] == "60"
    assert r.json()["detail"]["field"] == "disk"
    assert "new jobs are refused until space is freed" in r.json()["detail"]["reason"]
    assert [j["id"] for j in store.jobs("alice")] == [first.json()["id"]]
    assert client.get(f"/v1/jobs/{first.json()['id']}", headers=alice).status_code == 200
    reserve.reserve = 0
    assert client.post("/v1/jobs", json=OK, headers=alice).status_code == 201


def test_a_database_write_refused_for_a_full_disk_is_a_503(api, monkeypatch):
    import sqlite3

    client, alice, store = api

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store, "add_job", full)
    r = client.post("/v1/jobs", json=OK, headers=alice)
    assert r.status_code == 503 and r.json()["detail"]["field"] == "disk"


def _quota_server(store, quotas: str):
    """A service and its API on 4 GPUs as `dlsched server --quotas QUOTAS` starts one: the
    configuration made from the tenants the store holds at the start."""
    from dlsched.tenant_quotas import load_tenants

    names = [t["name"] for t in store.tenants()]
    service = SchedulerService(
        store,
        FakeExecutor({"n0": 4}),
        "fifo",
        clock=Clock(),
        quotas=load_tenants(quotas, names, 4),
    )
    return service, TestClient(create_app(service, store, hash_token("admin-secret")))


ADMIN = {"Authorization": "Bearer admin-secret"}


def _nominal(client) -> dict:
    tenants = client.get("/v1/quotas", headers=ADMIN).json()["tenants"]
    return {t: q["nominal"] for t, q in tenants.items()}


def test_equal_quotas_split_the_gpus_between_the_tenants_created_after_the_start(tmp_path):
    # A new server has no tenant: its equal split was of nothing, and a tenant created later had
    # a nominal quota of 0 in a cohort with nothing to lend, so its jobs waited for ever
    store = SQLiteStore(tmp_path / "db.sqlite")
    service, client = _quota_server(store, "equal")
    token = client.post("/v1/tenants", json={"name": "alice"}, headers=ADMIN).json()["token"]
    assert _nominal(client) == {"alice": 4}
    alice = {"Authorization": f"Bearer {token}"}
    job = client.post("/v1/jobs", json={**OK, "gpus": 2}, headers=alice).json()["id"]
    service.step()
    assert store.job(job)["status"] == "running"
    client.post("/v1/tenants", json={"name": "bob"}, headers=ADMIN)
    assert _nominal(client) == {"alice": 2, "bob": 2}


def test_a_quota_set_through_the_api_outlives_a_restart_and_keeps_out_of_the_equal_split(
    tmp_path,
):
    store = SQLiteStore(tmp_path / "db.sqlite")
    _, client = _quota_server(store, "equal")
    for name in ("alice", "bob"):
        client.post("/v1/tenants", json={"name": name}, headers=ADMIN)
    r = client.put("/v1/tenants/alice/quota", json={"nominal": 3, "cohort": "all"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert _nominal(client) == {"alice": 3, "bob": 2}
    # the server starts again on the same database (before, alice was back at 2)
    _, client = _quota_server(store, "equal")
    assert _nominal(client) == {"alice": 3, "bob": 2}
    # a third tenant: the equal split is 2, 1, 1; alice keeps the quota set for her
    client.post("/v1/tenants", json={"name": "carol"}, headers=ADMIN)
    assert _nominal(client) == {"alice": 3, "bob": 1, "carol": 1}
    # without --quotas too: the quota set is kept; the others have none (no tenant is held back)
    service = SchedulerService(store, FakeExecutor({"n0": 4}), "fifo", clock=Clock())
    client = TestClient(create_app(service, store, hash_token("admin-secret")))
    assert _nominal(client) == {"alice": 3}


def test_a_lending_limit_past_the_nominal_quota_or_without_a_cohort_is_a_422_naming_it(tmp_path):
    store = SQLiteStore(tmp_path / "db.sqlite")
    _, client = _quota_server(store, "equal")
    client.post("/v1/tenants", json={"name": "alice"}, headers=ADMIN)
    for body, reason in (
        ({"nominal": 2, "lending_limit": 3, "cohort": "all"}, "at most the nominal quota (2)"),
        ({"nominal": 2, "lending_limit": 1}, "lends to a cohort"),
        ({"nominal": 2, "lending_limit": -1, "cohort": "all"}, "greater than or equal to 0"),
    ):
        r = client.put("/v1/tenants/alice/quota", json=body, headers=ADMIN)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["field"].endswith("lending_limit") and reason in detail["reason"], detail
    assert _nominal(client) == {"alice": 4}  # nothing was set
    r = client.put(
        "/v1/tenants/alice/quota",
        json={"nominal": 2, "lending_limit": 1, "cohort": "all"},
        headers=ADMIN,
    )
    assert r.status_code == 200 and r.json()["lending_limit"] == 1, r.text


def test_the_api_takes_the_quotas_a_quota_file_takes_and_refuses_one_past_them(tmp_path):
    """The API bounded each count at 1,000,000 while a quota file allows MAX_GPUS (1,048,576):
    a quota written in a file was refused through the API, with another number."""
    from dlsched.cluster import MAX_GPUS
    from dlsched.tenant_quotas import MAX_WEIGHT

    store = SQLiteStore(tmp_path / "db.sqlite")
    _, client = _quota_server(store, "equal")
    client.post("/v1/tenants", json={"name": "alice"}, headers=ADMIN)
    largest = {"nominal": MAX_GPUS, "borrowing_limit": MAX_GPUS, "lending_limit": MAX_GPUS}
    body = {**largest, "cohort": "all", "weight": MAX_WEIGHT}
    r = client.put("/v1/tenants/alice/quota", json=body, headers=ADMIN)
    assert r.status_code == 200 and r.json()["nominal"] == MAX_GPUS, r.text
    for name, past in [*((k, MAX_GPUS + 1) for k in largest), ("weight", MAX_WEIGHT * 2)]:
        r = client.put("/v1/tenants/alice/quota", json={**body, name: past}, headers=ADMIN)
        assert r.status_code == 422 and r.json()["detail"]["field"].endswith(name), r.text
    assert _nominal(client)["alice"] == MAX_GPUS  # nothing was set


def test_a_tenant_s_token_is_replaced_by_the_admin_and_the_old_one_refused_at_once(api):
    client, alice, store = api
    job = client.post("/v1/jobs", json=OK, headers=alice).json()["id"]
    bob = client.post("/v1/tenants", json={"name": "bob"}, headers=ADMIN).json()["token"]
    for who in (alice, {"Authorization": f"Bearer {bob}"}):  # a tenant may not, not even its own
        assert client.post("/v1/tenants/alice/token", headers=who).status_code == 403
    assert client.post("/v1/tenants/carol/token", headers=ADMIN).status_code == 404
    r = client.post("/v1/tenants/alice/token", headers=ADMIN)
    assert r.status_code == 201 and r.json()["name"] == "alice", r.text
    assert client.get("/v1/jobs", headers=alice).status_code == 401  # the leaked one
    new = {"Authorization": f"Bearer {r.json()['token']}"}
    assert [j["id"] for j in client.get("/v1/jobs", headers=new).json()] == [job]


def test_dlsched_quotas_set_changes_only_what_it_names(tmp_path, monkeypatch, capsys):
    """`dlsched quotas --set alice --nominal 3` sent the nominal alone, and the API's PUT, which
    replaces the whole quota, took alice out of the cohort 'all' of `--quotas equal` and reset
    her weight: she could no longer borrow or lend."""
    import argparse

    from dlsched.runtime import client as cli
    from dlsched.tenant_quotas import load_tenants

    store = SQLiteStore(tmp_path / "db.sqlite")
    quotas = load_tenants("equal", [], 4)
    service = SchedulerService(store, FakeExecutor({"n0": 4}), "fifo", clock=Clock(), quotas=quotas)
    client = TestClient(create_app(service, store, hash_token("admin-secret")))
    admin = {"Authorization": "Bearer admin-secret"}
    for name in ("alice", "bob"):
        assert client.post("/v1/tenants", json={"name": name}, headers=admin).status_code == 201

    def call(args, method, url, **kwargs):
        r = client.request(method, url, headers=admin, **kwargs)
        assert r.status_code < 400, r.text
        return r

    monkeypatch.setattr(cli, "_call", call)

    def set_quota(**options):
        args = dict.fromkeys(cli.QUOTA_FIELDS)
        cli.cmd_quotas(argparse.Namespace(set="alice", **{**args, **options}))
        return client.get("/v1/quotas", headers=admin).json()["tenants"]["alice"]

    assert set_quota(weight=2.0)["cohort"] == "all"
    alice = set_quota(nominal=3)
    assert (alice["nominal"], alice["cohort"], alice["weight"]) == (3, "all", 2.0)
    alice = set_quota(borrowing_limit=1, cohort="lab")
    assert (alice["nominal"], alice["borrowing_limit"], alice["cohort"]) == (3, 1, "lab")
    alice = set_quota(lending_limit=2)
    assert (alice["nominal"], alice["lending_limit"], alice["cohort"]) == (3, 2, "lab")
    alice = set_quota(lending_limit="none")
    assert (alice["lending_limit"], alice["borrowing_limit"], alice["cohort"]) == (None, 1, "lab")
    alice = set_quota(borrowing_limit="none", cohort="none")
    assert (alice["borrowing_limit"], alice["cohort"], alice["weight"]) == (None, None, 2.0)
    capsys.readouterr()
    cli.cmd_quotas(argparse.Namespace(set=None, **dict.fromkeys(cli.QUOTA_FIELDS)))
    header, _, alice_row, bob_row = capsys.readouterr().out.splitlines()
    assert "weight" in header and alice_row.split()[:6] == ["alice", "3", "-", "-", "-", "2.0"]


def test_dlsched_quotas_on_a_server_without_quotas_says_how_to_give_one(api, monkeypatch, capsys):
    # it printed a table's header and nothing under it
    import argparse

    from dlsched.runtime import client as cli

    client, _, _ = api
    admin = {"Authorization": "Bearer admin-secret"}
    monkeypatch.setattr(
        cli, "_call", lambda args, method, url, **kw: client.request(method, url, headers=admin)
    )
    cli.cmd_quotas(argparse.Namespace(set=None, **dict.fromkeys(cli.QUOTA_FIELDS)))
    assert "no tenant has a quota" in capsys.readouterr().out


def test_dlsched_node_takes_a_node_out_of_service_and_status_shows_it(api, monkeypatch, capsys):
    import argparse

    from dlsched.runtime import client as cli

    client, alice, _ = api
    admin = {"Authorization": "Bearer admin-secret"}
    monkeypatch.setattr(
        cli,
        "_call",
        lambda args, method, url, **kw: client.request(method, url, headers=admin, **kw),
    )
    cli.cmd_node(argparse.Namespace(name="n0", service="cordoned"))
    assert capsys.readouterr().out == "node n0: out of service\n"
    assert "dlsched_nodes_out_of_service 1.0" in client.get("/metrics").text
    cli.cmd_status(argparse.Namespace())
    assert "n0     up   idle idle idle idle [out of service]" in capsys.readouterr().out
    cli.cmd_node(argparse.Namespace(name="n0", service="ready"))
    assert capsys.readouterr().out == "node n0: in service\n"
    # the admin's alone, a node that is there, one of the three states
    assert client.put("/v1/nodes/n0", json={"service": "drained"}, headers=alice).status_code == 403
    assert client.put("/v1/nodes/n9", json={"service": "drained"}, headers=admin).status_code == 404
    r = client.put("/v1/nodes/n0", json={"service": "gone"}, headers=admin)
    assert r.status_code == 422 and "service" in r.text


def test_a_removed_tenant_s_token_is_refused_its_jobs_cancelled_and_its_history_kept(api):
    client, alice, store = api
    service = client.app_state_service
    running = client.post("/v1/jobs", json={**OK, "gpus": 4}, headers=alice).json()["id"]
    service.step()
    service.executor.finish_profiling()
    service.step()
    queued = client.post("/v1/jobs", json={**OK, "gpus": 4}, headers=alice).json()["id"]
    service.step()
    assert [store.job(j)["status"] for j in (running, queued)] == ["running", "queued"]
    assert client.delete("/v1/tenants/alice", headers=alice).status_code == 403  # the admin's
    r = client.delete("/v1/tenants/alice", headers=ADMIN)
    assert r.status_code == 200 and r.json()["jobs_cancelled"] == 2
    assert client.get("/v1/jobs", headers=alice).status_code == 401  # at once
    service.step()
    assert [store.job(j)["status"] for j in (running, queued)] == ["cancelled", "cancelled"]
    assert ("stop", running, False) in service.executor.log
    assert any("its tenant was removed" in e["message"] for e in store.events(running))
    # its history stays for the admin (usage, export); its name stays taken
    assert {j["id"] for j in client.get("/v1/jobs", headers=ADMIN).json()} == {running, queued}
    assert client.get("/v1/tenants", headers=ADMIN).json() == []
    (gone,) = client.get("/v1/tenants?removed=true", headers=ADMIN).json()
    assert gone["name"] == "alice" and gone["removed"] == r.json()["removed"]
    again = client.post("/v1/tenants", json={"name": "alice"}, headers=ADMIN)
    assert again.status_code == 409 and "was removed" in again.text
    assert client.delete("/v1/tenants/alice", headers=ADMIN).status_code == 404
    assert client.post("/v1/tenants/alice/token", headers=ADMIN).status_code == 404


def test_a_job_submitted_as_its_tenant_is_removed_is_refused_not_left_queued(tmp_path):
    # the request was let in before the removal and adds its job after: the store refuses it
    from dlsched.runtime.store import TenantRemoved

    store = SQLiteStore(tmp_path / "db.sqlite")
    store.create_tenant("alice", "hash-alice")
    assert store.remove_tenant("alice", 1.0)
    with pytest.raises(TenantRemoved):
        store.add_job("alice", {**OK})
    assert store.jobs() == [] and store.tenant_by_token_hash("hash-alice") is None


def test_removing_a_tenant_splits_equal_quotas_again_and_a_restart_keeps_it_out(tmp_path):
    store = SQLiteStore(tmp_path / "db.sqlite")
    _, client = _quota_server(store, "equal")
    for name in ("alice", "bob", "carol"):
        client.post("/v1/tenants", json={"name": name}, headers=ADMIN)
    r = client.put("/v1/tenants/carol/quota", json={"nominal": 1, "cohort": "all"}, headers=ADMIN)
    assert r.status_code == 200 and _nominal(client) == {"alice": 2, "bob": 1, "carol": 1}
    assert client.delete("/v1/tenants/bob", headers=ADMIN).status_code == 200
    assert _nominal(client) == {"alice": 2, "carol": 1}  # carol keeps the quota set for her
    assert client.delete("/v1/tenants/carol", headers=ADMIN).status_code == 200
    assert _nominal(client) == {"alice": 4}
    _, client = _quota_server(store, "equal")  # the server starts again on the same database
    assert _nominal(client) == {"alice": 4}


def test_a_removed_tenant_s_quota_from_a_file_stays_lent_to_its_cohort(
    tmp_path, monkeypatch, capsys
):
    # found by the service's random sequences: with alice's nominal 3 gone from the cohort,
    # bob (nominal 1) could never again run a job of 4 GPUs: it waited for ever
    import argparse

    from dlsched.runtime import client as cli
    from dlsched.tenant_quotas import TenantConfig, TenantQuota

    store = SQLiteStore(tmp_path / "db.sqlite")
    quotas = TenantConfig(
        {"alice": TenantQuota(3, None, "lab"), "bob": TenantQuota(1, None, "lab")}
    )
    service = SchedulerService(store, FakeExecutor({"n0": 4}), "fifo", clock=Clock(), quotas=quotas)
    client = TestClient(create_app(service, store, hash_token("admin-secret")))
    bob = {}
    for name in ("alice", "bob"):
        token = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["token"]
        bob = {"Authorization": f"Bearer {token}"}
    assert client.delete("/v1/tenants/alice", headers=ADMIN).status_code == 200
    assert _nominal(client) == {"alice": 3, "bob": 1}
    standing = client.get("/v1/quotas", headers=ADMIN).json()["tenants"]
    assert {t: v["removed"] for t, v in standing.items()} == {"alice": True, "bob": False}
    monkeypatch.setattr(
        cli, "_call", lambda args, method, url, **kw: client.request(method, url, headers=ADMIN)
    )
    cli.cmd_quotas(argparse.Namespace(set=None, **dict.fromkeys(cli.QUOTA_FIELDS)))
    _, _, alice_row, bob_row = capsys.readouterr().out.splitlines()
    assert alice_row.split()[:3] == ["alice", "(removed)", "3"] and bob_row.split()[:2] == [
        "bob",
        "1",
    ]
    job = client.post("/v1/jobs", json={**OK, "gpus": 4}, headers=bob).json()["id"]
    service.step()
    service.executor.finish_profiling()
    service.step()
    assert store.job(job)["status"] == "running"
    # the operator may still change it (to 0: nothing more to lend)
    r = client.put("/v1/tenants/alice/quota", json={"nominal": 0, "cohort": "lab"}, headers=ADMIN)
    assert r.status_code == 200 and _nominal(client) == {"alice": 0, "bob": 1}


def test_dlsched_tenant_list_and_remove(api, monkeypatch, capsys):
    import argparse

    from dlsched.runtime import client as cli

    client, _, _ = api
    monkeypatch.setattr(
        cli,
        "_call",
        lambda args, method, url, **kw: client.request(method, url, headers=ADMIN, **kw),
    )
    cli.cmd_tenant_remove(argparse.Namespace(name="alice"))
    assert capsys.readouterr().out == "tenant alice removed; 0 of its jobs cancelled\n"
    cli.cmd_tenant_list(argparse.Namespace(removed=False))
    assert capsys.readouterr().out == ""
    cli.cmd_tenant_list(argparse.Namespace(removed=True))
    assert capsys.readouterr().out.startswith("alice (removed 20")
