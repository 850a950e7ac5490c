"""The scaling model fitted to Pollux's measurements."""

import statistics

import pytest

from dlsched.cluster import parse_cluster_spec
from dlsched.errors import SpecError
from dlsched.jobs import JobSpec, JobState
from dlsched.perf.measurements import pollux_apps, pollux_points
from dlsched.perf.scaling import fit_scaling, holdout_split, relative_errors, scaling_model

APPS = pollux_apps()


def test_all_six_applications_are_measured():
    assert APPS == ["bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"]


@pytest.mark.parametrize("app", APPS)
def test_median_error_on_the_fitted_points_is_under_ten_percent(app):
    errors = relative_errors(scaling_model(app), pollux_points(app))
    assert statistics.median(errors) < 0.10


@pytest.mark.parametrize("app", APPS)
def test_held_out_points_are_predicted_about_as_well(app):
    train, test = holdout_split(pollux_points(app))
    assert not set(train) & set(test)
    assert statistics.median(relative_errors(fit_scaling(app, train), test)) < 0.11


def test_reproduces_measured_single_gpu_points():
    # cifar10 placements.csv, one GPU: per-GPU batch 32 -> 0.0428 s, batch 1024 -> measured.
    # Tolerance 15%: the fit spreads its error over all 1,512 points.
    fit = scaling_model("cifar10")
    measured = {p.local_batch: p.step_s for p in pollux_points("cifar10") if p.gpus == 1}
    assert fit.iteration_s(32) == pytest.approx(measured[32.0], rel=0.15)
    assert fit.iteration_s(1024) == pytest.approx(measured[1024.0], rel=0.15)


@pytest.mark.parametrize("app", APPS)
def test_speed_never_superlinear_and_monotone_on_a_node(app):
    fit = scaling_model(app)
    batch = statistics.median(p.local_batch for p in pollux_points(app))
    one = fit.throughput(batch)
    previous = one
    for gpus in range(2, 5):  # one node of Pollux's testbed: 4 GPUs
        t = fit.throughput(batch, gpus, 1)
        assert t >= previous - 1e-9
        assert t <= gpus * one + 1e-9
        previous = t
    for gpus in (8, 16, 32, 64):  # spread: still never superlinear
        assert fit.throughput(batch, gpus, gpus // 4) <= gpus * one + 1e-9


@pytest.mark.parametrize("app", APPS)
def test_time_grows_with_batch(app):
    fit = scaling_model(app)
    assert fit.iteration_s(64) >= fit.iteration_s(32) >= fit.iteration_s(16)


def test_gradient_accumulation_costs_at_least_k_sub_batch_passes():
    fit = scaling_model("imagenet")
    for k in (2, 4, 8):
        step = fit.iteration_s(256 / k, gpus=4, nodes=1, accumulation=k)
        assert step >= k * fit.compute_s(256 / k)
        # and since every pass pays the fixed cost, more than one pass at the full batch
        assert step > fit.iteration_s(256, gpus=4, nodes=1)


def test_bad_inputs():
    with pytest.raises(SpecError):
        scaling_model("alexnet")
    with pytest.raises(SpecError):
        scaling_model("bert").iteration_s(8, gpus=2, nodes=3)


# -- the zoo: GPU types, co-location, memory, and the simulator's speed ------------------------

from dlsched.perf.measurements import gavel_pair, gavel_solo  # noqa: E402
from dlsched.perf.model import PerfModel  # noqa: E402
from dlsched.perf.zoo import ZOO  # noqa: E402

TRACE_MODELS = [
    "resnet18",
    "shufflenet_v2_x1_0",
    "vgg16",
    "vgg19",
    "dqn",
    "a2c",
    "bert",
    "gpt2",
    "cifar10",
    "imagenet",
    "bert",
    "deepspeech2",
    "yolov3",
    "ncf",
]


def test_every_model_the_traces_name_has_a_profile():
    from dlsched.traces import load_trace

    named = {
        j.model
        for name in ("muri-1", "muri-2", "muri-3", "muri-4", "pollux-1")
        for j in load_trace(name).jobs
    }
    assert named <= set(ZOO) and set(TRACE_MODELS) <= set(ZOO)
    perf = PerfModel()
    for model in set(TRACE_MODELS):
        assert perf.iteration_s(model, 1) > 0


def test_gpu_type_speed_is_gavels_measured_ratio():
    perf = PerfModel()
    expected = gavel_solo("ResNet-18 (batch size 128)", "K80") / gavel_solo(
        "ResNet-18 (batch size 128)", "V100"
    )
    assert perf.type_speed("resnet18", "K80") == pytest.approx(expected)
    assert perf.iteration_s("resnet18", 1, gpu_type="K80") == pytest.approx(
        perf.iteration_s("resnet18", 1) / expected
    )
    assert perf.type_speed("resnet18", "V100") == 1.0
    assert perf.type_speed("resnet18", "V100M32") == 1.0  # the same chip with more memory
    assert PerfModel({"T4": 0.5}).type_speed("bert", "T4") == 0.5


def test_a_gpu_type_nobody_measured_is_refused_unless_the_cluster_gives_its_speed():
    # it ran at V100 speed, silently: an Aryl run with a T4 inference pool gave the V100 numbers
    from dlsched.perf.speed import PerfSpeed

    with pytest.raises(SpecError) as err:
        PerfModel().type_speed("bert", "T4")
    assert err.value.field == "gpu_speed" and "T4" in str(err.value)
    with pytest.raises(SpecError, match="T4 has no measured speed"):
        PerfSpeed(PerfModel(), parse_cluster_spec("1x2:V100,1x2:T4@inference"))
    cluster = parse_cluster_spec("1x2:V100,1x2:T4*0.4@inference")
    speed = PerfSpeed(PerfModel(), cluster)
    job = JobState(JobSpec("a", 0, 1, 100.0, model="resnet18", batch_size=128), seq=0)
    # a 1-GPU job on the T4 (GPU 2) runs at 0.4 of its V100 speed (GPU 0)
    assert speed(job, (2,)) == pytest.approx(0.4 * speed(job, (0,)))


def test_colocation_slowdowns_are_asymmetric_measurements():
    perf = PerfModel()
    xi_a, xi_b = perf.colocation("resnet18", "bert")
    shared = gavel_pair("ResNet-18 (batch size 128)", "Transformer (batch size 16)")
    assert xi_b == pytest.approx(gavel_solo("Transformer (batch size 16)") / shared[1])
    assert xi_a >= 1 and xi_b >= 1 and xi_a != xi_b
    # both VGGs have Blox measurements: vgg19 b32 next to vgg19 b32 ran at 0.43 of its speed
    assert perf.colocation("vgg16", "vgg19") == pytest.approx((1 / 0.43, 1 / 0.43))


@pytest.mark.parametrize("model", [m for m, p in ZOO.items() if p.footprint_mib])
def test_memory_reproduces_the_footprint_and_grows_with_batch(model):
    p = ZOO[model]
    assert p.memory_mib(p.footprint_batch) == pytest.approx(p.footprint_mib)
    assert p.memory_mib(1) < p.memory_mib(p.footprint_batch / 2) < p.memory_mib(p.footprint_batch)
    assert p.memory_mib(1) > p.fixed_mib > 0


def test_memory_is_unknown_where_nothing_was_measured():
    assert PerfModel().memory_mib("imagenet") is None


def test_a_job_alone_at_its_requested_size_takes_exactly_its_trace_duration():
    from dlsched.cluster import parse_cluster_spec
    from dlsched.jobs import JobSpec
    from dlsched.perf.assign import assign_models
    from dlsched.perf.speed import PerfSpeed
    from dlsched.policies.catalog import make_policy
    from dlsched.sim import simulate

    cluster = parse_cluster_spec("4x8:V100")
    perf = PerfModel()
    jobs = [
        JobSpec("muri", 0, 4, 1234.5, model="vgg16", batch_size=64),
        JobSpec("philly-like", 0, 16, 98765.0),
    ]
    jobs = assign_models(jobs, perf, cluster, seed=3)
    assert jobs[1].model == "imagenet" and jobs[1].iterations > 0  # 439 GPU-hours: XL class
    for spec in jobs:
        r = simulate(cluster, [spec], make_policy("fifo"), workload=PerfSpeed(perf, cluster))
        assert r.jobs[0].finish == spec.duration_s


def test_a_job_with_a_model_and_no_batch_gets_the_model_s_default_and_genie_molds_it():
    # issue 25, 3: mapping `model` without `batch` left the batch empty, so GENIE could not
    # predict the job on other sizes and ran it only as asked
    from dlsched.cluster import parse_cluster_spec
    from dlsched.jobs import JobSpec
    from dlsched.perf.assign import assign_models
    from dlsched.perf.model import default_local_batch

    cluster = parse_cluster_spec("1x8:V100")
    given = JobSpec("j", 0, 4, 3600.0, model="cifar10", iterations=500, deadline_s=99_999.0)
    (job,) = assign_models([given], PerfModel(), cluster)
    assert job.model == "cifar10" and job.iterations == 500  # its own, kept
    assert job.batch_size == round(default_local_batch("cifar10") * 4)
    # GENIE now molds it: alone with a loose deadline it gets the fewest GPUs that meet it,
    # below its request (before: its request, 4)
    from dlsched.perf.speed import PerfSpeed
    from dlsched.policies.catalog import make_policy
    from dlsched.sim import simulate

    def gpus_held(spec):
        r = simulate(
            cluster, [spec], make_policy("genie"), workload=PerfSpeed(PerfModel(), cluster)
        )
        return r.jobs[0].attained_gpu_s / r.jobs[0].run_time_s

    assert gpus_held(given) == 4  # no batch: run only as asked
    assert gpus_held(job) < 4


def test_spread_or_slower_placements_run_slower():
    from dlsched.cluster import parse_cluster_spec
    from dlsched.jobs import JobSpec, JobState
    from dlsched.perf.speed import PerfSpeed

    cluster = parse_cluster_spec("2x4:V100,1x4:K80")
    speed = PerfSpeed(PerfModel(), cluster)
    job = JobState(JobSpec("j", 0, 4, 100.0, model="bert", batch_size=16), 0)
    assert speed(job, (0, 1, 2, 3)) == 1.0
    assert speed(job, (0, 1, 4, 5)) < 1.0  # two nodes: cross-node synchronization
    assert speed(job, (8, 9, 10, 11)) < 1.0  # K80s
    assert speed(job, (0, 1)) < 1.0  # half the GPUs, same global batch


def test_model_assignment_is_seeded_and_follows_size_classes():
    from dlsched.perf.assign import assign_models
    from dlsched.traces import load_trace

    jobs = load_trace("philly").jobs[:3000]
    cluster = parse_cluster_spec("64x8")
    a = assign_models(jobs, PerfModel(), cluster, seed=1)
    assert a == assign_models(jobs, PerfModel(), cluster, seed=1)
    assert a != assign_models(jobs, PerfModel(), cluster, seed=2)
    for spec in a:
        hours = spec.num_gpus * spec.duration_s / 3600
        allowed = (
            {"cifar10", "ncf"}
            if hours < 1
            else {"deepspeech2", "bert"}
            if hours < 10
            else {"yolov3"}
            if hours < 100
            else {"imagenet"}
        )
        assert spec.model in allowed and spec.iterations >= 1


def test_scaling_curve_for_the_report_is_measured_data():
    from dlsched.perf.validation import consolidated_curve
    from dlsched.report.plots import scaling_figure_svg

    batch, curve = consolidated_curve("cifar10")
    assert curve[0][0] == 1 and curve[0][1] == 1
    measured: dict[tuple[int, int], list[float]] = {}
    for p in pollux_points("cifar10"):
        if p.local_batch == batch:
            measured.setdefault((p.gpus, p.nodes), []).append(p.gpus * batch / p.step_s)
    for gpus, nodes, throughput in curve:
        assert any(throughput == pytest.approx(t) for t in measured[(gpus, nodes)])
        assert nodes == min(n for g, n in measured if g == gpus)
    assert scaling_figure_svg().startswith("<svg")


def test_the_stored_scaling_fits_are_a_fresh_fit_of_every_application():
    # a simulation reads the fits stored in the package (no fitting); they must be what fitting
    # the shipped measurements gives now, up to rounding: they were written with numpy's SVD
    # solver, which the plain-Python QR of least_squares matches to 7e-13 relative (kept, so
    # that every simulation's output stayed the same)
    from dlsched.perf import scaling

    stored = scaling._stored_fits()
    fresh = scaling.fits_document()["fits"]
    assert sorted(stored) == sorted(fresh) == pollux_apps()
    for app, fit in stored.items():
        assert {k: v for k, v in fit.items() if k not in scaling.COEFFICIENTS} == {
            k: v for k, v in fresh[app].items() if k not in scaling.COEFFICIENTS
        }
        assert scaling.scaling_model(app) == scaling.ScalingFit(**fit)  # read, not refitted
        for name in scaling.COEFFICIENTS:
            assert fit[name] == pytest.approx(fresh[app][name], rel=1e-9, abs=1e-15), (
                f"{app} {name}: the measurements changed: run "
                "python -c 'from dlsched.perf.scaling import write_fits; write_fits()'"
            )


def test_least_squares_solves_exact_and_overdetermined_systems_and_zeroes_an_empty_column():
    from dlsched.perf.scaling import least_squares, nonnegative_fit

    # exact: x = (1, 2)
    assert least_squares([[1, 0], [0, 1], [1, 1]], [1, 2, 3]) == pytest.approx([1, 2])
    # the line through (0, 1), (1, 2), (2, 4) by hand: slope 1.5, intercept 5/6
    assert least_squares([[1, 0], [1, 1], [1, 2]], [1, 2, 4]) == pytest.approx([5 / 6, 1.5])
    # a column of zeros (no multi-node sample) gets 0, as numpy's minimum-norm solution does
    assert least_squares([[1, 0], [1, 0]], [2, 4]) == pytest.approx([3, 0])
    # y = 2x exactly: the intercept is 0 (held at 0 if rounding makes it negative)
    assert nonnegative_fit([[1, 1], [1, 2], [1, 3]], [2, 4, 6]) == pytest.approx([0, 2])
    # y = 4 - x exactly: the slope goes, and the constant c minimizes ((c - 3) / 3)^2 +
    # ((c - 2) / 2)^2: c = (1/3 + 1/2) / (1/9 + 1/4) = 30/13
    assert nonnegative_fit([[1, 1], [1, 2]], [3, 2]) == pytest.approx([30 / 13, 0])
