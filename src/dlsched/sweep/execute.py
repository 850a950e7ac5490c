"""Running a sweep's simulations: each as a Ray task (an embedded local Ray using every core by
default, or an existing cluster), or one after another in this process (``sequential``).

Each distinct workload (trace, cluster, workload options, seed) is prepared once, by one task,
and handed to its runs through Ray's object store. A run's outputs are kept under
``OUT/runs/<key>/``, where the key hashes everything that determines them: the run's settings
and seed, the contents of every file a setting names (a trace, a quota file, a plug-in's
module) and the package's own files (:func:`dlsched.workload_cache.package_fingerprint`). A run
whose folder exists is done: a folder is written whole under a temporary name and renamed, so
a sweep killed midway loses only the runs in flight, and running it again skips the others.
A run that fails does not stop the others; it is listed with its error and tried again next
time.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .spec import RunSpec

KEY_FORMAT = 1  # raise when what a run's folder holds changes
RUN_FILE = "run.json"  # the run's settings, seed and axis values, beside its outputs


def run_key(run: RunSpec) -> str:
    """The hash of everything that determines the run's outputs."""
    from ..workload_cache import describe_inputs, package_fingerprint

    material = [KEY_FORMAT, package_fingerprint(), describe_inputs(run.describe())]
    policy = run.get("policy")
    if ":" in policy.name:  # a plug-in: its module's source is an input too
        spec = importlib.util.find_spec(policy.name.split(":")[0])
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            material.append(describe_inputs(spec.origin))
    text = json.dumps(material, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:24]  # 96 bits: a folder name


def prepare_workload(settings: dict) -> Any:
    """The prepared workload of a run's workload settings (through the workload cache)."""
    from ..prepare import prepare
    from ..workload_cache import default_cache_dir

    settings = dict(settings)
    trace, cluster = settings.pop("trace"), settings.pop("cluster", None)
    if "format" in settings:  # (the spec's name for it, as dlsched simulate's --format)
        settings["fmt"] = settings.pop("format")
    return prepare(trace, cluster, cache_dir=default_cache_dir(), **settings)


def simulate_run(workload: Any, run: RunSpec) -> dict[str, bytes]:
    """Simulate one run on its prepared workload: its output files, by name."""
    from ..runs import simulate

    policy = run.get("policy")
    done = simulate(workload, policy.name, params=dict(policy.params), **run.run_settings())
    with tempfile.TemporaryDirectory(prefix="dlsched-run-") as tmp:
        done.write(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}


@dataclass
class Outcome:
    """What became of a sweep's runs in this invocation."""

    done: list[RunSpec] = field(default_factory=list)  # ran now
    cached: list[RunSpec] = field(default_factory=list)  # found done before
    failed: list[tuple[RunSpec, str]] = field(default_factory=list)  # with the error
    nodes: dict[str, str] = field(default_factory=dict)  # run key -> the Ray node it ran on


def store_run(runs_dir: Path, key: str, run: RunSpec, files: dict[str, bytes]) -> None:
    """Write a run's folder whole, then rename it into place (a crash leaves no half)."""
    tmp = runs_dir / f".tmp-{key}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    record = {"settings": run.describe(), "point": dict(run.point), "seed": run.seed}
    (tmp / RUN_FILE).write_text(json.dumps(record, indent=1, sort_keys=True))
    final = runs_dir / key
    if final.exists():  # --force: the new outputs replace the old
        shutil.rmtree(final)
    tmp.rename(final)


def execute(
    runs: list[RunSpec],
    out: Path,
    *,
    force: bool = False,
    sequential: bool = False,
    ray_address: str | None = None,
    ray_token_file: str | None = None,
    cpus: int | None = None,
    progress: Callable[[int, int, int, int], None] | None = None,
) -> Outcome:
    """Run what is not done yet of ``runs`` (all with ``force``); ``progress(done, running,
    failed, total)`` after each change."""
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    _drop_halves(runs_dir)
    outcome = Outcome()
    todo: dict[str, RunSpec] = {}
    for run in runs:
        key = run_key(run)
        if not force and (runs_dir / key).is_dir():
            outcome.cached.append(run)
        else:
            todo[key] = run
    total = len(runs)

    def report(running: int) -> None:
        if progress is not None:
            done = len(outcome.done) + len(outcome.cached)
            progress(done, running, len(outcome.failed), total)

    report(0)
    if todo:
        run_all = _run_here if sequential else _run_on_ray
        run_all(todo, runs_dir, outcome, report, ray_address, ray_token_file, cpus, out)
    return outcome


def _drop_halves(runs_dir: Path) -> None:
    """Remove the folders a killed sweep was writing (its process is gone)."""
    for tmp in runs_dir.glob(".tmp-*"):
        try:
            os.kill(int(tmp.name.rsplit("-", 1)[1]), 0)
        except (ValueError, ProcessLookupError):
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass


def _error(e: BaseException) -> str:
    """A failure's traceback (its last 4,000 characters: the error is last)."""
    text = "".join(traceback.format_exception(e)).strip()
    return text[-4000:]


def _workload_key(run: RunSpec) -> str:
    return _settings_key(run.workload_settings())


def _settings_key(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True, default=repr)


def _run_here(
    todo: dict[str, RunSpec],
    runs_dir: Path,
    outcome: Outcome,
    report: Callable[[int], None],
    *_: object,
) -> None:
    """One run after another, those of one workload together (one workload in memory)."""
    held: tuple[str, Any] = ("", None)
    for key, run in sorted(todo.items(), key=lambda item: _workload_key(item[1])):
        report(1)
        wkey = _workload_key(run)
        try:
            if held[0] != wkey:
                held = ("", None)  # the last one goes before the next is made
                held = (wkey, prepare_workload(run.workload_settings()))
            store_run(runs_dir, key, run, simulate_run(held[1], run))
        except Exception as e:  # one failed run does not stop the others
            outcome.failed.append((run, _error(e)))
        else:
            outcome.done.append(run)
    report(0)


def _run_on_ray(
    todo: dict[str, RunSpec],
    runs_dir: Path,
    outcome: Outcome,
    report: Callable[[int], None],
    address: str | None,
    token_file: str | None,
    cpus: int | None,
    out: Path,
) -> None:
    ray = connect_ray(address, token_file, cpus, out)
    # spread over the nodes: else a node whose worker is up first may take every short run
    # while the others' workers start (seen in the suite on a loaded machine)
    task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_ray_task)
    prepare_task = task.options(num_returns=2)
    plan = DispatchPlan(todo)
    # a task's reference -> (run key, run), or (workload key, None) for a preparation
    in_flight: dict[Any, tuple[str, RunSpec | None]] = {}

    def fill(worker: str | None) -> None:
        """One task per CPU of the cluster (which may grow) at a time, so that each is chosen
        when a worker is free: the first for ``worker``, which just finished one."""
        slots = max(1, int(ray.cluster_resources().get("CPU", 0)))
        while len(in_flight) < slots:
            step = plan.next_step(worker)
            if step is None:
                return
            worker = None
            wkey, item, refs = step
            if item is None:  # its second result is the worker, which then holds the workload
                workload, done = prepare_task.remote(None, None, plan.settings[wkey])
                plan.preparing(wkey, (workload, done))
                in_flight[done] = (wkey, None)
            else:  # the run waits for ``done`` (Ray fails it with the preparation's error);
                # the workload's reference, in a list, reaches it unread
                workload, done = refs
                in_flight[task.remote(done, [workload], item[1])] = item

    fill(None)
    report(_runs(in_flight))
    try:
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            key, run = in_flight.pop(ready[0])
            worker = None
            try:
                result = ray.get(ready[0])
            except Exception as e:  # the task's error (or its workload's), re-raised here
                error = _error(_cause(e))
                if run is None:  # the workload's runs not yet submitted fail with it
                    outcome.failed += [(r, error) for _, r in plan.drop(key)]
                else:
                    outcome.failed.append((run, error))
            else:
                if run is None:
                    worker = result
                else:
                    files, outcome.nodes[key], worker = result
                    store_run(runs_dir, key, run, files)
                    outcome.done.append(run)
                plan.holds(worker, key if run is None else _workload_key(run))
            fill(worker)
            report(_runs(in_flight))
    finally:
        for ref in in_flight:  # interrupted: nothing more is wanted of these
            ray.cancel(ref, force=True)


def _runs(in_flight: dict) -> int:
    return sum(run is not None for _, run in in_flight.values())


class DispatchPlan:
    """Which task a free Ray worker gets next: a run of the workload it holds (no read from the
    object store), else the next workload to prepare (which it then holds), else a run of a
    prepared workload with the most runs left (read from the object store). So a worker runs
    a workload's runs one after another, as the sequential side does. Submitted all at once,
    Ray ran every preparation first (they wait for nothing) and then the runs in any order:
    a sweep of 10 workloads of 4 runs on two workers read a workload in 20 of its 40 runs."""

    def __init__(self, todo: dict[str, RunSpec]) -> None:
        self.left: dict[str, list[tuple[str, RunSpec]]] = {}  # workload key -> runs to submit
        self.settings: dict[str, dict] = {}
        for wkey, key, run in sorted((_workload_key(r), k, r) for k, r in todo.items()):
            self.left.setdefault(wkey, []).append((key, run))
            self.settings[wkey] = run.workload_settings()
        self._unprepared = deque(self.left)
        # workloads prepared or preparing -> their references, while runs of them are left to
        # submit (the last one's submission drops it)
        self._refs: dict[str, Any] = {}
        self._held: dict[str, str] = {}  # worker id -> the workload key it holds

    def next_step(self, worker: str | None) -> tuple[str, tuple[str, RunSpec] | None, Any] | None:
        """(workload key, None, None) to prepare it, (workload key, (run key, run), the
        workload's references) to run, or None: nothing left to submit."""
        wkey = self._held.get(worker or "")
        if wkey not in self._refs:
            if self._unprepared:
                return self._unprepared.popleft(), None, None
            if not self._refs:
                return None
            wkey = max(self._refs, key=lambda k: len(self.left[k]))
        item, refs = self.left[wkey].pop(0), self._refs[wkey]
        if not self.left[wkey]:  # its last run: the runs in flight hold the workload now
            self.drop(wkey)
        return wkey, item, refs

    def preparing(self, wkey: str, refs: Any) -> None:
        self._refs[wkey] = refs

    def holds(self, worker: str, wkey: str) -> None:
        self._held[worker] = wkey

    def drop(self, wkey: str) -> list[tuple[str, RunSpec]]:
        """Forget a workload (its last run submitted, or its preparation failed): its runs not
        submitted."""
        self._refs.pop(wkey, None)
        return self.left.pop(wkey, [])


# A Ray worker's workload, by its settings' key: the last it prepared or read (reading one from
# the object store costs about a tenth of a run of it: 0.12-0.14 s against 1.2-1.9 CPU-s at
# 30,000 jobs). One only: a worker holds at most one workload besides the run.
_held: tuple[str, Any] = ("", None)


def _ray_task(prepared: Any, workload: list | None, what: Any) -> tuple[Any, ...]:
    """A sweep's Ray task. Without ``workload``: prepare the workload of the settings ``what``,
    keep it, and return it and this worker's id (what its runs wait for). Else simulate the run
    ``what`` on the workload (``workload[0]``'s, unless this worker holds it) and return its
    output files, the node and the worker it ran on. (One function for both: as two, Ray
    leased workers to each apart and started a third process on two cores.)"""
    import ray

    global _held
    context = ray.get_runtime_context()
    if workload is None:
        _held = ("", None)  # the last one goes before the next is made
        _held = (_settings_key(what), prepare_workload(what))
        return _held[1], context.get_worker_id()
    wkey = _workload_key(what)
    if _held[0] != wkey:
        _held = ("", None)  # the last one goes before the next is read
        _held = (wkey, ray.get(workload[0]))
    return simulate_run(_held[1], what), context.get_node_id(), context.get_worker_id()


def _cause(e: BaseException) -> BaseException:
    """A Ray task error's own exception, when Ray kept it."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


def connect_ray(address: str | None, token_file: str | None, cpus: int | None, out: Path) -> Any:
    """Ray, connected: to ``address`` with its token (as ``dlsched server`` attaches), or an
    embedded cluster on this machine using ``cpus`` (default every core), started now and
    stopped when this process exits."""
    if "ray" not in sys.modules:  # (a test that started a cluster has configured Ray already)
        from ..runtime.ray_setup import configure_ray

        if address is not None and token_file is None:
            from ..errors import SpecError

            raise SpecError(
                "ray-token-file", "an existing cluster needs its token file (as the server's)"
            )
        configure_ray(Path(token_file or out / "ray.token"), embedded=address is None)
    try:
        import ray
    except ImportError:
        from ..errors import SpecError

        raise SpecError(
            "sweep", "running on Ray needs Ray: pip install 'dlsched[sweep]' (or --sequential)"
        ) from None
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
        if address is None:
            _start_reaper()
            address = start_embedded_head(cpus or os.cpu_count() or 1)
        else:
            from ..runtime.ray_setup import check_reachable

            check_reachable(address, "ray-address")
        ray.init(address=address, **kwargs)
    return ray


def start_embedded_head(cpus: int) -> str:
    """An embedded Ray head node with only the processes a sweep uses, and its address.

    ``ray.init`` also starts the autoscaler's monitor, a log monitor and a dashboard API server
    (even with ``include_dashboard=False``): three Python processes importing Ray, which on
    two cores delayed a sweep's first task by about a second (docs/sweeps.md). This starts the
    head as ``ray.init`` does, through Ray's ``Node`` (as ``ray.cluster_utils`` does; Ray is
    pinned to 2.60), without them (``LEAN_HEAD``, and no API server, which Ray has
    no switch for). Its processes die with this one (the kernel's fate sharing,
    as under ``ray.init``, and the reaper) or at its normal exit."""
    import ray
    from ray._private.parameter import RayParams

    from ..runtime.ray_setup import LEAN_HEAD, lean_head_node

    # Its workers start with the raylet, beside its agents, not as the driver registers (then
    # ``ray.init`` took 0.56-0.82 s here, 0.50-0.65 s with them started; the benchmark's sweep
    # was 0.86 s shorter on average over 5 interleaved pairs: docs/sweeps.md)
    config = {"enable_worker_prestart": True}
    params = RayParams(num_cpus=cpus, _system_config=config, **LEAN_HEAD)
    head = lean_head_node()(params, head=True, shutdown_at_exit=False, spawn_reaper=True)

    def stop() -> None:  # at exit: the driver first (it waits on a raylet it cannot reach)
        ray.shutdown()
        head.kill_all_processes(check_alive=False, allow_graceful=False)

    atexit.register(stop)
    return head.address


_reaper: int | None = None  # the write end of the embedded cluster's reaper's pipe


def _start_reaper() -> None:
    """No process of the embedded cluster outlives this one, however it ends
    (:mod:`dlsched.runtime.reaper`)."""
    global _reaper
    if _reaper is None:
        from ..runtime.reaper import start_reaper

        _reaper = start_reaper()


def started_embedded_ray() -> bool:
    """Whether this process started an embedded cluster (and its reaper) for a sweep."""
    return _reaper is not None
