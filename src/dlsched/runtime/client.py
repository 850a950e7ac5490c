"""The CLI's client side: ``dlsched submit | jobs | logs | cancel | status | tenant``.

The server address comes from ``--server`` or ``$DLSCHED_SERVER`` (default
http://127.0.0.1:8470), the token from ``--token`` or ``$DLSCHED_TOKEN``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from argparse import Namespace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from ..errors import SpecError, option_name
from ..report.columns import human_duration
from ..yamlfile import read_yaml
from .server import DEFAULT_PORT

if TYPE_CHECKING:
    from argparse import ArgumentParser

    import httpx


class ApiError(Exception):
    pass


def _client(args: Namespace) -> httpx.Client:
    import httpx

    token = args.token or os.environ.get("DLSCHED_TOKEN")
    if not token:
        raise SpecError("token", "give --token or set DLSCHED_TOKEN")
    base = args.server or os.environ.get("DLSCHED_SERVER") or f"http://127.0.0.1:{DEFAULT_PORT}"
    try:
        url = httpx.URL(base)
    except httpx.InvalidURL as e:  # (not an HTTPError: it was a traceback)
        raise SpecError("server", f"{base!r} is not a URL: {e}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise SpecError("server", f"{base!r} is not an http:// or https:// URL")
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _call(args: Namespace, method: str, path: str, **kwargs: Any) -> httpx.Response:
    import httpx

    with _client(args) as c:
        try:
            r = c.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise ApiError(f"cannot reach the server: {e}") from None
    if r.status_code >= 400:
        detail = (
            r.json().get("detail")
            if r.headers.get("content-type", "").startswith("application/json")
            else r.text
        )
        if isinstance(detail, dict) and "message" in detail:
            detail = detail["message"]
        raise ApiError(f"{r.status_code}: {detail}")
    return r


def cmd_submit(args: Namespace) -> int:
    path = Path(args.spec)
    spec = read_yaml(path, "spec")
    job = _call(args, "POST", "/v1/jobs", json=spec).json()
    print(job["id"])
    return 0


def _ago(t: float | None) -> str:
    return "-" if not t else f"{time.time() - t:,.0f} s ago"


def _in(t: float | None) -> str:
    """A time relative to now: 'in 1.5 h', '3 min ago'."""
    if not t:
        return "-"
    dt = t - time.time()
    text = human_duration(abs(dt))
    return f"in {text}" if dt >= 0 else f"{text} ago"


def _predicted_end(t: float | None) -> str:
    """A running job's predicted end; one that has passed (the job runs slower than its
    measured speed said) is shown as overdue, not as a time the job ended."""
    if not t:
        return "-"
    late = time.time() - t
    return f"overdue {human_duration(late)}" if late > 0 else _in(t)


def on_track(job: dict) -> str:
    """Whether a job with a deadline meets it: as finished, or as predicted."""
    deadline = job.get("deadline")
    if deadline is None:
        return "-"
    if job["status"] == "done":
        return "met" if job["finished"] <= deadline else "missed"
    if job["status"] in ("failed", "cancelled"):
        return "missed" if job["status"] == "failed" else "-"
    if job.get("predicted_finish") is not None:
        # a predicted end that has passed: it ends from now on, at the earliest
        expected = max(job["predicted_finish"], time.time())
        return "yes" if expected <= deadline else "late"
    return "waiting" if time.time() < deadline else "late"


def gpus_shown(job: dict) -> str:
    """The GPUs it asked for; a running job's (or a done job's, at its end) as ``1 (asked 4)``
    when it held another count (GENIE ran it on fewer, an elastic job grew or shrank)."""
    asked = job["spec"]["gpus"]
    held = len(job.get("gpus") or ()) if job["status"] in ("running", "done") else 0
    return f"{held} (asked {asked})" if held and held != asked else str(asked)


def cmd_jobs(args: Namespace) -> int:
    jobs = _call(args, "GET", "/v1/jobs").json()
    rows = []
    for j in jobs:
        spec = j["spec"]
        # measured by the server's clock in the configuration it runs in (the program's own
        # report is a claim); "-" until a stretch of a run was measured
        clocked = j.get("measured_iteration_s")
        ms = f"{clocked * 1000:.0f}" if clocked else "-"
        rows.append(
            [
                j["id"],
                j["tenant_id"],
                j["status"],
                gpus_shown(j),
                f"{j['iteration']}/{spec.get('iterations') or str(spec['epochs']) + 'ep'}",
                ms,
                j["preemptions"],
                j["failures"],
                _ago(j["submitted"]),
                _in(j.get("deadline")),
                _predicted_end(j.get("predicted_finish")),
                on_track(j),
            ]
        )
    print(
        tabulate(
            rows,
            [
                "id",
                "tenant",
                "status",
                "gpus",
                "progress",
                "ms/it",
                "preempt",
                "fails",
                "submitted",
                "deadline",
                "predicted end",
                "on track",
            ],
            disable_numparse=True,
        )
    )
    return 0


# control characters but tab and newline: a tenant's text must not drive the terminal
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A tenant's text (a log, an event's message) with control characters shown as \\xNN, so
    that printing it cannot move the cursor, retitle the window or hide lines."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cmd_logs(args: Namespace) -> int:
    sys.stdout.write(printable(_call(args, "GET", f"/v1/jobs/{args.id}/logs").text))
    return 0


def cmd_events(args: Namespace) -> int:
    """A job's events, oldest first, each message whole (a failure's full traceback)."""
    job = _call(args, "GET", f"/v1/jobs/{args.id}").json()
    print(f"{job['id']} ({job['status']})")
    for e in job["events"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["t"]))
        lines = printable(e["message"]).rstrip().splitlines() or [""]
        print(f"{when}  {e['status']:<9} {lines[0]}")
        for line in lines[1:]:
            print(f"{'':30}{line}")
    return 0


def cmd_cancel(args: Namespace) -> int:
    _call(args, "POST", f"/v1/jobs/{args.id}/cancel")
    print(f"cancel requested for {args.id}")
    return 0


def cmd_status(args: Namespace) -> int:
    s = _call(args, "GET", "/v1/cluster").json()
    idle = [
        f"{s[field]} {what}"
        for field, what in (
            ("gpus_serving_inference", "serving inference"),
            ("gpus_out_of_service", "out of service or down"),
        )
        if s.get(field)  # (a server from before these fields counted them in use)
    ]
    in_use = s.get("gpus_in_use", s["gpus_total"] - s["gpus_free"])
    print(
        f"policy {s['policy']}: {in_use}/{s['gpus_total']} GPUs in use"
        + (f" ({', '.join(idle)})" if idle else "")
        + f", {len(s['running'])} running, {len(s['queue'])} queued"
    )
    for n in s["nodes"]:
        cells = " ".join(n["jobs_by_gpu"].get(str(i), "idle") for i in range(n["gpus"]))
        loan = f" [inference: {n['loan']}]" if n.get("pool") == "inference" else ""
        out = "" if n.get("in_service", True) else " [out of service]"
        print(f"  {n['name']:<6} {'up' if n['alive'] else 'DOWN':<4} {cells}{loan}{out}")
    for t, q in (s.get("over_quota") or {}).items():
        print(
            f"  tenant {t} is over its quota: {q['reserved']} GPUs reserved, nominal "
            f"{q['nominal']} (borrowing)"
        )
    if s["queue"]:
        print("queue: " + " ".join(s["queue"]))
        print("queued by tenant: " + ", ".join(f"{t} {c}" for t, c in s["queue_by_tenant"].items()))
    return 0


def cmd_pools(args: Namespace) -> int:
    if args.demand is not None:
        p = _call(args, "PUT", "/v1/pools/inference/demand", json={"servers": args.demand}).json()
    else:
        p = _call(args, "GET", "/v1/pools").json()
    print(
        f"inference servers: {len(p['inference_servers'])}, demand {p['demand']}, held {p['held']}"
    )
    for state in ("loaned", "reclaiming", "returning"):
        print(f"  {state}: {' '.join(p[state]) or '-'}")
    slowest = None if p["max_return_s"] is None else round(p["max_return_s"], 1)
    print(
        f"loans {p['loans']}, reclaims {p['reclaims']}, handed back {p['returned']} "
        f"(slowest {slowest} s of a "
        f"{p['notice_s']:g} s notice), scale-ins {p['reclaim_scale_ins']}, preemptions "
        f"{p['reclaim_preemptions']}"
    )
    return 0


def cmd_node(args: Namespace) -> int:
    n = _call(args, "PUT", f"/v1/nodes/{args.name}", json={"service": args.service}).json()
    print(f"node {n['name']}: {'in service' if n['in_service'] else 'out of service'}")
    return 0


def _when(text: str | None, default: float, option: str) -> float:
    """ISO 8601 with a zone, Unix seconds, or a span back from now (7d, 12h, 30min); an error
    names ``option``."""
    if text is None:
        return default
    from datetime import datetime

    from .jobspec import UNITS_S, WITHIN

    m = WITHIN.match(text)
    if m:
        return time.time() - float(m["n"]) * UNITS_S[m["unit"]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(
            option, f"expected ISO 8601, Unix seconds or a span such as 7d, got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        raise SpecError(option, f"{text!r} has no time zone (add Z or +01:00)")
    return parsed.timestamp()


def cmd_usage(args: Namespace) -> int:
    now = time.time()
    r = _call(
        args,
        "GET",
        "/v1/usage",
        params={
            "since": _when(args.since, now - 30 * 86400, "since"),
            "until": _when(args.until, now, "until"),
        },
    ).json()
    rows = r["jobs"] if args.jobs else r["tenants"]
    cols = (["job_id", "tenant", "status"] if args.jobs else ["tenant", "jobs"]) + [
        "gpu_hours",
        "running_s",
        "queued_s",
        "preemptions",
    ]
    if args.csv:
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(cols)
        for row in rows:
            w.writerow([row[c] for c in cols])
        return 0
    from tabulate import tabulate

    fmt = {
        "gpu_hours": lambda v: f"{v:.3f}",
        "running_s": lambda v: f"{v / 3600:.2f} h",
        "queued_s": lambda v: f"{v / 3600:.2f} h",
    }
    print(
        tabulate(
            [[fmt.get(c, str)(row[c]) for c in cols] for row in rows],
            [c.replace("_s", "").replace("_", " ") for c in cols],
            disable_numparse=True,
        )
    )
    return 0


def fetch_history(args: Namespace) -> dict:
    """The server's finished and running jobs with their measurements (``GET /v1/export``)."""
    now = time.time()
    return _call(
        args,
        "GET",
        "/v1/export",
        params={"since": _when(args.since, 0.0, "since"), "until": _when(args.until, now, "until")},
    ).json()


def cmd_export(args: Namespace) -> int:
    from .export import history_csv

    history = fetch_history(args)
    Path(args.out).write_text(history_csv(history))
    skipped = "".join(f"; left out: {n} ({why})" for why, n in history["skipped"].items())
    print(f"wrote {len(history['jobs'])} jobs to {args.out}{skipped}")
    events = ""
    if history.get("node_events"):
        from ..node_events import node_events_csv

        path = Path(args.out).with_suffix(".node_events.csv")
        path.write_text(node_events_csv(history["node_events"]))
        print(f"wrote {len(history['node_events'])} node events to {path}")
        events = f" --node-events {path}"
    print(f"cluster {history['cluster']}, policy {history['policy']}")
    params = "".join(f" --param {k}={v}" for k, v in history["params"].items())
    print(
        f"replay: dlsched whatif --trace {args.out} --cluster {history['cluster']} "
        f"--server-policy {history['policy']}{params}{events}"
    )
    return 0


QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit", "cohort", "weight")
NO_VALUE = "none"  # --borrowing-limit none, --cohort none, ...: take the limit or cohort away


def _count_or_none(text: str) -> int | str:
    return NO_VALUE if text == NO_VALUE else int(text)


_count_or_none.__name__ = "integer or 'none'"  # (argparse's message: "invalid ... value")


def cmd_quotas(args: Namespace) -> int:
    changes = {k: getattr(args, k) for k in QUOTA_FIELDS if getattr(args, k) is not None}
    if not args.set and changes:
        option = option_name(next(iter(changes)))
        raise SpecError("set", f"{option} changes a tenant's quota: name it with --set TENANT")
    if args.set:
        if not changes:
            raise SpecError(
                "set",
                "give what to change: --nominal, --borrowing-limit, --lending-limit, --cohort, "
                "--weight",
            )
        # the API's PUT replaces the whole quota: the fields not changed are the tenant's own
        # (a nominal alone took a tenant out of its cohort and reset its weight)
        current = _call(args, "GET", "/v1/quotas").json()["tenants"].get(args.set) or {}
        body = {k: current[k] for k in QUOTA_FIELDS if k in current}
        body.update({k: None if v == NO_VALUE else v for k, v in changes.items()})
        print(
            json.dumps(
                _call(args, "PUT", f"/v1/tenants/{args.set}/quota", json=body).json(), indent=1
            )
        )
        return 0
    q = _call(args, "GET", "/v1/quotas").json()
    if not q["tenants"]:
        print(
            "no tenant has a quota (the server runs without --quotas): "
            "dlsched quotas --set TENANT --nominal N gives one"
        )
        return 0
    from tabulate import tabulate

    cols = [
        "nominal",
        "borrowing_limit",
        "lending_limit",
        "cohort",
        "weight",
        "reserved",
        "gpus_held",
        "borrowed",
        "waiting_for_quota",
        "waiting_for_gpus",
    ]
    print(
        tabulate(
            [
                [f"{t} (removed)" if v.get("removed") else t]
                + ["-" if v[c] is None else v[c] for c in cols]
                for t, v in q["tenants"].items()
            ],
            ["tenant"] + [c.replace("_", " ") for c in cols],
            disable_numparse=True,
        )
    )
    return 0


def cmd_tenant_create(args: Namespace) -> int:
    t = _call(args, "POST", "/v1/tenants", json={"name": args.name}).json()
    print(json.dumps(t, indent=1))
    return 0


def cmd_tenant_token(args: Namespace) -> int:
    t = _call(args, "POST", f"/v1/tenants/{args.name}/token").json()
    print(json.dumps(t, indent=1))
    return 0


def cmd_tenant_remove(args: Namespace) -> int:
    t = _call(args, "DELETE", f"/v1/tenants/{args.name}").json()
    print(f"tenant {t['name']} removed; {t['jobs_cancelled']} of its jobs cancelled")
    return 0


def cmd_tenant_list(args: Namespace) -> int:
    tenants = _call(args, "GET", "/v1/tenants", params={"removed": args.removed}).json()
    for t in tenants:
        if args.removed:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t["removed"]))
            print(f"{t['name']} (removed {when})")
        else:
            print(t["name"])
    return 0


def add_client_parsers(sub: Any) -> None:  # (argparse's subparsers action)
    def common(p: ArgumentParser) -> ArgumentParser:
        p.add_argument(
            "--server", help="server URL (default $DLSCHED_SERVER or http://127.0.0.1:8470)"
        )
        p.add_argument("--token", help="your token (default $DLSCHED_TOKEN)")
        return p

    p = common(sub.add_parser("submit", help="submit a training job (YAML or JSON spec)"))
    p.add_argument("spec", help="job spec file")
    p.set_defaults(func=cmd_submit)
    common(
        sub.add_parser("jobs", help="list your jobs (all jobs with the admin token)")
    ).set_defaults(func=cmd_jobs)
    p = common(sub.add_parser("logs", help="a job's log"))
    p.add_argument("id")
    p.set_defaults(func=cmd_logs)
    p = common(
        sub.add_parser(
            "events",
            help="a job's events: starts, preemptions, resizes, failures with their reason",
        )
    )
    p.add_argument("id")
    p.set_defaults(func=cmd_events)
    p = common(sub.add_parser("cancel", help="cancel a queued or running job"))
    p.add_argument("id")
    p.set_defaults(func=cmd_cancel)
    common(
        sub.add_parser("status", help="the cluster's GPUs, running jobs and queue")
    ).set_defaults(func=cmd_status)
    p = common(
        sub.add_parser(
            "usage",
            help="GPU-hours, queued and running time, preemptions per tenant or job (sacct-like)",
        )
    )
    p.add_argument(
        "--since", help="start: ISO 8601, Unix seconds, or back from now (7d, 12h; default 30d)"
    )
    p.add_argument("--until", help="end (default now)")
    p.add_argument("--jobs", action="store_true", help="one row per job, not per tenant")
    p.add_argument("--csv", action="store_true", help="CSV instead of a table")
    p.set_defaults(func=cmd_usage)
    p = common(
        sub.add_parser(
            "quotas", help="tenants' quotas and use; --set TENANT changes one (admin token)"
        )
    )
    p.add_argument(
        "--set",
        metavar="TENANT",
        help="change TENANT's quota by the options below (the rest stays), from now on and "
        "after a restart (docs/tenancy.md)",
    )
    p.add_argument("--nominal", type=int, help="GPUs the tenant is guaranteed")
    p.add_argument(
        "--borrowing-limit",
        type=_count_or_none,
        help=f"at most this many GPUs above nominal ({NO_VALUE}: no limit)",
    )
    p.add_argument(
        "--lending-limit",
        type=_count_or_none,
        help="at most this many GPUs of the nominal quota lent to the cohort; the rest is the "
        f"tenant's alone ({NO_VALUE}: all may be lent)",
    )
    p.add_argument(
        "--cohort",
        help=f"tenants of a cohort lend each other unused nominal quota ({NO_VALUE}: none)",
    )
    p.add_argument("--weight", type=float, help="fair-share weight (drf, ftf)")
    p.set_defaults(func=cmd_quotas)
    p = common(
        sub.add_parser(
            "export",
            help="finished and running jobs with their measured speeds, as a "
            "trace the simulator replays (dlsched whatif)",
        )
    )
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument(
        "--since",
        help="jobs submitted from: ISO 8601, Unix seconds, or back from now (7d, 12h; "
        "default: all)",
    )
    p.add_argument("--until", help="submitted before (default now)")
    p.set_defaults(func=cmd_export)
    p = common(
        sub.add_parser(
            "pools", help="the inference pool: loaned and reclaimed servers (admin token)"
        )
    )
    p.add_argument(
        "--demand",
        type=int,
        help="set the inference side's demand (servers it needs within the notice)",
    )
    p.set_defaults(func=cmd_pools)
    p = common(
        sub.add_parser(
            "node",
            help="take a node out of service for maintenance, or put it back (admin token)",
            description="cordon: no new job goes to the node, its jobs run to their ends; "
            "drain: that, and its jobs checkpoint and wait to resume elsewhere now; ready: "
            "back in service. Kept across server restarts (docs/runtime.md).",
        )
    )
    p.add_argument("name", help="the node's name, as 'dlsched status' lists it")
    what = p.add_mutually_exclusive_group(required=True)
    for flag, service, text in (
        ("--cordon", "cordoned", "no new job goes there"),
        ("--drain", "drained", "and its jobs checkpoint and wait again now"),
        ("--ready", "ready", "back in service"),
    ):
        what.add_argument(flag, dest="service", action="store_const", const=service, help=text)
    p.set_defaults(func=cmd_node)
    tenant = sub.add_parser("tenant", help="tenants (admin token)")
    tsub = tenant.add_subparsers(dest="tenant_command", required=True)
    p = common(tsub.add_parser("create", help="create a tenant and print its token"))
    p.add_argument("name")
    p.set_defaults(func=cmd_tenant_create)
    p = common(
        tsub.add_parser(
            "token", help="give a tenant a new token and print it (its old one stops working)"
        )
    )
    p.add_argument("name")
    p.set_defaults(func=cmd_tenant_token)
    p = common(
        tsub.add_parser(
            "remove",
            help="remove a tenant: its token stops working and its queued and running jobs are "
            "cancelled; its finished jobs stay for usage and export (the name stays taken)",
        )
    )
    p.add_argument("name")
    p.set_defaults(func=cmd_tenant_remove)
    p = common(tsub.add_parser("list", help="list tenants"))
    p.add_argument("--removed", action="store_true", help="those removed instead, with when")
    p.set_defaults(func=cmd_tenant_list)
