"""Cluster specs, job-spec validation and placement."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.cluster import Cluster, load_cluster, parse_cluster_spec
from dlsched.errors import SpecError
from dlsched.jobs import JobSpec
from dlsched.policies.placement import best_fit, consolidated, spread
from dlsched.state.free import FreeGpus
from example_counts import examples


def test_cluster_spec_with_pools_types_and_memory():
    c = parse_cluster_spec("2x8:V100,3x4:T4@inference,1x2:X1/20000")
    assert c.num_gpus == 16 + 12 + 2
    assert c.pool_gpus("training") == 18 and c.pool_gpus("inference") == 12
    assert c.nodes[2].gpu_type == "T4" and c.nodes[2].gpu_mem_mib == 16 * 1024
    assert c.nodes[5].gpu_mem_mib == 20000
    assert list(c.nodes[1].gpu_ids) == list(range(8, 16))
    assert c.gpu_node[17] == 2


def test_cluster_yaml(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(
        "groups:\n  - {count: 2, gpus_per_node: 4, gpu_type: A100, nodes_per_rack: 1}\n"
        "  - {count: 1, gpus_per_node: 8, gpu_type: T4, pool: inference}\n"
    )
    c = load_cluster(str(f))
    assert [n.rack for n in c.nodes] == [0, 1, 2]
    assert c.nodes[2].pool == "inference"


def test_a_misspelled_key_of_a_cluster_file_is_named_not_ignored(tmp_path):
    # gpu_typ for gpu_type gave V100s, silently
    f = tmp_path / "c.yaml"
    f.write_text("groups:\n  - {count: 2, gpus_per_node: 4, gpu_typ: T4}\n")
    with pytest.raises(SpecError, match="unknown field \\(known: count, cpus_per_node") as e:
        load_cluster(str(f))
    assert e.value.field == "groups[0].gpu_typ"


def test_a_gpu_type_s_speed_in_the_spec_and_yaml_round_trips(tmp_path):
    c = parse_cluster_spec("1x8:V100,2x4:T4*0.45@inference")
    assert c.gpu_speeds == {"T4": 0.45}
    assert load_cluster(c.spec()) == c and "T4*0.45" in c.describe()
    f = tmp_path / "c.yaml"
    f.write_text("groups:\n  - {count: 1, gpus_per_node: 4, gpu_type: A100, gpu_speed: 2.5}\n")
    assert load_cluster(str(f)).gpu_speeds == {"A100": 2.5}
    with pytest.raises(
        SpecError, match="'1x4:T4\\*0.5@inference': SPEED: .*one speed per GPU type"
    ) as err:
        parse_cluster_spec("1x4:T4*0.4,1x4:T4*0.5@inference")
    assert err.value.field == "cluster"
    with pytest.raises(SpecError, match="one speed per GPU type") as err:  # a file names the field
        Cluster.build(
            [{"count": 1, "gpus_per_node": 4, "gpu_type": "T4", "gpu_speed": s} for s in (0.4, 0.5)]
        )
    assert err.value.field == "groups[1].gpu_speed"


@pytest.mark.parametrize(
    "spec, part",
    [
        ("64x8:V100@nowhere", "POOL"),
        ("0x8", "COUNT"),
        ("abc", "cannot parse"),
        ("2x4:Unknown", "MEM_MIB"),
        ("2x4:T4*0", "SPEED"),
        ("2x4:T4*fast", "cannot parse"),
    ],
)
def test_bad_cluster_specs_name_the_field(spec, part):
    # the option, the group as written and its part (a cluster file's field names meant
    # nothing to a user of --cluster: 'groups[0].count')
    with pytest.raises(SpecError) as e:
        parse_cluster_spec(spec)
    said = f"cannot parse '{spec}'" if part == "cannot parse" else f"'{spec}': {part}: "
    assert e.value.field == "cluster" and said in e.value.reason, e.value.reason


@pytest.mark.parametrize(
    "spec, group, what",
    [
        (
            "99999999x8",
            "'99999999x8': COUNT",
            "131,072 nodes",
        ),  # was built until the kernel killed it
        ("1x1048576,1x1", "'1x1': COUNT", "1,048,576 GPUs"),
        ("100000x1,31073x1", "'31073x1': COUNT", "131,072 nodes"),
        ("1x1048577", "'1x1048577': COUNT", "1,048,576 GPUs"),
        # a speed of 1e-300 overflowed a job's time (OverflowError), 1e300 divided by zero
        ("2x8:X/16000*1e-300", "SPEED", r"in \[0.001, 1000\]"),
        ("2x8:X/16000*1e300", "SPEED", r"in \[0.001, 1000\]"),
        ("2x8:X/99999999999999", "MEM_MIB", "at most 1,048,576"),
        ("2x8:" + "X" * 65 + "/16000", "TYPE", "at most 64 characters"),
    ],
)
def test_a_cluster_past_its_bounds_stops_before_it_is_built(spec, group, what):
    with pytest.raises(SpecError, match=what) as e:
        parse_cluster_spec(spec)
    assert e.value.field == "cluster" and f"{group}: " in e.value.reason, e.value.reason


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"\xff\xfegroups: []\n", "can't decode byte 0xff"),  # UnicodeDecodeError's traceback
        (b"groups: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deep"),  # RecursionError's
        (b"groups: [\n", "while parsing a flow node"),  # as before
    ],
    ids=["utf-16", "deep", "unclosed"],
)
def test_a_yaml_file_that_cannot_be_read_names_its_option(tmp_path, content, reason):
    from dlsched.yamlfile import read_yaml

    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=reason) as e:
        load_cluster(str(path))
    assert e.value.field == "cluster"
    with open(path, "ab") as f:  # past the bound: refused before it is read
        f.truncate(16 * 2**20 + 1)
    with pytest.raises(SpecError, match="over 16,777,216") as e:
        read_yaml(path, "quotas")
    assert e.value.field == "quotas"


def test_a_yaml_file_read_to_its_bound_and_its_aliases_bounded(tmp_path):
    """A device with no size (/dev/zero was read until memory ran out), an alias inside what it
    names (a traceback from the JSON encoder of `dlsched submit`) and aliases that expand ten
    lines into 10^10 values (`dlsched submit` ran until killed) are refused, naming the
    option; aliases that expand to little are read as before."""
    from dlsched.yamlfile import read_yaml

    with pytest.raises(SpecError, match="over 16,777,216 bytes") as e:
        read_yaml("/dev/zero", "spec")
    assert e.value.field == "spec"
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [1, *a]\n")
    with pytest.raises(SpecError, match="refers to itself") as e:
        read_yaml(loop, "spec")
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]" for k in range(1, 10)]
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="expands to over 8,388,608 values") as e:
        read_yaml(bomb, "sweep")
    assert e.value.field == "sweep"
    shared = tmp_path / "shared.yaml"
    shared.write_text("base: &b {gpus: 8}\ngroups: [*b, *b]\n")
    assert read_yaml(shared, "cluster")["groups"] == [{"gpus": 8}, {"gpus": 8}]


def test_a_yaml_file_holds_plain_data_only_and_its_times_stay_text(tmp_path):
    """A time stays the text it is (YAML made it a datetime, which a job spec sent as JSON
    cannot carry: `dlsched submit` stopped with a traceback); a value of an explicit tag that
    is not plain data is refused, naming where it is."""
    from dlsched.yamlfile import read_yaml

    path = tmp_path / "s.yaml"
    path.write_text("deadline: 2026-11-23T18:00:00Z\nday: 2026-11-23\n")
    assert read_yaml(path, "spec") == {"deadline": "2026-11-23T18:00:00Z", "day": "2026-11-23"}
    for text, where, kind in [
        ("args: !!set {a, b}\n", "args", "set"),
        ("x: [1, {y: !!binary aGk=}]\n", "x[1].y", "bytes"),
        ("t: !!timestamp 2026-11-23\n", "t", "date"),
    ]:
        path.write_text(text)
        message = re.escape(f"holds a value of type {kind} at {where}:")
        with pytest.raises(SpecError, match=message) as e:
            read_yaml(path, "spec")
        assert e.value.field == "spec"


def test_a_cluster_at_its_bounds_is_built():
    assert parse_cluster_spec("131072x8").num_gpus == 1_048_576


def test_bad_cluster_yaml_names_the_field(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("groups:\n  - {count: 2, gpus_per_node: -1}\n")
    with pytest.raises(SpecError, match=r"groups\[0\].gpus_per_node"):
        load_cluster(str(f))
    f.write_text("groups:\n  - [2, 8]\n")  # an AttributeError's traceback
    with pytest.raises(SpecError, match="must be a mapping") as e:
        load_cluster(str(f))
    assert e.value.field == "groups[0]"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"job_id": ""}, "job_id"),
        ({"submit_time_s": -1.0}, "submit_time_s"),
        ({"num_gpus": 0}, "num_gpus"),
        ({"num_gpus": 1.5}, "num_gpus"),
        ({"duration_s": -5.0}, "duration_s"),
        ({"duration_s": float("nan")}, "duration_s"),
        ({"batch_size": 0}, "batch_size"),
        ({"min_gpus": 8}, "min_gpus"),
        ({"max_gpus": 1}, "max_gpus"),
        ({"deadline_s": -1.0}, "deadline_s"),  # (5.0, before submission: a late job, valid)
        ({"deadline_s": float("inf")}, "deadline_s"),
        ({"gpu_milli": 1500}, "gpu_milli"),
        ({"tenant": ""}, "tenant"),
        ({"gpu_types": ()}, "gpu_types"),
        ({"qos_class": "x" * 257}, "qos_class"),  # (a trace's cell, named in every summary)
    ],
)
def test_job_spec_validation_names_the_field(kwargs, field):
    base = {"job_id": "j", "submit_time_s": 10.0, "num_gpus": 4, "duration_s": 100.0}
    with pytest.raises(SpecError) as e:
        JobSpec(**{**base, **kwargs})
    assert e.value.field == field


def test_best_fit_prefers_the_fullest_node_that_fits():
    c = parse_cluster_spec("3x4")
    free = FreeGpus(c)
    free.take([0, 1, 2])  # node 0 has 1 free
    free.take([4, 5])  # node 1 has 2 free
    assert best_fit(free, 1) == (3,)
    assert best_fit(free, 2) == (6, 7)
    assert best_fit(free, 4) == (8, 9, 10, 11)
    # 6 GPUs do not fit on one node: the emptiest nodes first
    assert sorted(best_fit(free, 6)) == [6, 7, 8, 9, 10, 11]
    assert best_fit(free, 8) is None


def test_consolidated_refuses_to_spread_and_spread_spreads():
    c = parse_cluster_spec("2x4")
    free = FreeGpus(c)
    free.take([0, 1])
    free.take([4, 5])
    assert consolidated(free, 3) is None  # 2 + 2 free, but not on one node
    assert sorted(best_fit(free, 3)) in ([2, 3, 6], [2, 3, 7], [2, 6, 7], [3, 6, 7])
    assert sorted(spread(free, 2)) == [2, 6]
    assert consolidated(free, 2) == (2, 3)


@pytest.mark.parametrize(
    "cluster, gpus, types, fewest",
    [
        # nodes of different sizes: 4 + 2 + 2 + 2 for 9 (every node taken as 4: 3, and a
        # consolidated placement of 9 was never found)
        ("1x4:V100,3x2:V100", 9, None, 4),
        # an inference pool's larger nodes hold no job unless loaned: 2 + 2 for 3 (before: 1)
        ("2x2:V100,1x4:V100@inference", 3, None, 2),
        # of one type: the K80 nodes' 4 GPUs each, not the V100 nodes' 8 (before: 1)
        ("2x8:V100,2x4:K80", 6, ("K80",), 2),
        ("2x8:V100,2x4:K80", 6, None, 1),
    ],
)
def test_the_fewest_nodes_a_job_needs_are_counted_on_the_nodes_it_may_use(
    cluster, gpus, types, fewest
):
    c = parse_cluster_spec(cluster)
    assert c.min_nodes_for(gpus, types) == fewest
    free = FreeGpus(c)
    placed = consolidated(free, gpus, types)  # found on an idle cluster
    assert placed is not None and len({c.gpu_node[g] for g in placed}) == fewest


def test_gpu_type_constraints():
    c = parse_cluster_spec("1x2:V100,1x2:T4")
    free = FreeGpus(c)
    assert best_fit(free, 2, ("T4",)) == (2, 3)
    free.take([2])
    assert best_fit(free, 2, ("T4",)) is None


def test_free_index_rejects_double_take_and_release():
    free = FreeGpus(parse_cluster_spec("1x2"))
    free.take([0])
    with pytest.raises(ValueError):
        free.take([0])
    with pytest.raises(ValueError):
        free.release([1])
    assert free.total == 1


def _free_index_agrees(free: FreeGpus, free_gpus: set[int]) -> None:
    """The index lists exactly ``free_gpus``, each node in the bucket of its free count."""
    nodes = free.cluster.nodes
    assert {g for n in free.usable for g in free.free[n]} == free_gpus
    assert free.total == len(free_gpus)
    for n in range(len(nodes)):
        count = sum(1 for g in nodes[n].gpu_ids if g in free_gpus)
        assert [c for c, bucket in enumerate(free.buckets) if n in bucket] == (
            [count] if count else []
        )


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_free_index_takes_and_releases_gpus_in_any_order_across_copies(data):
    """Taking or releasing GPUs of several nodes in any order (interleaved, repeated: an error
    then), on an index and its copies, leaves each with the GPUs a plain set says, every node in
    the bucket of its free count; a failed call keeps what it did before the bad GPU."""
    cluster = parse_cluster_spec("3x4")
    indexes = [(FreeGpus(cluster), set(range(12)))]
    for _ in range(data.draw(st.integers(1, 12))):
        i = data.draw(st.integers(0, len(indexes) - 1))
        free, model = indexes[i]
        if data.draw(st.booleans()):
            indexes.append((free.copy(), set(model)))
            continue
        gpus = data.draw(st.lists(st.integers(0, 11), max_size=6))
        taking = data.draw(st.booleans())
        changed = set()
        # the first GPU that cannot be taken (not free) or released (free), or taken twice
        bad = next(
            (k for k, g in enumerate(gpus) if ((g in model) != taking) or g in gpus[:k]), None
        )
        if bad is None:
            (free.take if taking else free.release)(gpus)
            changed = set(gpus)
        else:
            with pytest.raises(ValueError):
                (free.take if taking else free.release)(gpus)
            changed = set(gpus[:bad])
        model -= changed if taking else set()
        model |= set() if taking else changed
        for other, its_model in indexes:
            _free_index_agrees(other, its_model)
