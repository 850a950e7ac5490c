"""Trace adapters: each reads one format into validated job specs and counts what it dropped.

``load_trace(name_or_path)`` takes a bundled trace's name (see :data:`BUNDLED`) or a file path
(format detected from the header, or given).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import SpecError
from .base import Trace
from .generic import header, load_generic, load_own, own_mapping
from .history import load_history
from .muri import load_muri
from .openb import load_openb
from .philly import load_philly
from .pollux import load_pollux
from .synthetic import synthetic

SYNTHETIC_PARAMETERS = tuple(inspect.signature(synthetic).parameters)

LOADERS: dict[str, Callable[..., Trace]] = {
    "philly": load_philly,
    "muri": load_muri,
    "pollux": load_pollux,
    "openb": load_openb,
    "history": load_history,
    "dlsched": load_own,
}

# header column that tells each format apart
SIGNATURES = {
    "philly": {"timestamp", "duration", "num_gpus", "cluster"},
    "muri": {"job_id", "num_gpu", "submit_time", "iterations", "model_name"},
    "pollux": {"name", "time", "application", "num_replicas", "batch_size"},
    "openb": {"name", "gpu_milli", "num_gpu", "creation_time"},
    "history": {"job_id", "submit_s", "iterations", "iteration_s", "startup_s", "restart_s"},
}


@dataclass(frozen=True, slots=True)
class Bundled:
    path: str
    fmt: str
    description: str


BUNDLED: dict[str, Bundled] = {
    "philly": Bundled(
        "traces/philly/philly_jobs.csv.gz",
        "philly",
        "Microsoft Philly, Sep-Dec 2017, every job (tenant = virtual cluster)",
    ),
    **{
        f"muri-{k}": Bundled(
            f"traces/muri/trace{k}.csv",
            "muri",
            f"Philly-derived Muri trace {k}, with model and batch per job",
        )
        for k in range(1, 5)
    },
    **{
        f"pollux-{k}": Bundled(
            f"traces/pollux/workload-{k}.csv",
            "pollux",
            f"Pollux evaluation workload {k} (durations from Pollux's measurements)",
        )
        for k in range(1, 9)
    },
    "openb": Bundled(
        "traces/alibaba_openb/openb_pod_list_default.csv",
        "openb",
        "Alibaba GPU pods 2023 (FGD): fractional GPU requests",
    ),
    "openb-gpuspec": Bundled(
        "traces/alibaba_openb/openb_pod_list_gpuspec33.csv",
        "openb",
        "the same pods, a third with GPU-type constraints",
    ),
}


def bundled_path(name: str) -> Path:
    return Path(str(resources.files("dlsched") / "data" / BUNDLED[name].path))


def detect_format(path: str | Path) -> str:
    columns = set(header(path)) - {""}
    if not columns:
        raise SpecError("trace", f"{path} has no header: its first line is empty")
    for fmt, cols in SIGNATURES.items():
        if cols <= columns:
            return fmt
    if own_mapping(columns) is not None:  # after history, which has some of the same names
        return "dlsched"
    raise SpecError(
        "format",
        f"cannot tell the format of {path} from its header; "
        "give --format generic with a --map of its columns",
    )


def load_trace(
    name_or_path: str,
    fmt: str | None = None,
    skip_invalid: bool = False,
    mapping: str | None = None,
    **synthetic_params: Any,
) -> Trace:
    if name_or_path == "synthetic":
        unknown = sorted(set(synthetic_params) - set(SYNTHETIC_PARAMETERS))
        if unknown:
            raise SpecError(
                "trace_param",
                f"the synthetic trace has no parameter {unknown[0]!r} "
                f"(it takes {', '.join(SYNTHETIC_PARAMETERS)})",
            )
        return synthetic(**synthetic_params)
    if name_or_path in BUNDLED:
        b = BUNDLED[name_or_path]
        return LOADERS[b.fmt](
            bundled_path(name_or_path), name=name_or_path, skip_invalid=skip_invalid
        )
    path = Path(name_or_path)
    if not path.is_file():
        raise SpecError(
            "trace",
            f"'{name_or_path}' is neither a bundled trace "
            f"({', '.join(BUNDLED)}, synthetic) nor a file",
        )
    if fmt == "generic" or mapping is not None:
        if not mapping:
            raise SpecError("mapping", "the generic CSV format needs a column mapping (--map)")
        return load_generic(path, mapping, name=path.stem, skip_invalid=skip_invalid)
    fmt = fmt or detect_format(path)
    if fmt not in LOADERS:
        raise SpecError("format", f"unknown format '{fmt}': use {', '.join(LOADERS)} or generic")
    return LOADERS[fmt](path, name=path.stem, skip_invalid=skip_invalid)


__all__ = ["Trace", "BUNDLED", "load_trace", "synthetic", "detect_format", "bundled_path"]
