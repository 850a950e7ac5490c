"""The workload performance model, fitted from measured public data.

So far: iteration time vs per-GPU batch, GPU count and node count, fitted per application to
Pollux's measurements (:mod:`dlsched.perf.scaling`).
"""

from .scaling import ScalingFit, fit_scaling, scaling_model

__all__ = ["ScalingFit", "fit_scaling", "scaling_model"]
