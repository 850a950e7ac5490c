"""``dlsched server``: the store, the Ray cluster (embedded unless ``--ray-address``), the
scheduling loop and the API, started together and stopped together."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from ..errors import SpecError
from .store import SQLiteStore

DEFAULT_PORT = 8470


def admin_token_hash(store: SQLiteStore, data_dir: Path, given: str | None) -> str:
    """The admin token's hash: from ``--admin-token`` / ``DLSCHED_ADMIN_TOKEN`` if given, else
    the one created at the first start (its token written to ``data_dir/admin.token``, 0600)."""
    from .api import hash_token, new_token
    if given:
        digest = hash_token(given)
        store.set_setting("admin_token_hash", digest)
        return digest
    digest = store.get_setting("admin_token_hash")
    if digest is None:
        token = new_token()
        path = data_dir / "admin.token"
        path.write_text(token + "\n")
        path.chmod(0o600)
        digest = hash_token(token)
        store.set_setting("admin_token_hash", digest)
        print(f"dlsched: admin token written to {path}", flush=True)
    return digest


def serve(args, params: dict) -> int:
    try:
        import uvicorn

        from .api import create_app
        from .executor import LocalRayCluster, RayExecutor
        from .service import SchedulerService
    except ImportError as e:
        raise SpecError("server", f"the server needs the runtime's packages ({e.name} is missing): "
                                  "pip install 'dlsched[runtime]'") from None

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(args.db or data_dir / "dlsched.db")
    digest = admin_token_hash(store, data_dir, args.admin_token or os.environ.get("DLSCHED_ADMIN_TOKEN"))
    local = None
    address = args.ray_address
    if address is None:
        local = LocalRayCluster(args.nodes, args.gpus_per_node)
        address = local.address
    executor = RayExecutor(address, data_dir, start_timeout_s=args.start_timeout_s)
    service = SchedulerService(store, executor, args.policy, params, interval_s=args.interval_s,
                               resize_mechanism=args.resize_mechanism, metrics_tenants=args.metrics_tenants)
    service.start()
    app = create_app(service, store, digest)
    print(f"dlsched: serving on http://{args.host}:{args.port} (policy {args.policy}, "
          f"{service.capacity_gpus} GPUs on {len(service.node_names)} nodes)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
        executor.shutdown()
        if local is not None:
            local.shutdown()
    return 0


def add_server_parser(sub):
    p = sub.add_parser("server", help="run the scheduler service: REST API, scheduling loop, Ray executor")
    p.add_argument("--data-dir", default="dlsched-data", help="checkpoints, logs, admin token (default %(default)s)")
    p.add_argument("--db", help="SQLite database path (default DATA_DIR/dlsched.db)")
    p.add_argument("--policy", default="fifo", help="scheduling policy (see 'dlsched policies'; default %(default)s)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="policy parameter (repeatable)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--ray-address", help="attach to this Ray cluster (its nodes started with dlsched GPU "
                   "resources) instead of starting an embedded one")
    p.add_argument("--nodes", type=int, default=2, help="embedded cluster: emulated nodes (default %(default)s)")
    p.add_argument("--gpus-per-node", type=int, default=4, help="embedded cluster: GPUs per node (default %(default)s)")
    p.add_argument("--admin-token", help="admin token (default: $DLSCHED_ADMIN_TOKEN, else generated at the first start)")
    p.add_argument("--interval-s", type=float, default=0.5, help="scheduling pass period (default %(default)s)")
    p.add_argument("--metrics-tenants", action="store_true",
                   help="label /metrics' queue length by tenant (off: /metrics needs no token, so tenant "
                        "names stay private)")
    p.add_argument("--resize-mechanism", choices=["background", "stop-resume"], default="background",
                   help="how the elastic policies' resizes are carried out (default %(default)s)")
    p.add_argument("--start-timeout-s", type=float, default=120.0,
                   help="a job's workers must all be placed and set up within this (default %(default)s)")
    return p
