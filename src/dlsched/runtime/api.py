"""The REST API (FastAPI; the OpenAPI schema is at ``/openapi.json``, docs at ``/docs``).

Every call but ``/metrics`` and ``/healthz`` needs ``Authorization: Bearer <token>``: the admin
token, or a tenant's. Tokens are random (32 bytes) and stored only as SHA-256 hashes. A tenant
sees and controls only its own jobs (another tenant's job is a 404, as if it did not exist);
the admin sees all and creates tenants.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import sqlite3
import time
from importlib import resources
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from ..cluster import MAX_GPUS
from ..errors import SpecError
from ..tenant_quotas import MAX_WEIGHT
from .jobspec import JobRequest, spec_error
from .limits import (
    MAX_LOG_BYTES,
    MAX_QUEUED_PER_TENANT,
    TENANT_NAME,
    BodyLimit,
    DiskReserve,
    SubmitLimiter,
    tail,
)
from .service import SchedulerService
from .store import FINAL, QUEUED, Store, TenantRemoved
from .usage import usage_report

ADMIN = "admin"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# The dashboard's files, served from the package; no script or style from anywhere else.
STATIC_TYPES = {
    "dashboard.html": "text/html",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
}
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def static_file(name: str) -> bytes:
    return resources.files("dlsched.runtime").joinpath("static", name).read_bytes()


class QuotaRequest(BaseModel):
    """A tenant's quota, bounded as a quota file's (tenant_quotas.quota_from checks it again)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    nominal: int = Field(ge=0, le=MAX_GPUS)
    borrowing_limit: int | None = Field(None, ge=0, le=MAX_GPUS)
    lending_limit: int | None = Field(None, ge=0, le=MAX_GPUS)
    cohort: str | None = Field(None, min_length=1, max_length=64)
    weight: float = Field(1.0, gt=0, le=MAX_WEIGHT)


class NodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    service: Literal["ready", "cordoned", "drained"] = Field(
        description="ready: in service; cordoned: no new job goes there, its jobs run to their "
        "ends; drained: that, and its jobs are preempted now (each checkpoints and waits again)"
    )


class DemandRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    servers: int = Field(
        ge=0, le=100_000, description="inference servers needed within the reclaim notice"
    )


class TenantRequest(BaseModel):
    name: str


def create_app(
    service: SchedulerService,
    store: Store,
    admin_token_hash: str,
    limiter: SubmitLimiter | None = None,
    max_queued: int = MAX_QUEUED_PER_TENANT,
    disk: DiskReserve | None = None,
) -> FastAPI:
    """The REST API. ``disk``: new jobs get 503 while the server's data disk is short of its
    reserve (the server passes its data directory's)."""
    app = FastAPI(
        title="dlsched",
        description="Deep-learning job scheduler: submit, watch and cancel "
        "training jobs; tenants and tokens; cluster status and metrics.",
    )
    app.add_middleware(BodyLimit)
    limiter = limiter or SubmitLimiter()

    bearer = HTTPBearer(auto_error=False, description="the admin token or a tenant's")

    def caller(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
        if credentials is None or not credentials.credentials.strip():
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        digest = hash_token(credentials.credentials.strip())
        if hmac.compare_digest(digest, admin_token_hash):
            return ADMIN
        tenant = store.tenant_by_token_hash(digest)
        if tenant is None:
            raise HTTPException(401, "unknown token", headers={"WWW-Authenticate": "Bearer"})
        return tenant["id"]

    def admin(who: str = Depends(caller)) -> str:
        if who != ADMIN:
            raise HTTPException(403, "admin token required")
        return who

    def own_job(job_id: str, who: str) -> dict:
        job = store.job(job_id)
        if job is None or (who != ADMIN and job["tenant_id"] != who):
            raise HTTPException(404, f"no job '{job_id}'")
        return job

    @app.exception_handler(SpecError)
    async def bad_spec(request: Request, e: SpecError) -> JSONResponse:
        return JSONResponse(
            {"detail": {"field": e.field, "reason": e.reason, "message": str(e)}}, status_code=422
        )

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, e: RequestValidationError) -> JSONResponse:
        return await bad_spec(request, spec_error(list(e.errors())))

    @app.exception_handler(sqlite3.OperationalError)
    async def store_failed(request: Request, e: sqlite3.OperationalError) -> JSONResponse:
        """A write the database refused (the disk filled up after all): 503, nothing lost of
        what was accepted before."""
        if "full" not in str(e):
            raise e
        reason = "the server's data disk is full: try again once space is freed"
        return JSONResponse(
            {"detail": {"field": "disk", "reason": reason}},
            status_code=503,
            headers={"Retry-After": "60"},
        )

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard_page() -> HTMLResponse:
        """The dashboard (runtime/static): it asks for a token and calls the API with it."""
        return HTMLResponse(static_file("dashboard.html").decode(), headers=PAGE_HEADERS)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in STATIC_TYPES:
            raise HTTPException(404, "no such file")
        return Response(static_file(name), media_type=STATIC_TYPES[name], headers=PAGE_HEADERS)

    @app.get("/v1/dashboard")
    def dashboard(limit: int = Query(200, ge=1, le=2000), who: str = Depends(caller)) -> dict:
        """What the dashboard shows at once: the cluster, the latest ``limit`` jobs (and every
        queued or running one), utilization and queue length over the last hours."""
        tenant = None if who == ADMIN else who
        rows, total = store.recent_jobs(tenant, limit)
        return {
            "cluster": service.snapshot(tenant),
            "jobs": [compact(r) for r in rows],
            "jobs_total": total,
            "history": [
                dict(zip(("t", "gpus_used", "gpus_usable", "queued", "running"), h))
                for h in list(service.history)
            ],
            "tenant": tenant,
        }

    def compact(row: dict) -> dict:
        spec = row["spec"]
        return {
            "id": row["id"],
            "tenant": row["tenant_id"],
            "status": row["status"],
            "gpus": spec.get("gpus"),
            "iteration": row["iteration"],
            "iterations": spec.get("iterations"),
            "preemptions": row["preemptions"],
            "failures": row["failures"],
            "submitted": row["submitted"],
            "started": row["started"],
            "finished": row["finished"],
            "deadline": spec.get("deadline"),
            "predicted_finish": service.predicted_finish(row["id"])
            if row["status"] == "running"
            else None,
        }

    @app.get("/healthz")
    def healthz() -> dict:
        return {"ok": True}

    @app.post("/v1/tenants", status_code=201)
    def create_tenant(body: TenantRequest, _: str = Depends(admin)) -> dict:
        name = body.name
        if not TENANT_NAME.match(name) or name == ADMIN:
            raise SpecError(
                "name",
                "must be 1-32 lowercase letters, digits or '-', starting with a letter "
                f"(and not '{ADMIN}'), got {body.name[:64]!r}",
            )
        token = new_token()
        try:
            tenant = service.create_tenant(name, hash_token(token))
        except sqlite3.IntegrityError:
            if any(t["name"] == name for t in store.tenants(removed=True)):
                raise HTTPException(
                    409, f"tenant '{name}' was removed: its jobs' history keeps the name"
                ) from None
            raise HTTPException(409, f"tenant '{name}' exists") from None
        return {"id": tenant["id"], "name": tenant["name"], "token": token}

    @app.post("/v1/tenants/{name}/token", status_code=201)
    def replace_token(name: str, _: str = Depends(admin)) -> dict:
        """A new token for the tenant: the old one is refused from now on (one that leaked)."""
        token = new_token()
        if not store.replace_token(name, hash_token(token)):
            raise HTTPException(404, f"no tenant '{name[:64]}'")
        return {"name": name, "token": token}

    @app.delete("/v1/tenants/{name}")
    def remove_tenant(name: str, _: str = Depends(admin)) -> dict:
        """The tenant's token is refused from now on and its queued and running jobs are
        cancelled; its finished jobs stay, for usage and export, until the retention. Its name
        stays taken."""
        removed = service.remove_tenant(name)
        if removed is None:
            raise HTTPException(404, f"no tenant '{name[:64]}'")
        return removed

    @app.get("/v1/tenants")
    def list_tenants(removed: bool = Query(False), _: str = Depends(admin)) -> list[dict]:
        """The tenants (``removed``: those removed, with when)."""
        return store.tenants(removed=removed)

    @app.post("/v1/jobs", status_code=201)
    def submit(spec: JobRequest, who: str = Depends(caller)) -> dict:
        if who == ADMIN:
            raise HTTPException(403, "jobs belong to tenants: submit with a tenant's token")
        wait = limiter.take(who)
        if wait is not None:
            raise HTTPException(
                429,
                f"too many submits: try again in {wait:.1f} s",
                headers={"Retry-After": str(max(1, round(wait)))},
            )
        if len(store.jobs(who, statuses=(QUEUED,))) >= max_queued:
            raise HTTPException(429, f"tenant has {max_queued} jobs waiting already (the limit)")
        short = disk.short() if disk is not None else None
        if short:
            raise HTTPException(
                503, {"field": "disk", "reason": short}, headers={"Retry-After": "60"}
            )
        clean = service.validate(
            spec.model_dump(exclude_none=True)
        )  # SpecError -> 422; nothing stored
        try:
            job = store.add_job(who, clean)
        except TenantRemoved:
            raise HTTPException(401, "the tenant was removed") from None
        service.wake()
        return job

    def shown(row: dict) -> dict:
        """A job as the API shows it: its row, its deadline and its predicted finish."""
        return {
            **row,
            "deadline": row["spec"].get("deadline"),
            "predicted_finish": service.predicted_finish(row["id"]),
        }

    @app.get("/v1/jobs")
    def list_jobs(who: str = Depends(caller)) -> list[dict]:
        return [shown(row) for row in store.jobs(None if who == ADMIN else who)]

    @app.get("/v1/jobs/{job_id}")
    def job_status(job_id: str, who: str = Depends(caller)) -> dict:
        return {**shown(own_job(job_id, who)), "events": store.events(job_id)}

    @app.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse)
    def job_logs(job_id: str, who: str = Depends(caller)) -> str:
        own_job(job_id, who)
        return tail(service.executor.log_path(job_id), MAX_LOG_BYTES)

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel(job_id: str, who: str = Depends(caller)) -> dict:
        job = own_job(job_id, who)
        if job["status"] in FINAL:
            raise HTTPException(409, f"job '{job_id}' is already {job['status']}")
        store.update_job(job_id, event="cancel requested", cancel_requested=1)
        service.wake()
        return {"id": job_id, "cancel_requested": True}

    @app.get("/v1/cluster")
    def cluster(who: str = Depends(caller)) -> dict:
        return service.snapshot(None if who == ADMIN else who)

    @app.get("/v1/quotas")
    def quotas(who: str = Depends(caller)) -> dict:
        """Tenants' quotas and what they use (a tenant: its own)."""
        return service.quotas(None if who == ADMIN else who)

    @app.put("/v1/tenants/{name}/quota")
    def set_quota(name: str, body: QuotaRequest, _: str = Depends(admin)) -> dict:
        if not TENANT_NAME.match(name):
            raise SpecError("name", f"no such tenant name: {name[:64]!r}")
        # (a removed tenant's too: its quota stays, lent to its cohort)
        if all(t["name"] != name for t in store.tenants() + store.tenants(removed=True)):
            raise HTTPException(404, f"no tenant '{name}'")
        return service.set_quota(name, body.model_dump(exclude_none=True))

    @app.get("/v1/usage")
    def usage(
        since: float = Query(0.0), until: float | None = Query(None), who: str = Depends(caller)
    ) -> dict:
        """GPU-hours, queued and running time and preemptions per tenant and job (sacct-like)."""
        return usage_report(
            store, since, time.time() if until is None else until, None if who == ADMIN else who
        )

    @app.get("/v1/export")
    def export(
        since: float = Query(0.0, ge=0, allow_inf_nan=False),
        until: float | None = Query(None, ge=0, allow_inf_nan=False),
        who: str = Depends(caller),
    ) -> dict:
        """Finished and running jobs submitted in [since, until) as a trace the simulator replays,
        with what their runs measured (a tenant: its own jobs)."""
        return service.export(
            since, math.inf if until is None else until, None if who == ADMIN else who
        )

    @app.put("/v1/pools/inference/demand")
    def inference_demand(body: DemandRequest, _: str = Depends(admin)) -> dict:
        """The inference side's autoscaler: the servers it needs within the reclaim notice."""
        return service.set_inference_demand(body.servers)

    @app.put("/v1/nodes/{name}")
    def set_node(name: str, body: NodeRequest, _: str = Depends(admin)) -> dict:
        """An operator's maintenance: a node out of service (cordoned, drained) or back."""
        if name not in service.node_names:
            raise HTTPException(404, f"no node {name[:64]!r}")
        return service.set_node(name, body.service)

    @app.get("/v1/pools")
    def pools(_: str = Depends(admin)) -> dict:
        return service.pools()

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")

    return app
