"""Sweeps: a grid of simulations (traces x clusters x policies x loads x parameters x seeds) run
as Ray tasks, cached and resumable, reported with confidence intervals across seeds.

    dlsched sweep SPEC.yaml --out DIR          # or, from Python:
    dlsched.sweep.run_sweep("SPEC.yaml", "DIR")

:mod:`.spec` reads and checks a spec, :mod:`.execute` runs what is not done yet, :mod:`.results`
writes ``sweep.csv``, ``report.html`` and the tables.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecError, option_name
from .execute import Outcome, execute
from .results import aggregate, collect, text_tables, write_csv, write_html
from .spec import SweepSpec, load_spec, parse_spec

__all__ = ["SweepResult", "load_spec", "parse_spec", "run_sweep"]


@dataclass
class SweepResult:
    spec: SweepSpec
    outcome: Outcome
    rows: list[dict]  # sweep.csv's
    aggregates: dict  # metric -> point -> policy -> mean, ci, n (and relative to the baseline)
    out: Path

    @property
    def ok(self) -> bool:
        return not self.outcome.failed

    def tables(self) -> str:
        return text_tables(self.spec, self.aggregates)


def _check_ways(
    sequential: bool, ray_address: str | None, ray_token_file: str | None, cpus: int | None
) -> None:
    """``cpus`` sizes the embedded Ray cluster; an existing one (``ray_address``) has its own
    size, and a sequential sweep uses no Ray at all."""
    if sequential:
        given = [
            n
            for n, v in (
                ("ray_address", ray_address),
                ("ray_token_file", ray_token_file),
                ("cpus", cpus),
            )
            if v is not None
        ]
        if given:
            raise SpecError(
                given[0], f"{option_name(given[0])} does nothing with --sequential (no Ray)"
            )
    elif cpus is not None and ray_address is not None:
        raise SpecError(
            "cpus", "--cpus sizes the embedded Ray cluster: one at --ray-address has its own"
        )


def run_sweep(
    spec: str | Path | dict | SweepSpec,
    out: str | Path,
    *,
    force: bool = False,
    sequential: bool = False,
    ray_address: str | None = None,
    ray_token_file: str | None = None,
    cpus: int | None = None,
    progress: bool = False,
) -> SweepResult:
    """Run every run of ``spec`` (a YAML file, a dict or a parsed spec) not done yet in
    ``out``, then write ``out/sweep.csv`` and ``out/report.html``. ``force`` reruns the done
    ones; ``sequential`` runs them one after another in this process instead of on Ray.
    Options the chosen way of running has no use for are refused, naming them."""
    _check_ways(sequential, ray_address, ray_token_file, cpus)
    if not isinstance(spec, SweepSpec):
        spec = parse_spec(spec) if isinstance(spec, dict) else load_spec(spec)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    bar: Any = None
    update = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(spec.runs), desc=spec.name, unit="run", file=sys.stderr)

        def update(done: int, running: int, failed: int, total: int) -> None:
            bar.n = done + failed
            bar.set_postfix(running=running, failed=failed, refresh=False)
            bar.refresh()

    try:
        outcome = execute(
            spec.runs,
            out,
            force=force,
            sequential=sequential,
            ray_address=ray_address,
            ray_token_file=ray_token_file,
            cpus=cpus,
            progress=update,
        )
    finally:
        if bar is not None:
            bar.close()
    failures = out / "failures.json"
    failures.unlink(missing_ok=True)
    if outcome.failed:
        listed = [
            {"point": dict(run.point), "seed": run.seed, "error": error}
            for run, error in outcome.failed
        ]
        failures.write_text(json.dumps(listed, indent=1))
    rows = collect(spec, out)
    write_csv(rows, out / "sweep.csv")
    aggregates = aggregate(spec, rows)
    write_html(spec, aggregates, rows, outcome.failed, out / "report.html")
    return SweepResult(spec, outcome, rows, aggregates, out)
