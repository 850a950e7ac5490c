import contextlib
import os
import signal

import pytest

from dlsched.cluster import parse_cluster_spec
from dlsched.jobs import JobSpec
from dlsched.policies.catalog import make_policy
from dlsched.sim import SimConfig, simulate
from scratch_dirs import scratch_dir


def job(job_id, submit, gpus, duration, **kw):
    return JobSpec(
        job_id=job_id, submit_time_s=float(submit), num_gpus=gpus, duration_s=float(duration), **kw
    )


@contextlib.contextmanager
def ends_within(seconds):
    """A hang fails the test (with its traceback) instead of holding the suite."""

    def on_alarm(*_):
        raise TimeoutError(f"not ended within {seconds} s")

    before = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def run(cluster, jobs, policy, config=None, **params):
    """Simulate and return {job_id: JobState}."""
    result = simulate(
        parse_cluster_spec(cluster), jobs, make_policy(policy, **params), config or SimConfig()
    )
    return {j.job_id: j for j in result.jobs}, result


# prepared workloads (dlsched.workload_cache) in a folder of this run's, not the user's cache
os.environ["DLSCHED_CACHE_DIR"] = scratch_dir("dlsched-test-cache-")
# Ray's session folders (logs, sockets) too: in /tmp/ray each run left about 25 of them, 771
# (357 MB) after two days. A short name: a Unix socket's path has at most 107 bytes.
os.environ["RAY_TMPDIR"] = scratch_dir("dlsched-ray-")
# Ray as the server runs it, set before any test imports Ray (runtime_helpers does it at its
# import): first imported inside a test, after another file's test had imported Ray, it failed
# that test ("configure_ray must run before ray is imported") in a run of a few files
import runtime_helpers  # noqa: E402, F401

# Ray starts its workers, and so every job's tenant process, 15 niceness steps below the
# process that started its cluster (its raylet's `worker_niceness`). Beside a CPU-bound test on
# the other pytest worker, or a server starting up, they then get a twenty-eighth of a core:
# a torch import took over a minute, and runtime tests timed out. In the suite they run at the
# tests' own priority; `dlsched server` keeps Ray's default.
os.environ["RAY_worker_niceness"] = "0"


def pytest_collection_modifyitems(items):
    """Tests run on two workers (pytest-xdist, ``--dist loadfile``: a module's tests stay on one
    worker, in file order, as some build on each other), each with its own shared cluster for
    the end-to-end tests that use it. Those run first: they are the longest (files go to the
    workers in this order, as ``--no-loadscope-reorder`` in pyproject.toml keeps it; xdist's
    default, the files with most tests first, left the longest to the end: 396 s against 426 s
    for the suite on 2026-11-29). Then the files that start fresh PyTorch processes
    (``torch_processes``): left to the end, they kept one worker busy after the other was done."""
    items.sort(
        key=lambda item: (
            not item.get_closest_marker("runtime"),
            not _on_the_shared_cluster(item),
            not item.get_closest_marker("torch_processes"),
        )
    )


def _on_the_shared_cluster(item) -> bool:
    return "ray_cluster" in item.fixturenames and not hasattr(item.module, "ray_cluster")


@pytest.fixture(scope="session")
def ray_cluster():
    """One embedded cluster (2 nodes x 2 emulated GPUs) per worker for every runtime test that
    needs no other shape: each test gets its own service, data directory and tenants on it."""
    from runtime_helpers import local_ray_cluster

    yield from local_ray_cluster(nodes=2, gpus_per_node=2, cpus_per_node=4)


@pytest.fixture
def harness(ray_cluster, tmp_path, request):
    """A service on the shared cluster: (policy, params[, options]) by indirect parametrize."""
    from runtime_helpers import Harness

    policy, params, *options = getattr(request, "param", ("fifo", None))
    h = Harness(ray_cluster.address, tmp_path, policy, params, **(options[0] if options else {}))
    yield h
    h.close()
    # the next test gets the whole cluster: a worker this one left holding a GPU is this test's
    # error, not a start that never comes in the next one's
    from runtime_helpers import wait_for_gpus_released

    wait_for_gpus_released(ray_cluster)


@pytest.fixture
def J():
    return job


def pytest_terminal_summary(terminalreporter):
    """A skipped test is a check that did not run: name each one, loudly, at the very end."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section(f"{len(skipped)} TEST(S) DID NOT RUN", sep="!", red=True, bold=True)
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line(f"SKIPPED {report.nodeid}: {reason}", red=True, bold=True)
    terminalreporter.write_line(
        "`make test` installs bubblewrap and chromium as root with apt; see CONTRIBUTING.md",
        red=True,
    )
