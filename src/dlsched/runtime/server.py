"""``dlsched server``: the store, the Ray cluster (embedded unless ``--ray-address``), the
scheduling loop and the API, started together and stopped together."""

from __future__ import annotations

import fcntl
import logging
import math
import os
import signal
import socket
from argparse import ArgumentParser, Namespace
from pathlib import Path
from typing import Any

from ..errors import SpecError, option_name
from ..inference import DEFAULT_RECLAIM_NOTICE_S
from ..jobs import MAX_TIME_S
from ..policies.catalog import make_policy
from .limits import (
    CHECKPOINT_RETENTION_S,
    DISK_RESERVE_BYTES,
    FINISHED_KEPT_PER_TENANT,
    JOB_RETENTION_S,
    DiskReserve,
)
from .sandbox import (
    DEFAULT_CPUS,
    DEFAULT_DIR_MIB,
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_MIB,
    DEFAULT_UID_BASE,
    DEFAULT_UID_COUNT,
    MIN_MEMORY_MIB,
    Sandbox,
)
from .store import SQLiteStore

DEFAULT_PORT = 8470


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file that is 0600 from the moment it exists (never world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # a file that existed before keeps its mode otherwise


def admin_token_hash(store: SQLiteStore, data_dir: Path, given: str | None) -> str:
    """The admin token's hash: from ``--admin-token-file`` / ``DLSCHED_ADMIN_TOKEN`` if given
    (an ``admin.token`` file from an earlier start is then stale: removed, and said so), else the
    one created at the first start, its token written to ``data_dir/admin.token`` (0600)."""
    from .api import hash_token, new_token

    path = data_dir / "admin.token"
    if given:
        digest = hash_token(given)
        store.set_setting("admin_token_hash", digest)
        if path.exists():
            path.unlink()
            print(
                f"dlsched: removed {path}: the admin token now comes from the given one", flush=True
            )
        return digest
    stored = store.get_setting("admin_token_hash")
    if stored is None or not path.exists():
        token = new_token()
        write_private(path, token + "\n")
        stored = hash_token(token)
        store.set_setting("admin_token_hash", stored)
        print(f"dlsched: admin token written to {path}", flush=True)
    return stored


def given_admin_token(args: Namespace) -> str | None:
    """The admin token from ``--admin-token-file``, else ``DLSCHED_ADMIN_TOKEN`` (never from the
    command line itself, where other users could read it in the process list)."""
    if args.admin_token_file:
        try:
            token = Path(args.admin_token_file).read_text().strip()
        except OSError as e:
            raise SpecError("admin-token-file", f"cannot read it: {e.strerror}") from None
        if not token:
            raise SpecError("admin-token-file", "the file is empty")
        return token
    return os.environ.get("DLSCHED_ADMIN_TOKEN") or None


def sandbox_from(args: Namespace, data_dir: Path) -> Sandbox:
    """The tenant sandbox the options ask for, checked (a :class:`SpecError` if it cannot
    isolate)."""
    try:
        first, _, last = args.tenant_uids.partition("-")
        base, count = int(first), int(last) - int(first) + 1
    except ValueError:
        raise SpecError("tenant-uids", f"expected FIRST-LAST, got {args.tenant_uids!r}") from None
    if count < 1:
        raise SpecError("tenant-uids", "LAST must not be below FIRST")
    sandbox = Sandbox(
        hide=(str(data_dir.resolve()),),
        isolate=not args.trust_tenants,
        uid_base=base,
        uid_count=count,
        memory_mib=args.job_memory_mib,
        max_processes=args.job_max_processes,
        cpus=args.job_cpus,
        dir_mib=args.job_dir_mib,
        expose=tuple(args.sandbox_expose or ()),
        warm=not args.cold_starts,
    )
    sandbox.check()
    return sandbox


def hold_exclusively(lock: Path, option: str, what: Path) -> int:
    """Lock ``lock`` for this process's lifetime (the kernel lets go when it ends, crashed or
    not) and write its pid there; a second server on the same data directory or database would
    run the same jobs twice, so it is refused, naming ``option`` and the holder."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 20, 0).decode(errors="replace").strip()
        os.close(fd)
        by = f" (pid {holder})" if holder.isdigit() else ""
        raise SpecError(option, f"{what} is in use by another dlsched server{by}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def listen_on(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound before anything starts: a port in use stopped the
    server only once Ray was up and it had said it was serving."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's own
        try:
            sock.bind(address)
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
    except OSError as e:
        reason = e.strerror or str(e)
        raise SpecError("port", f"cannot listen on {host}:{port}: {reason}") from None
    return sock


# Chosen bounds of the embedded cluster: each emulated node is a raylet and its workers on this
# machine, and each GPU a custom resource on the raylet's command line (100,000 overflowed it)
MAX_EMBEDDED_NODES = 64
MAX_EMBEDDED_GPUS_PER_NODE = 64


# the embedded cluster's shape when not given
EMBEDDED_DEFAULTS = {"nodes": 2, "gpus_per_node": 4, "inference_nodes": 0}


# the bounds of an isolated tenant process when not given (with --trust-tenants none applies)
ISOLATION_DEFAULTS = {
    "tenant_uids": f"{DEFAULT_UID_BASE}-{DEFAULT_UID_BASE + DEFAULT_UID_COUNT - 1}",
    "job_memory_mib": DEFAULT_MEMORY_MIB,
    "job_max_processes": DEFAULT_MAX_PROCESSES,
    "job_cpus": DEFAULT_CPUS,
}


def _take_defaults(args: Namespace, defaults: dict, unused: bool, why: str) -> None:
    """Each option of ``defaults`` not given takes its default; when ``unused`` (the other
    options make them do nothing), one given is refused, naming it and ``why``."""
    for name, default in defaults.items():
        value = getattr(args, name)
        if value is None:
            setattr(args, name, default)
        elif unused:
            option = option_name(name)
            raise SpecError(option[2:], f"{option} {why}")


def check_options(args: Namespace, params: dict) -> None:
    """The numeric options and the policy with its parameters, before anything starts (a bad
    one stopped the server only once Ray was up, or never: a pass period of 0 spun, nan ones
    were taken). Options the others make do nothing were taken in silence: the embedded
    cluster's shape beside --ray-address, the sandbox's beside --trust-tenants, the reclaim
    notice without inference servers; they are refused, naming them."""
    _take_defaults(
        args,
        EMBEDDED_DEFAULTS,
        args.ray_address is not None,
        "shapes the embedded cluster: one at --ray-address has its own nodes",
    )
    if args.reclaim_notice_s is None:
        args.reclaim_notice_s = DEFAULT_RECLAIM_NOTICE_S
    elif args.ray_address is None and not args.inference_nodes:  # (an attached cluster's
        # inference servers are known once Ray is up)
        raise SpecError(
            "reclaim-notice-s",
            "--reclaim-notice-s is a reclaimed inference server's: the embedded cluster has "
            "none (--inference-nodes)",
        )
    if args.trust_tenants and (args.cold_starts or args.sandbox_expose):
        option = "--cold-starts" if args.cold_starts else "--sandbox-expose"
        raise SpecError(option[2:], f"{option} sets up the sandbox: --trust-tenants has none")
    _take_defaults(
        args,
        ISOLATION_DEFAULTS,
        args.trust_tenants,
        "bounds an isolated tenant process: with --trust-tenants nothing is bounded",
    )
    embedded = [
        ("nodes", args.nodes, 1, MAX_EMBEDDED_NODES),
        ("gpus-per-node", args.gpus_per_node, 1, MAX_EMBEDDED_GPUS_PER_NODE),
        ("inference-nodes", args.inference_nodes, 0, MAX_EMBEDDED_NODES),
    ]
    for name, value, low, high in (
        ("port", args.port, 0, 65535),
        *(embedded if args.ray_address is None else []),
        ("finished-kept-per-tenant", args.finished_kept_per_tenant, 1, 10**9),
        ("job-max-processes", args.job_max_processes, 1, 10**6),
        ("job-memory-mib", args.job_memory_mib, 0, 2**40),
    ):
        if not low <= value <= high:
            raise SpecError(name, f"must be an integer in {low}..{high:,}, got {value!r}")
    # (durations at most a job's longest time, dlsched.jobs.MAX_TIME_S: past it they overflow)
    for name, value, least, most in (
        ("interval-s", args.interval_s, 0.01, MAX_TIME_S),  # a shorter period spins
        ("start-timeout-s", args.start_timeout_s, 0.01, MAX_TIME_S),
        ("shutdown-checkpoint-s", args.shutdown_checkpoint_s, 0.0, MAX_TIME_S),
        ("disk-reserve-mib", args.disk_reserve_mib, 0.0, 2.0**40),  # (1 EiB: past any disk)
        ("checkpoint-retention-h", args.checkpoint_retention_h, 0.0, MAX_TIME_S / 3600),
        ("reclaim-notice-s", args.reclaim_notice_s, 0.0, MAX_TIME_S),
    ):
        if not (math.isfinite(value) and least <= value <= most):
            raise SpecError(name, f"must be a number in [{least:g}, {most:g}], got {value!r}")
    if not (math.isfinite(args.job_retention_days) and args.job_retention_days > 0):
        raise SpecError(
            "job-retention-days", f"must be a finite number > 0, got {args.job_retention_days!r}"
        )
    make_policy(args.policy, **params)  # the service makes its own once Ray is up


def serve(args: Namespace, params: dict) -> int:
    check_options(args, params)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    data_dir = Path(args.data_dir)
    sandbox = sandbox_from(args, data_dir)  # its options too are refused before anything is made
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)  # the database and the tokens are the server's alone
    hold_exclusively(data_dir / "server.lock", "data-dir", data_dir)
    db = args.db or str(data_dir / "dlsched.db")
    if db != ":memory:":  # (--db may be another server's too)
        Path(db).parent.mkdir(parents=True, exist_ok=True)
        hold_exclusively(Path(db + ".lock"), "db", Path(db))
    listener = listen_on(args.host, args.port)
    from .ray_setup import check_reachable, configure_ray

    configure_ray(
        Path(args.ray_token_file) if args.ray_token_file else data_dir / "ray.token",
        embedded=args.ray_address is None,
    )
    if args.ray_address is not None:
        check_reachable(args.ray_address, "ray-address")
    try:
        import uvicorn

        from .api import create_app
        from .ray_executor import LocalRayCluster, RayExecutor
        from .service import SchedulerService
    except ImportError as e:
        raise SpecError(
            "server",
            f"the server needs the runtime's packages ({e.name} is missing): "
            "pip install 'dlsched[runtime]'",
        ) from None

    store = SQLiteStore(db)
    digest = admin_token_hash(store, data_dir, given_admin_token(args))
    if not sandbox.isolate:
        print(
            "dlsched: --trust-tenants: tenant programs run as this server's own user, unisolated",
            flush=True,
        )
    local = None
    address = args.ray_address
    if address is None:
        local = LocalRayCluster(
            args.nodes, args.gpus_per_node, inference_nodes=args.inference_nodes
        )
        address = local.address
    executor = RayExecutor(address, data_dir, sandbox, start_timeout_s=args.start_timeout_s)
    quotas = None
    if args.quotas:
        from ..tenant_quotas import load_tenants

        training = sum(n.gpus for n in executor.inventory() if n.alive and n.pool == "training")
        quotas = load_tenants(args.quotas, [t["name"] for t in store.tenants()], training)
    service = SchedulerService(
        store,
        executor,
        args.policy,
        params,
        interval_s=args.interval_s,
        resize_mechanism=args.resize_mechanism,
        metrics_tenants=args.metrics_tenants,
        checkpoint_retention_s=args.checkpoint_retention_h * 3600,
        job_retention_s=args.job_retention_days * 86400,
        finished_kept_per_tenant=args.finished_kept_per_tenant,
        reclaim_notice_s=args.reclaim_notice_s,
        quotas=quotas,
    )
    if service.policy.loans_servers and not service.state.loans.inference_nodes:
        print(
            f"dlsched: policy {args.policy} borrows idle inference servers and this cluster has "
            "none: no server will be lent to training (--inference-nodes, or on an attached "
            "cluster nodes with the resource dlsched_pool_inference; docs/runtime.md)",
            flush=True,
        )
    kept = store.quotas()
    if kept:  # (an edit of the --quotas file does not move these)
        print(f"dlsched: quotas set through the API hold for {', '.join(sorted(kept))}", flush=True)
    service.start()
    reserve = DiskReserve(data_dir, int(args.disk_reserve_mib * (1 << 20)))
    app = create_app(service, store, digest, disk=reserve)
    print(
        f"dlsched: serving on http://{args.host}:{listener.getsockname()[1]} "
        f"(policy {args.policy}, "
        f"{_count(service.capacity_gpus, 'GPU')} on "
        f"{_count(len(service.node_names) - len(service.state.loans.inference_nodes), 'node')}"
        + (
            f", {_count(len(service.state.loans.inference_nodes), 'inference server')}"
            if service.state.loans.inference_nodes
            else ""
        )
        + ")",
        flush=True,
    )
    # uvicorn stops on SIGTERM or SIGINT, then raises the signal again for the handler it found
    # (Ray's, which exits with a traceback): this one lets the shutdown below run, then exit 0
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        service.stop()
        executor.shutdown(args.shutdown_checkpoint_s)
        saved = service.requeue_at_shutdown(executor.poll())
        print(f"dlsched: {_count(saved, 'running job')} checkpointed", flush=True)
        if local is not None:
            import ray

            ray.shutdown()  # the driver leaves before its cluster goes
            local.shutdown()
    print("dlsched: stopped", flush=True)
    return 0


def add_server_parser(sub: Any) -> ArgumentParser:
    p = sub.add_parser(
        "server", help="run the scheduler service: REST API, scheduling loop, Ray executor"
    )
    p.add_argument(
        "--data-dir",
        default="dlsched-data",
        help="checkpoints, logs, admin token (default %(default)s); one server at a time",
    )
    p.add_argument(
        "--db", help="SQLite database path (default DATA_DIR/dlsched.db); one server at a time"
    )
    p.add_argument(
        "--policy",
        default="fifo",
        help="scheduling policy: a name (see 'dlsched policies') or a plug-in's "
        "package.module:ClassName (default %(default)s)",
    )
    p.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="policy parameter (repeatable)"
    )
    p.add_argument("--host", default="127.0.0.1", help="the API's address (default %(default)s)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="(default %(default)s; 0: any free port)"
    )
    p.add_argument(
        "--ray-address",
        help="attach to this Ray cluster, HOST:PORT (its nodes started with dlsched GPU "
        "resources) instead of starting an embedded one",
    )
    # (None: not given; an attached cluster has its own nodes, check_options)
    p.add_argument(
        "--nodes",
        type=int,
        help=f"embedded cluster: emulated nodes (default {EMBEDDED_DEFAULTS['nodes']})",
    )
    p.add_argument(
        "--gpus-per-node",
        type=int,
        help=f"embedded cluster: GPUs per node (default {EMBEDDED_DEFAULTS['gpus_per_node']})",
    )
    p.add_argument(
        "--inference-nodes",
        type=int,
        help="embedded cluster: inference servers (i0, i1...) training may borrow under a policy "
        f"that loans them, e.g. aryl (default {EMBEDDED_DEFAULTS['inference_nodes']}; "
        "docs/runtime.md)",
    )
    p.add_argument(
        "--reclaim-notice-s",
        type=float,
        help="how long a reclaimed inference server's training workers have to leave "
        f"(default {DEFAULT_RECLAIM_NOTICE_S})",
    )
    p.add_argument(
        "--admin-token-file",
        help="file holding the admin token (default: $DLSCHED_ADMIN_TOKEN, "
        "else one generated at the first start into DATA_DIR/admin.token)",
    )
    p.add_argument(
        "--quotas",
        metavar="SOURCE",
        help="tenant quotas: a YAML file, or equal (the training GPUs split evenly between the "
        "tenants, again as each is created); 'dlsched quotas --set TENANT ...' changes one live, "
        "kept across restarts (without this flag no tenant is held back until one is set; "
        "docs/tenancy.md)",
    )
    p.add_argument(
        "--interval-s", type=float, default=0.5, help="scheduling pass period (default %(default)s)"
    )
    p.add_argument(
        "--metrics-tenants",
        action="store_true",
        help="label /metrics' queue length by tenant (off: /metrics needs no token, so tenant "
        "names stay private)",
    )
    p.add_argument(
        "--resize-mechanism",
        choices=["background", "stop-resume"],
        default="background",
        help="how the elastic policies' resizes are carried out (default %(default)s)",
    )
    p.add_argument(
        "--start-timeout-s",
        type=float,
        default=120.0,
        help="a job's workers must all be placed and set up within this (default %(default)s)",
    )
    p.add_argument(
        "--shutdown-checkpoint-s",
        type=float,
        default=60.0,
        help="on SIGTERM or Ctrl-C, each running job checkpoints (as when preempted) and waits "
        "for the next start; its runs get this long in all, then are killed (0: at once, "
        "losing the work since their last periodic checkpoint; default %(default)s, the "
        "executor's stop timeout)",
    )
    p.add_argument(
        "--disk-reserve-mib",
        type=float,
        default=DISK_RESERVE_BYTES >> 20,
        help="new jobs get 503 while the data directory's disk has less free, so the jobs "
        "accepted keep room for their logs and checkpoints (default %(default)s)",
    )
    p.add_argument(
        "--checkpoint-retention-h",
        type=float,
        default=CHECKPOINT_RETENTION_S / 3600,
        help="a finished job's checkpoint is deleted after this many hours; its log stays "
        "(default %(default)s)",
    )
    p.add_argument(
        "--job-retention-days",
        type=float,
        default=JOB_RETENTION_S / 86400,
        help="a finished job's row, events, accounting and log are deleted after this many days "
        "(default %(default)s)",
    )
    p.add_argument(
        "--finished-kept-per-tenant",
        type=int,
        default=FINISHED_KEPT_PER_TENANT,
        help="of each tenant's finished jobs only the newest this many are kept (row, events, "
        "accounting, log; default %(default)s)",
    )
    g = p.add_argument_group("tenant isolation (docs/security.md)")
    g.add_argument(
        "--trust-tenants",
        action="store_true",
        help="run tenant programs as the server's own user, unisolated: only for a single-user "
        "machine (isolation needs root and bubblewrap)",
    )
    g.add_argument(
        "--cold-starts",
        action="store_true",
        help="start every isolated tenant process as a new interpreter that imports PyTorch "
        "(about 2 CPU-s), not forked from a template process per node that imported it once",
    )
    g.add_argument(
        "--tenant-uids",
        metavar="FIRST-LAST",
        help="uids tenant processes run as, one per job "
        f"(default {ISOLATION_DEFAULTS['tenant_uids']})",
    )
    g.add_argument(
        "--job-memory-mib",
        type=int,
        help="address space limit of each tenant process in MiB, 0 for none, else at least "
        f"{MIN_MEMORY_MIB} (CUDA reserves much address space: raise it or use 0 on real GPUs; "
        f"default {DEFAULT_MEMORY_MIB})",
    )
    g.add_argument(
        "--job-max-processes",
        type=int,
        help=f"processes and threads a job's uid may have (default {DEFAULT_MAX_PROCESSES})",
    )
    g.add_argument(
        "--job-cpus",
        type=float,
        help="CPU time each worker of a job may use with all it forks, in cores, 0 for no bound "
        f"(a control group, where the node has CPU control; default {DEFAULT_CPUS})",
    )
    g.add_argument(
        "--job-dir-mib",
        type=int,
        default=DEFAULT_DIR_MIB,
        help="disk a job's directory (checkpoint, what its program writes) may use while it "
        "runs, checked every few seconds, 0 for no bound (default %(default)s)",
    )
    g.add_argument(
        "--sandbox-expose",
        action="append",
        metavar="DIR",
        help="a directory tenant programs may read (their code, data); repeatable",
    )
    g.add_argument(
        "--ray-token-file",
        help="Ray's auth token (default DATA_DIR/ray.token, created at the first "
        "start); an attached cluster's nodes must use the same",
    )
    return p


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
