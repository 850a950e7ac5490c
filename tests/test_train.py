"""The training worker's semantics, without Ray: gradient accumulation keeps the optimizer step,
every sample is used once per epoch whatever the worker count, and resume continues."""

import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from dlsched.runtime.train import (  # noqa: E402
    EpochOrder,
    Trainer,
    load_entrypoint,
    sample_positions,
)

# SGD: Adam divides each gradient by its running magnitude, so a gradient that is zero up to
# rounding (the attention key bias's) would turn float noise into full-size steps
LM = {
    "entrypoint": "dlsched.workloads.lm:build",
    "args": {"samples": 64, "dim": 32, "layers": 1, "optimizer": "sgd", "lr": 0.1},
}


def trained(tmp_path, name, iterations, **config):
    t = Trainer(
        {
            **LM,
            "batch_size": 16,
            "iterations": iterations,
            "checkpoint_every": 0,
            "checkpoint_path": str(tmp_path / f"{name}.pt"),
            **config,
        },
        0,
        1,
        lambda line: None,
    )
    t.setup()
    assert t.run() == {"status": "done", "iteration": iterations}
    return t.plain_model.state_dict()


def test_an_entrypoint_file_the_job_cannot_see_is_named_with_where_it_looked(tmp_path):
    # a program under a directory the sandbox hides failed with a bare FileNotFoundError
    with pytest.raises(FileNotFoundError, match="--sandbox-expose") as e:
        load_entrypoint(f"{tmp_path / 'absent.py'}:build")
    assert str(tmp_path / "absent.py") in str(e.value)
    program = tmp_path / "present.py"
    program.write_text("def build(args):\n    return args\n")
    assert load_entrypoint(f"{program}:build")({"x": 1}) == {"x": 1}


def test_accumulating_sub_batches_gives_the_parameters_of_the_full_batch(tmp_path):
    full = trained(tmp_path, "full", 6)
    for k in (2, 4, 16):
        accumulated = trained(tmp_path, f"k{k}", 6, accumulation=k)
        for name, value in full.items():
            torch.testing.assert_close(accumulated[name], value, rtol=1e-5, atol=1e-6, msg=name)
    changed = trained(tmp_path, "other", 6, seed=1)  # the test can tell runs apart
    assert any(not torch.allclose(changed[n], v) for n, v in full.items())


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    straight = trained(tmp_path, "straight", 8)
    trained(tmp_path, "split", 3)  # checkpoints at its end (iteration 3)
    resumed = trained(tmp_path, "split", 8)  # loads it and goes on to 8
    for name, value in straight.items():
        torch.testing.assert_close(resumed[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_every_sample_once_per_epoch_across_grows_and_shrinks():
    size, batch = 100, 12
    order = EpochOrder(size, seed=3)
    worlds = [2, 2, 4, 4, 4, 1, 3, 3, 2]  # 9 iterations x 12 = 108 positions
    seen = []
    for iteration, world in enumerate(worlds):
        for rank in range(world):
            seen += [order(p) for p in sample_positions(iteration, batch, rank, world)]
    first_epoch, next_epoch = seen[:size], seen[size:]
    assert sorted(first_epoch) == list(range(size))  # each index exactly once
    assert len(next_epoch) == 8 and len(set(next_epoch)) == 8
    assert first_epoch != sorted(first_epoch)  # and in a shuffled order


def _worker_of_two(rank: int, master: str, checkpoint: str, out: str, accumulation: int) -> None:
    torch.set_num_threads(1)
    t = Trainer(
        {
            **LM,
            "batch_size": 16,
            "iterations": 6,
            "checkpoint_every": 0,
            "checkpoint_path": checkpoint,
            "accumulation": accumulation,
        },
        rank,
        2,
        lambda line: None,
    )
    t.setup(master)
    t.run()
    if rank == 0:
        torch.save(t.plain_model.state_dict(), out)
    # no teardown: a rank freeing DDP after its group is destroyed hangs now and then with gloo
    # (the runtime kills a tenant process once its run has answered)
    os._exit(0)


@pytest.mark.torch_processes
def test_two_workers_accumulating_give_the_parameters_of_one(tmp_path):
    import multiprocessing
    import socket

    one = trained(tmp_path, "one", 6)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        master = f"127.0.0.1:{s.getsockname()[1]}"
    ctx = multiprocessing.get_context("spawn")
    out = tmp_path / "two.pt"
    workers = [
        ctx.Process(
            target=_worker_of_two,
            args=(rank, master, str(tmp_path / "two-ckpt.pt"), str(out), 2),
        )
        for rank in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    codes = [w.exitcode for w in workers]
    for w in workers:
        w.kill()  # one that hung
    assert codes == [0, 0]
    two = torch.load(out, weights_only=True)
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_the_emulated_job_s_sgd_steps_as_torch_s_and_imports_no_dynamo(tmp_path):
    # MomentumSGD (dlsched.workloads.emulated) against torch.optim.SGD on the same model and
    # data, with a checkpoint round trip halfway: the same parameters bit for bit. And an
    # emulated job trained in a fresh process never imports torch._dynamo (torch.optim does).
    import subprocess
    import sys

    from dlsched.workloads.emulated import MomentumSGD

    torch.manual_seed(0)
    a, b = (
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        for _ in range(2)
    )
    b.load_state_dict(a.state_dict())
    ours = MomentumSGD(a.parameters(), lr=0.05, momentum=0.9)
    theirs = torch.optim.SGD(b.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for i in range(20):
        x = torch.randn(4, 8, generator=g)
        for model, opt in ((a, ours), (b, theirs)):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
        if i == 9:
            saved = ours.state_dict()
            ours = MomentumSGD(a.parameters(), lr=0.05, momentum=0.9)
            ours.load_state_dict(saved)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    program = (
        "import sys; from dlsched.runtime.train import Trainer\n"
        "t = Trainer({'entrypoint': 'dlsched.workloads.emulated:build', 'args': {'samples': 64,"
        " 'per_sample_ms': 0, 'fixed_ms': 0}, 'batch_size': 8, 'iterations': 3,"
        f" 'checkpoint_every': 2, 'checkpoint_path': {str(tmp_path / 'e.pt')!r}}},"
        " 0, 1, lambda line: None)\n"
        "t.setup(); t.run(); print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


COLLECTOR_SEEN: list[tuple[str, bool]] = []


def recording_build(args):
    """The emulated program, noting whether the cyclic collector is on as it is built and at
    every loss it computes (a training pass)."""
    import gc

    from dlsched.workloads.emulated import build

    COLLECTOR_SEEN.append(("build", gc.isenabled()))
    workload = build(args)
    loss = workload.loss

    def noted(outputs, targets):
        COLLECTOR_SEEN.append(("pass", gc.isenabled()))
        return loss(outputs, targets)

    workload.loss = noted
    return workload


def test_the_collector_is_paused_while_a_worker_starts_and_on_while_it_trains(tmp_path):
    # dlsched.runtime.startup_gc: off for the build (and a first DDP construction), on again for
    # every pass, and as it was once the worker is done
    import gc

    COLLECTOR_SEEN.clear()
    t = Trainer(
        {
            "entrypoint": f"{__name__}:recording_build",
            "args": {"samples": 64, "per_sample_ms": 0, "fixed_ms": 0},
            "batch_size": 8,
            "iterations": 3,
            "checkpoint_every": 0,
            "checkpoint_path": str(tmp_path / "c.pt"),
        },
        0,
        1,
        lambda line: None,
    )
    assert gc.isenabled()
    t.setup()
    assert gc.isenabled()
    assert t.run() == {"status": "done", "iteration": 3}
    assert COLLECTOR_SEEN == [("build", False)] + [("pass", True)] * 3
    assert gc.isenabled()


@pytest.mark.torch_processes
def test_a_newcomer_to_a_group_imports_what_ddp_needs_while_it_prepares(tmp_path):
    # a background scale-out's newcomers prepare while the others train, and the switch waits
    # for their DDP construction: its first one imports torch._dynamo.utils (1-2 s of CPU), so
    # they import it before. A worker alone never builds DDP and does not. (A fresh process:
    # this one may have imported it already.)
    import subprocess
    import sys

    script = f"""
import sys
from dlsched.runtime.train import Trainer
def trainer(world):
    config = {{"entrypoint": "dlsched.workloads.emulated:build", "batch_size": 8,
        "iterations": 1, "checkpoint_path": {str(tmp_path / "c.pt")!r}}}
    return Trainer(config, 0, world, lambda line: None)
trainer(1).prepare()
alone = "torch._dynamo.utils" in sys.modules
trainer(2).prepare()
print(alone, "torch._dynamo.utils" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
