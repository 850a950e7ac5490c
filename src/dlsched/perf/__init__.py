"""The workload performance model, fitted from or looked up in measured public data.

- ``scaling``: iteration time vs per-GPU batch, GPUs and nodes, fitted to Pollux's measurements;
- ``zoo``: the models the traces name, mapped to the measured job types, with memory;
- ``model.PerfModel``: one facade (iteration time, memory, GPU-type speed, co-location);
- ``speed.PerfSpeed``: the simulator's speed function; ``assign``: models for traces without.

See docs/perf.md.
"""

from .model import PerfModel
from .scaling import ScalingFit, fit_scaling, scaling_model

__all__ = ["PerfModel", "ScalingFit", "fit_scaling", "scaling_model"]
