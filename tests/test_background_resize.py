"""Background resizes and the books: a move's old workers run until its switch, so its GPUs
stay held until then (in both backends) and are given back when the job stops, fails or
switches; a scale-in's GPUs are free at once."""

import pytest

from dlsched.cluster import parse_cluster_spec
from dlsched.errors import PlanError
from dlsched.jobs import PENDING, JobSpec
from dlsched.policies.catalog import make_policy
from dlsched.state.cluster_state import ClusterState
from dlsched.state.costs import Costs
from dlsched.state.invariants import problems
from dlsched.view import Plan


def moved(scale_in_switch_reported=False):
    """e (elastic, 1..4, no model: a 30 s stop-resume pause) runs on GPUs 0, 1 of node 0 and
    moves in the background to 1, 4, 5; r (1 GPU) waits."""
    state = ClusterState(
        parse_cluster_spec("2x4:V100"),
        make_policy("fifo"),
        scale_in_switch_reported=scale_in_switch_reported,
    )
    e = state.submit(JobSpec("e", 0.0, 2, 1000.0, min_gpus=1, max_gpus=4))
    r = state.submit(JobSpec("r", 0.0, 1, 100.0))
    state.apply(Plan(start=[(e, (0, 1))]))
    state.apply(Plan(resize=[(e, (1, 4, 5))]))
    return state, e, r


def test_a_move_holds_the_gpu_it_leaves_until_its_switch():
    state, e, r = moved()
    # its old worker on GPU 0 runs until the switch at 0 + 30 s pause
    assert (e.gpus, e.leaving, e.switch_at) == ((1, 4, 5), (0,), 30.0)
    assert not state.free.is_free(0) and state.free.total == 4 and problems(state) == []
    with pytest.raises(PlanError, match="job r: GPU 0: a job's old workers leave it"):
        state.apply(Plan(start=[(r, (0,))]))
    state.advance_to(30.0)
    state.switch(e)
    assert e.leaving == () and state.free.is_free(0) and state.free.total == 5
    state.apply(Plan(start=[(r, (0,))]))
    assert problems(state) == []


def test_a_moving_job_preempted_or_lost_gives_its_old_gpus_back():
    state, e, r = moved()
    state.apply(Plan(preempt=[e], start=[(r, (0,))]))  # in the same plan: e's old workers stop
    assert e.status is PENDING and r.gpus == (0,) and problems(state) == []
    state, e, r = moved()
    state.node_down(0)  # the node of its old workers: the job fails
    assert e.status is PENDING and e.failures == 1 and e.leaving == ()
    assert state.free.total == 4 and problems(state) == []  # node 1, whole


def test_a_scale_in_frees_its_gpus_at_once_and_is_under_way_until_a_reported_switch():
    for reported in (False, True):
        state, e, r = moved(reported)
        state.switch(e)
        state.apply(Plan(resize=[(e, (4, 5))]))  # GPU 1's worker exits at a batch boundary
        assert state.free.total == 6 and e.leaving == () and problems(state) == []
        if reported:  # the runtime: no other resize until its executor says it switched
            assert e.switch_at == 0.0
            with pytest.raises(PlanError, match="its previous resize is still under way"):
                state.apply(Plan(resize=[(e, (4, 5, 6))]))
            state.switch(e)
        assert e.switch_at is None
        state.apply(Plan(resize=[(e, (4, 5, 6))]))


def test_a_stop_resume_resize_has_no_switch_to_wait_for():
    state = ClusterState(
        parse_cluster_spec("1x4:V100"),
        make_policy("fifo"),
        Costs(resize_mechanism="stop-resume"),
        scale_in_switch_reported=True,
    )
    e = state.submit(JobSpec("e", 0.0, 2, 1000.0, min_gpus=1, max_gpus=4))
    state.apply(Plan(start=[(e, (0, 1))]))
    state.apply(Plan(resize=[(e, (0,))]))
    assert e.switch_at is None and e.leaving == () and state.free.total == 3
    state.apply(Plan(resize=[(e, (0, 1, 2))]))  # the job restarted at its new size
    assert e.switch_at is None and state.free.total == 1 and problems(state) == []


def test_a_server_a_move_leaves_is_reclaimed_after_its_switch():
    # e runs on GPU 0 of the owned node and GPU 4 of the lent server (node 1) and moves off the
    # server in the background (to 0, 1, 2); the server is asked back: Aryl plans nothing for
    # e (its old worker leaves at the switch), and the server returns at the switch
    state = ClusterState(parse_cluster_spec("1x4:V100,1x2:V100@inference"), make_policy("aryl"))
    state.set_inference_demand(0)
    e = state.submit(JobSpec("e", 0.0, 2, 1000.0, min_gpus=1, max_gpus=4))
    state.apply(Plan(start=[(e, (0, 4))]))
    state.apply(Plan(resize=[(e, (0, 1, 2))]))
    assert e.leaving == (4,)
    state.set_inference_demand(1)
    assert e.resizes == 1 and list(state.loans.reclaiming) == [1] and problems(state) == []
    state.advance_to(30.0)
    state.switch(e)
    assert not state.loans.reclaiming and state.loans.stats.returned == 1
    assert state.loans.stats.reclaim_scale_ins == 0 and problems(state) == []
