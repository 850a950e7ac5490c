"""Bounds on what a caller may send and what the server keeps (documented defaults;
docs/runtime.md): a request body's size, a tenant's name, how fast a tenant may submit and how
many of its jobs may wait, how much of a log one request returns, how long a finished job's
checkpoint stays. A limit hit is a 4xx that says which limit, never a 500 or an unbounded
process."""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from os import PathLike
from typing import Any

# ASGI's parts (the asgiref types, not a dependency here)
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# A job spec's bounds (a value outside is a 422) that what its runs report is checked against
# too (.reports), here where a worker's process reads them without the API's imports
MAX_JOB_GPUS = 4096
MAX_BATCH_SIZE = 65_536  # global batch: a worker's memory grows with it
MAX_ITERATIONS = 10**9
MAX_BODY_BYTES = 1 << 20  # 1 MiB: a job spec is a few hundred bytes
# lowercase: unique case-insensitively; \Z, not $: "$" also matches before a final newline
TENANT_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}\Z")
SUBMITS_PER_S = 5.0  # per tenant, sustained
SUBMIT_BURST = 20  # per tenant, at once
MAX_QUEUED_PER_TENANT = 1000
MAX_LOG_BYTES = 1 << 20  # a log request returns at most its last 1 MiB
# A job's log on the server's disk (runtime/tenant_process.py, LogRelay): its processes write
# it in full while it is under LOG_HEAD_BYTES; past that each keeps only its last
# LOG_TAIL_BYTES, written with a mark of what was cut when it ends; once the file passes
# LOG_HARD_BYTES, only the mark. So one job's log stays under about LOG_HARD_BYTES whatever
# its programs print.
LOG_HEAD_BYTES = 8 << 20
LOG_TAIL_BYTES = 256 << 10
LOG_HARD_BYTES = 32 << 20
CHECKPOINT_RETENTION_S = 24 * 3600.0  # a finished job's checkpoint is deleted after a day
# What the server keeps of finished jobs (row, events, log, accounting): a tenant's newest
# FINISHED_KEPT_PER_TENANT, none older than JOB_RETENTION_S. With MAX_QUEUED_PER_TENANT and the
# 64 KiB bound on a job's args, a tenant's share of the database is bounded.
FINISHED_KEPT_PER_TENANT = 10_000
JOB_RETENTION_S = 90 * 86400.0
# New jobs are refused (503) while the data disk (database, logs, checkpoints) has less free:
# the jobs already accepted keep room to write their logs, checkpoints and states.
DISK_RESERVE_BYTES = 1 << 30


class BodyLimit:
    """ASGI middleware: a request whose body exceeds ``max_bytes`` gets 413 before any handler
    reads it (by its Content-Length, or while it streams in)."""

    def __init__(self, app: App, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._too_large(send)
        seen = 0

        async def counted() -> MutableMapping[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        body = b'{"detail":{"field":"body","reason":"request body over %d bytes"}}' % self.max_bytes
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class SubmitLimiter:
    """Per tenant: a token bucket of ``burst`` submits refilled at ``per_s``."""

    def __init__(
        self,
        per_s: float = SUBMITS_PER_S,
        burst: int = SUBMIT_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_s, self.burst, self.clock = per_s, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, as of)
        self._lock = threading.Lock()

    def take(self, tenant: str) -> float | None:
        """None if the tenant may submit now (a token is spent), else seconds to wait."""
        with self._lock:
            now = self.clock()
            tokens, at = self._buckets.get(tenant, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
            if tokens < 1:
                self._buckets[tenant] = (tokens, now)
                return (1 - tokens) / self.per_s
            self._buckets[tenant] = (tokens - 1, now)
            return None


def tail(path: str | PathLike[str], max_bytes: int) -> str:
    """The end of a file (at most ``max_bytes``), marked when cut; "" if it does not exist."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return ""
    text = data.decode(errors="replace")
    return text if size <= max_bytes else f"[... first {size - max_bytes} bytes not shown]\n" + text


class DiskReserve:
    """Whether the disk holding ``path`` has ``reserve`` bytes free (new work waits if not)."""

    def __init__(self, path: str | PathLike[str], reserve: int = DISK_RESERVE_BYTES) -> None:
        self.path, self.reserve = path, reserve

    def short(self) -> str | None:
        """Why new work is refused now, or None."""
        try:
            free = shutil.disk_usage(self.path).free
        except OSError:
            return None  # not measurable here: the write itself will say
        if free >= self.reserve:
            return None
        return (
            f"the server's data disk has {free >> 20} MiB free, under its reserve of "
            f"{self.reserve >> 20} MiB: new jobs are refused until space is freed"
        )
