"""Run by test_security.py in a network namespace of the test's own (``unshare --net``), never
on the host's: an embedded cluster where mallory's job binds every port it can while alice's
2-worker job (a process group that needs a rendezvous port) starts. Prints the outcome as JSON.
Argument: the data directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dlsched.runtime.job_network import loopback_up

loopback_up()
# a narrow ephemeral range in this namespace: one process of the hog can take all of it
Path("/proc/sys/net/ipv4/ip_local_port_range").write_text("40000 40999\n")

from runtime_helpers import (  # noqa: E402
    EMULATED,
    PROGRAMS,
    Harness,
    local_ray_cluster,
    log_of,
    wait_for,
)

data_dir = Path(sys.argv[1])
cluster_gen = local_ray_cluster(nodes=1, gpus_per_node=3, cpus_per_node=4)
cluster = next(cluster_gen)
from runtime_helpers import sandbox_for  # noqa: E402

h = Harness(cluster.address, data_dir, "fifo", sandbox=sandbox_for(data_dir))
try:
    mallory, alice = h.tenant("mallory"), h.tenant("alice")
    hog = h.submit(
        mallory,
        entrypoint=f"{PROGRAMS / 'port_hog.py'}:build",
        args={**EMULATED["args"], "fixed_ms": 100.0},
        gpus=1,
        batch_size=8,
        iterations=100_000,
    )
    h.wait_status(hog, "running")
    try:
        wait_for(lambda: "HELD" in log_of(h, hog), 60, what="the hog to hold its ports")
    except AssertionError:
        print(h.job(hog), log_of(h, hog)[-3000:], file=sys.stderr)
        raise
    honest = h.submit(alice, **EMULATED, gpus=2, batch_size=8, iterations=30)
    result = h.wait_status(honest, "done", "failed", timeout_s=150)
    print(
        json.dumps(
            {
                "honest": {k: result[k] for k in ("status", "failures", "attempt", "events")},
                "hog": h.job(hog)["status"],
                "held": [line for line in log_of(h, hog).splitlines() if "HELD" in line],
            }
        ),
        flush=True,
    )
finally:
    h.close()
    cluster_gen.close()
