"""A schema-driven fuzz of the REST API (schemathesis, from the app's own OpenAPI schema): every
generated request, valid or not, is sent as the admin, as two tenants, with a wrong token and with
none. No answer may be a 5xx, and nothing another tenant's job left (its ids, its name, its
tenant's name) may show in an answer to anyone but that tenant and the admin. The service runs
over the in-memory executor (no Ray), so a few thousand requests take seconds."""

from __future__ import annotations

import re
from types import SimpleNamespace

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.python.asgi import get_client

from dlsched.runtime.api import create_app, hash_token
from dlsched.runtime.limits import SubmitLimiter
from dlsched.runtime.service import SchedulerService
from dlsched.runtime.store import SQLiteStore
from example_counts import examples
from fake_executor import Clock, FakeExecutor
from scratch_dirs import scratch_dir

# per operation; each is sent five times (a few thousand requests in all)
EXAMPLES = examples(120)
SECRET_TENANT, SECRET_NAME = "zq-private-tenant", "zq-private-run-name"
JOB_ID = re.compile(r"\bjob-\d+\b")


def make_target():
    store = SQLiteStore(scratch_dir("dlsched-fuzz-") + "/db.sqlite")
    service = SchedulerService(store, FakeExecutor({"n0": 4}), "fifo", clock=Clock())
    app = create_app(
        service, store, hash_token("admin-secret"), limiter=SubmitLimiter(per_s=1000.0, burst=1000)
    )
    client = TestClient(app)
    admin = {"Authorization": "Bearer admin-secret"}

    def tenant(name):
        return client.post("/v1/tenants", json={"name": name}, headers=admin).json()["token"]

    secret, other = tenant(SECRET_TENANT), tenant("fuzzer")
    spec = {
        "entrypoint": "dlsched.workloads.lm:build",
        "gpus": 1,
        "batch_size": 8,
        "iterations": 5,
        "name": SECRET_NAME,
        "args": {"note": SECRET_NAME},
    }
    ids = {
        client.post(
            "/v1/jobs", json={**spec, "gpus": g}, headers={"Authorization": f"Bearer {secret}"}
        ).json()["id"]
        for g in (1, 4)
    }
    service.step()  # one runs, one waits
    return SimpleNamespace(
        app=app,
        secret_ids=ids,
        callers={
            "admin": "admin-secret",
            "owner": secret,
            "other": other,
            "wrong": "not-a-token",
            "none": None,
        },
    )


SENT: list[int] = []  # every answer's status, for the check that the fuzz did fuzz
TARGET = make_target()  # built at import: schemathesis reads the schema when collecting
schema = schemathesis.openapi.from_asgi("/openapi.json", TARGET.app)
# One client for every request (as schemathesis makes one per call otherwise), not reading proxy
# settings from the environment: that read, on every request, was 8% of the fuzz's time.
CLIENT = get_client(TARGET.app).__enter__()
CLIENT.trust_env = False


def check(case) -> None:
    target = TARGET
    for who, token in target.callers.items():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = case.call(session=CLIENT, headers=headers)
        SENT.append(response.status_code)
        assert response.status_code < 500, (who, case.method, case.path, response.text[:500])
        if who in ("other", "wrong", "none"):
            text = response.text
            assert SECRET_TENANT not in text and SECRET_NAME not in text, (
                who,
                case.path,
                text[:500],
            )
            assert not target.secret_ids & set(JOB_ID.findall(text)), (who, case.path, text[:500])


def fuzz_test(operation):
    """A test of one operation: schemathesis' parametrize over the whole schema gives every
    operation's item one node id, and pytest-xdist, which keys tests by node id, ran one
    operation of 17 (705 requests)."""
    only = schema.include(
        method=operation.method.upper(), path_regex=f"^{re.escape(operation.path)}$"
    )

    @only.parametrize()
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def test(case):
        check(case)

    return test


for _operation in (result.ok() for result in schema.get_all_operations()):
    _label = re.sub(r"\W+", "_", _operation.label).strip("_").lower()
    globals()[f"test_no_5xx_and_no_cross_tenant_read_{_label}"] = fuzz_test(_operation)


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(
    inner=JSON_VALUES, depth=st.integers(0, 400), pad=st.sampled_from([0, 1000, 65_000, 200_000])
)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
def test_nested_and_oversized_args_are_never_a_5xx_nor_break_listing(inner, depth, pad):
    # issue 29: args 254 levels deep was a 500, stored, and every later listing a 500
    args: dict = {"value": inner, "pad": "x" * pad}
    for _ in range(depth):
        args = {"a": args}
    client = TestClient(TARGET.app)
    caller = {"Authorization": f"Bearer {TARGET.callers['other']}"}
    spec = {"entrypoint": "dlsched.workloads.lm:build", "gpus": 1, "batch_size": 8}
    r = client.post("/v1/jobs", json={**spec, "iterations": 5, "args": args}, headers=caller)
    SENT.append(r.status_code)
    assert r.status_code in (201, 422, 429), r.text[:300]
    if r.status_code == 422:
        assert r.json()["detail"]["field"] == "args", r.text[:300]
    listing = client.get("/v1/jobs", headers=caller)
    assert listing.status_code == 200, listing.text[:300]


def test_the_fuzz_sent_thousands_of_requests_good_and_bad():
    """Runs after the fuzz (pytest keeps file order): it was not vacuous."""
    assert len(SENT) >= 2000, len(SENT)
    assert {200, 201, 401, 404, 422} <= set(SENT), sorted(set(SENT))
