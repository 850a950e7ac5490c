import pytest

from dlsched.elastic_jobs import MAX_ELASTIC_GPUS, make_elastic
from dlsched.errors import SpecError
from dlsched.jobs import JobSpec
from dlsched.traces import load_trace


def test_fraction_bounds_and_determinism():
    jobs = load_trace("philly").jobs[:20000]
    a = make_elastic(jobs, 0.3, 512, seed=1)
    assert a == make_elastic(jobs, 0.3, 512, seed=1)
    assert a != make_elastic(jobs, 0.3, 512, seed=2)
    elastic = [j for j in a if j.elastic]
    assert 0.28 < len(elastic) / len(jobs) < 0.32
    for j in elastic:
        assert j.min_gpus == max(1, j.num_gpus // 2)
        assert j.max_gpus == max(j.num_gpus, min(2 * j.num_gpus, MAX_ELASTIC_GPUS, 512))
        assert j.min_gpus <= j.num_gpus <= j.max_gpus
    # the same job is elastic whichever other jobs are loaded
    subset = {j.job_id for j in jobs[:5000]}
    assert {j.job_id for j in make_elastic(jobs[:5000], 0.3, 512, seed=1) if j.elastic} == {
        j.job_id for j in elastic if j.job_id in subset
    }


def test_every_job_or_none():
    jobs = [JobSpec(f"j{i}", 0.0, 4, 10.0) for i in range(50)]
    assert all(j.elastic for j in make_elastic(jobs, 1.0, 8))
    assert not any(j.elastic for j in make_elastic(jobs, 0.0, 8))
    assert all(j.max_gpus == 8 for j in make_elastic(jobs, 1.0, 8))
    with pytest.raises(SpecError, match="elastic_fraction"):
        make_elastic(jobs, 1.5, 8)
