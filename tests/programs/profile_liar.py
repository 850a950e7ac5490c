"""A program whose profiling run reports a false memory (tests/test_security.py): its build makes
the device's peak read as ``args["lie"]`` (nan, or below zero), which the profile returned to the
server then carries."""

from dlsched.runtime import profile
from dlsched.workloads.emulated import build as emulated


def build(args):
    lie = float(args.pop("lie"))
    profile.peak_mib = lambda: lie
    return emulated(args)
