"""The package's shape: no import cycles, a light CLI, the state's Protocols implemented, and
byte-identical simulations across processes."""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> set[str]:
    """Modules of the package this file imports, at the top or inside a function (a lazy import
    still ties the two modules together)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("dlsched"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("dlsched"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names)  # a submodule, maybe
    return out


def test_no_import_cycles():
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph = {m: {t for t in _imports(p, m) if t in files and t != m} for m, p in files.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t) :] + [t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                dfs(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)


def test_the_cli_imports_no_heavy_package():
    code = (
        "import sys, dlsched.cli; heavy = [m for m in ('matplotlib', 'numpy', 'httpx', 'torch', "
        "'ray', "
        "'fastapi', 'pydantic', 'uvicorn') if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    "cluster, policy, options",
    [
        ("16x8:V100", "tiresias", ["--elastic-fraction", "0.5"]),
        ("16x8:V100,4x8:V100@inference", "aryl", ["--elastic-fraction", "0.5"]),
        ("16x8:V100", "genie", ["--deadlines"]),
    ],
)
def test_a_simulation_with_the_performance_model_imports_no_numpy(
    tmp_path, cluster, policy, options
):
    # the scaling fits are stored in the package, GENIE's per-job fits and Aryl's knapsack are
    # plain Python: dlsched imports no numpy (10-16 MiB of a run's memory); matplotlib, for
    # reports and figures, does
    code = (
        "import sys; from dlsched.cli import main; "
        f"main(['simulate', '--trace', 'muri-3', '--cluster', {cluster!r}, '--policy', "
        f"{policy!r}, *{options!r}, '--out', {str(tmp_path)!r}, '--no-progress']); "
        "print('numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_every_workload_model_implements_the_protocol():
    from dlsched.cluster import parse_cluster_spec
    from dlsched.perf.model import PerfModel
    from dlsched.perf.speed import PerfSpeed
    from dlsched.runtime.speed import RuntimeSpeed
    from dlsched.workload_model import TRACE_MODEL, WorkloadModel

    for model in (TRACE_MODEL, PerfSpeed(PerfModel(), parse_cluster_spec("1x4")), RuntimeSpeed()):
        assert isinstance(model, WorkloadModel), type(model).__name__


def test_the_cluster_state_implements_the_policy_view():
    from dlsched.cluster import parse_cluster_spec
    from dlsched.policies.catalog import make_policy
    from dlsched.state.cluster_state import ClusterState
    from dlsched.view import PolicyView

    state = ClusterState(parse_cluster_spec("1x2"), make_policy("fifo"))
    names = [n for n in dir(PolicyView) if not n.startswith("_")]
    assert {"now", "free", "running", "workload", "projected_finish"} <= set(names)
    assert [n for n in names if not hasattr(state, n)] == []


def _simulate_in_a_process(tmp_path: Path, seed: str) -> str:
    out = tmp_path / f"run-{seed}"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dlsched.cli",
            "compare",
            "--trace",
            "muri-3",
            "--cluster",
            "8x8",
            "--policies",
            "tiresias,sjf-bsbf,elastic-tiresias",
            "--elastic-fraction",
            "0.5",
            "--limit",
            "300",
            "--out",
            str(out),
            "--no-progress",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    digest = hashlib.sha256()
    for f in sorted(out.rglob("*")):
        if f.suffix in (".csv",) or f.name == "summary.json":
            text = f.read_text()
            if f.name == "summary.json":  # the wall time is the one field that may differ
                text = "\n".join(line for line in text.splitlines() if '"wall_s"' not in line)
            digest.update(f.relative_to(out).as_posix().encode() + text.encode())
    return digest.hexdigest()


def test_simulations_are_byte_identical_across_processes(tmp_path):
    assert _simulate_in_a_process(tmp_path, "1") == _simulate_in_a_process(tmp_path, "4242")
