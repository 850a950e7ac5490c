"""Where the service keeps tenants, jobs and their history: an interface, and SQLite behind it.

Everything the service must not lose across a restart is here: a job is written before the
submit call returns, and every state change before it is acted on.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Protocol

# job states as stored (a superset of the policy's view: starting and cancelling are the
# executor's intermediate steps)
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
FINAL = (DONE, FAILED, CANCELLED)


class Store(Protocol):
    """The interface the service uses; a server database would implement the same."""

    def create_tenant(self, name: str, token_hash: str) -> dict: ...
    def tenant_by_token_hash(self, token_hash: str) -> dict | None: ...
    def replace_token(self, name: str, token_hash: str) -> bool: ...
    def remove_tenant(self, name: str, at: float) -> bool: ...
    def tenants(self, removed: bool = False) -> list[dict]: ...
    def add_job(self, tenant_id: str, spec: dict) -> dict: ...
    def job(self, job_id: str) -> dict | None: ...

    def known_job(self, job_id: str) -> dict:
        """A job the caller knows is stored (a live one, one just added): KeyError if not."""
        row = self.job(job_id)
        if row is None:
            raise KeyError(f"job {job_id} is not in the store")
        return row

    def jobs(
        self,
        tenant_id: str | None = None,
        statuses: tuple[str, ...] | None = None,
        after_seq: int = 0,
        cancel_requested: bool | None = None,
    ) -> list[dict]: ...
    def update_job(
        self,
        job_id: str,
        event: str | None = None,
        at: float | None = None,
        run: int | None = None,
        **fields: Any,
    ) -> None: ...
    def finished_between(self, after: float, until: float) -> list[str]: ...
    def recent_jobs(self, tenant_id: str | None, limit: int) -> tuple[list[dict], int]: ...
    def events(self, job_id: str) -> list[dict]: ...
    def get_setting(self, key: str) -> str | None: ...
    def set_setting(self, key: str, value: str) -> None: ...
    def set_quota(self, tenant: str, fields: dict) -> None: ...
    def delete_quota(self, tenant: str) -> None: ...
    def quotas(self) -> dict[str, dict]: ...
    def close_runs_left_open(self) -> int: ...
    def runs(self, since: float, until: float, tenant_id: str | None = None) -> list[dict]: ...
    def prune(self, keep_per_tenant: int, finished_before: float) -> list[str]: ...
    def add_node_event(self, t: float, kind: str, node: str) -> None: ...
    def node_events(self, until: float = math.inf) -> list[tuple[float, str, str]]: ...


class TenantRemoved(Exception):
    """A job was submitted for a tenant that was removed meanwhile."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    id TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL, token_hash TEXT UNIQUE NOT NULL, created REAL
    NOT NULL, removed REAL);
CREATE TABLE IF NOT EXISTS jobs (
    n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, tenant_id TEXT NOT NULL,
    spec TEXT NOT NULL, status TEXT NOT NULL, submitted REAL NOT NULL, started REAL, finished REAL,
    gpus TEXT, attempt INTEGER NOT NULL DEFAULT 0, iteration INTEGER NOT NULL DEFAULT 0,
    iteration_s REAL, preemptions INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '', profile TEXT,
    measured TEXT, measured_iteration_s REAL);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);
CREATE TABLE IF NOT EXISTS events (
    n INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, t REAL NOT NULL, status TEXT NOT
    NULL,
    message TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS quotas (tenant TEXT PRIMARY KEY, fields TEXT NOT NULL, set_at REAL NOT
    NULL);
CREATE TABLE IF NOT EXISTS runs (
    n INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, tenant_id TEXT NOT NULL,
    start REAL NOT NULL, end REAL, gpus INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS runs_job ON runs(job_id);
CREATE TABLE IF NOT EXISTS node_events (
    n INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, kind TEXT NOT NULL, node TEXT NOT NULL);
"""

_JOB_FIELDS = {
    "status",
    "started",
    "finished",
    "gpus",
    "attempt",
    "iteration",
    "iteration_s",
    "preemptions",
    "failures",
    "cancel_requested",
    "message",
    "profile",
    "measured",
    "measured_iteration_s",
}
_JSON_FIELDS = ("gpus", "profile", "measured")


class SQLiteStore(Store):
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # the server's alone (token hashes, every tenant's jobs), wherever --db puts it;
            # SQLite gives its -wal and -shm files the database's mode
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
            os.chmod(self.path, 0o600)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
        for column, kind in (("measured", "TEXT"), ("measured_iteration_s", "REAL")):
            if column not in columns:  # a database from before it was kept
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
        if "removed" not in {r[1] for r in self._db.execute("PRAGMA table_info(tenants)")}:
            self._db.execute("ALTER TABLE tenants ADD COLUMN removed REAL")
        self._lock = threading.Lock()

    def _rows(self, sql: str, args: tuple = ()) -> list[dict]:
        with self._lock:
            return [dict(r) for r in self._db.execute(sql, args).fetchall()]

    # -- tenants -----------------------------------------------------------------------------
    def create_tenant(self, name: str, token_hash: str) -> dict:
        row = {"id": name, "name": name, "token_hash": token_hash, "created": time.time()}
        with self._lock:
            self._db.execute(
                "INSERT INTO tenants (id, name, token_hash, created) "
                "VALUES (:id, :name, :token_hash, :created)",
                row,
            )
        return row

    def tenant_by_token_hash(self, token_hash: str) -> dict | None:
        rows = self._rows(
            "SELECT * FROM tenants WHERE token_hash = ? AND removed IS NULL", (token_hash,)
        )
        return rows[0] if rows else None

    def replace_token(self, name: str, token_hash: str) -> bool:
        """The tenant's token from now on (the old one no longer authenticates); False: no such
        tenant."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE tenants SET token_hash = ? WHERE name = ? AND removed IS NULL",
                (token_hash, name),
            )
        return cursor.rowcount == 1

    def remove_tenant(self, name: str, at: float) -> bool:
        """The tenant is removed at ``at``: no token of its authenticates any more and it leaves
        the list of tenants; its name stays taken (its jobs' history keeps it). False: no such
        tenant, or removed already."""
        with self._lock:
            cursor = self._db.execute(
                "UPDATE tenants SET removed = ?, token_hash = ? WHERE name = ? AND removed IS NULL",
                (at, f"removed:{name}", name),  # (no token hashes to it: hashes are hex)
            )
        return cursor.rowcount == 1

    def tenants(self, removed: bool = False) -> list[dict]:
        """The tenants (``removed``: those removed, with when)."""
        if removed:
            return self._rows(
                "SELECT id, name, created, removed FROM tenants WHERE removed IS NOT NULL "
                "ORDER BY created"
            )
        return self._rows(
            "SELECT id, name, created FROM tenants WHERE removed IS NULL ORDER BY created"
        )

    # -- jobs --------------------------------------------------------------------------------
    def add_job(self, tenant_id: str, spec: dict) -> dict:
        """A new queued job; TenantRemoved if its tenant was removed (after the request that
        adds it was let in: under the same lock as the removal, so none slips past it)."""
        now = time.time()
        with self._lock, self._db:
            self._db.execute("BEGIN")
            tenant = self._db.execute(
                "SELECT removed FROM tenants WHERE id = ?", (tenant_id,)
            ).fetchone()
            if tenant is not None and tenant[0] is not None:
                raise TenantRemoved(tenant_id)
            cur = self._db.execute(
                "INSERT INTO jobs (id, tenant_id, spec, status, submitted) VALUES ('', ?, ?, ?, ?)",
                (tenant_id, json.dumps(spec), QUEUED, now),
            )
            job_id = f"job-{cur.lastrowid}"
            self._db.execute("UPDATE jobs SET id = ? WHERE n = ?", (job_id, cur.lastrowid))
            self._db.execute(
                "INSERT INTO events (job_id, t, status, message) VALUES (?, ?, ?, ?)",
                (job_id, now, QUEUED, "submitted"),
            )
        return self.known_job(job_id)

    @staticmethod
    def _decode(row: dict) -> dict:
        row["spec"] = json.loads(row["spec"])
        for name in _JSON_FIELDS:
            row[name] = json.loads(row[name]) if row[name] else None
        row["cancel_requested"] = bool(row["cancel_requested"])
        row["seq"] = row.pop("n")  # submission order
        return row

    def job(self, job_id: str) -> dict | None:
        rows = self._rows("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return self._decode(rows[0]) if rows else None

    def jobs(
        self,
        tenant_id: str | None = None,
        statuses: tuple[str, ...] | None = None,
        after_seq: int = 0,
        cancel_requested: bool | None = None,
    ) -> list[dict]:
        sql = "SELECT * FROM jobs WHERE n > ?"
        args: list[object] = [after_seq]
        if cancel_requested is not None:
            sql += " AND cancel_requested = ?"
            args.append(int(cancel_requested))
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            args.append(tenant_id)
        if statuses:
            sql += f" AND status IN ({','.join('?' * len(statuses))})"
            args.extend(statuses)
        return [self._decode(r) for r in self._rows(sql + " ORDER BY n", tuple(args))]

    def recent_jobs(self, tenant_id: str | None, limit: int) -> tuple[list[dict], int]:
        """Every queued or running job and the ``limit`` latest others (newest first), and how
        many jobs there are in all: what the dashboard shows, without reading the whole table."""
        where, args = ("WHERE tenant_id = ?", (tenant_id,)) if tenant_id is not None else ("", ())
        final = ",".join("?" * len(FINAL))
        active = self._rows(
            f"SELECT * FROM jobs {where} {'AND' if where else 'WHERE'} status NOT IN ({final})",
            args + FINAL,
        )
        ended = self._rows(
            f"SELECT * FROM jobs {where} {'AND' if where else 'WHERE'} status IN ({final}) "
            "ORDER BY n DESC LIMIT ?",
            args + FINAL + (limit,),
        )
        total = self._rows(f"SELECT COUNT(*) AS c FROM jobs {where}", args)[0]["c"]
        rows = sorted(active + ended, key=lambda r: -r["n"])
        return [self._decode(r) for r in rows], total

    def finished_between(self, after: float, until: float) -> list[str]:
        """Ids of jobs that finished (done, failed or cancelled) in ``(after, until]``."""
        return [
            r["id"]
            for r in self._rows(
                "SELECT id FROM jobs WHERE finished > ? AND finished <= ? ORDER BY n",
                (after, until),
            )
        ]

    def update_job(
        self,
        job_id: str,
        event: str | None = None,
        at: float | None = None,
        run: int | None = None,
        **fields: Any,
    ) -> None:
        """Set ``fields`` and add ``event`` at time ``at`` (default now); with ``run``, the
        job's accounting changes at that time too: its open run (if any) ends, and a run of
        ``run`` GPUs begins (``run`` > 0). One transaction: a crash or a failed write leaves
        the job's status and its runs as they were together (a job shown done with its run
        still open would be charged its GPUs for ever)."""
        unknown = set(fields) - _JOB_FIELDS
        if unknown:
            raise KeyError(f"unknown job fields: {', '.join(sorted(unknown))}")
        for name in _JSON_FIELDS:
            if fields.get(name) is not None:
                fields[name] = json.dumps(fields[name])
        t = time.time() if at is None else at
        with self._lock, self._db:
            self._db.execute("BEGIN")
            if fields:
                sets = ", ".join(f"{k} = :{k}" for k in fields)
                self._db.execute(f"UPDATE jobs SET {sets} WHERE id = :id", {**fields, "id": job_id})
            if event is not None:
                status = (
                    fields.get("status")
                    or self._db.execute(
                        "SELECT status FROM jobs WHERE id = ?", (job_id,)
                    ).fetchone()[0]
                )
                self._db.execute(
                    "INSERT INTO events (job_id, t, status, message) VALUES (?, ?, ?, ?)",
                    (job_id, t, status, event),
                )
            if run is not None:
                self._db.execute(
                    "UPDATE runs SET end = ? WHERE job_id = ? AND end IS NULL", (t, job_id)
                )
                if run > 0:
                    self._db.execute(
                        "INSERT INTO runs (job_id, tenant_id, start, gpus) "
                        "SELECT id, tenant_id, ?, ? FROM jobs WHERE id = ?",
                        (t, run, job_id),
                    )

    def events(self, job_id: str) -> list[dict]:
        return self._rows(
            "SELECT t, status, message FROM events WHERE job_id = ? ORDER BY n", (job_id,)
        )

    def prune(self, keep_per_tenant: int, finished_before: float) -> list[str]:
        """Delete the finished jobs (row, events, accounting) beyond each tenant's newest
        ``keep_per_tenant`` finished ones, or finished before ``finished_before``; their ids."""
        final = ",".join("?" * len(FINAL))
        with self._lock, self._db:
            self._db.execute("BEGIN")
            ids = [
                r[0]
                for r in self._db.execute(
                    "SELECT id FROM (SELECT id, finished, ROW_NUMBER() OVER "
                    "(PARTITION BY tenant_id ORDER BY n DESC) AS k FROM jobs "
                    f"WHERE status IN ({final})) WHERE k > ? OR finished < ?",
                    (*FINAL, keep_per_tenant, finished_before),
                )
            ]
            for table, column in (("events", "job_id"), ("runs", "job_id"), ("jobs", "id")):
                self._db.executemany(f"DELETE FROM {table} WHERE {column} = ?", [(i,) for i in ids])
            # node events as old, but each node's last of each sort (lost or back; out of service
            # or back): a replay still starts with the node as it then was
            self._db.execute(
                "DELETE FROM node_events WHERE t < ? AND n NOT IN (SELECT MAX(n) FROM "
                "node_events GROUP BY node, kind IN ('down', 'up'))",
                (finished_before,),
            )
        return ids

    # -- nodes lost and back, out of service and back (a replay's node events) ---------------
    def add_node_event(self, t: float, kind: str, node: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO node_events (t, kind, node) VALUES (?, ?, ?)", (t, kind, node)
            )

    def node_events(self, until: float = math.inf) -> list[tuple[float, str, str]]:
        """(time, kind, node name) before ``until``, in the order they happened."""
        rows = self._rows("SELECT t, kind, node FROM node_events WHERE t < ? ORDER BY n", (until,))
        return [(r["t"], r["kind"], r["node"]) for r in rows]

    # -- settings ----------------------------------------------------------------------------
    def get_setting(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM settings WHERE key = ?", (key,))
        return rows[0]["value"] if rows else None

    def set_setting(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    # -- quotas set through the API (they outlive a restart) ----------------------------------
    def set_quota(self, tenant: str, fields: dict) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO quotas VALUES (?, ?, ?)",
                (tenant, json.dumps(fields), time.time()),
            )

    def delete_quota(self, tenant: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM quotas WHERE tenant = ?", (tenant,))

    def quotas(self) -> dict[str, dict]:
        """Tenant -> the fields of the quota last set for it, in the order they were set."""
        rows = self._rows("SELECT tenant, fields FROM quotas ORDER BY set_at")
        return {r["tenant"]: json.loads(r["fields"]) for r in rows}

    # -- accounting: a row per stretch a job held a fixed number of GPUs ---------------------
    def close_runs_left_open(self) -> int:
        """End the open runs of jobs not running (at the job's finish, else its last event):
        a server before runs and statuses were written together could stop between the two,
        and such a run would be charged until the report's end. How many were ended."""
        with self._lock, self._db:
            self._db.execute("BEGIN")
            return self._db.execute(
                "UPDATE runs SET end = MAX(start, COALESCE("
                "(SELECT finished FROM jobs WHERE jobs.id = runs.job_id), "
                "(SELECT MAX(t) FROM events WHERE events.job_id = runs.job_id), start)) "
                "WHERE end IS NULL AND job_id NOT IN (SELECT id FROM jobs WHERE status = ?)",
                (RUNNING,),
            ).rowcount

    def runs(self, since: float, until: float, tenant_id: str | None = None) -> list[dict]:
        """Stretches overlapping [since, until] (an open one ends at ``until``), clipped to it."""
        sql = (
            "SELECT job_id, tenant_id, MAX(start, ?) AS start, MIN(COALESCE(end, ?), ?) AS end, "
            "gpus "
            "FROM runs WHERE start < ? AND COALESCE(end, ?) > ?"
        )
        args: tuple = (since, until, until, until, until, since)
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            args += (tenant_id,)
        return self._rows(sql + " ORDER BY n", args)
