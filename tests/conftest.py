import pytest

from dlsched.cluster import parse_cluster_spec
from dlsched.jobs import JobSpec
from dlsched.policies.catalog import make_policy
from dlsched.sim import SimConfig, simulate


def job(job_id, submit, gpus, duration, **kw):
    return JobSpec(job_id=job_id, submit_time_s=float(submit), num_gpus=gpus,
                   duration_s=float(duration), **kw)


def run(cluster, jobs, policy, config=None, **params):
    """Simulate and return {job_id: JobState}."""
    result = simulate(parse_cluster_spec(cluster), jobs, make_policy(policy, **params),
                      config or SimConfig())
    return {j.job_id: j for j in result.jobs}, result


@pytest.fixture
def J():
    return job
