"""dlsched: a scheduler for deep-learning jobs on GPU clusters shared by many tenants.

The policy core (``dlsched.policies``) decides who runs where; the discrete-event simulator
(``dlsched.sim``) replays traces against a modelled cluster; the runtime (``dlsched.runtime``)
runs real jobs on Ray. From Python (README, "From Python"):

    import dlsched
    workload = dlsched.load_workload("philly", "64x8:V100", limit=2000)
    run = dlsched.simulate(workload, "tiresias")      # or a Policy object
    run.summary["mean_jct_s"], run.jobs[:3]

``Policy``, ``Plan`` and ``PolicyView`` are what a policy of your own is written with
(docs/writing-a-policy.md); ``list_policies()`` lists every policy by name.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# name -> module: imported on first use, so that a training worker importing dlsched.runtime
# does not pay for the simulator (no name here may be a submodule's: importing the submodule
# would replace it)
_LAZY = {
    "load_workload": "dlsched.prepare",
    "Workload": "dlsched.prepare",
    "simulate": "dlsched.runs",
    "Run": "dlsched.runs",
    "Policy": "dlsched.policies.base",
    "Plan": "dlsched.view",
    "PolicyView": "dlsched.view",
    "JobSpec": "dlsched.jobs",
    "JobState": "dlsched.jobs",
    "SimConfig": "dlsched.sim.engine",
}

__all__ = [*_LAZY, "list_policies", "__version__"]


def list_policies() -> dict[str, str]:
    """Every policy by name (built-in and installed plug-ins) and what it does."""
    from .policies.catalog import policy_descriptions

    return policy_descriptions()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return module.prepare if name == "load_workload" else getattr(module, name)
    raise AttributeError(f"module 'dlsched' has no attribute {name!r}")
