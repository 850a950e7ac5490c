"""A program whose build takes ``args["sleep_s"]`` seconds (tests/test_security.py): each of its
profiling runs holds a slot that long."""

import time

from dlsched.workloads.emulated import build as emulated


def build(args):
    time.sleep(args.pop("sleep_s"))
    return emulated(args)
